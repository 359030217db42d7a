"""Fine-tuned task models <-> HF transformers ``*For{Task}`` classes, both ways.

One `TaskHead` record per (family, attnlab task architecture) says which HF class holds the model, where
its head's weights live and whether its base model keeps a pooler; the encoder's weights go through the
family's layout in `attnlab.io.hf`. Every entry is exact: the HF class computes the same logits as the
attnlab model on the same inputs (tests/io/test_hf_export_tasks.py).

=================  ==========================================================================================
attnlab            HF class and head weights (attnlab -> HF)
=================  ==========================================================================================
SequenceClass.     BERT, ALBERT: pooler + ``classifier``. RoBERTa: ``encoder.pooler.dense`` ->
(regression too)   ``classifier.dense``, ``classifier`` -> ``classifier.out_proj`` (RobertaClassificationHead
                   is tanh(dense(h[CLS])), BERT's pooler). ELECTRA: the same names, but
                   ElectraClassificationHead hard-codes gelu: ``pooler_activation="gelu"``. DistilBERT:
                   ``encoder.pooler.dense`` -> ``pre_classifier`` + ReLU: ``pooler_activation="relu"``
TokenClass.        every family: ``classifier`` (no pooler)
QuestionAnswering  every family: ``qa_outputs`` (no pooler)
MultipleChoice     BERT, RoBERTa, ALBERT: pooler + ``classifier``. ELECTRA: pooler ->
                   ``sequence_summary.summary``, its ``summary_activation`` = ``pooler_activation`` (any).
                   DistilBERT: as its sequence classifier (``pre_classifier`` + ReLU)
=================  ==========================================================================================

The pooled heads are exact only when ``EncoderConfig.pooler_activation`` is the activation the HF head
applies (the `TaskHead`'s ``activation``); importing a HF checkpoint sets it. A classifier whose activation
the inferred family's class lacks (a tanh-pooled ELECTRA classifier) is exported, with no family named, as
a family whose class holds it exactly (ALBERT: post-LN, E != H, tanh pooler), with a warning; a named
family that does not hold it is refused with the reason.
Dropout is the one inexact part, and acts in training only: HF's RoBERTa and ELECTRA classification heads
(and ELECTRA's ``SequenceSummary`` with ``summary_first_dropout`` set) also drop out h[CLS] before the dense
layer, where attnlab's head has one dropout, after the pooler. Eval-mode logits are identical.
Classification and token classification are compared with ``transformers.pipeline``; question answering
(HF 5 has no such pipeline) and multiple choice through ``AutoModelFor*`` on ``AutoTokenizer``'s inputs.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.io.checkpoint import architecture_of, build_model, load_state_checked
from attnlab.io.format import CONFIG_NAME, CheckpointError, check_directory, read_json, resolve_dtype
from attnlab.io.hf import (
    config_to_hf,
    export_problems,
    export_tensors,
    infer_family,
    load_hf_encoder,
    read_hf_weights,
)
from attnlab.io.hf_tables import FAMILIES, HF_POOLER_ACTIVATIONS, TO_HF_POOLER_ACTIVATION, KeyMap
from attnlab.models.task_heads import TASK_ARCHITECTURES


class UnsupportedHeadError(CheckpointError):
    """A task head one side cannot represent exactly (the encoder can still be fine-tuned)."""


@dataclass(frozen=True)
class TaskHead:
    """Where one family's HF class keeps an attnlab task model's head."""

    hf_class: str
    head: Mapping[str, str]  # attnlab module path -> HF module path (".weight"/".bias" follow)
    pooler: (
        bool  # whether the HF base model holds a pooler (else the attnlab pooler must be mapped or unused)
    )
    config: Mapping[str, Any] = field(
        default_factory=dict
    )  # HF config fields the head needs, checked on read
    activation: str = "tanh"  # the EncoderConfig.pooler_activation HF's head applies to dense(h[CLS])
    # HF config field naming that activation: then any one is exact, and ``activation`` is HF's default
    activation_field: str | None = None
    dropout_field: str | None = None  # HF config field of the head's dropout, where not the family's


SEQ, TOKEN, QA, CHOICE = (
    "EncoderForSequenceClassification",
    "EncoderForTokenClassification",
    "EncoderForQuestionAnswering",
    "EncoderForMultipleChoice",
)
_CLASSIFIER = {"classifier": "classifier"}
_QA = {"qa_outputs": "qa_outputs"}
_DISTILBERT_POOLED = {"encoder.pooler.dense": "pre_classifier", "classifier": "classifier"}


def _standard(name: str) -> dict[str, TaskHead]:
    """BERT's four heads, which ALBERT repeats under its own class names."""
    return {
        SEQ: TaskHead(f"{name}ForSequenceClassification", _CLASSIFIER, pooler=True),
        TOKEN: TaskHead(f"{name}ForTokenClassification", _CLASSIFIER, pooler=False),
        QA: TaskHead(f"{name}ForQuestionAnswering", _QA, pooler=False),
        CHOICE: TaskHead(f"{name}ForMultipleChoice", _CLASSIFIER, pooler=True),
    }


