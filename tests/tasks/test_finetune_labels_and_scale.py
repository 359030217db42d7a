"""Class names come from the whole training file, whatever ``--max-train-examples`` keeps; every score a
fine-tuning reports is on one scale, percent (attnlab.metrics.scale)."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main
from attnlab.metrics import fractions_to_percent, score_label
from attnlab.models import get_preset
from attnlab.tasks import SentenceExample, TokenExample
from attnlab.tasks.finetune import FinetuneConfig, ModelSource, finetune_examples, get_task
from attnlab.tokenizers import bert_wordpiece

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "paris", "bob", "went", "to", "good", "bad", "film"]
VOCAB = {t: i for i, t in enumerate(WORDS)}
TINY = get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=32)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _cfg(tmp_path, **kw) -> FinetuneConfig:
    return FinetuneConfig(**{"batch_size": 4, "max_length": 16, "epochs": 1.0, "output_dir": tmp_path,
                             "progress_bar": False, "learning_rates": (1e-3,), **kw})  # fmt: skip


def _source() -> ModelSource:
    return ModelSource(config=TINY, tokenizer=bert_wordpiece(VOCAB))


@pytest.mark.parametrize("task", ["conll2003", "kbert_ner"])
def test_a_tag_only_the_rest_of_the_training_file_has_is_still_a_class(tmp_path, task):
    """CoNLL with the first 4 sentences (all PER): dev's I-LOC was "unknown" when classes came from them."""
    per = TokenExample(("bob", "went"), ("B-PER", "O"), "p")
    loc = TokenExample(("went", "to", "paris", "paris"), ("O", "O", "B-LOC", "I-LOC"), "l")
    result = finetune_examples(get_task(task), _source(), [per] * 4 + [loc] * 4, [loc, per],
                               _cfg(tmp_path, max_train_examples=4))  # fmt: skip
    assert result.train_examples == 4
    options = json.loads((tmp_path / "best" / "config.json").read_text())
    assert "I-LOC" in json.dumps(options)  # the model has the class the subsample lacks


@pytest.mark.parametrize("task", ["generic", "kbert_cls"])
def test_a_label_only_the_rest_of_the_training_file_has_is_still_a_class(tmp_path, task):
    train = [SentenceExample("good film", None, "pos", f"a{i}") for i in range(4)]
    train += [SentenceExample("bad film", None, "neg", f"b{i}") for i in range(4)]
    dev = [SentenceExample("bad film", None, "neg", "d0"), SentenceExample("good film", None, "pos", "d1")]
    result = finetune_examples(get_task(task), _source(), train, dev, _cfg(tmp_path, max_train_examples=4))
    assert 0.0 <= result.median <= 100.0 and result.train_examples == 4


def test_scores_are_percent_and_their_printed_names_say_so():
    assert fractions_to_percent({"accuracy": 0.875, "best_f1_thresh": -1.5}) == {
        "accuracy": 87.5, "best_f1_thresh": -1.5
    }  # fmt: skip
    assert score_label("f1") == "f1 (%)" and score_label("eval_accuracy") == "accuracy (%)"
    assert score_label("best_f1_thresh") == "best_f1_thresh"


def test_a_perfect_classification_reads_100_as_squads_f1_does(tmp_path, capsys):
    """Accuracy on SQuAD's scale (the official script's 0-100): printed, in results.json, in evaluate."""
    data = tmp_path / "data"
    data.mkdir()
    rows = ["sentence,label"] + ["good film,pos", "bad film,neg"] * 8
    for split in ("train", "dev"):
        (data / f"{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    tok = tmp_path / "tok"
    bert_wordpiece(VOCAB).save(tok)
    out = tmp_path / "run"
    argv = ["finetune", "--task", "generic", "--data-dir", str(data), "--model", "bert-tiny", "--tokenizer",
            str(tok), "--output-dir", str(out), "--epochs", "4", "--batch-size", "4", "--lr", "1e-3",
            "--max-length", "16", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "median dev accuracy (%)" in printed
    result = json.loads((out / "results.json").read_text())
    assert result["scale"] == "percent" and result["median"] == pytest.approx(100.0)
    assert main(["evaluate", "--task", "generic", "--data-dir", str(data), "--model", str(out / "best")]) == 0
    assert "generic dev accuracy (%): 100.00" in capsys.readouterr().out
