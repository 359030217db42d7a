"""HF encoder directories whatever their head: the choice between `attnlab.io.hf` (base, masked-LM,
pre-training, ELECTRA) and `attnlab.io.hf_tasks` (fine-tuned ``*For{Task}`` heads, with ``id2label``).

`load_hf` reads either kind of directory, `to_hf` gives either kind's HF config and tensors in memory, and
`save_hf` writes them with the tokenizer (`attnlab.io.hf_tokenizer`) and a model card
(`attnlab.io.model_card`); `describe_hf` names a directory's class and attnlab architecture from its key
names alone. The encoder family (`attnlab.io.families.bert`) loads and exports through these.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor, nn

from attnlab.atomic import write_json_atomic
from attnlab.io.checkpoint import architecture_of
from attnlab.io.format import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    check_directory,
    read_json,
    resolve_dtype,
    write_safetensors_atomic,
)
from attnlab.io.hf import (
    _IGNORED_HF_KEYS,
    SHARDED_INDEX_NAME,
    _family,
    _normalise_hf_keys,
    _plan,
    _split_base,
    load_hf_encoder,
    read_hf_weights,
    to_hf_encoder,
)
from attnlab.io.hf_tables import KINDS
from attnlab.io.hf_tasks import hf_task, load_hf_task, task_to_hf
from attnlab.io.hf_tokenizer import save_hf_tokenizer
from attnlab.io.model_card import write_model_card
from attnlab.models import TASK_ARCHITECTURES


def load_hf(
    directory: str | os.PathLike,
    architecture: str | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
) -> nn.Module:
    """An attnlab model from a HF transformers directory (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT).

    ``architecture`` None picks the richest attnlab model the weights hold (`attnlab.io.hf`), and the task
    model of a fine-tuned ``*For{Task}`` checkpoint (`attnlab.io.hf_tasks`); ``"Encoder"`` loads the encoder
    alone and ignores any head. ``dtype`` None keeps the stored dtype. Returned in eval mode.
    """
    directory = check_directory(directory)
    task = hf_task(read_json(directory / CONFIG_NAME))
    if task is not None and architecture in (None, task):
        return load_hf_task(directory, task, resolve_dtype(dtype)).to(device).eval()
    return load_hf_encoder(directory, architecture=architecture, dtype=dtype, device=device)


def to_hf(
    model: nn.Module, family: str | None = None, dtype: str | torch.dtype | None = None
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(HF config.json dict, HF state dict)`` for ``model``, in memory; `save_hf` writes them.

    ``family`` ("bert", "roberta", "albert", "electra", "distilbert") defaults to
    `attnlab.io.hf.infer_family`.
    Models HF cannot represent raise a `CheckpointError` listing every reason (`attnlab.io.hf.to_hf_encoder`,
    `attnlab.io.hf_tasks.task_to_hf`).
    """
    if getattr(model, "config", None) is None:
        raise TypeError(f"{type(model).__name__} has no `config`; not an attnlab model")
    if architecture_of(model)[0] in TASK_ARCHITECTURES:
        return task_to_hf(model, family=family, dtype=dtype)
    return to_hf_encoder(model, family=family, dtype=dtype)


def describe_hf(directory: str | os.PathLike) -> tuple[str, str, Any]:
    """``(HF class, attnlab architecture, EncoderConfig)`` of a HF directory, reading only key names
    (safetensors headers) where it can."""
    directory = check_directory(directory)
    config_path = directory / CONFIG_NAME
    hf = read_json(config_path)
    family = _family(hf.get("model_type"), str(config_path))
    single, index = directory / WEIGHTS_NAME, directory / SHARDED_INDEX_NAME
    if single.is_file():
        with safe_open(str(single), framework="pt") as f:
            keys: dict[str, None] = dict.fromkeys(f.keys())
        source = str(single)
    elif index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: missing object field 'weight_map'")
        keys, source = dict.fromkeys(weight_map), str(index)
    else:
        tensors, source = read_hf_weights(directory)
        keys = dict.fromkeys(tensors)
    keys = _normalise_hf_keys(keys, family)
    base, rest = _split_base(keys, family)
    kind, config = _plan(hf, family, set(base), set(rest), None, str(config_path), source)
    task = hf_task(hf)
    if task is not None:  # a fine-tuned *For{Task} checkpoint
        return str(hf["architectures"][0]), task, config
    return family.classes.get(kind, "?"), KINDS[kind][0], config


def save_hf(
    model: nn.Module,
    directory: str | os.PathLike,
    family: str | None = None,
    dtype: str | torch.dtype | None = None,
    tokenizer: Any = None,
    card: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``model`` as a HF transformers directory (``config.json`` + ``model.safetensors``) that
    ``transformers.AutoModel*.from_pretrained`` loads; see `to_hf` for ``family`` and the errors.

    With ``tokenizer``, its files and a ``tokenizer_config.json`` naming the class that rebuilds it
    (`attnlab.io.hf_tokenizer`), so ``AutoTokenizer`` and ``pipeline(...)`` load the directory. Every export
    gets a model card, ``README.md`` (`attnlab.io.model_card`), from the config and ``card`` (what training
    recorded: base model, task, data set, metrics, command).
    """
    hf_config, tensors = to_hf(model, family=family, dtype=dtype)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors_atomic(tensors, directory / WEIGHTS_NAME, metadata={"format": "pt"})
    write_json_atomic(hf_config, directory / CONFIG_NAME)
    if tokenizer is not None:
        config = model.config
        types = config.type_vocab_size > 1
        save_hf_tokenizer(tokenizer, directory, hf_config["model_type"], config.max_sequence_length, types)
    write_model_card(directory, hf_config, card or {})
    return directory


def hf_parameter_count(directory: str | os.PathLike) -> int:
    """Number of values in a HF or attnlab directory's weights without building the model."""
    directory = Path(directory)
    path = directory / WEIGHTS_NAME
    if not path.is_file():
        tensors, _ = read_hf_weights(directory)
        return sum(t.numel() for k, t in tensors.items() if not _IGNORED_HF_KEYS.search(k))
    with safe_open(str(path), framework="pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
