"""attnlab model directories in HF's own layout, so ``transformers.AutoModel*.from_pretrained`` and
``pipeline(...)`` load them as they are, not only their separate ``hf/`` export.

When a model has an exact HF form, `attnlab.io.checkpoint.save_pretrained` writes

- ``config.json``: HF's config fields (``model_type``, ``architectures``, ``hidden_size``, ``id2label``, ...)
  and attnlab's own fields beside them (``"format": "attnlab"``, ``architecture``, ``options``, ``config``,
  ``tied``, and ``hf_family``); HF keeps unknown fields as plain attributes, attnlab reads its own ones, so
  nothing HF has no field for (pre-training options, dropout settings) is lost;
- ``model.safetensors``: the tensors under HF's names (`attnlab.io.hf.to_hf`, the export every HF parity
  test checks), plus any attnlab tensor the HF class has no place for under the name the family's other
  classes give it (the pooler a masked LM or a token classifier keeps but does not read: HF's class reports
  it as unused, its sequence classifier reads it).

"Exact" is checked, not assumed: the export must succeed without a warning other than the pooler kept
aside (a pooler HF would initialise randomly, a substituted family: not the same model), and the tensors,
mapped back by the same key table, must equal the model's state bit for bit. Otherwise (ALBERT's partial
sharing, a pre-LN model with E != H, an activation HF hard-codes differently, ...) the directory keeps
attnlab's names, as before; `hf_form` returns the reason. The pre-LN encoder is HF's RoBERTa-PreLayerNorm,
whose positions count the tokens that are not ``pad_token_id``: exact where that id marks padding only, as
it does with every tokenizer here (BERT-style positions count every token).

A directory HF loaded and saved again keeps attnlab's config fields (HF keeps unknown ones) but may hold
other weights or another head; HF's ``transformers_version`` field marks it, and attnlab reads it as the HF
checkpoint it now is (`attnlab.io.checkpoint.written_by_attnlab`).

Reading (`to_attnlab_names`) maps HF names back to the state-dict names of the model rebuilt from
attnlab's own config, and drops what HF alone keeps (a written-out sinusoidal table, an untied decoder's
second bias, the zero type row of a model without segment embeddings).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.io.checkpoint import architecture_of
from attnlab.io.format import CheckpointError, tied_aliases
from attnlab.io.hf import _kind_of, adds_type_row, infer_family, position_shift
from attnlab.io.hf_encoders import to_hf
from attnlab.io.hf_tables import FAMILIES, key_map
from attnlab.io.hf_tasks import task_head, task_key_map
from attnlab.models import TASK_ARCHITECTURES

HF_FAMILY_FIELD = "hf_family"  # config.json: present exactly when model.safetensors uses HF's names


def _table(model: nn.Module, family: str) -> tuple[Any, str]:
    """The export's key table for ``model`` as HF ``family``'s class (`attnlab.io.hf.key_map`,
    `attnlab.io.hf_tasks.task_key_map`) and the encoder's path in ``model`` ("" or "encoder.")."""
    name, _ = architecture_of(model)
    if name in TASK_ARCHITECTURES:
        entry = task_head(family, name, f"{name} as HF {family}", model.config)
        return task_key_map(family, entry), "encoder."
    kind = _kind_of(model)
    return key_map(FAMILIES[family], kind), "" if kind == "base" else "encoder."


def hf_names(model: nn.Module, family: str) -> dict[str, str]:
    """``{attnlab state key: HF name}`` for ``model`` as HF ``family``'s class; tied aliases are left out
    (stored once)."""
    table, _ = _table(model, family)
    aliases = tied_aliases(model)
    names = {}
    for key in model.state_dict():
        theirs = table.to_hf(key)
        if key not in aliases and theirs is not None:
            names[key] = theirs
    return names


