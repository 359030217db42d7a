"""Pre-trained encoders into task models.

`load_task_model(directory, architecture, **options)` starts fine-tuning from a checkpoint directory:

- an attnlab checkpoint of the same task architecture (a fine-tuned model) loads whole;
- any other attnlab checkpoint (``Encoder``, ``EncoderForPreTraining``, ``ReplacedTokenDetection``, another
  task model) or a HF transformers directory (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT; via
  `attnlab.io.load`) gives its encoder; the task head -- and a pooler the checkpoint lacks -- is
  initialised fresh (BERT's N(0, 0.02)) and a warning names every fresh parameter.

`attnlab.io.load(directory)` loads what a directory holds for inference; a HF task checkpoint loads whole
when attnlab can represent its head exactly, by the per-family tables of `attnlab.io.hf_tasks` (the ones
``attnlab.io.save(model, directory, hf=True)`` exports with):

==============================  ===================================================  ===================
HF class                        HF head weights                                      attnlab
==============================  ===================================================  ===================
*ForSequenceClassification      BERT, ALBERT: ``classifier``; RoBERTa, ELECTRA:      EncoderForSequence-
                                ``classifier.dense`` (loaded as the pooler) +        Classification
                                ``out_proj``; DistilBERT: ``pre_classifier`` (as
                                the pooler) + ``classifier``
*ForTokenClassification         ``classifier`` (every family)                        ...TokenClassification
*ForQuestionAnswering           ``qa_outputs`` (every family)                        ...QuestionAnswering
*ForMultipleChoice              pooler + ``classifier`` (BERT, ALBERT, RoBERTa);     ...MultipleChoice
                                ELECTRA: ``sequence_summary.summary`` (as the
                                pooler); DistilBERT: as its classifier
==============================  ===================================================  ===================

The pooler's activation is the HF head's (``EncoderConfig.pooler_activation``): tanh for BERT, ALBERT and
RoBERTa, gelu for ELECTRA's classification head (its multiple-choice head: ``summary_activation``), ReLU
for DistilBERT's ``pre_classifier``. A head attnlab cannot compute (ELECTRA's summary with no activation)
raises an error that says so. RoBERTa's and ELECTRA's classification heads apply dropout before their
dense layer too; that only changes training, not inference (a named deviation).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.io import load
from attnlab.io.checkpoint import build_model, load_state_checked, read_checkpoint_config
from attnlab.io.families.bert import attnlab_tensors
from attnlab.io.format import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    read_json,
    read_safetensors,
    written_by_attnlab,
)
from attnlab.io.hf import is_hf_directory
from attnlab.io.hf_tasks import HF_TASK_SUFFIXES, UnsupportedHeadError, hf_task, labels_from_hf
from attnlab.models import ARCHITECTURES, TASK_ARCHITECTURES, Encoder

__all__ = ["HF_TASK_SUFFIXES", "UnsupportedHeadError", "load_task_model"]


def _architecture_name(architecture: str | type) -> str:
    name = architecture if isinstance(architecture, str) else architecture.__name__
    if name not in TASK_ARCHITECTURES:
        raise ValueError(f"unknown task architecture {name!r}; valid: {', '.join(TASK_ARCHITECTURES)}")
    return name


def _is_attnlab_directory(directory: Path) -> bool:
    path = directory / CONFIG_NAME
    if not path.is_file():
        return False
    try:
        return written_by_attnlab(read_json(path))
    except (CheckpointError, OSError):
        return False


def _check_directory(directory: str | os.PathLike) -> Path:
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such model directory")
    if not (d / CONFIG_NAME).is_file():
        raise FileNotFoundError(
            f"{d / CONFIG_NAME}: missing; a model directory holds config.json and weights"
        )
    return d


_hf_task = hf_task  # the attnlab task a HF config's ``architectures`` names


_hf_labels = labels_from_hf  # (num_labels, names) of a HF config


def _encoder_state(directory: Path) -> tuple[Any, dict[str, Tensor], str]:
    """``(EncoderConfig, encoder state dict, description)`` of an attnlab or HF directory."""
    if _is_attnlab_directory(directory):
        arch, options, config, raw = read_checkpoint_config(directory)
        tensors, _ = read_safetensors(directory / WEIGHTS_NAME)
        meta = build_model(arch, config, options, meta=True)
        tensors = attnlab_tensors(tensors, raw, meta, directory / CONFIG_NAME)
        if arch == "Encoder":
            state = dict(tensors)
        else:
            state = {k[len("encoder.") :]: v for k, v in tensors.items() if k.startswith("encoder.")}
            if not state:
                raise CheckpointError(f"{directory / WEIGHTS_NAME}: no encoder.* weights in this {arch}")
        return config, state, f"attnlab {arch}"
    if is_hf_directory(directory):
        encoder = load(directory, architecture="Encoder")
        hf = read_json(directory / CONFIG_NAME)
        return encoder.config, encoder.state_dict(), f"HF {hf.get('model_type')} {hf.get('architectures')}"
    raise CheckpointError(
        f'{directory / CONFIG_NAME}: neither an attnlab checkpoint ("format": "attnlab") nor a HF '
        'transformers config ("model_type")'
    )


def _load_encoder_into(model: nn.Module, state: Mapping[str, Tensor], source: str) -> list[str]:
    """Copy ``state`` into ``model.encoder``; returns the encoder keys the state lacked (left as initialised).

    Only a pooler may be missing (the task needs one the checkpoint has not got); any other missing or
    unexpected key, or a shape mismatch, raises with the names and shapes.
    """
    encoder: Encoder = model.encoder
    expected = encoder.state_dict()
    missing = [k for k in expected if k not in state]  # other than the pooler: named by load_state_checked
    filled = dict(state)
    for key in missing:
        if key.startswith("pooler."):
            filled[key] = expected[key]
    if not encoder.config.add_pooler:
        filled = {k: v for k, v in filled.items() if not k.startswith("pooler.")}
    load_state_checked(encoder, filled, source=source, architecture="Encoder", config=encoder.config)
    return [f"encoder.{k}" for k in missing if k.startswith("pooler.")]


def load_task_model(
    directory: str | os.PathLike,
    architecture: str | type,
    *,
    device: str | torch.device = "cpu",
    config_changes: Mapping[str, Any] | None = None,
    **options: Any,
) -> nn.Module:
    """A task model whose encoder comes from ``directory`` (attnlab or HF), in train mode on ``device``.

    ``options`` go to the architecture's ``from_config`` (``num_labels``, ``labels``,
    ``classifier_dropout``). A checkpoint of the same architecture loads whole when ``options`` agree
    with the saved ones (a changed label set re-initialises the head, with a warning). ``config_changes``
    replace fields of the checkpoint's config that hold no weights (fine-tuning's dropout: see
    `with_config_changes`).
    """
    name = _architecture_name(architecture)
    cls = ARCHITECTURES[name]
    d = _check_directory(directory)
    whole = None
    if _is_attnlab_directory(d):
        arch, saved, _, _ = read_checkpoint_config(d)
        if arch == name and _same_head(saved, options):
            whole = load(d)
    elif is_hf_directory(d) and _hf_task(read_json(d / CONFIG_NAME)) == name:
        try:
            model = load(d)
        except UnsupportedHeadError:
            pass  # its encoder is used below with a new head, which the warning there names
        else:
            whole = model if _same_head(model.options, options) else None
    if whole is not None:
        if "classifier_dropout" in options and hasattr(whole, "dropout"):  # no weights: just set it
            p = options["classifier_dropout"]
            whole.dropout.p = whole.config.hidden_dropout if p is None else p
            whole.options["classifier_dropout"] = p
        return with_config_changes(whole, config_changes).to(device).train()
    config, state, what = _encoder_state(d)
    if config_changes:
        config = dataclasses.replace(config, **config_changes)
    model = cls.from_config(config, **options)
    fresh_pooler = _load_encoder_into(model, state, source=f"{d} ({what})")
    fresh = fresh_pooler + model.head_state_keys()
    warnings.warn(
        f"{name} from {d} ({what}): the encoder's weights are loaded; newly initialised (train them): "
        f"{', '.join(fresh)}",
        stacklevel=2,
    )
    return model.to(device).train()


def with_config_changes(model: nn.Module, changes: Mapping[str, Any] | None) -> nn.Module:
    """``model`` rebuilt with ``changes`` to its config and its own weights: for fields that hold no weights,
    such as dropout (a model pre-trained without dropout is fine-tuned with it). The same model when
    ``changes`` change nothing."""
    if not changes or all(getattr(model.config, k) == v for k, v in changes.items()):
        return model
    config = dataclasses.replace(model.config, **changes)
    rebuilt = type(model).from_config(config, **getattr(model, "options", {}))
    rebuilt.load_state_dict(model.state_dict())
    return rebuilt.train(model.training)


def _same_head(saved: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
    """Whether a saved head fits ``options``: same number and names of labels and the same pooling (absent:
    [CLS]); dropout has no weights."""
    same = all(saved.get(k) == v for k, v in options.items() if k not in ("classifier_dropout", "pooling"))
    return same and saved.get("pooling", "cls") == options.get("pooling", "cls")
