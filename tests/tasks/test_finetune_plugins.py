"""The fine-tuning run calls its plug-ins and nothing else about them: a feature builder (BERT's, K-BERT's
or any object with ``build`` and ``collate``) and an extra loss (``wrap``)."""

from __future__ import annotations

import pytest

from attnlab.models import get_preset
from attnlab.tasks import SentenceExample
from attnlab.tasks.evaluation import TaskEvaluator
from attnlab.tasks.feature_builder import TaskFeatures
from attnlab.tasks.finetune import FinetuneConfig, ModelSource, finetune_examples, get_task
from attnlab.tasks.finetune_run import run_once
from attnlab.tokenizers import bert_wordpiece

VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film"])}
TINY = get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=16)
TRAIN = [SentenceExample(f"{w} film", None, str(int(w == "good")), f"t{i}")
         for i, w in enumerate(["good", "bad"] * 4)]  # fmt: skip

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class CountingFeatures(TaskFeatures):
    """BERT's features, counting the calls the run makes."""

    def __init__(self) -> None:
        self.built, self.collated = [], 0

    def build(self, spec, tokenizer, examples, labels, **options):
        self.built.append(options["training"])
        return super().build(spec, tokenizer, examples, labels, **options)

    def collate(self, features, pad_id=0):
        self.collated += 1
        return super().collate(features, pad_id)


class RecordingLoss:
    def __init__(self) -> None:
        self.wrapped = []

    def wrap(self, model):
        self.wrapped.append(model)
        return model


def _cfg(tmp_path, **kw):
    return FinetuneConfig(batch_size=4, max_length=8, epochs=1.0, output_dir=tmp_path, progress_bar=False,
                          learning_rates=(1e-3,), **kw)  # fmt: skip


def test_the_sweep_builds_and_pads_through_the_feature_builder_it_is_given(tmp_path):
    builder = CountingFeatures()
    finetune_examples(get_task("sst2"), ModelSource(config=TINY, tokenizer=bert_wordpiece(VOCAB)), TRAIN,
                      TRAIN[:4], _cfg(tmp_path, knowledge=builder))  # fmt: skip
    assert builder.built == [True, False]  # training features, then the dev features
    assert builder.collated >= 2 + 1  # two training batches and the dev batch


def test_one_run_trains_the_module_the_extra_loss_wraps_and_saves_the_task_model(tmp_path):
    spec, source = get_task("sst2"), ModelSource(config=TINY, tokenizer=bert_wordpiece(VOCAB))
    features, _ = TaskFeatures().build(spec, source.tokenizer, TRAIN, ["0", "1"], training=True, max_length=8,
                                       with_token_types=True)  # fmt: skip
    evaluator = TaskEvaluator(spec, features, TRAIN, ["0", "1"])
    loss = RecordingLoss()
    run = run_once(spec, source, features, evaluator, ["0", "1"], _cfg(tmp_path), 1e-3, 0, tmp_path / "run",
                   extra_loss=loss)  # fmt: skip
    (model,) = loss.wrapped
    assert type(model).__name__ == "EncoderForSequenceClassification"
    assert run.steps == 2 and (tmp_path / "run" / "best" / "config.json").is_file()
