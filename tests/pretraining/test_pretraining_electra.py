"""ELECTRA's pre-trainer: shared embeddings by identity, replacements only where masked, labels, gradients."""

from __future__ import annotations

import pytest
import torch

from attnlab.io import load, save
from attnlab.models import EncoderConfig, EncoderForPreTraining, ReplacedTokenDetection, get_preset
from attnlab.models.pretraining import masked_lm_loss
from attnlab.pretraining import ElectraPreTrainer, generator_config

V = 50
MASK = 4


def _config(**kw) -> EncoderConfig:
    base = dict(
        vocab_size=V, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64, embedding_size=16,
        max_position_embeddings=32, add_pooler=False, hidden_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    base.update(kw)
    return EncoderConfig(**base)


def _electra(seed: int = 0, **kw) -> ElectraPreTrainer:
    torch.manual_seed(seed)
    disc = _config()
    gen = EncoderForPreTraining.from_config(generator_config(disc, 0.25))
    return ElectraPreTrainer(gen, ReplacedTokenDetection.from_config(disc), **kw)


def _batch(seed: int = 0, b: int = 3, t: int = 12):
    g = torch.Generator().manual_seed(seed)
    original = torch.randint(5, V, (b, t), generator=g)
    labels = torch.full_like(original, -100)
    masked = torch.rand(b, t, generator=g) < 0.3
    masked[:, 0] = masked[:, -1] = False
    masked[0, 3] = True
    original[-1, -3:] = 0  # padding ([PAD] = 0) at the end of the last row
    masked[-1, -3:] = False
    labels[masked] = original[masked]
    input_ids = torch.where(masked, torch.full_like(original, MASK), original)
    attention_mask = (original != 0).long()
    return original, input_ids, labels, attention_mask


def test_generator_sizes_follow_table_6():
    # ELECTRA-Base's generator at 1/3 is the released google/electra-base-generator shape
    released = get_preset("electra-base-generator")
    g = generator_config(get_preset("electra-base"), 1 / 3)
    assert (g.hidden_size, g.num_heads, g.intermediate_size) == (
        released.hidden_size, released.num_heads, released.intermediate_size
    )  # fmt: skip
    assert g.embedding_dim == 768 and g.num_layers == 12
    s = generator_config(get_preset("electra-small"), 0.25)  # the paper's 1/4-size small generator
    assert (s.hidden_size, s.num_heads, s.intermediate_size, s.embedding_dim) == (64, 1, 256, 128)
    with pytest.raises(ValueError, match="fraction"):
        generator_config(get_preset("electra-small"), 0.0)


def test_embeddings_are_tied_by_identity():
    m = _electra()
    g, d = m.generator.encoder.embeddings, m.discriminator.encoder.embeddings
    assert g.word is d.word and g.position is d.position and g.token_type is d.token_type and g.norm is d.norm
    assert m.generator.mlm_head.decoder.weight is d.word.weight
    assert g.project is not None and g.project.in_features == 16 and g.project.out_features == 8  # E -> H_G
    assert d.project is not None and d.project.out_features == 32
    shared = {id(p) for p in d.parameters()}
    n_params = sum(p.numel() for p in m.parameters())  # each shared parameter counted once
    gen_only = sum(p.numel() for p in m.generator.parameters() if id(p) not in shared)
    assert n_params == sum(p.numel() for p in m.discriminator.parameters()) + gen_only
    assert m.discriminator_only() is m.discriminator


def test_mismatched_embedding_sizes_are_refused():
    gen = EncoderForPreTraining.from_config(_config(embedding_size=8, hidden_size=8, num_heads=1))
    with pytest.raises(ValueError, match="embedding_dim"):
        ElectraPreTrainer(gen, ReplacedTokenDetection.from_config(_config()))
    with pytest.raises(ValueError, match="pair_head"):
        ElectraPreTrainer(
            EncoderForPreTraining.from_config(_config(add_pooler=True), pair_head=True),
            ReplacedTokenDetection.from_config(_config()),
        )


def test_replacements_only_at_masked_positions_and_labels():
    m = _electra()
    original, input_ids, labels, attention_mask = _batch()
    out = m(input_ids, labels=labels, attention_mask=attention_mask)
    masked = labels != -100
    assert torch.equal(out.corrupted_ids[~masked], original[~masked])  # nothing else changes
    assert (out.corrupted_ids[masked] != MASK).float().mean() > 0.9  # samples from a near-uniform softmax
    assert torch.equal(out.replaced, out.corrupted_ids != original)
    assert not out.replaced[~masked].any()
    assert out.mlm_logits.shape == (int(masked.sum()), V) and torch.equal(out.mlm_labels, original[masked])


def test_a_sample_equal_to_the_original_counts_as_original():
    m = _electra()
    original, input_ids, labels, attention_mask = _batch()
    original[0, 3] = labels[0, 3] = 7
    with torch.no_grad():
        m.generator.mlm_head.bias.fill_(-1e4)
        m.generator.mlm_head.bias[7] = 1e4  # the generator now always samples token 7
    out = m(input_ids, labels=labels, attention_mask=attention_mask)
    masked = labels != -100
    assert (out.corrupted_ids[masked] == 7).all()
    assert not out.replaced[0, 3]  # sampled 7 == original 7: "real", label 0
    assert torch.equal(out.replaced[masked], original[masked] != 7)


def test_loss_is_mlm_plus_50_rtd_and_matches_the_parts():
    m = _electra(rtd_weight=50.0)
    original, input_ids, labels, attention_mask = _batch()
    torch.manual_seed(1)
    out = m(input_ids, labels=labels, attention_mask=attention_mask)
    assert out.loss.item() == pytest.approx(out.mlm_loss.item() + 50.0 * out.rtd_loss.item(), rel=1e-6)
    # the generator's loss is the ordinary masked-LM loss of the generator on the same batch
    full = m.generator(input_ids, attention_mask=attention_mask, labels=labels)
    assert out.mlm_loss.item() == pytest.approx(masked_lm_loss(full.mlm_logits, labels).item(), rel=1e-5)
    # the discriminator's loss is its own BCE on the corrupted text with replaced labels, padding ignored
    rtd_labels = out.replaced.long().masked_fill(attention_mask == 0, -100)
    disc = m.discriminator(out.corrupted_ids, attention_mask=attention_mask, labels=rtd_labels)
    assert out.rtd_loss.item() == pytest.approx(disc.loss.item(), rel=1e-5)
    for key in ("mlm_loss", "rtd_loss", "rtd_accuracy", "replaced_fraction"):
        assert key in out.metrics


def _grads(module):
    return {n: p.grad for n, p in module.named_parameters()}


def test_generator_learns_only_from_the_mlm_loss():
    m = _electra()
    _, input_ids, labels, attention_mask = _batch()
    out = m(input_ids, labels=labels, attention_mask=attention_mask)
    out.rtd_loss.backward()
    shared = {id(p) for p in m.discriminator.encoder.embeddings.parameters()}
    for name, p in m.generator.named_parameters():
        if id(p) in shared:
            continue  # the shared embeddings learn from both losses
        assert p.grad is None or not p.grad.any(), f"generator {name} got a gradient from the RTD loss"
    assert m.discriminator.rtd_head.classifier.weight.grad.abs().sum() > 0
    m.zero_grad(set_to_none=True)
    out = m(input_ids, labels=labels, attention_mask=attention_mask)
    out.mlm_loss.backward()
    for name, p in m.discriminator.named_parameters():
        if id(p) in shared:
            continue
        assert p.grad is None or not p.grad.any(), f"discriminator {name} got a gradient from the MLM loss"
    assert m.generator.encoder.attention[0].layer.query.weight.grad.abs().sum() > 0
    assert m.discriminator.encoder.embeddings.word.weight.grad.abs().sum() > 0  # through the tied decoder


def test_discriminator_is_saved_alone(tmp_path):
    m = _electra()
    save(m.discriminator_only(), tmp_path / "d")
    loaded = load(tmp_path / "d")
    assert type(loaded) is ReplacedTokenDetection
    ids = torch.randint(5, V, (2, 10))
    m.eval()
    assert torch.allclose(loaded(ids).logits, m.discriminator(ids).logits, atol=1e-6)
