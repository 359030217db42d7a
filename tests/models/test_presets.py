"""Presets: every one builds (on the meta device) and its parameter count matches an independent
formula, the released checkpoints' counts and the papers' tables."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from attnlab.models import (
    PRESETS,
    Encoder,
    EncoderConfig,
    EncoderForPreTraining,
    ReplacedTokenDetection,
    count_parameters,
    get_preset,
)


def formula(c: EncoderConfig) -> int:
    """Encoder parameters written out from the architecture (independent of the module code)."""
    H, E, V, P = c.hidden_size, c.embedding_dim, c.vocab_size, c.max_position_embeddings
    I = c.intermediate_size  # noqa: E741 (the papers' names)
    embeddings = V * E + (P * E if c.position_embedding == "learned" else 0) + c.type_vocab_size * E + 2 * E
    project = E * H + H if E != H else 0
    attention = 4 * (H * H + H) + 2 * H  # query, key, value, output + LayerNorm
    ffn = (H * I + I) + (I * H + H) + 2 * H  # up, down + LayerNorm
    n_att = 1 if c.sharing in ("all", "attention") else c.num_layers
    n_ffn = 1 if c.sharing in ("all", "ffn") else c.num_layers
    final = 2 * H if c.norm_first else 0
    pooler = H * H + H if c.add_pooler else 0
    return embeddings + project + n_att * attention + n_ffn * ffn + final + pooler


@functools.cache
def meta_encoder(name: str) -> Encoder:
    """The preset built on the meta device (no memory, no initialisation work), once per pytest run."""
    with torch.device("meta"):
        return Encoder(get_preset(name))


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_builds_on_meta_and_counts(name: str) -> None:
    config = get_preset(name)
    encoder = meta_encoder(name)
    with torch.device("meta"):
        ids = torch.zeros(2, 16, dtype=torch.long)
        out = encoder(ids, attention_mask=torch.ones_like(ids))  # shapes only: meta tensors hold no data
    assert out.last_hidden_state.shape == (2, 16, config.hidden_size)
    assert count_parameters(encoder) == formula(config)
    assert EncoderConfig.from_dict(config.to_dict()) == config


def preset_count(name: str) -> int:
    return count_parameters(meta_encoder(name))


def test_count_parameters_takes_a_config_or_a_model() -> None:
    config = get_preset("bert-tiny")
    assert count_parameters(config) == count_parameters(Encoder(config)) == formula(config)
    with pytest.raises(TypeError, match="expected an nn.Module or EncoderConfig, got str"):
        count_parameters("bert-tiny")


# Exact counts of the released models' bare encoders, as HF BertModel / RobertaModel / AlbertModel /
# ElectraModel / DistilBertModel report them. Cross-checked against published counts of the same checkpoints:
# KerasHub's ALBERT presets list 11,683,584 / 17,683,968 / 58,724,864 / 222,595,584, and its ELECTRA
# backbones (which add a pooler, 256^2 + 256 or 768^2 + 768) list 13,548,800 for both small models,
# 33,576,960 for the base generator and 109,482,240 for the base discriminator.
RELEASED = {
    "bert-tiny": 4_385_920,
    "bert-mini": 11_170_560,
    "bert-mini-local": 11_170_560 + (4096 - 512) * 256,  # bert-mini + the longer position table
    "bert-small": 28_763_648,
    "bert-medium": 41_373_184,
    "bert-base-uncased": 109_482_240,
    "bert-base-cased": 108_310_272,
    "bert-large-uncased": 335_141_888,
    "bert-large-cased": 333_579_264,
    "roberta-base": 124_645_632,
    "roberta-large": 355_359_744,
    "albert-base": 11_683_584,
    "albert-large": 17_683_968,
    "albert-xlarge": 58_724_864,
    "albert-xxlarge": 222_595_584,
    "electra-small": 13_483_008,
    "electra-base": 108_891_648,
    "electra-large": 334_092_288,
    "electra-small-generator": 13_483_008,
    "electra-base-generator": 33_511_168,
    "electra-large-generator": 50_999_552,
    "distilbert-base": 66_362_880,
}


@pytest.mark.parametrize("name", list(PRESETS))
def test_exact_counts(name: str) -> None:
    assert preset_count(name) == RELEASED[name]


# The papers' figures, counted as the papers count them: the encoder with embeddings and pooler
# (BERT Table/section 3, RoBERTa, ALBERT Table 1, DistilBERT section 4); ELECTRA (Table 1) counts the
# discriminator with its replaced-token head (no pooler).
WITHIN_ONE_PERCENT = {
    "bert-base-uncased": 110e6,  # 109.48M, -0.47%
    "roberta-base": 125e6,  # 124.65M, -0.28%
    "roberta-large": 355e6,  # 355.36M, +0.10%
    "distilbert-base": 66e6,  # 66.36M, +0.55%
    "electra-base": 110e6,  # 109.48M with the RTD head, -0.47%
    "electra-large": 335e6,  # 335.14M with the RTD head, +0.04%
}


def paper_count(name: str) -> int:
    config = get_preset(name)
    if name.startswith("electra") and not name.endswith("generator"):
        with torch.device("meta"):
            return count_parameters(ReplacedTokenDetection.from_config(config))
    return preset_count(name)


@pytest.mark.parametrize("name", list(WITHIN_ONE_PERCENT))
def test_paper_counts_within_one_percent(name: str) -> None:
    assert paper_count(name) == pytest.approx(WITHIN_ONE_PERCENT[name], rel=0.01)


# Figures the exact architecture cannot reach within 1%: the papers round (and ALBERT-xxlarge's 235M is
# higher than any count of the released model, whose HF AlbertModel also has 222.6M). We test the exact
# count (above, and by formula) and pin the gap stated here.
PAPER_GAPS = {
    "bert-large-uncased": (340e6, 335_141_888, -0.0143),  # even with MLM+NSP heads: 336.2M, -1.1%
    "albert-base": (12e6, 11_683_584, -0.0264),  # 11.68M rounds to 12M
    "albert-large": (18e6, 17_683_968, -0.0176),  # 17.68M rounds to 18M
    "albert-xlarge": (60e6, 58_724_864, -0.0213),
    "albert-xxlarge": (235e6, 222_595_584, -0.0528),
    "electra-small": (14e6, 13_549_057, -0.0322),  # 13.55M with the RTD head rounds to 14M
}


@pytest.mark.parametrize("name", list(PAPER_GAPS))
def test_paper_counts_with_stated_gap(name: str) -> None:
    paper, exact, gap = PAPER_GAPS[name]
    count = paper_count(name)
    assert count == exact
    assert (count - paper) / paper == pytest.approx(gap, abs=5e-5)


def test_bert_large_pretraining_count() -> None:
    with torch.device("meta"):
        model = EncoderForPreTraining.from_config(get_preset("bert-large-uncased"), pair_head=True)
    # encoder + MLM transform (1024^2 + 1024 + LayerNorm 2048) + output bias 30522 + NSP 2050;
    # the decoder is tied to the word embedding and counted once.
    assert count_parameters(model) == 335_141_888 + 1024 * 1024 + 1024 + 2048 + 30522 + 2050


# -- the presets' fields ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "layers", "hidden"),
    [("bert-tiny", 2, 128), ("bert-mini", 4, 256), ("bert-small", 4, 512), ("bert-medium", 8, 512)],
)
def test_turc_sizes(name: str, layers: int, hidden: int) -> None:
    c = get_preset(name)
    assert (c.num_layers, c.hidden_size, c.num_heads, c.intermediate_size) == (
        layers,
        hidden,
        hidden // 64,
        4 * hidden,
    )


def test_family_fields() -> None:
    base, large = get_preset("bert-base-uncased"), get_preset("bert-large-uncased")
    assert (base.num_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (12, 768, 12, 3072)
    assert (large.num_layers, large.hidden_size, large.num_heads, large.intermediate_size) == (
        24,
        1024,
        16,
        4096,
    )
    assert get_preset("bert-base-cased") == dataclasses.replace(base, vocab_size=28996)
    r = get_preset("roberta-base")
    assert (
        r.vocab_size,
        r.max_position_embeddings,
        r.type_vocab_size,
        r.pad_token_id,
        r.position_offset,
    ) == (
        50265,
        514,
        1,
        1,
        2,
    )
    assert r.max_sequence_length == 512
    xx = get_preset("albert-xxlarge")
    assert (
        xx.embedding_size,
        xx.hidden_size,
        xx.num_heads,
        xx.intermediate_size,
        xx.num_layers,
        xx.vocab_size,
    ) == (
        128,
        4096,
        64,
        16384,
        12,
        30000,
    )
    assert all(get_preset(f"albert-{s}").sharing == "all" for s in ("base", "large", "xlarge", "xxlarge"))
    s = get_preset("electra-small")
    assert (s.embedding_size, s.hidden_size, s.num_heads, s.intermediate_size, s.add_pooler) == (
        128,
        256,
        4,
        1024,
        False,
    )
    for size, emb in (("small", 128), ("base", 768), ("large", 1024)):
        g = get_preset(f"electra-{size}-generator")
        assert (g.embedding_dim, g.hidden_size, g.num_heads, g.intermediate_size) == (emb, 256, 4, 1024)
        assert g.embedding_dim == get_preset(f"electra-{size}").embedding_dim  # tie-able to the discriminator
    d = get_preset("distilbert-base")
    assert (d.num_layers, d.type_vocab_size, d.add_pooler, d.position_embedding) == (6, 0, False, "learned")


def test_get_preset_errors_and_overrides() -> None:
    with pytest.raises(
        ValueError, match="unknown preset 'bert-huge'; valid: bert-tiny, bert-mini, .*distilbert-base"
    ):
        get_preset("bert-huge")
    assert get_preset("bert-mini", vocab_size=99).vocab_size == 99
    with pytest.raises(ValueError, match=r"unknown field\(s\) layers"):
        get_preset("bert-mini", layers=3)
    assert get_preset("bert-base-uncased") is not get_preset("bert-base-uncased")  # fresh objects