TASK_HEADS: dict[str, dict[str, TaskHead]] = {
    "bert": _standard("Bert"),
    "albert": _standard("Albert"),
    "roberta": {
        **_standard("Roberta"),
        SEQ: TaskHead(
            "RobertaForSequenceClassification",
            {"encoder.pooler.dense": "classifier.dense", "classifier": "classifier.out_proj"},
            pooler=False,
        ),
    },
    "roberta-prelayernorm": {
        **_standard("RobertaPreLayerNorm"),
        SEQ: TaskHead(
            "RobertaPreLayerNormForSequenceClassification",
            {"encoder.pooler.dense": "classifier.dense", "classifier": "classifier.out_proj"},
            pooler=False,
        ),
    },
    "electra": {
        # ElectraClassificationHead: dropout -> dense -> gelu (hard-coded) -> dropout -> out_proj
        SEQ: TaskHead(
            "ElectraForSequenceClassification",
            {"encoder.pooler.dense": "classifier.dense", "classifier": "classifier.out_proj"},
            pooler=False,
            activation="gelu",
        ),
        TOKEN: TaskHead("ElectraForTokenClassification", _CLASSIFIER, pooler=False),
        QA: TaskHead("ElectraForQuestionAnswering", _QA, pooler=False),
        CHOICE: TaskHead(
            "ElectraForMultipleChoice",
            {"encoder.pooler.dense": "sequence_summary.summary", "classifier": "classifier"},
            pooler=False,
            config={"summary_type": "first", "summary_use_proj": True, "summary_proj_to_labels": False},
            activation="gelu",  # ElectraConfig's default summary_activation
            activation_field="summary_activation",
        ),
    },
    # DistilBERT's pooled heads: pre_classifier -> ReLU -> dropout(seq_classif_dropout) -> classifier
    "distilbert": {
        SEQ: TaskHead(
            "DistilBertForSequenceClassification",
            _DISTILBERT_POOLED,
            pooler=False,
            activation="relu",
            dropout_field="seq_classif_dropout",
        ),
        TOKEN: TaskHead("DistilBertForTokenClassification", _CLASSIFIER, pooler=False),
        QA: TaskHead("DistilBertForQuestionAnswering", _QA, pooler=False),
        CHOICE: TaskHead(
            "DistilBertForMultipleChoice",
            _DISTILBERT_POOLED,
            pooler=False,
            activation="relu",
            dropout_field="seq_classif_dropout",
        ),
    },
}

# Why a (family, task) pair has no entry: said in the error of both directions (none today: every
# family's HF task classes have an exact entry above).
NOT_EXACT: dict[tuple[str, str], str] = {}

# HF config field of the classifier's dropout, per family (training only; kept for a faithful round trip).
# DistilBERT's token classifier uses the encoder's ``dropout``: nothing of its own to write.
_DROPOUT_FIELD = {
    "bert": "classifier_dropout",
    "roberta": "classifier_dropout",
    "roberta-prelayernorm": "classifier_dropout",
    "electra": "classifier_dropout",
    "albert": "classifier_dropout_prob",
}

# HF class-name suffix -> attnlab task architecture
HF_TASK_SUFFIXES: dict[str, str] = {
    "ForSequenceClassification": SEQ,
    "ForTokenClassification": TOKEN,
    "ForQuestionAnswering": QA,
    "ForMultipleChoice": CHOICE,
}


def reads_pooler(architecture: str) -> bool:
    """Whether the attnlab task ``architecture``'s head reads the pooled [CLS] output."""
    return TASK_ARCHITECTURES[architecture].uses_pooler


