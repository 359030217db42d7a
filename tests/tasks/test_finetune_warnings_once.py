"""A sweep's loading warnings are said once: every (learning rate, seed) run builds the same model from the
same checkpoint, and the "newly initialised" head is news only the first time."""

from __future__ import annotations

import logging

import pytest

from attnlab.io import save
from attnlab.models import EncoderForPreTraining, get_preset
from attnlab.tasks import SentenceExample
from attnlab.tasks.finetune import FinetuneConfig, ModelSource, finetune_examples, get_task
from attnlab.tokenizers import bert_wordpiece

VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film"])}
TINY = get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=16)
TRAIN = [SentenceExample(f"{w} film", None, str(int(w == "good")), f"t{i}")
         for i, w in enumerate(["good", "bad"] * 2)]  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def checkpoint(tmp_path):
    d = tmp_path / "mlm"
    save(EncoderForPreTraining.from_config(TINY), d)
    bert_wordpiece(VOCAB).save(d)
    return d


def _sweep(source: ModelSource, out) -> None:
    cfg = FinetuneConfig(
        batch_size=4, max_length=8, epochs=1.0, output_dir=out, progress_bar=False, keep_best=False,
        learning_rates=(1e-3, 2e-3, 3e-3), seeds=(0, 1, 2),
    )  # fmt: skip
    result = finetune_examples(get_task("sst2"), source, TRAIN, TRAIN[:2], cfg)
    assert len(result.runs) == 9


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "newly initialised" in r.getMessage()]


def test_newly_initialised_is_said_once_per_sweep(checkpoint, tmp_path, caplog):
    source = ModelSource(directory=checkpoint)
    with caplog.at_level(logging.WARNING, logger="attnlab.tasks"):
        _sweep(source, tmp_path / "first")
    (message,) = _said(caplog)
    assert "classifier" in message  # it still names what is fresh
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnlab.tasks"):
        _sweep(source, tmp_path / "second")  # a new sweep with the same source says it again, once
    assert len(_said(caplog)) == 1


def test_a_single_build_outside_a_sweep_still_warns(checkpoint, caplog):
    source = ModelSource(directory=checkpoint)
    with caplog.at_level(logging.WARNING, logger="attnlab.tasks"):
        for _ in range(2):
            source.build(get_task("sst2"), ["0", "1"], 0.1, False)
    assert len(_said(caplog)) == 2
