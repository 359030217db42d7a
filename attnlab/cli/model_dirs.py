"""Checks on the model directories people pass to ``finetune``, ``evaluate`` and ``translate``, made before
anything is loaded, with messages that say which directory to pass instead.

- `check_model_dir`: a run directory (``RUN/model``, ``RUN/best`` inside) or a training checkpoint
  (``RUN/checkpoints/step-N``) given where a model directory is expected names the directory to pass.
- `check_vocab_fits`: a tokenizer with more tokens than the model's embedding is caught at load (naming both
  files), not at the first batch.
- `task_architecture_error`, `fine_tuned_task`: ``evaluate`` on a pre-trained (not fine-tuned) model is an
  error; on a model fine-tuned for another task a warning naming both tasks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from attnlab.io.directories import CONFIG, RESULTS, TRAINER_STATE, WEIGHTS, check_model_dir  # noqa: F401


def model_config(d: Path) -> tuple[str | None, Any]:
    """``(architecture, EncoderConfig)`` of an attnlab or HF encoder directory, without loading weights."""
    from attnlab.io.checkpoint import read_checkpoint_config
    from attnlab.io.hf import is_hf_directory
    from attnlab.io.hf_encoders import describe_hf

    if is_hf_directory(d):
        _, architecture, config = describe_hf(d)
        return architecture, config
    architecture, _, config, _ = read_checkpoint_config(d)
    return architecture, config


def _tokenizer_file(d: Path) -> Path:
    for name in ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model"):
        if (d / name).is_file():
            return d / name
    return d


def check_vocab_fits(model_dir: Path, tokenizer: Any, tokenizer_dir: str | os.PathLike | None = None) -> None:
    """A tokenizer whose ids reach past the model's word embedding is an error naming both files."""
    _, config = model_config(model_dir)
    size = tokenizer.get_vocab_size() if hasattr(tokenizer, "get_vocab_size") else tokenizer.vocab_size
    if size > config.vocab_size:
        tok_file = _tokenizer_file(Path(tokenizer_dir) if tokenizer_dir is not None else model_dir)
        raise ValueError(
            f"{tok_file} has {size} tokens but {model_dir / CONFIG} has vocab_size {config.vocab_size}: "
            "the tokenizer does not fit the model's embedding; use the tokenizer the model was trained with"
        )


def task_architecture_error(model_dir: Path, task: str, architecture: str) -> str | None:
    """A message when ``model_dir`` does not hold a ``architecture`` model (e.g. a pre-trained one)."""
    found, _ = model_config(model_dir)
    if found == architecture:
        return None
    if found in ("EncoderForPreTraining", "Encoder", "ReplacedTokenDetection", None):
        return (
            f"{model_dir / CONFIG}: a pre-trained model ({found or 'encoder'}), not one fine-tuned for "
            f"{task}; fine-tune it first (attnlab finetune --task {task} --model {model_dir} ...) and "
            "evaluate RUN/best"
        )
    return f"{model_dir / CONFIG}: a {found}, but {task} needs a {architecture}"


def fine_tuned_task(model_dir: Path) -> str | None:
    """The task a model directory was fine-tuned on, from ``results.json`` of the run holding it
    (``RUN/best`` or ``RUN/lrX-seedY/best``), or None when unknown."""
    for run in (model_dir.parent, model_dir.parent.parent):
        path = run / RESULTS
        if path.is_file():
            try:
                task = json.loads(path.read_text(encoding="utf-8")).get("task")
            except (OSError, ValueError, AttributeError):
                return None
            return task if isinstance(task, str) else None
    return None


SEQ2SEQ_TYPE = "attnlab-seq2seq"  # the model_type of attnlab.translation.config.Seq2SeqConfig files


def check_seq2seq_dir(path: str | os.PathLike, option: str = "MODEL_DIR") -> Path:
    """A directory written by ``translate-train`` (RUN/model); anything else names what it holds."""
    d = check_model_dir(path, option)
    try:
        raw = json.loads((d / CONFIG).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{d / CONFIG}: not valid JSON ({e})") from None
    from attnlab.translation.config import is_seq2seq_config

    kind = raw.get("model_type") if isinstance(raw, dict) else None
    if not is_seq2seq_config(raw):
        what = f"architecture {raw.get('architecture', '?')!r}"  # attnlab's own, also when in HF's layout
        if kind and raw.get("format") != "attnlab":
            what = f"model_type {kind!r}"
        raise ValueError(
            f"{option} {d}: holds no translation model ({d / CONFIG} has {what}, not {SEQ2SEQ_TYPE!r}); "
            "pass the model directory of a translate-train run (RUN/model)"
        )
    return d
