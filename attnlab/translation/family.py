"""Translation models as an `attnlab.io` model family, so `attnlab.io.load` and `attnlab.io.save` take them.

The family is registered from here, above `attnlab.io`, because `Seq2Seq` lives in `attnlab.translation`
and `attnlab.io` imports no task package. Its directory is ``config.json`` + ``model.safetensors`` +
``tokenizer.json`` (+ the manifest), in Marian's layout where the model has an exact Marian form
(`attnlab.translation.hf_layout`); `attnlab.io.load` returns the model, and the directory's tokenizer is
``attnlab.tokenizers.load_tokenizer(directory)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from attnlab.atomic import atomic_path, write_json_atomic
from attnlab.io.checkpoint import load_state_checked
from attnlab.io.format import check_finite, resolve_dtype, write_safetensors_atomic
from attnlab.io.registry import ModelFamily, register
from attnlab.manifest import verify_directory, write_manifest
from attnlab.tokenizers import Tokenizer
from attnlab.train.checkpoint import MODEL_FILE, read_model_file, save_model

from .config import is_seq2seq_config
from .hf_layout import attnlab_state, load_config, marian_directory_files
from .model import Seq2Seq, build_model

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"


def save_seq2seq(
    model: Seq2Seq,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
    tokenizer: Tokenizer | None = None,
) -> Path:
    """Write ``config.json``, ``model.safetensors`` and ``tokenizer.json`` into ``directory`` (each
    atomically), then their manifest with ``run_id``.

    A model HF's MarianMT holds exactly (`attnlab.translation.hf_layout`: post-LN, sinusoidal, shared
    embeddings; the paper's interleaved sinusoids through a reordering of the features) is written in
    Marian's layout, with attnlab's config beside Marian's fields and a ``tokenizer_config.json``, so
    ``transformers.AutoModelForSeq2SeqLM`` and ``AutoTokenizer`` load the directory as it is."""
    if tokenizer is None:
        raise ValueError("a translation model directory holds its tokenizer: pass tokenizer=")
    if dtype is not None and resolve_dtype(dtype) != torch.float32:
        raise ValueError(f"translation directories hold float32 weights, not {dtype}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = marian_directory_files(model, tokenizer)
    if isinstance(files, str):  # no exact Marian form: attnlab's own layout
        write_json_atomic(model.config.to_dict(), directory / CONFIG_FILE, indent=2)
        with atomic_path(directory / MODEL_FILE) as tmp:
            save_model(model, tmp)
        tokenizer.save(str(directory / TOKENIZER_FILE))
        write_manifest(directory, [CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE], run_id=run_id)
        return directory

    config, tensors, hf_tokenizer, extra = files
    write_json_atomic(config, directory / CONFIG_FILE, indent=2)
    write_safetensors_atomic(
        tensors, directory / MODEL_FILE, metadata={"format": "pt", "producer": "attnlab"}
    )
    hf_tokenizer.save(str(directory / TOKENIZER_FILE))
    for name, content in extra.items():
        write_json_atomic(content, directory / name, indent=2)
    write_manifest(directory, [CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE, *extra], run_id=run_id)
    return directory


def load_seq2seq(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> Seq2Seq:
    """The model of a directory written by `save_seq2seq` (eval mode), checked against its tokenizer."""
    directory = Path(directory)
    for name in (CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE):
        if not (directory / name).is_file():
            raise FileNotFoundError(
                f"{directory}: missing {name} (expected a directory written by translate-train)"
            )
    verify_directory(directory)  # when it has a manifest
    config = load_config(directory / CONFIG_FILE)
    model = build_model(config)

    tensors = read_model_file(directory / MODEL_FILE)
    check_finite(tensors, f"{directory} ({MODEL_FILE})")
    state = attnlab_state(tensors, directory / CONFIG_FILE, config)
    source = f"{directory / MODEL_FILE} (with {CONFIG_FILE})"
    load_state_checked(model, state, source=source, architecture="Seq2Seq", config=config)
    tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"{directory}: tokenizer.json has {tokenizer.vocab_size} tokens, config.json vocab_size is "
            f"{config.vocab_size}"
        )
    target = resolve_dtype(dtype)
    model = model if target is None else model.to(dtype=target)
    return model.to(device).eval()


def reads(directory: Path, raw: Mapping[str, Any] | None) -> bool:
    """attnlab's translation directories: its own layout or Marian's with attnlab's fields beside."""
    return is_seq2seq_config(raw)


FAMILY = register(
    ModelFamily(
        name="marian",
        what="a translation encoder-decoder",
        model_types=(Seq2Seq,),
        reads=reads,
        load=load_seq2seq,
        save=save_seq2seq,
        commands="`attnlab translate`",
    )
)
