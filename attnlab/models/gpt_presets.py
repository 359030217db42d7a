"""Named GPT configurations, derived from each other with `dataclasses.replace`.

Parameter counts (tied output embedding counted once, as HF's ``GPT2LMHeadModel.num_parameters()``):
gpt 116.5M (Radford et al. 2018: 12 layers, 768 wide, 12 heads, 3072 FFN, 512 positions, 40,478 BPE tokens),
gpt2 124.4M and gpt2-medium 354.8M (Radford et al. 2019, Table 2: "117M" and "345M" as the paper counted).
The two small presets are CPU-sized and not from a paper.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from attnlab.models.gpt import GPTConfig


def gpt2() -> GPTConfig:
    """GPT-2 small: pre-LN, 12 x 768, 12 heads, 1024 positions, byte-level BPE of 50,257 tokens."""
    return GPTConfig()


def gpt2_medium() -> GPTConfig:
    return dataclasses.replace(gpt2(), hidden_size=1024, num_layers=24, num_heads=16)


def gpt() -> GPTConfig:
    """The original GPT: post-LN (no final LayerNorm), 512 positions, 40,478 BPE tokens, plain init."""
    return dataclasses.replace(
        gpt2(),
        vocab_size=40_478,
        max_positions=512,
        norm_first=False,
        scale_residual_init=False,
        bos_token_id=None,
        eos_token_id=None,
    )


def gpt_char_tiny() -> GPTConfig:
    """The character-level Tiny Shakespeare model: 4 layers, 4 heads, 128 wide, context 64, no dropout, the
    output projection untied from the embedding (measured better on a held-out part of Tiny Shakespeare's
    training text, -0.034 and -0.042 nats on two seeds: experiments/gpt_tinyshakespeare.py).

    ``vocab_size`` is a byte-sized default; set it to the corpus's character count."""
    return dataclasses.replace(
        gpt2(),
        vocab_size=256,
        max_positions=64,
        hidden_size=128,
        num_layers=4,
        num_heads=4,
        dropout=0.0,
        embedding_dropout=0.0,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=False,
    )


def gpt_bpe_small() -> GPTConfig:
    """A small BPE model for CPU experiments: 6 layers, 6 heads, 384 wide, 256 positions, 8,192 tokens."""
    return dataclasses.replace(
        gpt2(),
        vocab_size=8192,
        max_positions=256,
        hidden_size=384,
        num_layers=6,
        num_heads=6,
        bos_token_id=0,
        eos_token_id=0,
    )


GPT_PRESETS: dict[str, Callable[[], GPTConfig]] = {
    "gpt": gpt,
    "gpt2": gpt2,
    "gpt2-medium": gpt2_medium,
    "gpt-char-tiny": gpt_char_tiny,
    "gpt-bpe-small": gpt_bpe_small,
}


def get_gpt_preset(name: str, **overrides: Any) -> GPTConfig:
    """A preset by name with field overrides: ``get_gpt_preset("gpt-char-tiny", vocab_size=65)``."""
    try:
        factory = GPT_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown GPT preset {name!r}; valid: {', '.join(GPT_PRESETS)}") from None
    return dataclasses.replace(factory(), **overrides)
