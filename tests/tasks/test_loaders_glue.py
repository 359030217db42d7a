"""GLUE TSV loaders: every task's layout on hand-written fixtures, bad rows, and the real files' counts."""

from pathlib import Path

import pytest
from shared_data import DATA, require

from attnlab.tasks.examples import DataFormatError, SentenceExample, check_label_sets, compare_label_sets
from attnlab.tasks.loaders.glue import GLUE_TASKS, glue_path, glue_task, load_glue, load_glue_split

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"
GLUE_FIX = FIXTURES / "glue"


def test_cola_positional_columns_without_header():
    exs = load_glue("CoLA", GLUE_FIX / "CoLA" / "train.tsv")
    assert [e.label for e in exs] == ["1", "0", "1"]
    assert exs[1] == SentenceExample("They drank the pub.", None, "0", "train.tsv:2")
    assert exs.report.lines_read == 3 and exs.report.examples == 3 and not exs.report.structural


def test_cola_test_file_has_header_and_index():
    exs = load_glue("cola", GLUE_FIX / "CoLA" / "test.tsv")
    assert [(e.guid, e.label) for e in exs] == [("0", None), ("1", None)]
    assert exs[0].text_a == "Bill whistled past the house."
    assert exs.report.structural["header"] == 1


def test_sst2_keeps_text_verbatim():
    exs = load_glue("SST-2", GLUE_FIX / "SST-2" / "train.tsv")
    assert exs[0].text_a == "hide new secretions from the parental units "
    assert [e.label for e in exs] == ["0", "1"] and exs[0].text_b is None


def test_mrpc_bom_header_crlf_and_unbalanced_quotes():
    exs = load_glue("mrpc", GLUE_FIX / "MRPC" / "train.tsv")
    assert len(exs) == 2
    assert exs[0].guid == "702876-702977" and exs[0].label == "1"
    # a CSV reader would treat the leading quote as opening a quoted field; GLUE files are unquoted
    assert exs[1].text_b == "\"Yucaipa bought Dominick's in 1995."
    assert not exs[1].text_b.endswith("\r")
    test = load_glue("mrpc", GLUE_FIX / "MRPC" / "test.tsv")
    assert test[0].label is None and test[0].guid == "1089874-1089925"


def test_stsb_float_scores():
    exs = load_glue("STS-B", GLUE_FIX / "STS-B" / "train.tsv")
    assert [e.label for e in exs] == [5.0, 3.8]
    assert exs[1].text_b == "A man is playing a flute."
    assert glue_task("stsb").is_regression and glue_task("stsb").num_labels == 1


def test_qqp_columns():
    exs = load_glue("qqp", GLUE_FIX / "QQP" / "train.tsv")
    assert [(e.guid, e.label) for e in exs] == [("133273", "0"), ("402555", "1")]
    assert exs[1].text_b == "How do you control your horniness?"


def test_mnli_train_and_both_dev_files():
    train = load_glue_split(GLUE_FIX, "mnli", "train")
    matched = load_glue_split(GLUE_FIX, "mnli", "dev_matched")
    mismatched = load_glue_split(GLUE_FIX, "MNLI-mm", "dev_mismatched")
    assert [e.label for e in train] == ["neutral", "entailment"]
    # the dev files have label1..label5 before gold_label: the gold label is the one taken
    assert matched[0].label == "neutral" and matched[0].guid == "63735n"
    assert mismatched[0].label == "contradiction"
    assert glue_task("mnli").labels == ("contradiction", "entailment", "neutral")
    with pytest.raises(ValueError, match="dev_matched"):
        glue_path(GLUE_FIX, "mnli", "dev")


@pytest.mark.parametrize(
    "task, directory, labels",
    [
        ("qnli", "QNLI", ["not_entailment"]),
        ("rte", "RTE", ["not_entailment", "entailment"]),
        ("wnli", "WNLI", ["1"]),
    ],
)
def test_pair_tasks(task, directory, labels):
    exs = load_glue(task, GLUE_FIX / directory / "train.tsv")
    assert [e.label for e in exs] == labels
    assert all(e.text_b for e in exs)


