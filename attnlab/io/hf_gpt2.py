"""GPT-2 checkpoints of HF transformers (``GPT2LMHeadModel`` / ``GPT2Model``) to and from attnlab's `GPT`.

The layout differences, each handled here:

- GPT-2's projections are ``Conv1D`` layers: ``y = x @ W + b`` with W stored (in, out), the transpose of a
  ``Linear`` weight (out, in);
- ``attn.c_attn`` is one (H, 3H) projection for queries, keys and values: split in three along the output;
- names: ``wte``/``wpe`` (embeddings), ``h.{i}.ln_1``/``ln_2`` (the pre-LN norms of the two sub-layers),
  ``mlp.c_fc``/``mlp.c_proj``, ``ln_f`` (final norm); ``lm_head.weight`` is ``wte`` (tied);
- old checkpoints carry ``attn.bias``/``attn.masked_bias`` buffers (the causal mask): ignored.

Only plain dicts of tensors and JSON cross this boundary: attnlab never imports transformers.
Directories: ``config.json`` (``model_type: gpt2``) + ``model.safetensors`` (``pytorch_model.bin`` is read
with ``torch.load(weights_only=True)``, never unpickling code).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab.atomic import write_json_atomic
from attnlab.io.checkpoint import SkipRandomInit, load_state_checked
from attnlab.io.format import CheckpointError, read_json, read_safetensors, write_safetensors_atomic
from attnlab.models.gpt import GPT, GPTConfig, build_gpt

# HF activation_function -> attnlab activation
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
# GPT-2 Conv1D layers (weights stored (in, out)) -> attnlab Linear layers (weights (out, in))
_CONV1D = {
    "attn.c_proj": "self_attn.layer.output",
    "mlp.c_fc": "feed_forward.layer.up",
    "mlp.c_proj": "feed_forward.layer.down",
}
_ACTIVATIONS_BACK = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}


def config_from_gpt2(hf: dict[str, Any], source: str = "GPT2Config") -> GPTConfig:
    """A `GPTConfig` from a GPT2Config dict (``config.json``); unsupported settings raise, naming them."""

    def need(key: str, ok: bool, what: str) -> None:
        if not ok:
            raise CheckpointError(f"{source}: {key}={hf.get(key)!r}: attnlab supports only {what}")

    if hf.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(f"{source}: model_type {hf.get('model_type')!r} is not 'gpt2'")
    act = _ACTIVATIONS.get(hf.get("activation_function", "gelu_new"))
    need("activation_function", act is not None, ", ".join(_ACTIVATIONS))
    need("scale_attn_weights", hf.get("scale_attn_weights", True), "True (scores / sqrt(D))")
    need("scale_attn_by_inverse_layer_idx", not hf.get("scale_attn_by_inverse_layer_idx", False), "False")
    need("add_cross_attention", not hf.get("add_cross_attention", False), "False (a decoder-only model)")
    for key in ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions"):
        if not isinstance(hf.get(key), int):
            raise CheckpointError(f"{source}: field {key!r} must be an int, found {hf.get(key)!r}")
    try:
        return GPTConfig(
            vocab_size=hf["vocab_size"],
            max_positions=hf["n_positions"],
            hidden_size=hf["n_embd"],
            num_layers=hf["n_layer"],
            num_heads=hf["n_head"],
            intermediate_size=hf.get("n_inner"),
            activation=act,
            dropout=float(hf.get("resid_pdrop", 0.1)),
            embedding_dropout=float(hf.get("embd_pdrop", 0.1)),
            attention_dropout=float(hf.get("attn_pdrop", 0.1)),
            norm_first=True,
            layer_norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
            initializer_range=float(hf.get("initializer_range", 0.02)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", True)),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=hf.get("eos_token_id"),
            pad_token_id=hf.get("pad_token_id"),
        )
    except ValueError as e:
        raise CheckpointError(f"{source}: {e}") from e


def config_to_gpt2(config: GPTConfig) -> dict[str, Any]:
    """A GPT2Config dict for ``config.json`` that transformers reads."""
    if not config.norm_first:
        raise ValueError("only pre-LN (GPT-2) models export to the GPT-2 layout; the original GPT is post-LN")
    if config.activation not in _ACTIVATIONS_BACK:
        raise ValueError(f"activation {config.activation!r} has no GPT-2 equivalent")
    if getattr(config, "attention", "full") != "full":
        raise ValueError(f"attention={config.attention!r} has no GPT-2 equivalent (it attends to every key)")
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": config.vocab_size,
        "n_positions": config.max_positions,
        "n_ctx": config.max_positions,
        "n_embd": config.hidden_size,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "n_inner": config.intermediate_size,
        "activation_function": _ACTIVATIONS_BACK[config.activation],
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.embedding_dropout,
        "attn_pdrop": config.attention_dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        "scale_attn_weights": True,
        "tie_word_embeddings": config.tie_word_embeddings,
        "torch_dtype": "float32",
    }


def state_dict_from_gpt2(
    hf_state: dict[str, Tensor], config: GPTConfig, family: str = "gpt2"
) -> dict[str, Tensor]:
    """attnlab `GPT` state dict from a GPT2LMHeadModel / GPT2Model state dict (with or without the
    ``transformer.`` prefix); ``family="openai-gpt"`` reads HF's OpenAIGPTLMHeadModel (the original GPT: the
    same Conv1D layers, post-LN so ``ln_1``/``ln_2`` follow the sub-layers, no ``ln_f``, embeddings named
    ``tokens_embed``/``positions_embed``)."""
    if family not in ("gpt2", "openai-gpt"):
        raise ValueError(f"family {family!r} is not 'gpt2' or 'openai-gpt'")
    state = {k.removeprefix("transformer."): v for k, v in hf_state.items()}

    def get(name: str) -> Tensor:
        if name not in state:
            raise CheckpointError(
                f"{family} state dict has no {name!r} (config has {config.num_layers} layers)"
            )
        return state[name]

    h = config.hidden_size
    word, position = ("wte", "wpe") if family == "gpt2" else ("tokens_embed", "positions_embed")
    out = {"embed.word.weight": get(f"{word}.weight"), "embed.position.weight": get(f"{position}.weight")}
    for i in range(config.num_layers):
        hf, ours = f"h.{i}", f"decoder.layers.{i}"
        qkv_w = get(f"{hf}.attn.c_attn.weight")  # Conv1D (H, 3H): columns q | k | v
        qkv_b = get(f"{hf}.attn.c_attn.bias")  # (3H,)
        if qkv_w.shape != (h, 3 * h):
            raise CheckpointError(
                f"{hf}.attn.c_attn.weight has shape {tuple(qkv_w.shape)}, expected ({h}, {3 * h})"
            )
        for j, proj in enumerate(("query", "key", "value")):
            out[f"{ours}.self_attn.layer.{proj}.weight"] = qkv_w[:, j * h : (j + 1) * h].t().contiguous()
            out[f"{ours}.self_attn.layer.{proj}.bias"] = qkv_b[j * h : (j + 1) * h].contiguous()
        for hf_name, name in _CONV1D.items():
            out[f"{ours}.{name}.weight"] = (
                get(f"{hf}.{hf_name}.weight").t().contiguous()
            )  # (in, out) -> (out, in)
            out[f"{ours}.{name}.bias"] = get(f"{hf}.{hf_name}.bias")
        for hf_name, name in (("ln_1", "self_attn.norm"), ("ln_2", "feed_forward.norm")):
            out[f"{ours}.{name}.weight"] = get(f"{hf}.{hf_name}.weight")
            out[f"{ours}.{name}.bias"] = get(f"{hf}.{hf_name}.bias")
    if family == "gpt2":
        out["decoder.final_norm.weight"] = get("ln_f.weight")
        out["decoder.final_norm.bias"] = get("ln_f.bias")
    lm_head = hf_state.get("lm_head.weight")
    if not config.tie_word_embeddings:  # its own output matrix (GPTConfig.tie_word_embeddings)
        if lm_head is None:
            raise CheckpointError(f"{family}: tie_word_embeddings is false but lm_head.weight is missing")
        out["lm_head.weight"] = lm_head
        return out
    if lm_head is not None and not torch.equal(lm_head, out["embed.word.weight"]):
        raise CheckpointError(
            f"{family} lm_head.weight differs from {word}.weight but the config ties them "
            "(tie_word_embeddings)"
        )
    out["lm_head.weight"] = out["embed.word.weight"]
    return out


def config_to_openai_gpt(config: GPTConfig) -> dict[str, Any]:
    """An OpenAIGPTConfig dict for ``config.json``: the original GPT (post-LN, no final LayerNorm, an FFN of
    4H, HF's ``afn="gelu"`` being the tanh approximation)."""
    if config.norm_first:
        raise ValueError("pre-LN models export to the GPT-2 layout; OpenAI GPT is post-LN")
    afn = {"gelu_tanh": "gelu", "relu": "relu"}.get(config.activation)
    if afn is None:
        raise ValueError(f"activation {config.activation!r} has no OpenAI GPT equivalent (gelu_tanh, relu)")
    if config.intermediate_size not in (None, 4 * config.hidden_size):
        raise ValueError(f"intermediate_size {config.intermediate_size}: OpenAI GPT's FFN is 4 x hidden_size")
    if getattr(config, "attention", "full") != "full":
        raise ValueError(
            f"attention={config.attention!r} has no OpenAI GPT equivalent (it attends to every key)"
        )
    hf: dict[str, Any] = {
        "model_type": "openai-gpt",
        "architectures": ["OpenAIGPTLMHeadModel"],
        "vocab_size": config.vocab_size,
        "n_positions": config.max_positions,
        "n_embd": config.hidden_size,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "afn": afn,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.embedding_dropout,
        "attn_pdrop": config.attention_dropout,
        "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "tie_word_embeddings": config.tie_word_embeddings,
    }
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if getattr(config, name) is not None:
            hf[name] = getattr(config, name)
    return hf


def state_dict_to_gpt2(
    state: dict[str, Tensor], config: GPTConfig, family: str = "gpt2"
) -> dict[str, Tensor]:
    """GPT2LMHeadModel state dict (``transformer.`` names, Conv1D layout; ``lm_head.weight`` left out, as
    transformers writes tied weights); ``family="openai-gpt"``: OpenAIGPTLMHeadModel's (embeddings named
    ``tokens_embed``/``positions_embed``, no ``ln_f``)."""
    word, position = ("wte", "wpe") if family == "gpt2" else ("tokens_embed", "positions_embed")
    out = {f"{word}.weight": state["embed.word.weight"], f"{position}.weight": state["embed.position.weight"]}
    for i in range(config.num_layers):
        hf, ours = f"h.{i}", f"decoder.layers.{i}"
        attn = f"{ours}.self_attn.layer"
        out[f"{hf}.attn.c_attn.weight"] = torch.cat(
            [state[f"{attn}.{p}.weight"].t() for p in ("query", "key", "value")], dim=1
        )  # (H, 3H)
        out[f"{hf}.attn.c_attn.bias"] = torch.cat(
            [state[f"{attn}.{p}.bias"] for p in ("query", "key", "value")]
        )
        for hf_name, name in _CONV1D.items():
            out[f"{hf}.{hf_name}.weight"] = state[f"{ours}.{name}.weight"].t().contiguous()
            out[f"{hf}.{hf_name}.bias"] = state[f"{ours}.{name}.bias"]
        for hf_name, name in (("ln_1", "self_attn.norm"), ("ln_2", "feed_forward.norm")):
            out[f"{hf}.{hf_name}.weight"] = state[f"{ours}.{name}.weight"]
            out[f"{hf}.{hf_name}.bias"] = state[f"{ours}.{name}.bias"]
    if family == "gpt2":
        out["ln_f.weight"] = state["decoder.final_norm.weight"]
        out["ln_f.bias"] = state["decoder.final_norm.bias"]
    hf_state = {f"transformer.{k}": v for k, v in out.items()}
    if not config.tie_word_embeddings:
        hf_state["lm_head.weight"] = state["lm_head.weight"]
    return hf_state


def is_gpt2_directory(directory: str | os.PathLike) -> bool:
    path = Path(directory) / "config.json"
    if not path.is_file():
        return False
    try:
        return read_json(path).get("model_type") == "gpt2"
    except CheckpointError:
        return False


def _read_weights(directory: Path) -> dict[str, Tensor]:
    safetensors = directory / "model.safetensors"
    if safetensors.is_file():
        return read_safetensors(safetensors)[0]
    legacy = directory / "pytorch_model.bin"
    if legacy.is_file():
        try:
            return torch.load(legacy, map_location="cpu", weights_only=True)
        except Exception as e:  # weights_only refuses anything but tensors
            raise CheckpointError(
                f"{legacy}: not a plain tensor file ({e}); attnlab never unpickles code"
            ) from e
    raise FileNotFoundError(f"{directory}: no model.safetensors (or pytorch_model.bin) weights file")


def load_gpt2(directory: str | os.PathLike) -> GPT:
    """A `GPT` (eval mode, float32) from a HF GPT-2 directory."""
    directory = Path(directory)
    config = config_from_gpt2(read_json(directory / "config.json"), source=str(directory / "config.json"))
    tensors = state_dict_from_gpt2(_read_weights(directory), config)
    with SkipRandomInit():  # random init is wasted: every weight is loaded next
        model = build_gpt(config)
    load_state_checked(
        model,
        {k: v.float() for k, v in tensors.items()},
        source=str(directory),
        architecture="GPT",
        config=config,
    )
    return model.eval()


def save_gpt2(model: GPT, directory: str | os.PathLike) -> Path:
    """Write ``model`` as a HF GPT-2 directory (``config.json`` + ``model.safetensors``), atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    hf_config = config_to_gpt2(model.config)
    tensors = state_dict_to_gpt2(model.state_dict(), model.config)
    write_safetensors_atomic(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    write_json_atomic(hf_config, directory / "config.json")
    return directory
