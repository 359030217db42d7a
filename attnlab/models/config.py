"""`EncoderConfig`: every architectural choice of the BERT family as one named, validated field.

The papers differ in a few fields (see attnlab.models.presets):
BERT (Devlin et al. 2019) is the defaults; RoBERTa (Liu et al. 2019) changes the vocabulary and the
position offset; ALBERT (Lan et al. 2020) sets ``embedding_size`` and ``sharing``; ELECTRA (Clark et al.
2020) sets ``embedding_size`` for its generators; DistilBERT (Sanh et al. 2019) drops segment
embeddings and the pooler.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attnlab.nn.activations import ACTIVATIONS
from attnlab.nn.embeddings import POSITION_EMBEDDINGS

SHARING = ("none", "all", "attention", "ffn")
# self-attention: "full" (every key) or "local" (attnlab.nn.local_attention: a sliding window of
# attention_window keys on each side plus global_tokens leading global positions; linear memory in T)
ATTENTION = ("full", "local")
POOLER_ACTIVATIONS = ("tanh", *sorted(ACTIVATIONS))  # BERT's tanh, or any feed-forward activation


@dataclass
class EncoderConfig:
    """The encoder's shape and choices; defaults are BERT-base (uncased)."""

    vocab_size: int = 30522  # V: WordPiece vocabulary of bert-base-uncased
    hidden_size: int = 768  # H: the residual stream's width
    num_layers: int = 12  # L: Transformer blocks (executed; fewer are stored when shared)
    num_heads: int = 12  # N: attention heads, each of size D = H / N
    intermediate_size: int = 3072  # I: feed-forward inner size (4H in BERT)
    embedding_size: int | None = None  # E: None means E = H; ALBERT factorises with E = 128 < H
    max_position_embeddings: int = 512  # P: rows of the position table (RoBERTa: 514, offset included)
    type_vocab_size: int = 2  # segments A/B; 0 = no segment embeddings (DistilBERT), RoBERTa has 1
    position_embedding: str = "learned"  # "learned" (BERT) or "sinusoidal" (Vaswani et al. 3.5)
    position_offset: int = 0  # RoBERTa: pad_token_id + 1, positions computed from input_ids
    pad_token_id: int = 0  # padding id ([PAD] = 0 in BERT's vocab, <pad> = 1 in RoBERTa's)
    activation: str = "gelu"  # feed-forward activation, a key of attnlab.nn.ACTIVATIONS
    hidden_dropout: float = 0.1  # dropout on embeddings and on every sub-layer output
    attention_dropout: float = 0.1  # dropout on attention probabilities
    layer_norm_eps: float = 1e-12  # BERT's TF code uses 1e-12; RoBERTa (fairseq) 1e-5
    norm_first: bool = False  # False: post-LN (the papers); True: pre-LN + a final LayerNorm
    sharing: str = "none"  # ALBERT Table 4: "none" | "all" | "attention" | "ffn"
    add_pooler: bool = True  # act(Linear(h[CLS])) for NSP/SOP and classification
    # The pooler's activation: "tanh" (BERT) or a key of attnlab.nn.ACTIVATIONS; HF's ELECTRA classifier
    # head uses gelu, DistilBERT's pre_classifier relu. Old config.json files without it load as tanh.
    pooler_activation: str = "tanh"
    initializer_range: float = 0.02  # std of the normal initialisation (BERT's truncated normal)
    attention: str = "full"  # "full" (the papers) or "local": sliding-window attention
    attention_window: int = 128  # local: keys seen on each side of a query (Longformer's w / 2)
    global_tokens: int = 0  # local: the first G positions ([CLS] = 1) attend and are attended everywhere

    def __post_init__(self) -> None:
        def fail(field: str, expected: str) -> None:
            raise ValueError(f"EncoderConfig.{field}: expected {expected}, got {getattr(self, field)!r}")

        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                fail(name, "a positive int")
        if self.embedding_size is not None and (
            isinstance(self.embedding_size, bool)
            or not isinstance(self.embedding_size, int)
            or self.embedding_size <= 0
        ):
            fail("embedding_size", "a positive int or None (= hidden_size)")
        for name in ("type_vocab_size", "position_offset"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                fail(name, "an int >= 0")
        if not isinstance(self.pad_token_id, int) or not 0 <= self.pad_token_id < self.vocab_size:
            fail("pad_token_id", f"an int in [0, vocab_size={self.vocab_size})")
        if self.hidden_size % self.num_heads != 0:
            raise ValueError(
                f"EncoderConfig: hidden_size {self.hidden_size} is not divisible by "
                f"num_heads {self.num_heads}"
            )
        if self.activation not in ACTIVATIONS:
            fail("activation", f"one of {', '.join(sorted(ACTIVATIONS))}")
        if self.pooler_activation not in POOLER_ACTIVATIONS:
            fail("pooler_activation", f"one of {', '.join(POOLER_ACTIVATIONS)}")
        if self.position_embedding not in POSITION_EMBEDDINGS:
            fail("position_embedding", f"one of {', '.join(POSITION_EMBEDDINGS)}")
        if self.sharing not in SHARING:
            fail("sharing", f"one of {', '.join(SHARING)}")
        if self.attention not in ATTENTION:
            fail("attention", f"one of {', '.join(ATTENTION)}")
        for name in ("attention_window", "global_tokens"):
            value = getattr(self, name)
            least = 1 if name == "attention_window" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                fail(name, f"an int >= {least}")
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                fail(name, "a probability in [0, 1)")
        if not isinstance(self.layer_norm_eps, (int, float)) or self.layer_norm_eps <= 0:
            fail("layer_norm_eps", "a positive float")
        if not isinstance(self.initializer_range, (int, float)) or self.initializer_range <= 0:
            fail("initializer_range", "a positive float")
        for name in ("norm_first", "add_pooler"):
            if not isinstance(getattr(self, name), bool):
                fail(name, "a bool")
        if self.position_offset >= self.max_position_embeddings:
            fail("position_offset", f"less than max_position_embeddings={self.max_position_embeddings}")

    # -- derived sizes -------------------------------------------------------------------------
    @property
    def embedding_dim(self) -> int:
        """E, with ``embedding_size=None`` resolved to H."""
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def head_dim(self) -> int:
        """D = H / N."""
        return self.hidden_size // self.num_heads

    @property
    def max_sequence_length(self) -> int:
        """The longest input: P minus the positions the offset skips (RoBERTa: 514 - 2 = 512)."""
        return self.max_position_embeddings - self.position_offset

    # -- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderConfig:
        """Inverse of `to_dict`; unknown keys raise an error naming them (missing keys take defaults)."""
        if not isinstance(d, dict):
            raise TypeError(f"EncoderConfig.from_dict: expected a dict, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(
                f"EncoderConfig.from_dict: unknown key(s) {', '.join(unknown)}; "
                f"valid: {', '.join(sorted(known))}"
            )
        return cls(**d)
