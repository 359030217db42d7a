"""Fine-tuning's defaults for the models this project pre-trains: the encoder's dropout (a checkpoint
pre-trained without dropout, as the budget recipes do, is fine-tuned with BERT's 0.1 on every layer, with its
own weights; ``keep`` leaves the checkpoint's) and the learning rate by width (BERT's below BERT-base's width
is the small BERTs' grid)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from attnlab.io import save
from attnlab.models import EncoderForPreTraining, get_preset
from attnlab.tasks.finetune import (
    ENCODER_DROPOUT,
    LEARNING_RATES,
    SMALL_MODEL_LEARNING_RATES,
    FinetuneConfig,
    ModelSource,
    default_learning_rates,
    get_task,
)
from attnlab.tokenizers import bert_wordpiece

VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"])}


def _dropouts(model: nn.Module) -> list[float]:
    """The p of every dropout in the encoder's layers: nn.Dropout modules and the attention's own."""
    ps = [m.p for m in model.encoder.modules() if isinstance(m, nn.Dropout)]
    ps += [m.dropout for m in model.encoder.modules() if isinstance(getattr(m, "dropout", None), float)]
    return ps


@pytest.fixture
def no_dropout_checkpoint(tmp_path):
    torch.manual_seed(0)
    config = dataclasses.replace(
        get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=16),
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = EncoderForPreTraining.from_config(config, pair_head=False)
    save(model, tmp_path / "model")
    return tmp_path / "model", model


@pytest.mark.parametrize("start", ["checkpoint", "random"])
def test_default_restores_bert_dropout(no_dropout_checkpoint, start):
    directory, pretrained = no_dropout_checkpoint
    tok = bert_wordpiece(VOCAB)
    if start == "checkpoint":
        source = ModelSource(directory=directory, tokenizer=tok)
    else:
        source = ModelSource(config=pretrained.config, tokenizer=tok)
    spec = get_task("sst2")
    cfg = FinetuneConfig()
    assert cfg.encoder_dropout == ENCODER_DROPOUT == 0.1
    model = source.build(spec, ["negative", "positive"], cfg.dropout, False, cfg.encoder_dropout)
    assert model.training
    assert model.config.hidden_dropout == model.config.attention_dropout == 0.1
    ps = _dropouts(model)
    assert ps and all(p == pytest.approx(0.1) for p in ps), ps
    if start == "checkpoint":  # the checkpoint's weights, not a fresh initialisation
        trained = pretrained.encoder.state_dict()
        for k, v in model.encoder.state_dict().items():
            if k in trained:
                assert torch.equal(v, trained[k]), k


def test_keep_leaves_the_checkpoint_dropout(no_dropout_checkpoint):
    directory, _ = no_dropout_checkpoint
    source = ModelSource(directory=directory, tokenizer=bert_wordpiece(VOCAB))
    model = source.build(get_task("sst2"), ["negative", "positive"], 0.1, False, None)
    assert model.config.hidden_dropout == model.config.attention_dropout == 0.0
    assert all(p == 0.0 for p in _dropouts(model))


def test_bad_encoder_dropout():
    with pytest.raises(ValueError, match="encoder_dropout"):
        FinetuneConfig(encoder_dropout=1.0)


@pytest.mark.parametrize(
    ("preset", "default", "sweep"),
    [
        ("bert-tiny", (1e-4,), SMALL_MODEL_LEARNING_RATES),
        ("bert-mini", (1e-4,), SMALL_MODEL_LEARNING_RATES),
        ("electra-small", (1e-4,), SMALL_MODEL_LEARNING_RATES),
        ("bert-base-uncased", (3e-5,), LEARNING_RATES),
        ("bert-large-uncased", (3e-5,), LEARNING_RATES),
    ],
)
def test_learning_rate_by_width(preset, default, sweep):
    config = get_preset(preset)
    assert default_learning_rates(config) == default
    assert default_learning_rates(config, sweep=True) == sweep
