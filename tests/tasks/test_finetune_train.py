"""The fine-tuning recipe end to end on hand-made, trivially separable data: it must learn (far above
chance), keep the best epoch, sweep learning rates with the median over seeds, honour a time budget, and
work from the command line (finetune -> evaluate -> predict)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from shared_data import DATA, require

from attnlab.cli import main
from attnlab.io import load as load_model
from attnlab.models import get_preset
from attnlab.tasks import QAExample, SentenceExample, TokenExample
from attnlab.tasks.finetune import (
    FinetuneConfig,
    GenericColumns,
    ModelSource,
    TaskSpec,
    evaluate_directory,
    finetune,
    finetune_examples,
    get_task,
    split_selection,
)
from attnlab.tokenizers import bert_wordpiece

FILLER = "the a film plot was is very quite story actor scene it".split()
NAMES = ["alice", "bob", "carol"]
VOCAB = {
    t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", *FILLER, *NAMES])
}
# bert-tiny's shape (Turc et al. 2019: L=2, H=128); narrower encoders did not learn within a few dozen steps.
TINY = get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=32)
FAST = dict(batch_size=16, max_length=24, output_dir=None, progress_bar=False)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _tok():
    return bert_wordpiece(VOCAB)


def _sentiment(n: int, seed: int) -> list[SentenceExample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        y = rng.randint(0, 1)
        words = [rng.choice(FILLER) for _ in range(rng.randint(2, 6))]
        words.insert(rng.randint(0, len(words)), "good" if y else "bad")
        out.append(SentenceExample(" ".join(words), None, str(y), f"{seed}-{i}"))
    return out


def _cfg(tmp_path: Path, **kw) -> FinetuneConfig:
    return FinetuneConfig(**{**FAST, "output_dir": tmp_path, **kw})


SPEC = TaskSpec("toy", "classification", ("0", "1"), "accuracy")


def test_toy_classification_learns_and_keeps_the_best_epoch(tmp_path):
    source = ModelSource(config=TINY, tokenizer=_tok())
    dev = _sentiment(64, 1)
    result = finetune_examples(
        SPEC, source, _sentiment(160, 0), dev, _cfg(tmp_path, learning_rates=(2e-3,), epochs=3, seeds=(0,))
    )
    # Seed 0 leaves chance after the first epoch on the CPU and on CUDA alike (dropout streams differ);
    # seed 7 learned only in the third epoch on the CPU and not within three on an H200.
    (run,) = result.runs
    assert run.seed == 0 and len(run.epochs) == 3  # evaluated after every epoch
    assert result.median == run.score("accuracy") == max(e["accuracy"] for e in run.epochs)
    assert result.median >= 90  # percent; chance is 50
    # the kept model is the best epoch's: re-scoring it from disk gives the same accuracy
    again = evaluate_directory(SPEC, result.best_dir, dev, max_length=24)
    assert again["accuracy"] == pytest.approx(result.median)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["runs"][0]["seed"] == 0 and saved["learning_rate"] == 2e-3


def test_sweep_keeps_the_learning_rate_with_the_best_median(tmp_path):
    source = ModelSource(config=TINY, tokenizer=_tok())
    cfg = _cfg(tmp_path, learning_rates=(1e-7, 2e-3), seeds=(0, 1), epochs=3, keep_best=False)
    result = finetune_examples(SPEC, source, _sentiment(160, 0), _sentiment(48, 1), cfg)
    assert [(r.learning_rate, r.seed) for r in result.runs] == [(1e-7, 0), (1e-7, 1), (2e-3, 0), (2e-3, 1)]
    assert result.learning_rate == 2e-3
    scores = sorted(r.score("accuracy") for r in result.runs if r.learning_rate == 2e-3)
    assert result.median == pytest.approx(sum(scores) / 2)


def test_a_selection_split_chooses_and_dev_only_scores_the_chosen_models(tmp_path):
    """--selection-examples: held-out training examples choose the learning rate and each run's best
    evaluation; dev scores the chosen learning rate's saved models once, and that is the reported median."""
    source = ModelSource(config=TINY, tokenizer=_tok())
    train, dev = _sentiment(160, 0), _sentiment(48, 1)
    cfg = _cfg(tmp_path, learning_rates=(1e-7, 2e-3), seeds=(0, 1), epochs=3, selection_examples=40)
    result = finetune_examples(SPEC, source, train, dev, cfg)
    assert result.learning_rate == 2e-3 and result.selection_examples == 40 and result.train_examples == 120
    chosen = [r for r in result.runs if r.learning_rate == 2e-3]
    assert all(r.dev for r in chosen) and not any(r.dev for r in result.runs if r.learning_rate == 1e-7)
    for r in chosen:  # dev is the saved best model's score, not the selection score
        again = evaluate_directory(SPEC, r.best_dir, dev, max_length=24)
        assert r.dev["accuracy"] == pytest.approx(again["accuracy"])
    assert result.median == pytest.approx(sum(r.dev["accuracy"] for r in chosen) / 2)  # median of two
    assert result.selection_median == pytest.approx(sum(r.score("accuracy") for r in chosen) / 2)
    # the held-out draw is fixed, disjoint from training, and too large a draw is an error
    kept, held = split_selection(list(range(10)), 3, "toy")
    assert (kept, held) == split_selection(list(range(10)), 3, "toy")
    assert sorted(kept + held) == list(range(10)) and len(held) == 3
    with pytest.raises(ValueError, match="leaves nothing to train on"):
        split_selection(list(range(10)), 10, "toy")


