"""Tables end to end with real training at a tiny budget: a corpus, SST-2, CoNLL-2003 and Multi30k files
made here, two seeds, a few steps a run; TABLE.md/.json/.png written; a second run trains nothing. Every
table's smallest configuration runs too (slow: a few minutes in all)."""

import dataclasses
import json
import random
from pathlib import Path

import pytest

from attnlab.ablation import report
from attnlab.ablation.lab import run_table
from attnlab.ablation.settings import SIZES, LabSettings
from attnlab.ablation.table_file import load_table
from attnlab.ablation.tables import TABLES, get_table

WORDS = "the cat dog sat on a mat ran to house tree river bank went home good bad film plot".split()
NAMES = ("Paris", "London", "Smith", "Jones")


def _data(root: Path) -> Path:
    root.mkdir(parents=True)
    rng = random.Random(0)
    sentence = lambda: " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + " ."  # noqa: E731
    docs = ["\n".join(sentence() for _ in range(8)) for _ in range(100)]  # held out: 5 docs, 2 GPT blocks
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    sst = root / "glue" / "SST-2"
    sst.mkdir(parents=True)
    for split, n in (("train", 80), ("dev", 40)):
        rows = [f"{sentence()} {'good' if i % 2 else 'bad'}\t{i % 2}" for i in range(n)]
        (sst / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    conll = root / "conll2003"
    conll.mkdir()
    for name, n in (("train.txt", 60), ("valid.txt", 30)):
        lines = ["-DOCSTART- -X- -X- O", ""]
        for _ in range(n):
            for word in sentence().split():
                lines.append(f"{word} NN O O")
            lines += [f"{rng.choice(NAMES)} NNP B-NP B-PER", ""]
        (conll / name).write_text("\n".join(lines))
    m30k = root / "multi30k"
    m30k.mkdir()
    for split, n in (("train", 60), ("val", 10)):
        pairs = [sentence() for _ in range(n)]
        (m30k / f"{split}.en").write_text("\n".join(pairs) + "\n")
        (m30k / f"{split}.de").write_text("\n".join(p.upper() for p in pairs) + "\n")
    return root


def _tiny(tmp_path: Path, seeds: tuple[int, ...], smallest_share: float = 1.0) -> LabSettings:
    """Settings for runs of about a second; ``smallest_share``: the smallest `RunConfig.budget_share` of
    the table, whose run still gets the second (its setup comes out of its budget: at a quarter of it, a
    loaded machine left no time for the three steps `check_step_fits` asks for)."""
    data = _data(tmp_path / "data")
    size = dataclasses.replace(
        SIZES["cpu"], pretrain_minutes=0.02 / smallest_share, feature_examples=40, finetune_examples=40,
        bleu_sentences=5,
        translate_overrides={"num_layers": 1, "d_model": 64, "d_ff": 128},
    )  # fmt: skip
    return LabSettings(
        output=tmp_path / "out", data_dir=data, corpus=(str(data / "corpus.txt"),), seeds=seeds, size=size
    )


@pytest.mark.slow
def test_a_table_end_to_end_at_a_tiny_budget(tmp_path):
    settings = _tiny(tmp_path, (0, 1))
    table = get_table("roberta-table1")
    result = run_table(table, settings, log=lambda m: None)
    assert not result.failed and result.trained == 12
    for row in table.rows:
        for probe in table.probes:
            assert result.summaries[row.name, probe].n == 2
    written = report.write_table(result, tmp_path / "out")
    assert all(p.is_file() for p in written)
    data = json.loads(written[1].read_text())
    assert [o["verdict"] for o in data["orderings"]]  # judged, whatever the tiny runs measured
    again = run_table(table, settings, log=lambda m: None)
    assert again.trained == 0 and again.summaries == result.summaries


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_table_runs_at_its_smallest(name, tmp_path):
    table = get_table(name)
    smallest_share = min(row.run.budget_share for row in table.rows)
    result = run_table(table, _tiny(tmp_path, (0,), smallest_share), log=lambda m: None)
    assert not result.failed, result.failed
    # every judged probe is measured (a causal LM has no held-out MLM accuracy, which no table judges for it)
    assert all(result.summaries[r.name, p].n == 1 for r in table.rows for p in table.columns)
    assert all(p.is_file() for p in report.write_table(result, tmp_path / "out"))


@pytest.mark.slow
def test_a_table_of_ones_own_end_to_end_at_a_tiny_budget(tmp_path):
    """A file with only what it must hold (no paper, columns or note): trained, measured and written."""
    settings = _tiny(tmp_path, (0, 1))
    path = tmp_path / "rate.yaml"
    path.write_text(
        "name: rate\nprobes: [mlm_accuracy, sst2_features]\nrows:\n"
        "  - {name: 40%, run: {recipe: bert}}\n"
        "  - {name: 15%, run: {recipe: bert, recipe_overrides: {masking: {rate: 0.15}}}}\n"
    )
    result = run_table(load_table(path, settings), settings, log=lambda m: None, table_file=str(path))
    assert not result.failed and result.trained == 8
    md, js, png = report.write_table(result, tmp_path / "out")
    page = md.read_text()
    assert page.splitlines()[2] == f"rate.yaml; the table `rate` of `{path}`."
    assert f"`attnlab ablate {path} --device cuda" in page  # the GPU column's command names the file
    measured = json.loads(js.read_text())["rows"]
    assert [row["measured"]["sst2_features"]["n"] for row in measured] == [2, 2] and png.is_file()
