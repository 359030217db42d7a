"""`MaskedLMPreTrainer`: the loss and gradients of `EncoderForPreTraining`, logits only where predicted."""

from __future__ import annotations

import pytest
import torch

from attnlab.models import EncoderConfig, EncoderForPreTraining
from attnlab.pretraining import MaskedLMPreTrainer

V = 60


def _model(pair: bool) -> EncoderForPreTraining:
    torch.manual_seed(0)
    config = EncoderConfig(
        vocab_size=V, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, embedding_size=8,
        max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0, add_pooler=pair,
    )  # fmt: skip
    return EncoderForPreTraining.from_config(config, pair_head=pair)


def _batch(b: int = 3, t: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (b, t), generator=g)
    labels = torch.where(torch.rand(b, t, generator=g) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 2] = ids[0, 2]
    mask = torch.ones_like(ids)
    mask[-1, -2:] = 0
    labels[-1, -2:] = -100
    return {
        "input_ids": ids,
        "labels": labels,
        "attention_mask": mask,
        "pair_labels": torch.tensor([0, 1, 0]),
    }


@pytest.mark.parametrize("pair", [False, True])
def test_same_loss_and_gradients_as_the_full_model(pair):
    model = _model(pair)
    batch = _batch()
    if not pair:
        batch.pop("pair_labels")
    full = model(**batch)
    full.loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    wrapped = MaskedLMPreTrainer(model)
    out = wrapped(**batch)
    assert out.loss.item() == pytest.approx(full.loss.item(), rel=1e-6)
    selected = batch["labels"] != -100
    assert out.mlm_logits.shape == (int(selected.sum()), V)
    assert torch.allclose(out.mlm_logits, full.mlm_logits[selected], atol=1e-6)
    assert torch.equal(out.mlm_labels, batch["labels"][selected])
    out.loss.backward()
    got = {n: p.grad for n, p in wrapped.model.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    for name in expected:
        assert torch.allclose(got[name], expected[name], atol=1e-6), name
    if pair:
        assert torch.allclose(out.pair_logits, full.pair_logits) and "pair_accuracy" in out.metrics


def test_no_predictions_and_bad_input():
    wrapped = MaskedLMPreTrainer(_model(False))
    batch = _batch()
    batch.pop("pair_labels")
    batch["labels"].fill_(-100)
    out = wrapped(**batch)
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    with pytest.raises(ValueError, match="no pair_head"):
        wrapped(**_batch())
    with pytest.raises(ValueError, match="labels: expected the shape"):
        wrapped(batch["input_ids"], labels=batch["labels"][:, :3])
    with pytest.raises(TypeError, match="EncoderForPreTraining"):
        MaskedLMPreTrainer(torch.nn.Linear(2, 2))