def test_mean_pooling_learns_the_toy_task_and_is_kept_in_the_saved_model(tmp_path):
    """--pooling mean: the classifier reads the mean of the tokens' states; the kept model says so and
    scores the same from disk. A task without a sentence classifier refuses the option."""
    source = ModelSource(config=TINY, tokenizer=_tok())
    dev = _sentiment(64, 1)
    cfg = _cfg(tmp_path / "mean", learning_rates=(2e-3,), epochs=3, seeds=(0,), pooling="mean")
    result = finetune_examples(SPEC, source, _sentiment(160, 0), dev, cfg)
    assert result.median >= 90  # percent; chance is 50
    model = load_model(result.best_dir)
    assert model.pooling == "mean" and model.encoder.pooler is None
    again = evaluate_directory(SPEC, result.best_dir, dev, max_length=24)
    assert again["accuracy"] == pytest.approx(result.median)
    with pytest.raises(ValueError, match="pooling 'mean'.*conll2003"):
        ner = _cfg(tmp_path / "ner", pooling="mean")
        finetune_examples(get_task("conll2003"), source, _ner(16, 0), _ner(8, 1), ner)
    with pytest.raises(ValueError, match="FinetuneConfig.pooling"):
        _cfg(tmp_path, pooling="max")


def test_length_grouping_pads_less_learns_the_toy_task_and_is_recorded(tmp_path, monkeypatch):
    """--group-by-length: the training batches hold examples of similar length (padding measured on the
    batches the trainer collates), every example is still read once an epoch, the run learns as the plain one
    does, and run.json records the setting (which --resume compares)."""
    import attnlab.tasks.feature_builder as ft

    seen: list[tuple[int, int]] = []  # (padded positions, real tokens) of each training batch
    real_collate = ft.collate

    def spy(features, pad_id=0):
        batch = real_collate(features, pad_id)
        if "labels" in batch and len(features) == FAST["batch_size"]:
            seen.append((batch["input_ids"].numel(), int(batch["attention_mask"].sum())))
        return batch

    monkeypatch.setattr(ft, "collate", spy)
    source = ModelSource(config=TINY, tokenizer=_tok())
    rng = random.Random(5)
    train = [SentenceExample(" ".join(["the"] * rng.randint(1, 16)) + (" good" if i % 2 else " bad"), None,
                             str(i % 2), f"t{i}") for i in range(160)]  # fmt: skip
    padding = {}
    for grouped in (False, True):
        seen.clear()
        out = tmp_path / str(grouped)
        cfg = _cfg(out, learning_rates=(2e-3,), epochs=3, seeds=(0,), group_by_length=grouped)
        result = finetune_examples(SPEC, source, train, train[:48], cfg)
        assert result.median >= 90  # percent; chance is 50
        padding[grouped] = 1 - sum(r for _, r in seen) / sum(p for p, _ in seen)
        assert json.loads((out / "run.json").read_text())["settings"]["group_by_length"] is grouped
    assert padding[True] < 0.1 < 0.25 < padding[False]


def test_eval_every_sets_the_evaluations_and_the_last_step_is_always_one(tmp_path):
    source = ModelSource(config=TINY, tokenizer=_tok())
    train, dev = _sentiment(64, 0), _sentiment(16, 1)  # 4 batches of 16 an epoch, 8 steps in 2 epochs
    for every, steps in ((3, [3, 6, 8]), (100, [8]), (0, [4, 8])):
        cfg = _cfg(tmp_path / str(every), learning_rates=(1e-3,), epochs=2, seeds=(0,), eval_every=every)
        (run,) = finetune_examples(SPEC, source, train, dev, cfg).runs
        assert [e["step"] for e in run.epochs] == steps and run.steps == 8
    with pytest.raises(ValueError, match="FinetuneConfig.eval_every"):
        _cfg(tmp_path, eval_every=-1)


