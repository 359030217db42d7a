"""`Seq2SeqConfig`: the encoder-decoder of "Attention Is All You Need" (Vaswani et al. 2017), and its presets.

Every row of the paper's model-variation table (Table 3 in the arXiv version: rows (A)-(E)) is the base
preset plus overrides of the fields below::

    (A) num_heads=1                 (B) d_k=16               (C) num_layers=2, d_model=256, d_ff=1024
    (D) dropout=0.0, label_smoothing=0.2                     (E) position_embedding="learned"

``d_k`` / ``d_v`` are the per-head sizes of queries and keys / of values, by default ``d_model // num_heads``.
Row (A) changes h with d_k = d_v = d_model / h; row (B) changes d_k alone (its parameter counts, 60M and
58M, are those of smaller query/key projections with d_v kept at 64). When the heads do not tile d_model
the projections are ``d_model -> num_heads * d_k`` (``d_v``) and back.

Parameter counting convention (`count_parameters`): every trainable tensor once, biases and LayerNorm
gains included, the joint source/target/output embedding counted once (it is one tensor), sinusoidal
positions count nothing. With a 37,000-token joint vocabulary this gives 63.1M for base and 214.2M for
big; the paper reports 65M and 213M (Table 3). The paper does not give its exact vocabulary or counting
rule; its base-size rows are all ~2M above ours, i.e. as if the vocabulary held ~4k more tokens.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POSITION_EMBEDDINGS = ("sinusoidal", "learned")
# "interleaved": PE[pos, 2i] = sin, PE[pos, 2i+1] = cos (the paper, section 3.5).
# "concatenated": all sines then all cosines (tensor2tensor's and Marian's layout): the same features,
# permuted. Only matters for loading weights trained with the other layout (HF MarianMT parity).
SINUSOIDAL_LAYOUTS = ("interleaved", "concatenated")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "gelu_sigmoid")


@dataclass
class Seq2SeqConfig:
    # --- vocabulary: one joint BPE vocabulary for source and target (section 5.1)
    vocab_size: int = 37_000
    pad_token_id: int = 0
    bos_token_id: int = 2  # the decoder's start token (Marian starts with pad: set decoder_start_token_id)
    eos_token_id: int = 3
    decoder_start_token_id: int | None = None  # None: bos_token_id

    # --- size (Table 3 columns N, d_model, d_ff, h, d_k)
    num_layers: int = 6  # N: encoder layers
    num_decoder_layers: int | None = None  # None: the same N as the encoder (the paper always has)
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: int | None = None  # per-head query/key size; None: d_model // num_heads
    d_v: int | None = None  # per-head value size; None: d_model // num_heads (row B varies d_k only)

    # --- regularisation (section 5.4)
    dropout: float = 0.1  # P_drop: each sub-layer output before the residual add, and the embedding sums
    attention_dropout: float = 0.0  # on attention probabilities (not in the paper; tensor2tensor has it)
    activation_dropout: float = 0.0  # inside the FFN after the activation (not in the paper)
    label_smoothing: float = 0.1  # epsilon_ls

    # --- architecture choices
    activation: str = "relu"  # FFN non-linearity, eq. (2)
    position_embedding: str = "sinusoidal"  # "learned": Table 3 row (E)
    sinusoidal_layout: str = "interleaved"
    max_positions: int = 1024  # positions available to the embedding (learned table / sin-cos buffer)
    norm_first: bool = False  # False: post-LN as the paper; True: pre-LN (Xiong et al. 2020) + final norms
    layer_norm_eps: float = 1e-5  # the paper does not say; PyTorch's and Marian's default
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model) (section 3.4)
    share_embeddings: bool = True  # one matrix for source, target and pre-softmax (section 3.4)
    init_std: float | None = None  # None: Xavier-uniform on matrices (as tensor2tensor); else normal(0, std)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Seq2SeqConfig.{name}: expected a positive int, got {value!r}")
        if self.num_decoder_layers is not None and (
            not isinstance(self.num_decoder_layers, int) or self.num_decoder_layers < 1
        ):
            raise ValueError(
                "Seq2SeqConfig.num_decoder_layers: expected a positive int or None, "
                f"got {self.num_decoder_layers!r}"
            )
        if (self.d_k is None or self.d_v is None) and self.d_model % self.num_heads != 0:
            raise ValueError(
                f"Seq2SeqConfig: d_model={self.d_model} is not divisible by num_heads={self.num_heads}; "
                "give d_k and d_v explicitly"
            )
        for name in ("d_k", "d_v"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"Seq2SeqConfig.{name}: expected a positive int or None, got {value!r}")
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"Seq2SeqConfig.{name}: expected a number in [0, 1), got {value!r}")
        _choice("activation", self.activation, ACTIVATIONS)
        _choice("position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        _choice("sinusoidal_layout", self.sinusoidal_layout, SINUSOIDAL_LAYOUTS)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "start_token_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"Seq2SeqConfig.{name}: {value} is outside the vocabulary [0, {self.vocab_size})"
                )
        if self.eos_token_id == self.pad_token_id:
            raise ValueError("Seq2SeqConfig: eos_token_id and pad_token_id must differ")

    # --- derived values
    @property
    def head_dim(self) -> int:
        """d_k: the per-head query/key size."""
        return self.d_k if self.d_k is not None else self.d_model // self.num_heads

    @property
    def value_dim(self) -> int:
        """d_v: the per-head value size."""
        return self.d_v if self.d_v is not None else self.d_model // self.num_heads

    @property
    def decoder_layers(self) -> int:
        return self.num_decoder_layers if self.num_decoder_layers is not None else self.num_layers

    @property
    def start_token_id(self) -> int:
        return self.bos_token_id if self.decoder_start_token_id is None else self.decoder_start_token_id

    def summary(self) -> str:
        """One readable line: the sizes and the choices that differ between the paper's rows."""
        norm = "pre-LN" if self.norm_first else "post-LN"
        shared = ", shared embeddings" if self.share_embeddings else ""
        return (
            f"{self.num_layers}+{self.decoder_layers} layers, d_model {self.d_model}, d_ff {self.d_ff}, "
            f"{self.num_heads} heads, {norm}, {self.activation}, {self.position_embedding} positions, "
            f"dropout {self.dropout:g}, label smoothing {self.label_smoothing:g}, vocabulary "
            f"{self.vocab_size:,}{shared}"
        )

    # --- files
    def to_dict(self) -> dict[str, Any]:
        return {"model_type": "attnlab-seq2seq", **dataclasses.asdict(self)}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> Seq2SeqConfig:
        data = dict(data)
        model_type = data.pop("model_type", "attnlab-seq2seq")
        if model_type != "attnlab-seq2seq":
            raise ValueError(f"{source}: model_type {model_type!r} is not an attnlab seq2seq model")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown Seq2SeqConfig field(s) {', '.join(unknown)}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> Seq2SeqConfig:
        """From a ``config.json``: attnlab's own, or one in Marian's layout with attnlab's config in its
        ``config`` field (`attnlab.translation.hf_layout`; a directory HF transformers saved again is read
        by `attnlab.translation.hf_layout.load_config`, from the MarianConfig fields HF rewrote)."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        if is_seq2seq_config(data) and isinstance(data.get("config"), dict):
            return cls.from_dict(data["config"], source=f"{path}: field 'config'")
        return cls.from_dict(data, source=str(path))


MODEL_TYPE = "attnlab-seq2seq"  # config.json of attnlab's own layout
ARCHITECTURE = "Seq2Seq"  # config.json "architecture" of a directory in Marian's layout


def is_seq2seq_config(raw: Any) -> bool:
    """Whether a ``config.json`` dict is an attnlab translation model's: attnlab's own layout, or Marian's
    with attnlab's fields beside (`attnlab.translation.hf_layout`)."""
    if not isinstance(raw, dict):
        return False
    return raw.get("model_type") == MODEL_TYPE or (
        raw.get("format") == "attnlab" and raw.get("architecture") == ARCHITECTURE
    )


