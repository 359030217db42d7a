"""HF transformers encoders, both ways, without the fine-tuned heads: base, masked-LM, pre-training, ELECTRA.

`load_hf_encoder(directory)` reads a directory written by HF transformers (``config.json`` plus
``model.safetensors``, a sharded ``model.safetensors.index.json``, or a legacy ``pytorch_model.bin`` read with
``torch.load(weights_only=True)`` only) into an attnlab model; `to_hf_encoder(model)` gives the HF config and
tensors that ``transformers.AutoModel*.from_pretrained`` loads unchanged. The families are data
(`attnlab.io.hf_tables`); one generic translator serves all of them.

Kinds of model (HF classes -> attnlab architecture):

- ``base``: BertModel, RobertaModel, AlbertModel, ElectraModel, DistilBertModel -> ``Encoder``;
- ``mlm``: *ForMaskedLM (for ELECTRA, the generator) -> ``EncoderForPreTraining``;
- ``pretraining``: BertForPreTraining (NSP), AlbertForPreTraining (SOP)
  -> ``EncoderForPreTraining`` with ``pair_head=True``;
- ``rtd``: ElectraForPreTraining (the discriminator) -> ``ReplacedTokenDetection``.

Fine-tuned task models are `attnlab.io.hf_tasks`'s; `attnlab.io.hf_encoders` picks between the two.
Reading decides the kind from the weights present (the ``architectures`` field of real checkpoints
often names less than the file holds: bert-base-uncased says BertForMaskedLM and carries the NSP head).
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.io.checkpoint import architecture_of, build_model, load_state_checked
from attnlab.io.format import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    check_directory,
    check_finite,
    dtype_name,
    read_json,
    read_safetensors,
    resolve_dtype,
    tied_aliases,
    written_by_attnlab,
)
from attnlab.io.hf_tables import (
    _IGNORED_HF_KEYS,
    FAMILIES,
    HF_ACTIVATIONS,
    KINDS,
    TO_HF_ACTIVATION,
    Family,
    KeyMap,
    key_map,
)
from attnlab.models import TASK_ARCHITECTURES
from attnlab.models.config import EncoderConfig
from attnlab.nn.embeddings import sinusoidal_table

LEGACY_WEIGHTS_NAME = "pytorch_model.bin"
SHARDED_INDEX_NAME = "model.safetensors.index.json"
# ---------------------------------------------------------------------------------------------------
# reading HF directories


def is_hf_directory(directory: str | os.PathLike) -> bool:
    """True when ``directory/config.json`` is a HF transformers config (has ``model_type``) and not an attnlab
    directory in HF's layout (`attnlab.io.hf_layout`: attnlab reads those with its own config)."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        return False
    try:
        raw = read_json(path)
    except (CheckpointError, OSError):
        return False
    return "model_type" in raw and not written_by_attnlab(raw)


def _family(model_type: Any, source: str) -> Family:
    if model_type in ("gpt2", "openai-gpt"):  # causal LMs: attnlab.io.hf_gpt2 reads them
        raise CheckpointError(
            f"{source}: holds a HF {model_type} causal language model, not an encoder; use "
            "`attnlab generate` or `attnlab perplexity` with it (attnlab.io.load)"
        )
    if model_type not in FAMILIES:
        raise CheckpointError(
            f"{source}: unsupported model_type {model_type!r}; attnlab reads: {', '.join(FAMILIES)}"
        )
    return FAMILIES[model_type]


def read_hf_weights(directory: str | os.PathLike) -> tuple[dict[str, Tensor], str]:
    """The raw HF state dict of ``directory`` and the file it came from.

    Order: ``model.safetensors``, a sharded ``model.safetensors.index.json``, then the legacy
    ``pytorch_model.bin`` read with ``torch.load(weights_only=True)`` (tensors only, no code).
    """
    directory = Path(directory)
    single = directory / WEIGHTS_NAME
    if single.is_file():
        tensors, _ = read_safetensors(single)
        return tensors, str(single)
    index = directory / SHARDED_INDEX_NAME
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: missing object field 'weight_map'")
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            part, _ = read_safetensors(directory / shard)
            tensors.update(part)
        return tensors, str(index)
    legacy = directory / LEGACY_WEIGHTS_NAME
    if legacy.is_file():
        try:
            state = torch.load(legacy, map_location="cpu", weights_only=True)
        except Exception as e:  # the unpickler raises many types; all mean "not a plain tensor file"
            raise CheckpointError(
                f"{legacy}: cannot be read with torch.load(weights_only=True) (corrupt, or it pickles "
                f"more than tensors, which attnlab refuses to load): {e}"
            ) from e
        if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
            raise CheckpointError(f"{legacy}: expected a dict of tensors (a state dict)")
        tensors = dict(state)
        check_finite(tensors, f"{directory} ({LEGACY_WEIGHTS_NAME})")  # as read_safetensors refuses them
        return tensors, str(legacy)
    raise FileNotFoundError(
        f"{directory}: no weights found "
        f"(looked for {WEIGHTS_NAME}, {SHARDED_INDEX_NAME}, {LEGACY_WEIGHTS_NAME})"
    )