def test_time_budget_stops_and_still_evaluates(tmp_path):
    source = ModelSource(config=TINY, tokenizer=_tok())
    cfg = _cfg(tmp_path, learning_rates=(1e-3,), epochs=50, minutes=1e-4)
    (run,) = finetune_examples(SPEC, source, _sentiment(64, 0), _sentiment(16, 1), cfg).runs
    assert run.stopped_by_time and run.steps < 50 * 4 and run.epochs and run.epochs[-1]["step"] == run.steps


def _ner(n: int, seed: int) -> list[TokenExample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(3, 6))]
        k = rng.randint(0, len(words))
        words.insert(k, rng.choice(NAMES))
        tags = ["O"] * len(words)
        tags[k] = "B-PER"
        out.append(TokenExample(tuple(words), tuple(tags), f"{seed}-{i}"))
    return out


def test_toy_ner_learns_entity_f1(tmp_path):
    source = ModelSource(config=TINY, tokenizer=_tok())
    result = finetune_examples(
        get_task("conll2003"),
        source,
        _ner(128, 0),
        _ner(48, 1),
        _cfg(tmp_path, learning_rates=(3e-3,), epochs=3),
    )
    assert result.median >= 80  # percent
    model = load_model(result.best_dir)
    assert model.options["labels"] == ["O", "B-PER"]


def test_qa_runs_end_to_end_and_scores_squad_f1(tmp_path):
    rng = random.Random(0)
    examples = []
    for i in range(48):
        words = [rng.choice(FILLER) for _ in range(10)]
        name = rng.choice(NAMES)
        k = rng.randint(0, 9)
        words.insert(k, name)
        context = " ".join(words)
        start = len(" ".join(words[:k])) + (1 if k else 0)
        examples.append(QAExample(str(i), "", context, "the actor", ((name, start),)))
    source = ModelSource(config=TINY, tokenizer=_tok())
    cfg = _cfg(tmp_path, learning_rates=(3e-3,), epochs=4, max_length=12, stride=3)
    result = finetune_examples(get_task("squad"), source, examples[:32], examples[32:], cfg)
    (run,) = result.runs
    assert 0.0 <= run.best["f1"] <= 100.0 and "exact_match" in run.best
    assert "split_into_windows" in result.feature_reports["train"]


