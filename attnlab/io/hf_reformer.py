"""HF transformers' ``ReformerModelWithLMHead`` (``model_type`` "reformer") weights into a `Reformer`.

Read: LSH and local layers with one chunk before and none after (the paper's layout, HF's default), learned
position embeddings (``axial_pos_embds`` false), ``attention_head_size * num_attention_heads == hidden_size``,
an integer ``num_buckets``. Anything else is refused by field name. HF's ``is_decoder`` is attnlab's
``causal``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from attnlab.io.checkpoint import load_state_checked
from attnlab.io.format import CheckpointError, read_json
from attnlab.io.hf import read_hf_weights
from attnlab.models.reformer import Reformer, ReformerConfig


def config_from_reformer(hf: Mapping[str, Any], source: str = "ReformerConfig") -> ReformerConfig:
    """attnlab's config for an HF ``ReformerConfig`` dict; unsupported layouts raise naming the field."""
    if hf.get("model_type", "reformer") != "reformer":
        raise CheckpointError(f"{source}: model_type {hf.get('model_type')!r} is not 'reformer'")
    h, n = hf["hidden_size"], hf["num_attention_heads"]
    problems = []
    if hf.get("axial_pos_embds", True):
        problems.append("axial_pos_embds is true (axial position embeddings are not implemented)")
    if hf.get("attention_head_size", h // n) * n != h:
        problems.append(f"attention_head_size * num_attention_heads != hidden_size ({h})")
    if not isinstance(hf.get("num_buckets"), int):
        problems.append(f"num_buckets {hf.get('num_buckets')!r}: an integer is needed (factored buckets or "
                        "the on-the-fly choice are not implemented)")  # fmt: skip
    for prefix in ("lsh", "local"):
        if hf.get(f"{prefix}_num_chunks_before", 1) != 1 or hf.get(f"{prefix}_num_chunks_after", 0) != 0:
            problems.append(f"{prefix}_num_chunks_before/after must be 1/0")
    if hf.get("tie_word_embeddings", False):
        problems.append("tie_word_embeddings is true (the Reformer's head is 2H wide and untied)")
    if problems:
        raise CheckpointError(f"{source}: cannot read this Reformer: " + "; ".join(problems))
    return ReformerConfig(
        vocab_size=hf["vocab_size"],
        max_positions=hf["max_position_embeddings"],
        hidden_size=h,
        num_heads=n,
        intermediate_size=hf["feed_forward_size"],
        attention_layers=list(hf["attn_layers"]),
        causal=bool(hf.get("is_decoder", False)),
        num_hashes=hf.get("num_hashes", 1),
        num_buckets=hf["num_buckets"],
        lsh_chunk_length=hf["lsh_attn_chunk_length"],
        local_chunk_length=hf["local_attn_chunk_length"],
        hash_seed=hf.get("hash_seed"),
        ffn_chunk_size=hf.get("chunk_size_feed_forward", 0) or 0,
        activation=hf.get("hidden_act", "relu"),
        dropout=float(hf.get("hidden_dropout_prob", 0.0)),
        attention_dropout=float(hf.get("lsh_attention_probs_dropout_prob", 0.0)),
        layer_norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
    )


def state_dict_from_reformer(hf: Mapping[str, Tensor], config: ReformerConfig) -> dict[str, Tensor]:
    """HF ``ReformerModelWithLMHead`` state dict -> attnlab ``Reformer`` state dict."""
    out = {
        "word.weight": hf["reformer.embeddings.word_embeddings.weight"],
        "position.weight": hf["reformer.embeddings.position_embeddings.embedding.weight"],
        "final_norm.weight": hf["reformer.encoder.layer_norm.weight"],
        "final_norm.bias": hf["reformer.encoder.layer_norm.bias"],
        "lm_head.weight": hf["lm_head.decoder.weight"],
        "lm_head.bias": hf["lm_head.decoder.bias"],
    }
    for i, kind in enumerate(config.attention_layers):
        src = f"reformer.encoder.layers.{i}."
        attn, ffn = f"layers.attention.{i}.", f"layers.feed_forward.{i}."
        names = ("query_key", "value") if kind != "local" else ("query", "key", "value")
        for name in names:
            out[f"{attn}layer.{name}.weight"] = hf[f"{src}attention.self_attention.{name}.weight"]
        out[f"{attn}layer.output.weight"] = hf[f"{src}attention.output.dense.weight"]
        for part in ("weight", "bias"):
            out[f"{attn}norm.{part}"] = hf[f"{src}attention.layer_norm.{part}"]
            out[f"{ffn}norm.{part}"] = hf[f"{src}feed_forward.layer_norm.{part}"]
            out[f"{ffn}layer.layer.up.{part}"] = hf[f"{src}feed_forward.dense.dense.{part}"]
            out[f"{ffn}layer.layer.down.{part}"] = hf[f"{src}feed_forward.output.dense.{part}"]
    return out


def reformer_from_hf_state(
    hf_config: Mapping[str, Any], state: Mapping[str, Tensor], source: str = "HF Reformer"
) -> Reformer:
    """A `Reformer` (eval mode) with the weights of an HF model's config dict and state dict."""
    config = config_from_reformer(hf_config, source)
    try:
        tensors = state_dict_from_reformer(state, config)
    except KeyError as e:
        raise CheckpointError(
            f"{source}: missing weight {e.args[0]!r} of a ReformerModelWithLMHead"
        ) from None
    model = Reformer(config)
    load_state_checked(model, {k: v.float() for k, v in tensors.items()}, source=source,
    architecture="Reformer",
                       config=config)  # fmt: skip
    return model.eval()


def load_hf_reformer(directory: str | os.PathLike) -> Reformer:
    """A `Reformer` from a directory saved by HF's ``ReformerModelWithLMHead.save_pretrained``."""
    directory = Path(directory)
    tensors, _ = read_hf_weights(directory)
    return reformer_from_hf_state(read_json(directory / "config.json"), tensors, source=str(directory))