def _choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"Seq2SeqConfig.{name}: {value!r} is not one of {', '.join(map(repr, valid))}")


# --------------------------------------------------------------------------- presets (Table 3)


def transformer_base(**overrides: Any) -> Seq2SeqConfig:
    """Base: N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1, eps_ls=0.1."""
    return dataclasses.replace(Seq2SeqConfig(), **overrides)


def transformer_big(**overrides: Any) -> Seq2SeqConfig:
    """Big: N=6, d_model=1024, d_ff=4096, h=16, d_k=d_v=64, P_drop=0.3 (EN-DE; 0.1 for EN-FR)."""
    return dataclasses.replace(
        transformer_base(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3), **overrides
    )


def transformer_tiny(**overrides: Any) -> Seq2SeqConfig:
    """A CPU-sized model for tests and small experiments (not in the paper)."""
    base = transformer_base(num_layers=2, d_model=64, d_ff=256, num_heads=4, vocab_size=1000)
    return dataclasses.replace(base, **overrides)


def transformer_cpu(**overrides: Any) -> Seq2SeqConfig:
    """Base at the size a 2-core CPU trains in an hour (not in the paper): N=3, d_model=256, d_ff=1024, h=4
    (d_k=d_v=64; 7.6M parameters with an 8k joint BPE); transformer-base produces no usable output in that
    time. Why: ``experiments/translate_multi30k.py`` (figures in docs/design_measurements.md)."""
    return dataclasses.replace(
        transformer_base(num_layers=3, d_model=256, d_ff=1024, num_heads=4), **overrides
    )


PRESETS = {
    "transformer-base": transformer_base,
    "transformer-cpu": transformer_cpu,
    "transformer-big": transformer_big,
    "transformer-tiny": transformer_tiny,
}


def preset(name: str, **overrides: Any) -> Seq2SeqConfig:
    """A preset by name with overrides: ``preset("transformer-base", position_embedding="learned")``."""
    try:
        factory = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown translation preset {name!r}; valid: {', '.join(PRESETS)}") from None
    return factory(**overrides)


def count_parameters(config: Seq2SeqConfig) -> int:
    """Trainable parameters of the model `config` describes, by formula (see the module docstring).

    Checked against the built model's ``numel`` in the tests, and against the paper's Table 3.
    """
    h, f = config.d_model, config.d_ff
    qk, v = config.num_heads * config.head_dim, config.num_heads * config.value_dim
    attention = 2 * (h * qk + qk) + (h * v + v) + (v * h + h)
    ffn = h * f + f + f * h + h
    norm = 2 * h
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    embeddings = config.vocab_size * h * (1 if config.share_embeddings else 3)
    if config.position_embedding == "learned":
        embeddings += 2 * config.max_positions * h
    final_norms = 2 * norm if config.norm_first else 0
    return (
        config.num_layers * encoder_layer + config.decoder_layers * decoder_layer + embeddings + final_norms
    )