def mismatch(family: str, architecture: str, config: Any = None) -> str | None:
    """Why ``family``'s HF class for ``architecture`` cannot hold it exactly (over an encoder of ``config``,
    when given, for the pooler's activation); None when it can."""
    entry = TASK_HEADS.get(family, {}).get(architecture)
    if entry is None:
        return NOT_EXACT.get((family, architecture), f"{family} has no HF class for {architecture}")
    if config is None or not reads_pooler(architecture) or entry.activation_field is not None:
        return None
    if config.pooler_activation != entry.activation:
        return (
            f"HF {entry.hf_class} applies {entry.activation} to dense(h[CLS]) where this model's pooler "
            f"applies {config.pooler_activation}: no exact attnlab counterpart (fine-tune with "
            f"EncoderConfig.pooler_activation={entry.activation!r} to export to this family)"
        )
    return None


def task_head(family: str, architecture: str, source: str, config: Any = None) -> TaskHead:
    """The `TaskHead` of ``family``'s HF class for ``architecture``; `UnsupportedHeadError` with the reason
    and the families that would hold it exactly (those ``config``, when given, can be exported as)."""
    reason = mismatch(family, architecture, config)
    if reason is None:
        return TASK_HEADS[family][architecture]
    if config is None:
        others = [f for f, heads in TASK_HEADS.items() if architecture in heads]
        hint = f"families with an exact {architecture}: {', '.join(others)}"
    else:
        fits = exact_families(config, architecture)
        hint = (
            f"this model exports exactly as: {', '.join(fits)} (--family {fits[0]})"
            if fits
            else f"no HF family holds this {architecture} exactly"
        )
    raise UnsupportedHeadError(f"{source}: {reason}; {hint}")


def exact_families(config: Any, architecture: str) -> list[str]:
    """The families whose HF class holds ``architecture`` over an encoder of ``config`` exactly."""
    return [
        f
        for f in TASK_HEADS
        if mismatch(f, architecture, config) is None
        and not export_problems(_encoder_view(config, architecture), FAMILIES[f], "base")
    ]


def _encoder_view(config: Any, architecture: str) -> Any:
    """``config`` as the base-model export sees it: a pooler the head does not read is not exported, so its
    activation does not matter (HF's own pooler is tanh)."""
    if reads_pooler(architecture) or config.pooler_activation == "tanh":
        return config
    return dataclasses.replace(config, pooler_activation="tanh")


def id2label(model: nn.Module) -> dict[int, str]:
    """The class names of a label classifier (``LABEL_i`` where the model has none), as HF keys them."""
    return dict(model.id2label)


def task_config_to_hf(
    model: nn.Module, family_name: str, entry: TaskHead, dtype: torch.dtype
) -> dict[str, Any]:
    """The HF ``config.json`` of a task model: the encoder's fields, the class, labels and head settings."""
    name, options = architecture_of(model)
    hf = config_to_hf(model.config, family_name, "base", dtype)
    hf["architectures"] = [entry.hf_class]
    if name in (SEQ, TOKEN):
        labels = id2label(model)
        hf["id2label"] = {str(i): label for i, label in labels.items()}
        hf["label2id"] = {label: i for i, label in labels.items()}
        if name == SEQ:
            hf["problem_type"] = "regression" if len(labels) == 1 else "single_label_classification"
    dropout = options.get("classifier_dropout")
    dropout_field = entry.dropout_field or _DROPOUT_FIELD.get(family_name)
    if dropout is not None and name != QA and dropout_field:
        hf[dropout_field] = dropout
    hf.update(entry.config)
    if entry.activation_field:
        hf[entry.activation_field] = TO_HF_POOLER_ACTIVATION[model.config.pooler_activation]
    if "summary_type" in entry.config:  # ELECTRA's SequenceSummary: its last dropout is the classifier's
        hf["summary_last_dropout"] = model.config.hidden_dropout if dropout is None else dropout
    return hf


