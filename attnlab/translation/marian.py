"""Weights to and from the HF transformers MarianMT layout (Junczys-Dowmunt et al. 2018; the OPUS-MT models).

MarianMT is the paper's architecture with a few conventions of its own, each mapped to a config field:

- positions: sinusoidal with all sines then all cosines -> ``sinusoidal_layout="concatenated"``;
- embeddings scaled by sqrt(d_model) (``scale_embedding=True`` in its config), one matrix shared by both
  embeddings and ``lm_head`` (``share_encoder_decoder_embeddings``, ``tie_word_embeddings``);
- the decoder starts from the padding token (``decoder_start_token_id`` = pad);
- post-LN, LayerNorm epsilon 1e-5, no LayerNorm on the embeddings;
- ``final_logits_bias`` (a buffer added to the logits): attnlab's generator has no bias, so it must be zero.

Only plain dicts of tensors cross this boundary: attnlab never imports transformers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .config import Seq2SeqConfig

_ATTN = {"q_proj": "query", "k_proj": "key", "v_proj": "value", "out_proj": "output"}
_FFN = {"fc1": "up", "fc2": "down"}


def config_from_marian(hf: dict[str, Any]) -> Seq2SeqConfig:
    """A `Seq2SeqConfig` from a MarianConfig's ``to_dict()``; unsupported settings raise, naming the field."""

    def need(key: str, ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(f"MarianConfig.{key}={hf.get(key)!r}: attnlab supports only {what}")

    need(
        "decoder_attention_heads",
        hf["encoder_attention_heads"] == hf["decoder_attention_heads"],
        "equal heads",
    )
    need("decoder_ffn_dim", hf["encoder_ffn_dim"] == hf["decoder_ffn_dim"], "equal FFN sizes")
    need(
        "share_encoder_decoder_embeddings",
        hf.get("share_encoder_decoder_embeddings", True) and hf.get("tie_word_embeddings", True),
        "shared, tied embeddings",
    )
    dvs = hf.get("decoder_vocab_size") or hf["vocab_size"]
    need("decoder_vocab_size", dvs == hf["vocab_size"], "a joint vocabulary")
    act = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh"}.get(hf["activation_function"])
    need("activation_function", act is not None, "relu, gelu, gelu_new")
    eos = hf["eos_token_id"]
    return Seq2SeqConfig(
        vocab_size=hf["vocab_size"],
        pad_token_id=hf["pad_token_id"],
        bos_token_id=hf["decoder_start_token_id"],
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
        decoder_start_token_id=hf["decoder_start_token_id"],
        num_layers=hf["encoder_layers"],
        num_decoder_layers=hf["decoder_layers"],
        d_model=hf["d_model"],
        d_ff=hf["encoder_ffn_dim"],
        num_heads=hf["encoder_attention_heads"],
        dropout=float(hf["dropout"]),
        attention_dropout=float(hf["attention_dropout"]),
        activation_dropout=float(hf["activation_dropout"]),
        label_smoothing=0.0,
        activation=act,
        position_embedding="sinusoidal",
        sinusoidal_layout="concatenated",
        max_positions=hf["max_position_embeddings"],
        norm_first=False,
        layer_norm_eps=1e-5,
        scale_embedding=bool(hf["scale_embedding"]),
        share_embeddings=True,
    )


def _layer_map(stack: str, i: int, subs: dict[str, str]) -> dict[str, str]:
    """attnlab name -> Marian name for one layer of ``stack`` ("encoder" / "decoder")."""
    out: dict[str, str] = {}
    ours, theirs = f"{stack}.layers.{i}", f"model.{stack}.layers.{i}"
    for sub, hf_sub in subs.items():
        for hf_proj, proj in _ATTN.items():
            for p in ("weight", "bias"):
                out[f"{ours}.{sub}.layer.{proj}.{p}"] = f"{theirs}.{hf_sub}.{hf_proj}.{p}"
        for p in ("weight", "bias"):
            out[f"{ours}.{sub}.norm.{p}"] = f"{theirs}.{hf_sub}_layer_norm.{p}"
    for hf_fc, fc in _FFN.items():
        for p in ("weight", "bias"):
            out[f"{ours}.feed_forward.layer.{fc}.{p}"] = f"{theirs}.{hf_fc}.{p}"
    for p in ("weight", "bias"):
        out[f"{ours}.feed_forward.norm.{p}"] = f"{theirs}.final_layer_norm.{p}"
    return out


def name_map(config: Seq2SeqConfig) -> dict[str, str]:
    """attnlab parameter name -> MarianMTModel parameter name (shared embedding under its attnlab name)."""
    names = {"src_embed.word.weight": "model.shared.weight"}
    for i in range(config.num_layers):
        names.update(_layer_map("encoder", i, {"self_attn": "self_attn"}))
    for i in range(config.decoder_layers):
        names.update(_layer_map("decoder", i, {"self_attn": "self_attn", "cross_attn": "encoder_attn"}))
    return names


def state_dict_from_marian(hf_state: dict[str, Tensor], config: Seq2SeqConfig) -> dict[str, Tensor]:
    """attnlab state dict (for ``load_state_dict``) from a MarianMTModel state dict."""
    bias = hf_state.get("final_logits_bias")
    if bias is not None and bool(bias.ne(0).any()):
        raise ValueError(
            "MarianMTModel.final_logits_bias is not zero: attnlab's generator has no output bias"
        )
    out: dict[str, Tensor] = {}
    for ours, theirs in name_map(config).items():
        if theirs not in hf_state:
            raise KeyError(f"Marian state dict has no {theirs!r} (needed for attnlab's {ours!r})")
        out[ours] = hf_state[theirs]
    shared = out["src_embed.word.weight"]
    out["tgt_embed.word.weight"] = shared
    out["generator.weight"] = shared
    return out


def state_dict_to_marian(state: dict[str, Tensor], config: Seq2SeqConfig) -> dict[str, Tensor]:
    """MarianMTModel state dict (shared/tied embedding names filled in, zero ``final_logits_bias``)."""
    out = {theirs: state[ours] for ours, theirs in name_map(config).items()}
    shared = out["model.shared.weight"]
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        out[name] = shared
    out["final_logits_bias"] = torch.zeros(1, config.vocab_size, dtype=shared.dtype)
    return out


# ------------------------------------------------------------------- attnlab models in Marian's layout


def config_to_marian(config: Seq2SeqConfig) -> dict[str, Any]:
    """The MarianConfig dict (``config.json``) of a model Marian's class holds exactly; a `ValueError`
    naming every field it cannot hold otherwise. The paper's interleaved sinusoids are held through
    `residual_permutation`."""
    problems = []
    if config.norm_first:
        problems.append("norm_first=True (Marian is post-LN)")
    if config.position_embedding != "sinusoidal":
        problems.append(
            f"position_embedding={config.position_embedding!r} (Marian's positions are sinusoidal)"
        )
    if not config.share_embeddings:
        problems.append("share_embeddings=False (Marian ties one matrix for both sides and the output)")
    if config.layer_norm_eps != 1e-5:
        problems.append(f"layer_norm_eps={config.layer_norm_eps} (Marian's LayerNorm uses 1e-5)")
    if config.head_dim * config.num_heads != config.d_model or config.value_dim != config.head_dim:
        problems.append("d_k/d_v other than d_model / num_heads")
    activation = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new"}.get(config.activation)
    if activation is None:
        problems.append(f"activation={config.activation!r} (relu, gelu, gelu_tanh map to Marian's)")
    if problems:
        raise ValueError("no exact MarianMT form: " + "; ".join(problems))
    return {
        "model_type": "marian",
        "architectures": ["MarianMTModel"],
        "vocab_size": config.vocab_size,
        "decoder_vocab_size": config.vocab_size,
        "d_model": config.d_model,
        "encoder_layers": config.num_layers,
        "decoder_layers": config.decoder_layers,
        "encoder_attention_heads": config.num_heads,
        "decoder_attention_heads": config.num_heads,
        "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff,
        "activation_function": activation,
        "dropout": config.dropout,
        "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout,
        "max_position_embeddings": config.max_positions,
        "scale_embedding": config.scale_embedding,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        "pad_token_id": config.pad_token_id,
        "eos_token_id": config.eos_token_id,
        "decoder_start_token_id": config.start_token_id,
        "forced_eos_token_id": None,
        "bos_token_id": None,
        "is_encoder_decoder": True,
    }


# The residual stream's axes in attnlab's state dict: (key suffix, axis). Every other axis (heads, FFN) is
# internal to a sub-layer and keeps its order.
_RESIDUAL_AXES = (
    ("layer.query.weight", 1),
    ("layer.key.weight", 1),
    ("layer.value.weight", 1),
    ("layer.output.weight", 0),
    ("layer.output.bias", 0),
    ("norm.weight", 0),
    ("norm.bias", 0),
    ("layer.up.weight", 1),
    ("layer.down.weight", 0),
    ("layer.down.bias", 0),
    ("word.weight", 1),
    ("generator.weight", 1),
)


def residual_permutation(config: Seq2SeqConfig) -> Tensor | None:
    """The order of the d_model features that turns the paper's interleaved sinusoids (sin, cos, sin, ...)
    into Marian's concatenated ones (all sines, then all cosines); None when the model is concatenated.

    A Transformer computes the same function when every residual-stream axis of every weight is permuted
    alike (LayerNorm's statistics and every matrix product over that axis do not depend on the order), so
    an interleaved model is a Marian model with its features reordered, exactly up to float rounding."""
    if config.sinusoidal_layout == "concatenated":
        return None
    d = config.d_model
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def permute_residual(state: dict[str, Tensor], order: Tensor) -> dict[str, Tensor]:
    """``state`` with every residual-stream axis taken in ``order`` (tied tensors stay one tensor)."""
    out: dict[str, Tensor] = {}
    done: dict[tuple, Tensor] = {}
    for name, value in state.items():
        axis = next((a for suffix, a in _RESIDUAL_AXES if name.endswith(suffix)), None)
        if axis is None:
            out[name] = value
            continue
        key = (value.data_ptr(), value.storage_offset(), tuple(value.shape), axis)
        if key not in done:
            done[key] = value.index_select(axis, order.to(value.device)).contiguous()
        out[name] = done[key]
    return out
