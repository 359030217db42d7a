"""HF transformers' Transformer-XL (``TransfoXLLMHeadModel``, ``model_type`` "transfo-xl") weights into a
`TransfoXL`.

HF keeps query, key and value in one ``qkv_net`` (3H, H) and the relative-position projection as ``r_net``;
its
``r_w_bias`` is the paper's u, ``r_r_bias`` its v (per layer with ``untie_r``, else once on the model). Only
the
layout attnlab builds is read: post-LN (``pre_lnorm`` false), ``d_head * n_head == d_model``, one embedding of
``d_model`` (``div_val`` 1, ``d_embed == d_model``) and a plain softmax (``cutoffs`` empty, so no adaptive
softmax);
anything else is refused by field name. HF's ``prediction_scores`` are log-probabilities, attnlab's logits are
logits: ``log_softmax(logits)`` equals them. HF's model starts with ``mem_len`` zero vectors as memory when
none
is given; the paper's code (and attnlab) start with none: pass empty memories to HF to compare.

No import of transformers: the HF classes were removed from transformers 5; this reads ``config.json`` and the
weights file of a saved model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab.io.checkpoint import load_state_checked
from attnlab.io.format import CheckpointError, read_json
from attnlab.io.hf import read_hf_weights
from attnlab.models.transfo_xl import TransfoXL, TransfoXLConfig, build_transfo_xl


def config_from_transfo_xl(hf: Mapping[str, Any], source: str = "TransfoXLConfig") -> TransfoXLConfig:
    """attnlab's config for an HF ``TransfoXLConfig`` dict; unsupported layouts raise naming the field."""
    if hf.get("model_type", "transfo-xl") != "transfo-xl":
        raise CheckpointError(f"{source}: model_type {hf.get('model_type')!r} is not 'transfo-xl'")
    d_model, n_head = hf["d_model"], hf["n_head"]
    problems = []
    if hf.get("pre_lnorm", False):
        problems.append("pre_lnorm is true (attnlab's Transformer-XL is post-LN, as the paper's code)")
    if hf.get("d_head", d_model // n_head) * n_head != d_model:
        problems.append(f"d_head * n_head = {hf['d_head']} * {n_head} != d_model = {d_model}")
    if hf.get("d_embed", d_model) != d_model or hf.get("div_val", 1) != 1:
        problems.append("adaptive input (d_embed != d_model or div_val != 1) is not implemented")
    if hf.get("cutoffs"):
        problems.append(f"cutoffs {hf['cutoffs']}: adaptive softmax is not implemented (needs cutoffs [])")
    if hf.get("attn_type", 0) != 0:
        problems.append(f"attn_type {hf['attn_type']} (only 0, relative positions, exists)")
    if not hf.get("tie_word_embeddings", True):
        problems.append("tie_word_embeddings is false (attnlab ties the output layer to the embedding)")
    if problems:
        raise CheckpointError(f"{source}: cannot read this Transformer-XL: " + "; ".join(problems))
    return TransfoXLConfig(
        vocab_size=hf["vocab_size"],
        hidden_size=d_model,
        num_layers=hf["n_layer"],
        num_heads=n_head,
        intermediate_size=hf["d_inner"],
        segment_length=max(1, int(hf.get("tgt_len", 64) or 64)),
        mem_len=int(hf.get("mem_len", 0) or 0),
        clamp_len=max(0, int(hf.get("clamp_len", 0) or 0)),
        same_length=bool(hf.get("same_length", False)),
        share_biases=not hf.get("untie_r", True),
        dropout=float(hf.get("dropout", 0.0)),
        attention_dropout=float(hf.get("dropatt", 0.0)),
        layer_norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
    )


def state_dict_from_transfo_xl(hf: Mapping[str, Tensor], config: TransfoXLConfig) -> dict[str, Tensor]:
    """HF ``TransfoXLLMHeadModel`` state dict -> attnlab ``TransfoXL`` state dict."""
    h = config.hidden_size
    out: dict[str, Tensor] = {"embed.weight": hf["transformer.word_emb.emb_layers.0.weight"]}
    out["lm_head.bias"] = hf["crit.out_layers.0.bias"]
    for i in range(config.num_layers):
        src, dst = f"transformer.layers.{i}.", f"decoder.layers.{i}."
        attn, ffn = dst + "self_attn.", dst + "feed_forward."
        qkv = hf[src + "dec_attn.qkv_net.weight"]  # (3H, H): query, key, value rows
        for j, name in enumerate(("query", "key", "value")):
            out[f"{attn}layer.{name}.weight"] = qkv[j * h : (j + 1) * h]
        out[attn + "layer.output.weight"] = hf[src + "dec_attn.o_net.weight"]
        out[attn + "layer.position.weight"] = hf[src + "dec_attn.r_net.weight"]
        bias_src = src + "dec_attn." if not config.share_biases else "transformer."
        out[attn + "layer.u"] = hf[bias_src + "r_w_bias"]
        out[attn + "layer.v"] = hf[bias_src + "r_r_bias"]
        for part in ("weight", "bias"):
            out[f"{attn}norm.{part}"] = hf[f"{src}dec_attn.layer_norm.{part}"]
            out[f"{ffn}layer.up.{part}"] = hf[f"{src}pos_ff.CoreNet.0.{part}"]
            out[f"{ffn}layer.down.{part}"] = hf[f"{src}pos_ff.CoreNet.3.{part}"]
            out[f"{ffn}norm.{part}"] = hf[f"{src}pos_ff.layer_norm.{part}"]
    return out


def transfo_xl_from_hf_state(
    hf_config: Mapping[str, Any], state: Mapping[str, Tensor], source: str = "HF Transformer-XL"
) -> TransfoXL:
    """A `TransfoXL` (eval mode) with the weights of an HF model's config dict and state dict."""
    config = config_from_transfo_xl(hf_config, source)
    try:
        tensors = state_dict_from_transfo_xl(state, config)
    except KeyError as e:
        raise CheckpointError(f"{source}: missing weight {e.args[0]!r} of a TransfoXLLMHeadModel") from None
    model = build_transfo_xl(config)
    load_state_checked(
        model,
        {k: v.float() for k, v in tensors.items()},
        source=source,
        architecture="TransfoXL",
        config=config,
    )
    return model.eval()


def load_hf_transfo_xl(directory: str | os.PathLike) -> TransfoXL:
    """A `TransfoXL` from a directory saved by HF's ``TransfoXLLMHeadModel.save_pretrained``."""
    directory = Path(directory)
    config_path = directory / "config.json"
    tensors, _ = read_hf_weights(directory)
    return transfo_xl_from_hf_state(read_json(config_path), tensors, source=str(config_path))


def empty_memory(config: TransfoXLConfig, batch: int) -> list[Tensor]:
    """HF's memory layout (M=0, B, H) per layer: what to pass HF to start with no memory, as attnlab does."""
    return [torch.zeros(0, batch, config.hidden_size) for _ in range(config.num_layers)]