def _hf_value(hf: Mapping[str, Any], family: Family, name: str, source: str) -> Any:
    if name in hf and hf[name] is not None:
        return hf[name]
    if name in family.defaults:
        return family.defaults[name]
    raise CheckpointError(f"{source}: missing field {name!r} (needed for a {family.model_type} model)")


def config_from_hf(hf: Mapping[str, Any], *, source: str = CONFIG_NAME, add_pooler: bool = True) -> Any:
    """An `EncoderConfig` from a HF ``config.json`` dict; unsupported settings raise naming the field."""
    family = _family(hf.get("model_type"), source)
    unsupported = []
    if hf.get("position_embedding_type", "absolute") != "absolute":
        unsupported.append(
            f"position_embedding_type={hf['position_embedding_type']!r} (attnlab has absolute positions only)"
        )
    for flag in ("is_decoder", "add_cross_attention"):
        if hf.get(flag):
            unsupported.append(f"{flag}=true (attnlab's encoders are bidirectional, without cross-attention)")
    if family.layer_groups and _hf_value(hf, family, "inner_group_num", source) != 1:
        unsupported.append(f"inner_group_num={hf['inner_group_num']} (attnlab supports 1 layer per group)")
    values: dict[str, Any] = {}
    for ours, theirs in family.config_fields.items():
        values[ours] = _hf_value(hf, family, theirs, source)
    act = values["activation"]
    if act not in HF_ACTIVATIONS:
        unsupported.append(
            f"{family.config_fields['activation']}={act!r} (valid: {', '.join(HF_ACTIVATIONS)})"
        )
    else:
        values["activation"] = HF_ACTIVATIONS[act]
    values.update(family.fixed)
    if family.embedding_size and values.get("embedding_size") == values["hidden_size"]:
        values["embedding_size"] = None  # E == H: no projection
    if family.position_offset_from_pad:
        values["position_offset"] = values["pad_token_id"] + 1
    if family.sinusoidal_field and _hf_value(hf, family, family.sinusoidal_field, source):
        values["position_embedding"] = "sinusoidal"
    if family.layer_groups:
        groups = _hf_value(hf, family, "num_hidden_groups", source)
        if groups == 1:
            values["sharing"] = "all" if values["num_layers"] > 1 else "none"
        elif groups == values["num_layers"]:
            values["sharing"] = "none"
        else:
            unsupported.append(
                f"num_hidden_groups={groups} with num_hidden_layers={values['num_layers']} "
                "(attnlab maps 1 group to sharing='all' and one group per layer to sharing='none')"
            )
    if unsupported:
        raise CheckpointError(
            f"{source}: unsupported {family.model_type} setting(s): " + "; ".join(unsupported)
        )
    values["add_pooler"] = add_pooler
    try:
        return EncoderConfig(**values)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: {e}") from e


def _normalise_hf_keys(state: Mapping[str, Any], family: Family) -> dict[str, Any]:
    """Drop saved buffers, rename TF-era ``gamma``/``beta``, fold the decoder's bias into the head's.

    Values are tensors, or None when only the key names are known (`describe_hf`).
    """
    out: dict[str, Any] = {}
    for key, value in state.items():
        if _IGNORED_HF_KEYS.search(key):
            continue
        key = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", key)) if "LayerNorm" in key else key
        out[key] = value
    for alias, target in family.hf_aliases.items():
        if alias in out:
            # HF's forward adds the decoder's bias; tied, it is the same tensor as ``target``. Untied
            # (tie_word_embeddings=false) it is the one in use and ``target`` is left unused.
            out[target] = out.pop(alias)
    return out