def task_to_hf(
    model: nn.Module, family: str | None = None, dtype: str | torch.dtype | None = None
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(HF config.json dict, HF state dict)`` of an attnlab task model as ``family``'s ``*For{Task}`` class.

    ``family`` defaults to `attnlab.io.hf.infer_family` of the encoder. Raises `CheckpointError` naming every
    reason the encoder has no HF form, and `UnsupportedHeadError` when the family's head is not exact.
    """
    target = resolve_dtype(dtype)
    name, options = architecture_of(model)
    if options.get("pooling", "cls") != "cls":
        raise UnsupportedHeadError(
            f"cannot export {name} with pooling={options['pooling']!r} to HF: HF's "
            "*ForSequenceClassification classes read the [CLS] token; keep the attnlab directory or export "
            "to ONNX"
        )
    config = model.config
    family_name = family or infer_family(config, "base")
    if family_name not in FAMILIES:
        raise ValueError(f"unknown HF family {family_name!r}; valid: {', '.join(FAMILIES)}")
    reason = mismatch(family_name, name, config)
    if family is None and reason is not None:
        fits = exact_families(config, name)
        if fits:  # e.g. a tanh-pooled ELECTRA classifier: ALBERT's class holds it exactly (E != H, post-LN)
            warnings.warn(f"{reason}: exported as HF {fits[0]}, whose {name} is exact", stacklevel=3)
            family_name = fits[0]
    fam = FAMILIES[family_name]
    entry = task_head(family_name, name, f"cannot export {name} as HF {family_name}", config)
    problems = export_problems(_encoder_view(config, name), fam, "base")
    if problems:
        raise CheckpointError(
            f"cannot export this attnlab {name} as HF {family_name}:\n  " + "\n  ".join(problems)
        )
    table = task_key_map(family_name, entry)
    state = model.state_dict()
    if not entry.pooler and not any(k.startswith("encoder.pooler") for k in entry.head):
        # The head reads no pooler (token classification, QA): an inherited one is unused; HF has none.
        state = {k: v for k, v in state.items() if not k.startswith("encoder.pooler.")}
    tensors = export_tensors(model, state, table, "encoder.", family_name, target)
    floats = {t.dtype for t in tensors.values() if t.is_floating_point()}
    stored = target or (floats.pop() if len(floats) == 1 else torch.float32)
    return task_config_to_hf(model, family_name, entry, stored), tensors


def task_key_map(family_name: str, entry: TaskHead) -> KeyMap:
    """attnlab <-> HF names of a task model: the head's entries first (they may claim the pooler), then the
    encoder's layout under the family prefix."""
    fam = FAMILIES[family_name]
    table = dict(entry.head)
    for ours, theirs in fam.layout.items():
        table.setdefault(f"encoder.{ours}", f"{fam.prefix}.{theirs}")
    return KeyMap(table)


def hf_task(hf: Mapping[str, Any]) -> str | None:
    """The attnlab task architecture a HF config's ``architectures`` names, or None."""
    for cls_name in hf.get("architectures") or []:
        for suffix, ours in HF_TASK_SUFFIXES.items():
            if str(cls_name).endswith(suffix):
                return ours
    return None


def head_state_from_hf(
    family: str, architecture: str, hf: Mapping[str, Any], raw: Mapping[str, Tensor], source: str
) -> dict[str, Tensor]:
    """The attnlab head weights (``classifier.*``, ``qa_outputs.*``, a pooler the head maps) of a HF
    ``*For{Task}`` state dict; every HF key outside the base model must be one the table knows."""
    entry = task_head(family, architecture, source)
    for key, value in entry.config.items():
        # HF's config class supplies an absent field (the values here are its defaults); HF reads a flag
        # as its truth value (``summary_proj_to_labels`` None: no projection to the labels).
        given = hf.get(key, value)
        if (bool(given) if isinstance(value, bool) else given) != value:
            raise UnsupportedHeadError(
                f"{source}: {entry.hf_class} with {key}={given!r} has no exact attnlab counterpart "
                f"(attnlab's pooler is act(dense(h[CLS])), which HF writes as {key}={value!r})"
            )
    head_activation(entry, hf, source)  # refuse an activation attnlab's pooler cannot apply, before loading
    prefix = f"{FAMILIES[family].prefix}."
    table = KeyMap(entry.head)
    head: dict[str, Tensor] = {}
    unknown = []
    for key, value in raw.items():
        if key.startswith(prefix) or key.endswith("position_ids"):
            continue
        ours = table.from_hf(key)
        if ours is None:
            unknown.append(key)
        else:
            head[ours] = value
    if unknown:
        raise CheckpointError(
            f"{source}: {hf.get('architectures')} holds weights attnlab's {entry.hf_class} mapping "
            f"does not know: {', '.join(sorted(unknown)[:12])}"
        )
    expected = [f"{ours}.{p}" for ours in entry.head for p in ("weight", "bias")]
    absent = [k for k in expected if k not in head]
    if absent:
        raise CheckpointError(
            f"{source}: config.json names {hf.get('architectures')} but the weights lack the head "
            f"({', '.join(absent)}); found non-encoder keys: {', '.join(sorted(head)) or 'none'}"
        )
    return head


def head_activation(entry: TaskHead, hf: Mapping[str, Any], source: str = CONFIG_NAME) -> str:
    """The ``pooler_activation`` of the attnlab model computing ``entry``'s HF head as ``hf`` sets it up."""
    if entry.activation_field is None:
        return entry.activation
    value = hf.get(entry.activation_field, TO_HF_POOLER_ACTIVATION[entry.activation])  # absent: HF's default
    if value not in HF_POOLER_ACTIVATIONS:  # HF applies no activation for None or ""
        raise UnsupportedHeadError(
            f"{source}: {entry.hf_class} with {entry.activation_field}={value!r} has no exact attnlab "
            f"counterpart (attnlab's pooler applies one of: {', '.join(HF_POOLER_ACTIVATIONS)})"
        )
    return HF_POOLER_ACTIVATIONS[value]


def labels_from_hf(hf: Mapping[str, Any], source: str = CONFIG_NAME) -> tuple[int, list[str] | None]:
    """``(num_labels, names)`` of a HF config; HF's default names (``LABEL_0``, ...) read as None."""
    id2label = hf.get("id2label")
    if isinstance(id2label, Mapping) and id2label:
        try:
            ordered = [str(id2label[k]) for k in sorted(id2label, key=lambda k: int(k))]
        except (TypeError, ValueError):
            raise CheckpointError(f"{source}: id2label keys must be integers, got {list(id2label)}") from None
        default = all(name == f"LABEL_{i}" for i, name in enumerate(ordered))
        return len(ordered), None if default else ordered
    return int(hf.get("num_labels", 2)), None


def load_hf_task(
    directory: str | os.PathLike, architecture: str | None = None, dtype: torch.dtype | None = None
) -> nn.Module:
    """A HF ``*For{Task}`` directory as the attnlab task model (labels from ``id2label``), by `TASK_HEADS`.

    ``architecture`` None takes the task the config's ``architectures`` names. ``dtype`` None keeps the
    stored one. Returned in eval mode on the CPU.
    """
    d = check_directory(directory)
    config_path = d / CONFIG_NAME
    hf = read_json(config_path)
    name = architecture or hf_task(hf)
    if name is None:
        raise CheckpointError(f"{config_path}: architectures={hf.get('architectures')} names no task model")
    family = str(hf.get("model_type"))
    raw, source = read_hf_weights(d)
    head = head_state_from_hf(family, name, hf, raw, source)
    encoder = load_hf_encoder(d, architecture="Encoder")
    config = encoder.config
    if reads_pooler(name):  # the head's activation is the pooler's (gelu for ELECTRA, ReLU for DistilBERT)
        config = dataclasses.replace(config, pooler_activation=head_activation(TASK_HEADS[family][name], hf))
    options: dict[str, Any] = {}
    if name in (SEQ, TOKEN):
        n, labels = labels_from_hf(hf, str(config_path))
        options = {"num_labels": n, "labels": labels}
    entry = TASK_HEADS[family][name]
    dropout = hf.get(entry.dropout_field or _DROPOUT_FIELD.get(family, ""))
    if name != QA and isinstance(dropout, (int, float)) and not isinstance(dropout, bool):
        options["classifier_dropout"] = float(dropout)  # training only; kept for a faithful round trip
    model = build_model(name, config, options, init=False)  # every weight is loaded next
    state = {f"encoder.{k}": v for k, v in encoder.state_dict().items()}
    for key in model.state_dict():  # a pooler the HF class lacks must come from the head weights
        if key.startswith("encoder.pooler.") and key not in state and key not in head:
            raise CheckpointError(f"{source}: {hf.get('architectures')} needs a pooler, but {key} is missing")
    state.update(head)
    load_state_checked(model, state, source=source, architecture=f"{name} (from HF {family})", config=config)
    if dtype is None:
        floats = {t.dtype for t in raw.values() if t.is_floating_point()}
        dtype = floats.pop() if len(floats) == 1 else None
    if dtype is not None:
        model.to(dtype=dtype)
    return model.eval()


def is_task_directory(directory: str | os.PathLike) -> bool:
    """Whether ``directory/config.json`` is a HF config naming a ``*For{Task}`` class."""
    path = Path(directory) / CONFIG_NAME
    try:
        return path.is_file() and hf_task(read_json(path)) is not None
    except (CheckpointError, OSError):
        return False
