"""Encoder checkpoints: the architecture registry's side of a model directory.

`architecture_of` names a model's class in `attnlab.models.ARCHITECTURES` with the ``from_config`` options
that rebuild it; `build_model` rebuilds it (on the meta device, or without random initialisation for a model
loaded next); `load_state_checked` copies weights in with errors that name the file, the key, both shapes and
the config field that disagrees; `read_checkpoint_config` reads an attnlab encoder's ``config.json``. The
files themselves are `attnlab.io.format`'s; the encoder family (`attnlab.io.families.bert`) saves and loads
with these.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from attnlab.io.format import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    check_directory,
    read_json,
    tied_aliases,
    written_by_attnlab,
)
from attnlab.manifest import verify_directory
from attnlab.models import ARCHITECTURES
from attnlab.models.config import EncoderConfig
from attnlab.models.gpt import GPTConfig

CAUSAL_LM_ARCHITECTURE = "GPT"  # attnlab.io.families.gpt2's directories (config.json "architecture")

# ---------------------------------------------------------------------------------------------------
# architectures


def architecture_of(model: nn.Module) -> tuple[str, dict[str, Any]]:
    """The model's name in ``ARCHITECTURES`` and the ``from_config`` options that rebuild it.

    Options come from ``model.options`` when the class keeps them; otherwise each keyword option of
    ``from_config`` is read back from the attribute of the same name (a sub-module counts as True,
    None as False). ``save_pretrained`` checks the result by rebuilding the model on the meta device.
    """
    archs = ARCHITECTURES
    # the model's class, else the nearest registered base: a class that only re-routes the computation
    # (attnlab.accel's FusedEncoder) saves as the architecture it computes
    registered = next((c for c in type(model).__mro__ if c in archs.values()), None)
    names = [name for name, cls in archs.items() if cls is registered]
    if not names:
        raise TypeError(
            f"{type(model).__name__} is not a registered architecture; "
            f"attnlab.models.ARCHITECTURES holds: {', '.join(sorted(archs))}"
        )
    name = names[0]
    explicit = getattr(model, "options", None)
    if isinstance(explicit, Mapping):
        return name, dict(explicit)
    options: dict[str, Any] = {}
    params = inspect.signature(archs[name].from_config).parameters
    for pname, p in params.items():
        if pname in ("config", "cls", "self") or p.kind not in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue
        value = getattr(model, pname, inspect.Parameter.empty)
        if value is inspect.Parameter.empty:
            continue
        if isinstance(value, (bool, int, float, str)):
            options[pname] = value
        elif value is None:
            options[pname] = False
        elif isinstance(value, nn.Module):
            options[pname] = True
    if "tie_weights" in params and hasattr(model, "mlm_head") and hasattr(model, "encoder"):
        # EncoderForPreTraining(tie_weights=...) leaves no attribute; the tie itself says it.
        options["tie_weights"] = model.mlm_head.decoder.weight is model.encoder.embeddings.word.weight
    return name, options


class SkipRandomInit(TorchFunctionMode):
    """Skip random initialisation while a model that is about to be loaded is built.

    Every parameter is then overwritten by a strict ``load_state_dict``, so drawing random values first
    is wasted time (2.5 s of a 3.5 s bert-base load). Deterministic set-up (zeros, ones, the sinusoidal
    table of non-persistent buffers) still runs; only the random fills are skipped.
    """

    SKIP = frozenset(
        {
            nn.init.normal_,
            nn.init.uniform_,
            nn.init.trunc_normal_,
            nn.init.kaiming_uniform_,
            nn.init.kaiming_normal_,
            nn.init.xavier_uniform_,
            nn.init.xavier_normal_,
            Tensor.normal_,
            Tensor.uniform_,
        }
    )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.SKIP:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def build_model(
    architecture: str, config: Any, options: Mapping[str, Any], *, meta: bool = False, init: bool = True
) -> nn.Module:
    """``ARCHITECTURES[architecture].from_config(config, **options)``.

    ``meta=True`` builds on the meta device (shapes only); ``init=False`` leaves parameters
    uninitialised, for a caller that loads every one of them next.
    """
    archs = ARCHITECTURES
    if architecture not in archs:
        raise CheckpointError(f"unknown architecture {architecture!r}; valid: {', '.join(sorted(archs))}")
    cls = archs[architecture]
    if meta:
        with torch.device("meta"):
            return cls.from_config(config, **options)
    if not init:
        with SkipRandomInit():
            return cls.from_config(config, **options)
    return cls.from_config(config, **options)


# ---------------------------------------------------------------------------------------------------
# mismatch explanations

# Which EncoderConfig field sets each dimension of a parameter, by the end of its state-dict name.
# "E" stands for embedding_size (hidden_size when None).
_SHAPE_FIELDS: list[tuple[str, tuple[str | None, ...]]] = [
    (r"embeddings\.word\.weight$", ("vocab_size", "E")),
    (r"embeddings\.position\.weight$", ("max_position_embeddings", "E")),
    (r"embeddings\.token_type\.weight$", ("type_vocab_size", "E")),
    (r"embeddings\.norm\.(weight|bias)$", ("E",)),
    (r"embeddings\.project\.weight$", ("hidden_size", "E")),
    (r"embeddings\.project\.bias$", ("hidden_size",)),
    (r"attention\.\d+\.layer\.(query|key|value|output)\.weight$", ("hidden_size", "hidden_size")),
    (r"attention\.\d+\.layer\.(query|key|value|output)\.bias$", ("hidden_size",)),
    (r"feed_forward\.\d+\.layer\.up\.weight$", ("intermediate_size", "hidden_size")),
    (r"feed_forward\.\d+\.layer\.up\.bias$", ("intermediate_size",)),
    (r"feed_forward\.\d+\.layer\.down\.weight$", ("hidden_size", "intermediate_size")),
    (r"mlm_head\.dense\.weight$", ("E", "hidden_size")),
    (r"mlm_head\.dense\.bias$", ("E",)),
    (r"mlm_head\.norm\.(weight|bias)$", ("E",)),
    (r"mlm_head\.decoder\.weight$", ("vocab_size", "E")),
    (r"mlm_head\.bias$", ("vocab_size",)),
    (r"\.norm\.(weight|bias)$", ("hidden_size",)),
    (r"final_norm\.(weight|bias)$", ("hidden_size",)),
    (r"pooler\.dense\.weight$", ("hidden_size", "hidden_size")),
    (r"(pair_head|rtd_head)\.\w+\.weight$", (None, "hidden_size")),
    (r"\.(weight|bias)$", ("hidden_size",)),
]


def _field_value(config: Any, field: str) -> int | None:
    if field == "E":
        return getattr(config, "embedding_size", None) or getattr(config, "hidden_size", None)
    return getattr(config, field, None)


def explain_shape(key: str, expected: tuple[int, ...], found: tuple[int, ...], config: Any) -> str:
    """One line naming ``key``, both shapes and the config field(s) whose value disagrees."""
    fields: tuple[str | None, ...] = ()
    for pattern, dims in _SHAPE_FIELDS:
        if re.search(pattern, key) and len(dims) == len(expected):
            fields = dims
            break
    blame = []
    if len(expected) != len(found):
        blame.append(f"rank {len(found)} instead of {len(expected)}")
    else:
        for dim, (e, f) in enumerate(zip(expected, found)):
            if e == f:
                continue
            field = fields[dim] if dim < len(fields) else None
            if field is None or _field_value(config, field) is None:  # not a field of this config
                # fall back to the fields whose value is the expected size
                names = ["vocab_size", "hidden_size", "intermediate_size", "max_position_embeddings"]
                names += ["type_vocab_size", "embedding_size"]
                names += ["d_model", "d_ff", "max_positions"]  # a translation model's (Seq2SeqConfig)
                candidates = [n for n in names if _field_value(config, n) == e]
                field = " or ".join(candidates) if candidates else None
            label = "embedding_size (or hidden_size when embedding_size is None)" if field == "E" else field
            blame.append(
                f"dim {dim}: config {label} = {e}, checkpoint has {f}"
                if label
                else f"dim {dim}: expected {e}, checkpoint has {f}"
            )
    return (
        f"{key}: checkpoint shape {tuple(found)} but the config builds {tuple(expected)} ({'; '.join(blame)})"
    )


def _layer_hint(keys: Iterable[str], config: Any) -> str:
    indices = {int(m.group(1)) for k in keys if (m := re.search(r"(?:attention|feed_forward)\.(\d+)\.", k))}
    if not indices:
        return ""
    return (
        f" (sub-layer indices {sorted(indices)}: compare num_layers = {getattr(config, 'num_layers', '?')} "
        f"and sharing = {getattr(config, 'sharing', '?')!r})"
    )


def short_list(keys: Iterable[str], limit: int = 12) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


SHAPES_SHOWN = 8  # shape mismatches spelled out in a load error; the rest are counted


def load_state_checked(
    model: nn.Module, tensors: Mapping[str, Tensor], *, source: str, architecture: str, config: Any
) -> None:
    """Copy ``tensors`` into ``model`` after checking names and shapes; errors explain every mismatch.

    Tied aliases of the model (``tied_aliases``) may be absent from ``tensors``: they are filled from their
    source. Values are copied in place, so ties and sharing survive.
    """
    expected = model.state_dict()
    aliases = tied_aliases(model)
    tensors = dict(tensors)
    for alias, src in aliases.items():
        if alias not in tensors and src in tensors:
            tensors[alias] = tensors[src]
        elif (
            alias in tensors
            and src in tensors
            and tensors[alias].shape == tensors[src].shape
            and not torch.equal(tensors[alias], tensors[src])
        ):
            raise CheckpointError(
                f"{source}: {alias} is tied to {src} in {architecture}, "
                "but the checkpoint holds different values"
            )
    missing = set(expected) - set(tensors)
    unexpected = set(tensors) - set(expected)
    problems = []
    if missing:
        problems.append(
            f"missing keys that {architecture} expects: {short_list(missing)}{_layer_hint(missing, config)}"
        )
    if unexpected:
        problems.append(
            f"unexpected keys that {architecture} does not have: {short_list(unexpected)}"
            f"{_layer_hint(unexpected, config)}"
        )
    differ = [k for k in sorted(set(expected) & set(tensors)) if expected[k].shape != tensors[k].shape]
    for key in differ[:SHAPES_SHOWN]:
        problems.append(explain_shape(key, tuple(expected[key].shape), tuple(tensors[key].shape), config))
    if len(differ) > SHAPES_SHOWN:
        problems.append(f"... and {len(differ) - SHAPES_SHOWN} more keys of other shapes")
    if problems:
        raise CheckpointError(f"{source}: the weights do not fit {architecture}:\n  " + "\n  ".join(problems))
    for key, value in tensors.items():
        if not (value.is_floating_point() or value.dtype == expected[key].dtype):
            raise CheckpointError(f"{source}: {key} has dtype {value.dtype}, expected {expected[key].dtype}")
    with torch.no_grad():
        model.load_state_dict(tensors, strict=True)


def read_checkpoint_config(
    directory: str | os.PathLike, *, allow_causal_lm: bool = False
) -> tuple[str, dict[str, Any], Any, dict[str, Any]]:
    """``(architecture, options, config, raw config.json)`` of an attnlab checkpoint directory; the config
    class follows the architecture: `GPTConfig` for a causal LM (only with ``allow_causal_lm``: every other
    caller reads encoders, and a GPT directory given to them is an error naming the commands that fit it),
    `EncoderConfig` otherwise."""
    directory = check_directory(directory)
    path = directory / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing; an attnlab checkpoint holds config.json and {WEIGHTS_NAME}"
        )
    verify_directory(directory, [CONFIG_NAME])
    raw = read_json(path)
    if not written_by_attnlab(raw):
        if "model_type" in raw:
            raise CheckpointError(
                f"{path}: this is a HF transformers checkpoint (model_type={raw['model_type']!r}); "
                "load it with attnlab.io.load or convert it with `attnlab convert`"
            )
        raise CheckpointError(f'{path}: not an attnlab checkpoint (no "format": "attnlab" field)')
    for field in ("architecture", "config"):
        if field not in raw:
            raise CheckpointError(f"{path}: missing field {field!r}")
    options = raw.get("options", {})
    if not isinstance(options, dict):
        raise CheckpointError(f"{path}: field 'options' must be an object, found {type(options).__name__}")
    if not isinstance(raw["config"], dict):
        raise CheckpointError(
            f"{path}: field 'config' must be an object, found {type(raw['config']).__name__}"
        )
    if raw["architecture"] == "Seq2Seq":  # attnlab.translation.hf_layout's directories
        raise CheckpointError(
            f"{path}: holds a translation encoder-decoder, not an encoder; use `attnlab translate` with it"
        )
    causal = raw["architecture"] == CAUSAL_LM_ARCHITECTURE
    if causal and not allow_causal_lm:
        raise CheckpointError(
            f"{path}: holds a causal language model (GPT), not an encoder; use `attnlab generate` or "
            "`attnlab perplexity` with it"
        )
    try:
        config = GPTConfig.from_dict(raw["config"]) if causal else EncoderConfig.from_dict(raw["config"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: field 'config': {e}") from e
    return raw["architecture"], options, config, raw