def test_label_ids_follow_task_label_order():
    rte = glue_task("RTE")
    assert [rte.label_to_id(x) for x in ("entailment", "not_entailment")] == [0, 1]
    with pytest.raises(ValueError, match="expected one of"):
        rte.label_to_id("neutral")
    assert set(GLUE_TASKS) >= {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"}


def test_missing_column_names_file_line_and_columns():
    path = FIXTURES / "bad" / "rte_missing_column.tsv"
    with pytest.raises(DataFormatError) as info:
        load_glue("rte", path)
    message = str(info.value)
    assert f"{path}:3:" in message and "expected 4" in message and "sentence1, sentence2, label" in message
    assert info.value.line == 3


def test_unknown_label_names_expected_labels():
    path = FIXTURES / "bad" / "rte_unknown_label.tsv"
    with pytest.raises(DataFormatError, match=r"rte_unknown_label.tsv:3: .*'contradiction'.*entailment"):
        load_glue("rte", path)


def test_bad_score_raises():
    with pytest.raises(DataFormatError, match=r"stsb_bad_score.tsv:2: .*number.*'high'"):
        load_glue("stsb", FIXTURES / "bad" / "stsb_bad_score.tsv")


def test_skip_counts_by_reason_never_silently():
    exs = load_glue("rte", FIXTURES / "bad" / "rte_missing_column.tsv", errors="skip")
    assert [e.guid for e in exs] == ["0", "2"]
    assert exs.report.skipped == {"missing_columns": 1}
    assert exs.report.samples["missing_columns"] == [f"{FIXTURES / 'bad' / 'rte_missing_column.tsv'}:3"]
    assert "missing_columns" in exs.report.summary()
    # every line is accounted for: examples + skipped + structure
    r = exs.report
    assert r.lines_read == r.examples + r.n_skipped + sum(r.structural.values())


def test_labelled_true_requires_label_column():
    with pytest.raises(DataFormatError, match="'label' column"):
        load_glue("cola", GLUE_FIX / "CoLA" / "test.tsv", labelled=True)


def test_unknown_task_lists_tasks():
    with pytest.raises(ValueError, match="sst2"):
        glue_task("sst-5")


def test_label_set_helper_names_labels():
    train = load_glue("rte", GLUE_FIX / "RTE" / "train.tsv")
    dev = [SentenceExample("a", "b", "neutral", "0"), SentenceExample("a", "b", "entailment", "1")]
    diff = compare_label_sets(train, dev)
    assert diff.only_in_second == {"neutral"} and diff.only_in_first == {"not_entailment"}
    with pytest.raises(ValueError, match=r"labels only in dev: \['neutral'\]"):
        check_label_sets(train, dev)
    assert check_label_sets(train, train[:1]).only_in_first == {"entailment"}
    with pytest.raises(ValueError, match="only in train"):
        check_label_sets(train, train[:1], allow_missing=False)


# ---- real data (skipped when ../shared/data is absent) -------------------------------------------------

REAL_COUNTS = [
    ("sst2", "train", 67_349), ("sst2", "dev", 872), ("cola", "train", 8_551), ("cola", "dev", 527),
    ("mrpc", "train", 3_668), ("mrpc", "dev", 408), ("rte", "train", 2_490), ("rte", "dev", 277),
    ("stsb", "train", 5_749), ("stsb", "dev", 1_500), ("qnli", "dev", 5_463),
]  # fmt: skip


@pytest.mark.data
@pytest.mark.parametrize("task, split, count", REAL_COUNTS)
def test_real_glue_counts(task, split, count):
    path = glue_path(DATA / "glue", task, split)
    require(path)
    exs = load_glue_split(DATA / "glue", task, split)
    assert len(exs) == count
    assert exs.report.n_skipped == 0
    spec = glue_task(task)
    if spec.labels is not None:
        assert {e.label for e in exs} == set(spec.labels)
    else:
        assert all(0.0 <= e.label <= 5.0 for e in exs)


@pytest.mark.data
def test_real_train_dev_label_sets_agree():
    root = DATA / "glue"
    require(root / "RTE" / "train.tsv")
    for task in ("sst2", "cola", "mrpc", "rte"):
        train, dev = load_glue_split(root, task, "train"), load_glue_split(root, task, "dev")
        assert check_label_sets(train, dev).same