def _detect_kind(keys: set[str], family: Family) -> str:
    """The richest kind whose head keys are in the file."""

    def has(group: str) -> bool:
        if group not in family.heads:
            return False
        table = KeyMap(family.heads[group])
        return any(table.from_hf(k) is not None for k in keys)

    if has("rtd"):
        return "rtd"
    if has("mlm"):
        return "pretraining" if has("pair") and "pretraining" in family.classes else "mlm"
    return "base"


def _split_base(state: Mapping[str, Any], family: Family) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(base-model entries without the family prefix, all other entries)``.

    Base-model keys carry the family prefix ("bert.") in *For* classes and none in a saved BertModel.
    """
    prefixed = f"{family.prefix}."
    base_map = KeyMap(family.layout)
    base: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in state.items():
        stripped = key[len(prefixed) :] if key.startswith(prefixed) else key
        if base_map.from_hf(stripped) is not None:
            base[stripped] = value
        else:
            rest[key] = value
    return base, rest


def _plan(
    hf: Mapping[str, Any],
    family: Family,
    base_keys: set[str],
    head_keys: set[str],
    architecture: str | None,
    config_source: str,
    weights_source: str,
) -> tuple[str, Any]:
    """The kind of model to build and its `EncoderConfig`, from the HF config and the keys present."""
    kind = _detect_kind(head_keys, family)
    if architecture is not None:
        choices = {KINDS[k][0] for k in family.classes}
        if architecture not in choices:
            raise CheckpointError(
                f"{weights_source}: cannot load a {family.model_type} checkpoint as {architecture!r}; "
                f"valid: {', '.join(sorted(choices))}"
            )
        if architecture == "Encoder":
            kind = "base"
        elif KINDS[kind][0] != architecture:
            raise CheckpointError(
                f"{weights_source}: the weights hold a {family.classes.get(kind, kind)} "
                f"(attnlab {KINDS[kind][0]}), not {architecture}"
            )
    pooler = family.layout.get("pooler.dense")
    has_pooler = pooler is not None and any(k.startswith(pooler + ".") for k in base_keys)
    config = config_from_hf(hf, source=config_source, add_pooler=has_pooler)
    if kind in ("mlm", "pretraining"):
        _check_head_activation(config, family, config_source)
    return kind, config


def load_hf_encoder(
    directory: str | os.PathLike,
    architecture: str | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device = "cpu",
) -> nn.Module:
    """An attnlab encoder, with the pre-training heads its weights hold, from a HF transformers directory
    (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT); fine-tuned task heads are `attnlab.io.hf_tasks`'s.

    ``architecture`` None picks the richest attnlab model the weights hold (see the module docstring);
    ``"Encoder"`` loads the encoder alone and ignores any head. ``dtype`` None keeps the stored dtype.
    Returned in eval mode.
    """
    target = resolve_dtype(dtype)
    directory = check_directory(directory)
    config_path = directory / CONFIG_NAME
    hf = read_json(config_path)
    family = _family(hf.get("model_type"), str(config_path))
    raw, weights_source = read_hf_weights(directory)
    state = _normalise_hf_keys(raw, family)

    base, rest = _split_base(state, family)
    kind, config = _plan(hf, family, set(base), set(rest), architecture, str(config_path), weights_source)
    name, options, _ = KINDS[kind]
    if kind in ("mlm", "pretraining") and hf.get("tie_word_embeddings") is False:
        options = {**options, "tie_weights": False}  # a decoder of its own, as HF then has
    if architecture == "Encoder":
        rest = {}  # the heads of a checkpoint read as the encoder alone

    # Translate every key; anything left over is named in the error.
    table = key_map(family, kind)
    hf_full = {(f"{family.prefix}.{k}" if kind != "base" else k): v for k, v in base.items()}
    hf_full.update(rest)
    ours: dict[str, Tensor] = {}
    unknown = []
    for key, value in hf_full.items():
        mapped = table.from_hf(key)
        if mapped is None:
            unknown.append(key)
        else:
            ours[mapped] = value
    if unknown:
        raise CheckpointError(
            f"{weights_source}: keys that attnlab's {family.model_type} mapping does not know: "
            f"{', '.join(sorted(unknown)[:12])}{' ...' if len(unknown) > 12 else ''} "
            f"(HF architectures: {hf.get('architectures')}); "
            "pass architecture='Encoder' to load the encoder alone"
        )
    if config.position_embedding == "sinusoidal" and not _is_sinusoidal(ours, config, kind):
        # HF keeps DistilBERT's sinusoidal table as an ordinary (trainable) weight; once trained it is no
        # longer the formula, so it is loaded as what it now is: learned positions.
        warnings.warn(
            f"{weights_source}: sinusoidal_pos_embds=true but the stored position table is not the "
            "sin/cos formula (fine-tuned?); loading it as learned positions",
            stacklevel=2,
        )
        config = dataclasses.replace(config, position_embedding="learned")

    model = build_model(name, config, options, init=False)
    load_state_checked(
        model, ours, source=weights_source, architecture=f"{name} (from {family.model_type})", config=config
    )
    if target is None:
        floats = {t.dtype for t in ours.values() if t.is_floating_point()}
        target = floats.pop() if len(floats) == 1 else None
    if target is not None:
        model.to(dtype=target)
    return model.to(device).eval()


def _check_head_activation(config: Any, family: Family, source: str) -> None:
    if family.head_activation is not None and config.activation != family.head_activation:
        raise CheckpointError(
            f"{source}: {family.model_type}'s MLM head always applies {family.head_activation!r}, but the "
            f"encoder's activation is {config.activation!r}; attnlab's MLM head uses the encoder's activation"
        )


def _is_sinusoidal(ours: dict[str, Tensor], config: Any, kind: str) -> bool:
    """Whether the stored position table is attnlab's sin/cos table; if so it is dropped from ``ours``
    (attnlab recomputes it as a buffer)."""
    key = f"{'' if kind == 'base' else 'encoder.'}embeddings.position.weight"
    stored = ours.get(key)
    if stored is None:
        return True
    expected = sinusoidal_table(config.max_position_embeddings, config.embedding_dim)
    if stored.shape != expected.shape or not torch.allclose(stored.float(), expected, atol=1e-5):
        return False
    del ours[key]
    return True


# ---------------------------------------------------------------------------------------------------
# writing HF directories


def _kind_of(model: nn.Module) -> str:
    name, options = architecture_of(model)
    if name == "Encoder":
        return "base"
    if name == "ReplacedTokenDetection":
        return "rtd"
    if name == "EncoderForPreTraining":
        return "pretraining" if options.get("pair_head") else "mlm"
    raise CheckpointError(
        f"save_hf exports Encoder, EncoderForPreTraining, ReplacedTokenDetection and the task models "
        f"({', '.join(_task_architectures())}), not {name}; export its encoder (model.encoder) instead"
    )


def _task_architectures() -> tuple[str, ...]:
    return tuple(TASK_ARCHITECTURES)


def infer_family(config: Any, kind: str) -> str:
    """The HF family an attnlab model exports to when none is named.

    ELECTRA for the discriminator, RoBERTa-PreLayerNorm for pre-LN, ALBERT for cross-layer sharing,
    DistilBERT without segment embeddings where it holds the model (post-LN, LayerNorm eps 1e-12, E = H),
    RoBERTa with an offset; when E != H, ELECTRA for a gelu MLM model (the generator) and ALBERT otherwise;
    else BERT (a student DistilBERT does not hold with one zero type row: `adds_type_row`). Pass ``family``
    to `save_hf` to choose another compatible one."""
    if kind == "rtd":
        return "electra"
    if config.norm_first:
        return "roberta-prelayernorm"
    if config.sharing != "none":
        return "albert"
    if config.type_vocab_size == 0 and not export_problems(config, FAMILIES["distilbert"], kind):
        return "distilbert"
    if config.position_offset > 0:
        return "roberta"
    if config.embedding_dim != config.hidden_size:
        # ELECTRA's generator head hard-codes gelu and ELECTRA has no SOP head: anything else is ALBERT.
        return "electra" if kind != "pretraining" and config.activation == "gelu" else "albert"
    return "bert"


def adds_type_row(config: Any, family: Family) -> bool:
    """Whether a model without segment embeddings (a distilled student) gets one all-zero type row, which
    ``family``'s HF class always adds to every token: then it changes nothing, the outputs stay attnlab's."""
    return config.type_vocab_size == 0 and "type_vocab_size" not in family.fixed


def position_shift(config: Any, family: Family) -> int:
    """Rows HF's position table holds in front of attnlab's (`Family.shift_positions`): pad_token_id + 1
    for a model whose positions start at 0, else 0."""
    if family.shift_positions and config.position_offset == 0:
        return config.pad_token_id + 1
    return 0


def export_problems(config: Any, family: Family, kind: str) -> list[str]:
    """Every reason ``config`` cannot be written as ``family``'s ``kind`` (empty when it can)."""
    problems = []
    if kind not in family.classes:
        problems.append(
            f"{family.model_type} has no HF class for attnlab {KINDS[kind][0]}"
            f"{' with a pair head' if kind == 'pretraining' else ''} "
            f"(it has: {', '.join(f'{family.classes[k]} = {KINDS[k][0]}' for k in family.classes)})"
        )
    if config.norm_first and not family.fixed.get("norm_first"):
        problems.append(
            f"norm_first=True ({family.model_type} is post-LN; pre-LN exports as roberta-prelayernorm)"
        )
    if getattr(config, "attention", "full") != "full":
        problems.append(f"attention={config.attention!r} ({family.model_type} attends to every key)")
    if config.sharing != "none" and not (family.layer_groups and config.sharing == "all"):
        problems.append(
            f"sharing={config.sharing!r} has no HF counterpart"
            + (" (ALBERT in HF shares all or nothing)" if family.layer_groups else f" in {family.model_type}")
        )
    if config.position_embedding == "sinusoidal" and family.sinusoidal_field is None:
        problems.append(f"position_embedding='sinusoidal' ({family.model_type} has learned positions)")
    expected_offset = config.pad_token_id + 1 if family.position_offset_from_pad else 0
    if config.position_offset != expected_offset and not position_shift(config, family):
        problems.append(
            f"position_offset={config.position_offset} ({family.model_type} needs {expected_offset}"
            + (" = pad_token_id + 1)" if family.position_offset_from_pad else ")")
        )
    if config.embedding_dim != config.hidden_size and not family.embedding_size:
        problems.append(
            f"embedding_size={config.embedding_size} != hidden_size ({family.model_type} has E = H)"
        )
    for name, value in family.fixed.items():
        if getattr(config, name) != value:
            problems.append(f"{name}={getattr(config, name)!r} ({family.model_type} fixes it to {value!r})")
    if config.add_pooler and family.pooler.get(kind, False) and config.pooler_activation != "tanh":
        problems.append(
            f"pooler_activation={config.pooler_activation!r} (HF {family.model_type}'s pooler is tanh)"
        )
    if (
        kind in ("mlm", "pretraining")
        and family.head_activation
        and config.activation != family.head_activation
    ):
        problems.append(
            f"activation={config.activation!r}: {family.model_type}'s MLM head "
            f"hard-codes {family.head_activation!r}"
        )
    return problems