def hf_form(
    model: nn.Module, dtype: torch.dtype | None
) -> tuple[dict[str, Any], dict[str, Tensor], str] | str:
    """``(HF config dict, tensors to store, family)`` when ``model`` has an exact HF form, else the reason
    it has none (a string). ``dtype`` casts floating-point tensors as `to_hf` does."""
    name, _ = architecture_of(model)
    try:
        kind = "base" if name in TASK_ARCHITECTURES else _kind_of(model)
        family = infer_family(model.config, kind)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hf_config, tensors = to_hf(model, family=family, dtype=dtype)
        names = hf_names(model, family)
    except (ValueError, TypeError, KeyError) as e:
        return " ".join(str(e).split())
    for w in caught:  # a pooler HF's class lacks is kept below, under the family's name for it; anything
        if "attnlab pooler is not exported" not in str(w.message):  # else (a pooler HF would initialise
            return str(w.message)  # randomly, a substituted family) is not the same model
    state = {k: v for k, v in model.state_dict().items() if k not in tied_aliases(model)}
    stored = dict(tensors)
    for key, value in state.items():  # what the HF class has no place for: under the family's name for it
        if names.get(key) not in tensors:  # (HF's other classes read it: a sequence classifier the pooler)
            name = names.get(key, key)  # or, where the family has none, its attnlab name
            if name in stored:
                return f"{key} and another tensor share the name {name}"
            stored[name] = value.to(dtype) if dtype is not None and value.is_floating_point() else value
    back = to_attnlab_names(stored, model, family)
    for key, value in state.items():
        expected = value.to(dtype) if dtype is not None and value.is_floating_point() else value
        if key not in back or back[key].dtype != expected.dtype or not torch.equal(back[key], expected):
            return f"{key} does not come back unchanged from HF's names"
    if hf_config.get("dtype") not in ("float32", "bfloat16", "float16"):
        return f"mixed dtypes ({hf_config.get('dtype')})"
    return hf_config, stored, family


def to_attnlab_names(tensors: Mapping[str, Tensor], model: nn.Module, family: str) -> dict[str, Tensor]:
    """``tensors`` stored in HF's layout under ``model``'s state-dict names (``model`` may be on the meta
    device). HF-only entries are dropped; an entry that is neither a HF name of ``model`` nor one of its
    own keys stays, so `attnlab.io.checkpoint.load_state_checked` names it as unexpected."""
    ours_of = {theirs: ours for ours, theirs in hf_names(model, family).items() if theirs in tensors}
    expected = set(model.state_dict())
    hf_only = _hf_only_names(model, family)
    _, prefix = _table(model, family)
    shift = position_shift(model.config, FAMILIES[family])
    out: dict[str, Tensor] = {}
    for name, value in tensors.items():
        if name in ours_of:
            ours = ours_of[name]
            if shift and ours == f"{prefix}embeddings.position.weight":
                if value.shape[0] != model.config.max_position_embeddings + shift:
                    raise CheckpointError(
                        f"{name}: {value.shape[0]} rows, expected max_position_embeddings "
                        f"{model.config.max_position_embeddings} + {shift} (positions from pad_token_id + 1)"
                    )
                value = value[shift:]
        elif name in expected or name not in hf_only:
            ours = name
        else:
            continue
        if ours in out:
            raise CheckpointError(f"{ours} is stored twice (as {name} and under another name)")
        out[ours] = value
    return out


def _hf_only_names(model: nn.Module, family: str) -> set[str]:
    """HF names the export writes that hold no attnlab tensor: the sinusoidal position table DistilBERT
    keeps in its weights, the second bias name of an untied decoder, the zero type row of a model without
    segment embeddings."""
    table, prefix = _table(model, family)
    names = set(FAMILIES[family].hf_aliases)
    position = table.to_hf(f"{prefix}embeddings.position.weight")
    if position:
        names.add(position)
    if adds_type_row(model.config, FAMILIES[family]):
        names.add(table.to_hf(f"{prefix}embeddings.token_type.weight"))
    return names
