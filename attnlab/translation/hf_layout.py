"""Translation model directories in HF MarianMT's layout, so ``AutoModelForSeq2SeqLM.from_pretrained(DIR)``
and ``AutoTokenizer.from_pretrained(DIR)`` load what ``translate-train`` wrote, as they are (transformers 5
has no translation pipeline: ``generate`` is the way there).

A model Marian's class holds (`attnlab.translation.marian.config_to_marian`: post-LN, sinusoidal positions,
one shared embedding) is written as

- ``config.json``: Marian's fields, and attnlab's beside them (``"format": "attnlab"``, ``"architecture":
  "Seq2Seq"``, ``"hf_family": "marian"``, ``config`` = the `Seq2SeqConfig`), which attnlab reads;
- ``model.safetensors``: Marian's tensor names (the shared embedding once: HF ties it to both sides and the
  output), the paper's interleaved sinusoids held by reordering every residual-stream feature
  (`attnlab.translation.marian.residual_permutation`: the same function, exactly up to float rounding);
- ``tokenizer.json`` with a ``$A </s>`` template, the source ending attnlab's data gives the encoder (attnlab
  encodes without special tokens and appends it itself, so its own use is unchanged), a
  ``tokenizer_config.json`` (``PreTrainedTokenizerFast``) and a ``generation_config.json`` (start, end and
  padding ids; HF's greedy search unless the caller asks for beams).

The tensors must come back bit for bit through the inverse mapping, checked at save time; a model without
an exact Marian form (pre-LN, learned positions, ...) keeps attnlab's own layout.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab import __version__
from attnlab.io.format import read_json
from attnlab.tokenizers.processors import TemplateProcessing

from .config import ARCHITECTURE, Seq2SeqConfig, is_seq2seq_config
from .marian import (
    config_from_marian,
    config_to_marian,
    permute_residual,
    residual_permutation,
    state_dict_from_marian,
    state_dict_to_marian,
)
from .model import Seq2Seq

HF_FAMILY = "marian"
# Names Marian's state dict repeats for the shared embedding: HF ties them on load (tie_word_embeddings).
_TIED_NAMES = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")


def marian_directory_files(
    model: Seq2Seq, tokenizer: Any
) -> tuple[dict[str, Any], dict[str, Tensor], Any, dict[str, dict[str, Any]]] | str:
    """``(config.json dict, tensors, tokenizer to save, {other json file: content})`` of ``model`` in
    Marian's layout, or the reason it has none."""
    config = model.config
    try:
        hf = config_to_marian(config)
    except ValueError as e:
        return str(e)
    state = model.state_dict()
    order = residual_permutation(config)
    ordered = permute_residual(state, order) if order is not None else state
    tensors = {k: v for k, v in state_dict_to_marian(ordered, config).items() if k not in _TIED_NAMES}
    back = marian_to_attnlab(tensors, config)
    if set(back) != set(state) or any(not torch.equal(back[k], v) for k, v in state.items()):
        return "the weights do not come back unchanged from Marian's layout"
    fields = {
        **hf,
        "format": "attnlab",
        "architecture": ARCHITECTURE,
        "attnlab_version": __version__,
        "hf_family": HF_FAMILY,
        "config": config.to_dict(),
    }
    return fields, tensors, _with_source_template(tokenizer, config), _hf_files(tokenizer, config)


def marian_to_attnlab(tensors: dict[str, Tensor], config: Seq2SeqConfig) -> dict[str, Tensor]:
    """attnlab's state dict from Marian-layout ``tensors`` (features put back in attnlab's order)."""
    state = state_dict_from_marian(tensors, config)
    order = residual_permutation(config)
    return permute_residual(state, torch.argsort(order)) if order is not None else state


def attnlab_state(
    tensors: dict[str, Tensor], config_path: str | os.PathLike, config: Seq2SeqConfig
) -> dict[str, Tensor]:
    """The weights of a translation directory under attnlab's names: as stored, or mapped back from Marian's
    when its ``config.json`` says so."""
    family = read_json(Path(config_path)).get("hf_family")
    if family is None:
        return tensors
    if family != HF_FAMILY:
        raise ValueError(
            f"{config_path}: field 'hf_family' is {family!r}; a translation model takes 'marian'"
        )
    try:
        return marian_to_attnlab(tensors, config)
    except (KeyError, ValueError) as e:
        weights = Path(config_path).parent / "model.safetensors"
        raise ValueError(f"{weights}: {e.args[0] if e.args else e}") from None


def _with_source_template(tokenizer: Any, config: Seq2SeqConfig) -> Any:
    """A copy of ``tokenizer`` whose template ends a sentence with ``</s>`` (what the encoder was trained on),
    for HF's pipeline, which encodes with special tokens."""
    eos = tokenizer.id_to_token(config.eos_token_id)
    marked = copy.deepcopy(tokenizer)
    marked.post_processor = TemplateProcessing(f"$A {eos}", f"$A $B {eos}", [(eos, config.eos_token_id)])
    return marked


def _hf_files(tokenizer: Any, config: Seq2SeqConfig) -> dict[str, dict[str, Any]]:
    token = tokenizer.id_to_token
    specials = {
        "pad_token": token(config.pad_token_id),
        "eos_token": token(config.eos_token_id),
        "bos_token": token(config.bos_token_id),
    }
    unk = tokenizer.token_to_id("<unk>")
    if unk is not None:
        specials["unk_token"] = "<unk>"
    return {
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": config.max_positions,
            **specials,
        },
        "generation_config.json": {
            "decoder_start_token_id": config.start_token_id,
            "eos_token_id": config.eos_token_id,
            "pad_token_id": config.pad_token_id,
            "forced_eos_token_id": None,
            "max_length": config.max_positions,
        },
    }


def load_config(path: str | os.PathLike) -> Seq2SeqConfig:
    """A translation directory's ``config.json`` (`Seq2SeqConfig.load`); one HF transformers loaded and saved
    again is read from its own MarianConfig fields, which say what the weights are now (a resized
    vocabulary, say), as the MarianMT checkpoint it is, in Marian's feature order."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None  # Seq2SeqConfig.load says what is wrong
    resaved = isinstance(data, dict) and "transformers_version" in data and data.get("model_type") == "marian"
    if resaved and is_seq2seq_config(data) and isinstance(data.get("config"), dict):
        return config_from_marian(data)
    return Seq2SeqConfig.load(path)