def config_to_hf(
    config: Any, family_name: str, kind: str, dtype: torch.dtype, tied: bool = True
) -> dict[str, Any]:
    """The HF ``config.json`` dict for ``config`` as ``family_name``'s ``kind`` class."""
    family = FAMILIES[family_name]
    hf: dict[str, Any] = {"model_type": family.model_type, "architectures": [family.classes[kind]]}
    for ours, theirs in family.config_fields.items():
        value = getattr(config, ours)
        if ours == "activation":
            value = TO_HF_ACTIVATION[value]
        elif ours == "embedding_size":
            value = config.embedding_dim
        hf[theirs] = value
    if family.layer_groups:
        hf["num_hidden_groups"] = 1 if config.sharing == "all" else config.num_layers
        hf["inner_group_num"] = 1
    if family.sinusoidal_field:
        hf[family.sinusoidal_field] = config.position_embedding == "sinusoidal"
    if adds_type_row(config, family):  # the zero row export_tensors writes
        hf["type_vocab_size"] = 1
    hf["max_position_embeddings"] = config.max_position_embeddings + position_shift(config, family)
    hf["tie_word_embeddings"] = tied
    hf["dtype"] = dtype_name(dtype)
    return hf


def to_hf_encoder(
    model: nn.Module, family: str | None = None, dtype: str | torch.dtype | None = None
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(HF config.json dict, HF state dict)`` for an encoder with its pre-training heads, in memory.

    ``family`` ("bert", "roberta", "albert", "electra", "distilbert") defaults to `infer_family`.
    Models HF cannot represent (pre-LN outside RoBERTa-PreLayerNorm, ALBERT's attention-only or FFN-only
    sharing, ...) raise a `CheckpointError` listing every reason. A pooler the HF class does not hold is left
    out with a warning. Tied weights appear once (HF re-ties the decoder on load).
    """
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(f"{type(model).__name__} has no `config`; not an attnlab model")
    target = resolve_dtype(dtype)
    kind = _kind_of(model)
    untied = kind in ("mlm", "pretraining") and architecture_of(model)[1].get("tie_weights") is False
    family_name = family or infer_family(config, kind)
    if family_name not in FAMILIES:
        raise ValueError(f"unknown HF family {family_name!r}; valid: {', '.join(FAMILIES)}")
    fam = FAMILIES[family_name]
    problems = export_problems(config, fam, kind)
    if problems:
        raise CheckpointError(
            f"cannot export this attnlab {KINDS[kind][0]} as HF {family_name}:\n  " + "\n  ".join(problems)
        )

    state = model.state_dict()
    prefix = "" if kind == "base" else "encoder."
    hf_pooler = fam.pooler.get(kind, False)
    if config.add_pooler and not hf_pooler:
        warnings.warn(
            f"HF {fam.classes[kind]} has no pooler: the attnlab pooler is not exported", stacklevel=3
        )
        state = {k: v for k, v in state.items() if not k.startswith(f"{prefix}pooler.")}
    elif hf_pooler and not config.add_pooler:
        warnings.warn(
            f"HF {fam.classes[kind]} holds a pooler but this model has none: HF will initialise it randomly",
            stacklevel=3,
        )
    tensors = export_tensors(model, state, key_map(fam, kind), prefix, family_name, target)
    if untied:
        # Untied, HF's decoder keeps a bias of its own too, and that is the one its forward adds.
        for alias, source in fam.hf_aliases.items():
            if source in tensors:
                tensors[alias] = tensors[source].clone()
    floats = {t.dtype for t in tensors.values() if t.is_floating_point()}
    stored = target or (floats.pop() if len(floats) == 1 else torch.float32)
    return config_to_hf(config, family_name, kind, stored, tied=not untied), tensors


def export_tensors(
    model: nn.Module,
    state: Mapping[str, Tensor],
    table: KeyMap,
    prefix: str,
    family_name: str,
    target: torch.dtype | None,
) -> dict[str, Tensor]:
    """``state`` (of ``model``) under HF names by ``table``; tied aliases appear once (HF re-ties them on
    load); a sinusoidal position table is written out (DistilBERT keeps it in the weights). ``prefix`` is
    the encoder's path in ``model`` ("" or "encoder.")."""
    config = model.config
    aliases = tied_aliases(model)
    tensors: dict[str, Tensor] = {}
    unmapped = []
    for key, value in state.items():
        if key in aliases:
            continue
        mapped = table.to_hf(key)
        if mapped is None:
            unmapped.append(key)
            continue
        tensors[mapped] = value.to(target) if target is not None and value.is_floating_point() else value
    if unmapped:
        raise CheckpointError(f"no HF {family_name} name for: {', '.join(sorted(unmapped))}")
    if adds_type_row(config, FAMILIES[family_name]):  # (1, E) zeros: every token's type 0 adds nothing
        word = tensors[table.to_hf(f"{prefix}embeddings.word.weight")]
        tensors[table.to_hf(f"{prefix}embeddings.token_type.weight")] = word.new_zeros(1, word.shape[1])
    shift = position_shift(config, FAMILIES[family_name])
    if shift:  # HF counts positions from pad_token_id + 1: the same embedding per position, rows moved
        key = table.to_hf(f"{prefix}embeddings.position.weight")
        positions = tensors[key]
        tensors[key] = torch.cat([positions.new_zeros(shift, positions.shape[1]), positions])
    if config.position_embedding == "sinusoidal":
        table_values = sinusoidal_table(config.max_position_embeddings, config.embedding_dim)
        key = table.to_hf(f"{prefix}embeddings.position.weight")
        if key is None:
            raise CheckpointError(f"no HF {family_name} name for the position table")
        tensors[key] = table_values.to(target or torch.float32)
    return tensors
