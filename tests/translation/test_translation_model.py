"""The encoder-decoder: configs and presets (parameter counts vs the paper), weight sharing, causal masking,
cached vs uncached decoding, beam search properties."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnlab.translation import (
    Seq2SeqConfig,
    beam_search,
    build_model,
    count_parameters,
    greedy_search,
    preset,
    transformer_base,
    transformer_big,
)
from attnlab.translation.config import transformer_tiny
from attnlab.translation.decoding import length_penalty
from attnlab.translation.model import ProjectedMultiHeadAttention

# Table 3 of the paper (arXiv v5; "Table 4" in some numberings): overrides of base -> parameters (x10^6).
TABLE3 = [
    ({}, 65),
    ({"d_k": 16}, 58),
    ({"d_k": 32}, 60),
    ({"num_layers": 2}, 36),
    ({"num_layers": 4}, 50),
    ({"num_layers": 8}, 80),
    ({"d_model": 256}, 28),
    ({"d_model": 1024}, 168),
    ({"d_ff": 1024}, 53),
    ({"d_ff": 4096}, 90),
]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny(**overrides) -> Seq2SeqConfig:
    return transformer_tiny(**{"vocab_size": 40, "dropout": 0.0, **overrides})


def source_batch(seed: int = 0, vocab: int = 40):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (3, 6), generator=g)
    mask = torch.ones_like(ids)
    ids[1, 4:], mask[1, 4:] = 0, 0
    return ids, mask


# ----------------------------------------------------------------------------------------------- configs


def test_presets_are_the_papers() -> None:
    base, big = transformer_base(), transformer_big()
    assert (base.num_layers, base.d_model, base.d_ff, base.num_heads, base.head_dim, base.dropout) == (
        6, 512, 2048, 8, 64, 0.1,
    )  # fmt: skip
    assert (big.num_layers, big.d_model, big.d_ff, big.num_heads, big.head_dim, big.dropout) == (
        6, 1024, 4096, 16, 64, 0.3,
    )  # fmt: skip
    assert base.label_smoothing == 0.1 and base.position_embedding == "sinusoidal" and not base.norm_first
    assert base.share_embeddings and base.scale_embedding


def test_parameter_counts_golden() -> None:
    # By hand, V = 37000: encoder layer 4*(512*512+512) + (2*512*2048+2048+512) + 2*2*512 = 3,152,384;
    # decoder layer 2*1,050,624 + 2,099,712 + 3*1024 = 4,204,032; embedding 37000*512 once.
    assert count_parameters(transformer_base()) == 6 * 3_152_384 + 6 * 4_204_032 + 37_000 * 512 == 63_082_496
    assert count_parameters(transformer_big()) == 214_245_376
    # The paper: 65M and 213M (see attnlab.translation.config for the convention).
    assert abs(count_parameters(transformer_base()) / 65e6 - 1) < 0.035
    assert abs(count_parameters(transformer_big()) / 213e6 - 1) < 0.01


@pytest.mark.parametrize("overrides,paper", TABLE3)
def test_table3_rows_match_the_paper_up_to_one_vocabulary_offset(overrides: dict, paper: int) -> None:
    """Every row sits above our count by the same ~4k embedding rows (d_model each), within the paper's
    rounding to 1M: the rows differ from each other exactly as our formula says."""
    cfg = transformer_base(**overrides)
    extra_rows = (paper * 1e6 - count_parameters(cfg)) / cfg.d_model
    assert 2_500 < extra_rows < 5_500, extra_rows


@pytest.mark.parametrize(
    "overrides",
    [{}, {"d_k": 8}, {"num_heads": 1}, {"position_embedding": "learned"}, {"norm_first": True},
     {"share_embeddings": False}, {"d_k": 8, "d_v": 24}],
)  # fmt: skip
def test_count_parameters_equals_built_model(overrides: dict) -> None:
    cfg = tiny(**overrides)
    model = build_model(cfg)
    unique = {id(p): p for p in model.parameters()}
    assert sum(p.numel() for p in unique.values()) == count_parameters(cfg)


def test_every_table3_row_builds_and_runs() -> None:
    rows = [
        {"num_heads": 1}, {"num_heads": 16}, {"d_k": 4}, {"num_layers": 1}, {"d_model": 32},
        {"d_ff": 64}, {"dropout": 0.0, "label_smoothing": 0.2}, {"position_embedding": "learned"},
    ]  # fmt: skip
    ids, mask = source_batch()
    for row in rows:
        model = build_model(tiny(**row))
        out = model(ids, mask, labels=torch.randint(4, 40, (3, 5)))
        assert out.logits.shape == (3, 5, 40) and torch.isfinite(out.loss), row


def test_projected_attention_for_row_b() -> None:
    model = build_model(tiny(d_k=4))
    attn = model.encoder.layers[0].self_attn.layer
    assert isinstance(attn, ProjectedMultiHeadAttention)
    assert attn.query.weight.shape == (16, 64) and attn.value.weight.shape == (64, 64)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="activation"):
        Seq2SeqConfig(activation="swish")
    with pytest.raises(ValueError, match="position_embedding"):
        Seq2SeqConfig(position_embedding="rotary")
    with pytest.raises(ValueError, match="divisible"):
        Seq2SeqConfig(d_model=100, num_heads=8)
    with pytest.raises(ValueError, match="eos_token_id"):
        Seq2SeqConfig(vocab_size=10, eos_token_id=10)
    with pytest.raises(ValueError, match="unknown translation preset"):
        preset("transformer-huge")


def test_config_round_trip(tmp_path) -> None:
    cfg = preset("transformer-base", d_k=16, norm_first=True)
    cfg.save(tmp_path / "config.json")
    assert Seq2SeqConfig.load(tmp_path / "config.json") == cfg


# ----------------------------------------------------------------------------------------------- model


def test_embeddings_shared_and_scaled() -> None:
    model = build_model(tiny())
    assert model.generator.weight is model.src_embed.word.weight is model.tgt_embed.word.weight
    assert model.src_embed.scale == pytest.approx(8.0)  # sqrt(64)
    separate = build_model(tiny(share_embeddings=False))
    assert separate.generator.weight is not separate.src_embed.word.weight


def test_sinusoids_are_the_papers_formula() -> None:
    model = build_model(tiny())
    table = model.tgt_embed.sinusoid  # (P, H)
    pos, i = 7, 5
    assert table[pos, 2 * i] == pytest.approx(
        torch.tensor(pos / 10000 ** (2 * i / 64)).sin().item(), abs=1e-6
    )
    assert table[pos, 2 * i + 1] == pytest.approx(
        torch.tensor(pos / 10000 ** (2 * i / 64)).cos().item(), abs=1e-6
    )
    with torch.no_grad():
        x = model.tgt_embed(torch.tensor([[5, 6]]))
    expected = model.tgt_embed.word.weight[[5, 6]] * 8.0 + table[:2]
    torch.testing.assert_close(x[0], expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_causal_masking(norm_first: bool) -> None:
    """Changing target tokens at positions >= j changes no logits before j."""
    torch.manual_seed(0)
    model = build_model(tiny(norm_first=norm_first)).eval()
    ids, mask = source_batch()
    dec = torch.randint(4, 40, (3, 8))
    j = 5
    perturbed = dec.clone()
    perturbed[:, j:] = torch.randint(4, 40, (3, 8 - j))
    with torch.no_grad():
        a = model(ids, mask, decoder_input_ids=dec).logits
        b = model(ids, mask, decoder_input_ids=perturbed).logits
    torch.testing.assert_close(a[:, :j], b[:, :j])
    assert not torch.allclose(a[:, j:], b[:, j:])


def test_source_padding_is_ignored() -> None:
    torch.manual_seed(0)
    model = build_model(tiny()).eval()
    ids, mask = source_batch()
    other = ids.clone()
    other[1, 4:] = 17  # change only padded positions
    dec = torch.randint(4, 40, (3, 4))
    with torch.no_grad():
        a = model(ids, mask, decoder_input_ids=dec).logits
        b = model(other, mask, decoder_input_ids=dec).logits
    torch.testing.assert_close(a, b)


def test_incremental_decode_equals_full() -> None:
    torch.manual_seed(0)
    model = build_model(tiny(position_embedding="learned")).eval()
    ids, mask = source_batch()
    dec = torch.randint(4, 40, (3, 7))
    with torch.no_grad():
        memory = model.encode(ids, mask)
        full = model.decode(dec, memory, mask)
        cache = model.new_cache()
        steps = [model.decode(dec[:, t : t + 1], memory, mask, cache=cache, offset=t) for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    # cross-attention keys/values were computed once: their length is the source's, not grown per step
    assert cache[0]["cross"]["key"].shape[2] == ids.shape[1]
    assert cache[0]["self"]["key"].shape[2] == 7


def test_labels_shift_and_padding() -> None:
    model = build_model(tiny())
    labels = torch.tensor([[5, 6, 3, -100]])
    assert model.shift_right(labels).tolist() == [[2, 5, 6, 3]]


# ----------------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("seed", [0, 1])
def test_cached_and_uncached_decoding_equal(seed: int) -> None:
    torch.manual_seed(seed)
    model = build_model(tiny())
    ids, mask = source_batch(seed)
    for search, kwargs in ((greedy_search, {}), (beam_search, {"beam_size": 3, "alpha": 0.6})):
        a = search(model, ids, mask, max_length=10, **kwargs)
        b = search(model, ids, mask, max_length=10, use_cache=False, **kwargs)
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_beam_size_one_is_greedy() -> None:
    torch.manual_seed(3)
    model = build_model(tiny())
    ids, mask = source_batch(3)
    greedy = greedy_search(model, ids, mask, max_length=9)
    beam = beam_search(model, ids, mask, beam_size=1, alpha=0.0, max_length=9)
    assert [h.tokens for h in greedy] == [h.tokens for h in beam]


def test_beam_finds_at_least_greedy_log_probability() -> None:
    torch.manual_seed(4)
    model = build_model(tiny())
    ids, mask = source_batch(4)
    greedy = greedy_search(model, ids, mask, max_length=6)
    beam = beam_search(model, ids, mask, beam_size=5, alpha=0.0, max_length=6)
    for g, b in zip(greedy, beam):
        assert b.score >= g.score - 1e-4


def test_batched_beam_equals_one_sentence_at_a_time() -> None:
    torch.manual_seed(5)
    model = build_model(tiny())
    ids, mask = source_batch(5)
    batched = beam_search(model, ids, mask, beam_size=3, max_length=8)
    for i in range(3):
        n = int(mask[i].sum())
        single = beam_search(model, ids[i : i + 1, :n], mask[i : i + 1, :n], beam_size=3, max_length=8)
        assert single[0].tokens == batched[i].tokens


def test_length_limit_is_source_length_plus_offset() -> None:
    torch.manual_seed(0)
    model = build_model(tiny())
    # make EOS impossible, so every hypothesis runs to its limit
    with torch.no_grad():
        model.src_embed.word.weight[model.config.eos_token_id] = (
            -100 * model.src_embed.word.weight.abs().max()
        )
    ids, mask = source_batch()
    lengths = mask.sum(1).tolist()
    for hyps in (
        greedy_search(model, ids, mask, max_length_offset=2),
        beam_search(model, ids, mask, 2, 0.6, max_length_offset=2),
    ):
        assert [len(h.tokens) for h in hyps] == [n + 2 for n in lengths]
        assert not any(h.finished for h in hyps)


def test_gnmt_length_penalty() -> None:
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(10, 0.6) == pytest.approx((15 / 6) ** 0.6)
    assert length_penalty(10, 1.0, "power") == 10.0
    with pytest.raises(ValueError, match="length_penalty_style"):
        length_penalty(3, 0.6, "average")


def test_decoding_leaves_training_mode() -> None:
    model = build_model(tiny(dropout=0.1)).train()
    ids, mask = source_batch()
    beam_search(model, ids, mask, beam_size=2, max_length=3)
    assert model.training
    assert dataclasses.asdict(model.config)["dropout"] == 0.1