def test_cli_finetune_evaluate_predict(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    for split, seed, n in (("train", 0, 96), ("dev", 1, 32)):
        with open(data / f"{split}.csv", "w", encoding="utf-8") as f:
            f.write("sentence,label\n")
            for ex in _sentiment(n, seed):
                f.write(f"{ex.text_a},{'pos' if ex.label == '1' else 'neg'}\n")
    tok_dir = tmp_path / "tok"
    _tok().save(tok_dir)
    out = tmp_path / "run"
    argv = ["finetune", "--task", "generic", "--data-dir", str(data), "--model", "bert-tiny", "--tokenizer",
            str(tok_dir), "--output-dir", str(out), "--epochs", "2", "--batch-size", "16", "--lr", "1e-3",
            "--max-length", "24"]  # fmt: skip
    assert main(argv) == 0
    assert "median dev accuracy" in capsys.readouterr().out
    best = out / "best"
    assert (best / "config.json").is_file() and (best / "tokenizer.json").is_file()
    assert (
        main(["evaluate", "--task", "generic", "--data-dir", str(data), "--model", str(best), "--json"]) == 0
    )
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["examples"] == 32 and 0.0 <= metrics["accuracy"] <= 100.0
    assert main(["predict", "classify", str(best), "--text", "a very good film"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    labels = json.loads(line)["labels"]
    assert {d["label"] for d in labels} == {"neg", "pos"} and sum(
        d["score"] for d in labels
    ) == pytest.approx(1)
    assert main(["finetune", "--task", "sst2", "--data-dir", str(data), "--model", "bert-tiny"]) == 2
    assert "--tokenizer" in capsys.readouterr().err


@pytest.mark.data
def test_real_glue_and_conll_build_features_without_skips():
    require(DATA / "glue" / "RTE", DATA / "conll2003")
    from attnlab.tasks.finetune import build_features, load_split, task_labels

    words = sorted({w for line in open(DATA / "conll2003" / "valid.txt") for w in line.split()[:1]})[:5000]
    vocab = {
        t: i
        for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[w.lower() for w in words]])
    }
    tok = bert_wordpiece(vocab)
    spec = get_task("conll2003")
    dev = load_split(spec, DATA / "conll2003", "dev")[:300]
    feats, report = build_features(
        spec, tok, dev, task_labels(spec, dev), training=True, max_length=64, with_token_types=True
    )
    assert not report.skipped and len(feats) >= 300
    rte = get_task("rte")
    examples = load_split(rte, DATA / "glue" / "RTE", "dev")
    feats, report = build_features(
        rte, tok, examples, rte.labels, training=True, max_length=128, with_token_types=True
    )
    assert len(feats) == len(examples) == 277 and report.cut["truncated"] > 0


def test_generic_regression_table_trains_with_mse_and_scores_correlations(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split, seed, n in (("train", 0, 64), ("dev", 1, 24)):
        rows = [{"text": ex.text_a, "score": float(ex.label) * 4 + 0.5} for ex in _sentiment(n, seed)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    source = ModelSource(config=TINY, tokenizer=_tok())
    cols = GenericColumns(text_a="text", label="score", regression=True)
    result = finetune("generic", data, source, _cfg(tmp_path / "run", learning_rates=(2e-3,), epochs=2), cols)
    assert result.metric == "spearman"
    (run,) = result.runs
    assert {"pearson", "spearman"} <= set(run.best) and -100.0 <= run.best["spearman"] <= 100.0
    model = load_model(result.best_dir)
    assert model.options["num_labels"] == 1


@pytest.mark.parametrize("task", ["squad", "squad2"])
def test_qa_scoring_counts_a_question_without_windows_as_unanswered(task):
    from types import SimpleNamespace

    from attnlab.tasks.finetune import TaskEvaluator, build_features

    spec = get_task(task)
    ok = QAExample("a", "", "alice was good", "the actor", (("alice", 0),))
    lost = QAExample("b", "", "bob was bad", " ".join(["the"] * 40), (("bob", 0),))
    feats, report = build_features(
        spec, _tok(), [ok, lost], None, training=False, max_length=16, with_token_types=True,
        stride=2, max_query_length=64,
    )  # fmt: skip
    assert report.skipped["no_room_for_passage"] == 1 and len(feats) == 1
    ev = TaskEvaluator(spec, feats, [ok, lost], None)
    start = torch.full((1, 16), -10.0)
    end = torch.full((1, 16), -10.0)
    start[0, 4] = end[0, 4] = 10.0  # [CLS] the actor [SEP] alice ...: "alice"
    ev.update(SimpleNamespace(start_logits=start, end_logits=end), None)
    metrics = ev.compute()
    key = "exact" if task == "squad2" else "exact_match"
    assert metrics[key] == pytest.approx(50.0)  # one of two questions right; the lost one counts as wrong


@pytest.mark.parametrize("task", ["squad", "squad2"])
def test_qa_evaluation_writes_the_official_prediction_files(task, tmp_path):
    import json
    from types import SimpleNamespace

    from attnlab.tasks.finetune import TaskEvaluator, build_features

    spec = get_task(task)
    ok = QAExample("a", "", "alice was good", "the actor", (("alice", 0),))
    lost = QAExample("b", "", "bob was bad", " ".join(["the"] * 40), (("bob", 0),))
    feats, _ = build_features(
        spec, _tok(), [ok, lost], None, training=False, max_length=16, with_token_types=True,
        stride=2, max_query_length=64,
    )  # fmt: skip
    ev = TaskEvaluator(spec, feats, [ok, lost], None)
    start = torch.full((1, 16), -10.0)
    end = torch.full((1, 16), -10.0)
    start[0, 4] = end[0, 4] = 10.0
    ev.update(SimpleNamespace(start_logits=start, end_logits=end), None)
    ev.compute()
    written = ev.write_predictions(tmp_path)
    assert json.loads((tmp_path / "predictions.json").read_text()) == {"a": "alice", "b": ""}
    if task == "squad2":
        odds = json.loads((tmp_path / "null_odds.json").read_text())
        assert set(odds) == {"a", "b"} and odds["a"] < 0  # the span beats [CLS] by a wide margin
    expected = ["predictions.json"] + (["null_odds.json"] if task == "squad2" else [])
    assert [p.name for p in written] == expected


def test_multiple_choice_learns_to_pick_the_good_ending(tmp_path):
    from attnlab.tasks import MultipleChoiceExample

    rng = random.Random(0)

    def make(n: int) -> list[MultipleChoiceExample]:
        out = []
        for i in range(n):
            endings = [" ".join(rng.choice(FILLER) for _ in range(3)) + " bad" for _ in range(4)]
            label = rng.randint(0, 3)
            endings[label] = endings[label].replace("bad", "good")
            out.append(MultipleChoiceExample("the film was", tuple(endings), label, str(i)))
        return out

    source = ModelSource(config=TINY, tokenizer=_tok())
    cfg = _cfg(tmp_path, learning_rates=(2e-3,), epochs=3)
    result = finetune_examples(get_task("swag"), source, make(96), make(32), cfg)
    assert result.median >= 60  # percent; chance is 25
    assert type(load_model(result.best_dir)).__name__ == "EncoderForMultipleChoice"
