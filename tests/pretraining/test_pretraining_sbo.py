"""SpanBERT's span-boundary objective: the head's equations, shapes, loss, and the data pipeline's spans."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlab.data import Masker, MaskingConfig, PretrainingCollator, span_boundary_targets
from attnlab.models import EncoderConfig, EncoderForPreTraining
from attnlab.models.pretraining import masked_lm_loss
from attnlab.pretraining import SpanBertForPreTraining, SpanBoundaryHead

V = 40


def _config(**kw):
    base = dict(
        vocab_size=V, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
        max_position_embeddings=32, add_pooler=False, hidden_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    base.update(kw)
    return EncoderConfig(**base)


def test_head_computes_the_papers_equations():
    torch.manual_seed(0)
    head = SpanBoundaryHead(16, 12, V, max_positions=8, position_size=6)
    left, right = torch.randn(5, 16), torch.randn(5, 16)
    pos = torch.tensor([0, 1, 2, 7, 30])  # the last is past the table: uses its last row
    logits = head(left, right, pos)
    assert logits.shape == (5, V)
    p = head.position.weight[pos.clamp(max=7)]
    h0 = torch.cat([left, right, p], -1)  # [x_{s-1}; x_{e+1}; p_i]
    h1 = F.layer_norm(
        F.gelu(h0 @ head.dense1.weight.T + head.dense1.bias), (16,), head.norm1.weight, head.norm1.bias, 1e-12
    )
    y = F.layer_norm(
        F.gelu(h1 @ head.dense2.weight.T + head.dense2.bias), (12,), head.norm2.weight, head.norm2.bias, 1e-12
    )
    assert torch.allclose(logits, y @ head.decoder.weight.T + head.bias, atol=1e-5)


def test_decoder_is_tied_to_the_word_embedding():
    m = SpanBertForPreTraining.from_config(_config(embedding_size=8))
    word = m.model.encoder.embeddings.word
    assert m.sbo_head.decoder.weight is word.weight and m.model.mlm_head.decoder.weight is word.weight
    assert m.sbo_head.dense2.out_features == 8  # to E, the decoder's input
    with pytest.raises(ValueError, match="pair_head"):
        SpanBertForPreTraining(
            EncoderForPreTraining.from_config(_config(add_pooler=True), pair_head=True), m.sbo_head
        )


def _span_batch(seed: int = 0):
    """Two sequences masked by the data pipeline's span masking, collated."""
    rng = np.random.default_rng(seed)
    masker = Masker(
        MaskingConfig(rate=0.3, strategy="span"), mask_id=4, vocab_size=V, special_ids=(0, 1, 2, 3)
    )
    items = []
    for t in (20, 16):
        ids = np.concatenate([[2], rng.integers(5, V, t - 2), [3]])
        special = np.zeros(t, bool)
        special[[0, -1]] = True
        res = masker(ids, rng.random(t) < 0.6, special, rng)
        items.append(
            {"input_ids": res.input_ids, "labels": res.labels, **span_boundary_targets(res.spans, t)}
        )
    return PretrainingCollator(pad_id=0)(items)


def test_loss_is_mlm_plus_sbo_over_the_span_tokens():
    torch.manual_seed(0)
    m = SpanBertForPreTraining.from_config(_config())
    batch = _span_batch()
    out = m(**batch)
    labels = batch["labels"]
    inside = (batch["span_position"] >= 0) & (labels != -100)
    assert torch.equal(inside, labels != -100)  # span masking: every prediction is in a span
    assert out.sbo_logits.shape == (int(inside.sum()), V)
    hidden = m.model.encoder(batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    b, t = inside.nonzero(as_tuple=True)
    expected = m.sbo_head(
        hidden[b, batch["span_left"][b, t]],
        hidden[b, batch["span_right"][b, t]],
        batch["span_position"][b, t],
    )
    assert torch.allclose(out.sbo_logits, expected, atol=1e-5)
    assert out.sbo_loss.item() == pytest.approx(F.cross_entropy(expected, labels[b, t]).item(), rel=1e-5)
    mlm = masked_lm_loss(m.model.mlm_head(hidden), labels)  # over all positions, as EncoderForPreTraining
    assert out.mlm_loss.item() == pytest.approx(mlm.item(), rel=1e-5)
    assert out.mlm_logits.shape == (int(inside.sum()), V) and torch.equal(out.mlm_labels, labels[b, t])
    assert out.loss.item() == pytest.approx(out.mlm_loss.item() + out.sbo_loss.item(), rel=1e-6)
    out.loss.backward()
    assert m.sbo_head.dense1.weight.grad.abs().sum() > 0 and m.sbo_head.position.weight.grad.abs().sum() > 0


def test_boundaries_are_the_tokens_just_outside_each_span():
    batch = _span_batch(1)
    for row in range(2):
        pos, left, right = (batch[k][row] for k in ("span_position", "span_left", "span_right"))
        for i in torch.nonzero(pos >= 0).flatten().tolist():
            s = i - int(pos[i])
            assert int(left[i]) == s - 1
            assert pos[int(right[i]) - 1] >= 0 and (int(right[i]) == len(pos) or pos[int(right[i])] <= 0)


def test_bad_boundaries_raise_a_clear_error():
    m = SpanBertForPreTraining.from_config(_config())
    batch = _span_batch()
    i = torch.nonzero(batch["span_position"][0] >= 0)[0, 0]
    batch["span_left"][0, i] = -1
    with pytest.raises(ValueError, match="span boundary"):
        m(**batch)
    with pytest.raises(ValueError, match="span_left: expected the shape"):
        m(**{**batch, "span_left": batch["span_left"][:, :3]})
