"""attnlab checkpoints in the field's directory layout: ``config.json`` + ``model.safetensors``.

``save_pretrained(model, directory)`` writes

- ``config.json``: ``{"format": "attnlab", "architecture": <name in attnlab.models.ARCHITECTURES>,
  "options": <keyword options of its from_config>, "config": <EncoderConfig.to_dict()>, "dtype": ...,
  "tied": {alias: source}}``;
- ``model.safetensors``: every tensor of the state dict once. Tied weights (the MLM decoder and the word
  embeddings, one tensor under two names) are stored under their first name only; the loader re-ties them
  because the rebuilt model ties them by construction.

Both files are written atomically (temporary file in the same directory, fsync, ``os.replace``), so a
crash leaves either the old file or the new one, never half of one. ``manifest.json`` (`attnlab.manifest`)
follows them with their SHA-256 and sizes; a writer that adds files (tokenizer files) seals the directory
again with `attnlab.manifest.write_manifest`.

Reading verifies: when a directory has a manifest, ``config.json`` and every safetensors file read through
`read_safetensors` must match it (a flipped bit, a zeroed block, a truncated copy is an error naming the
file), and every floating-point tensor must be finite (an error naming the directory and the tensor).
Directories without a manifest (HF transformers downloads) load as they are, still checked for finiteness.

``load_pretrained(directory)`` rebuilds the model from ``config.json`` and loads the weights, with errors
that name the file, the key, both shapes and the config field that disagrees. Loading never unpickles:
a pickle (``torch.save``) file where safetensors was expected is reported as such.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from attnlab.atomic import atomic_path, write_json_atomic
from attnlab.manifest import IntegrityError, verify_directory, verify_file, write_manifest

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FORMAT_NAME = "attnlab"
FORMAT_VERSION = 1

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


class CheckpointError(ValueError):
    """A checkpoint directory or file whose content is not what the loader expected."""


# ---------------------------------------------------------------------------------------------------
# small helpers shared with attnlab.io.hf


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``"float32" | "bfloat16" | "float16" | torch.dtype | None`` -> a torch dtype (None stays None)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        if dtype is not None and dtype not in DTYPES.values():
            raise ValueError(f"unsupported dtype {dtype}; valid: {', '.join(DTYPES)}")
        return dtype
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def write_safetensors_atomic(
    tensors: Mapping[str, Tensor], path: str | os.PathLike, metadata: Mapping[str, str] | None = None
) -> None:
    """Write ``tensors`` (distinct storages, any device) to ``path`` as safetensors, atomically."""
    with atomic_path(path) as tmp:
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp, metadata=dict(metadata or {})
        )


def _looks_like_pickle(path: Path) -> str | None:
    """Name the pickle flavour if ``path`` starts like a ``torch.save`` file, else None."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive as written by torch.save"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "a pickle (legacy torch.save format)"
    return None


def check_finite(tensors: Mapping[str, Tensor], source: str | os.PathLike) -> None:
    """Refuse weights holding NaN or Inf: an error naming ``source`` (the model directory) and the tensor."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{source}: tensor {name!r} holds {bad} non-finite value(s) (NaN or Inf) of "
                f"{tensor.numel()}; the weights are damaged or come from a diverged run, refusing to use them"
            )


def read_safetensors(
    path: str | os.PathLike, finite: bool = True
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """All tensors of a safetensors file and its metadata, with errors that name the file.

    A missing file raises FileNotFoundError; a corrupt or truncated one, a pickle in its place, or
    (``finite``) a tensor holding NaN / Inf raises CheckpointError; a file that differs from its
    directory's manifest raises `attnlab.manifest.IntegrityError`. Pickles are never loaded here.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such weights file")
    try:
        verify_file(path)  # against the directory's manifest.json, when it lists the file
    except IntegrityError as e:
        kind = _looks_like_pickle(path)
        if kind is None:
            raise
        raise CheckpointError(
            f"{path}: expected a safetensors file but found {kind}; attnlab never unpickles weights (and "
            "this is not the file its manifest.json lists)"
        ) from e
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            metadata = dict(f.metadata() or {})
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except (SafetensorError, OSError, RuntimeError) as e:
        kind = _looks_like_pickle(path)
        if kind is not None:
            raise CheckpointError(
                f"{path}: expected a safetensors file but found {kind}; attnlab never unpickles weights. "
                "If the file comes from a source you trust, convert it first, e.g. "
                "safetensors.torch.save_file(torch.load(path, weights_only=True), 'model.safetensors')"
            ) from e
        size = path.stat().st_size
        raise CheckpointError(
            f"{path}: not a valid safetensors file ({size} bytes; corrupt or truncated?): {e}"
        ) from e
    if finite:
        check_finite(tensors, f"{path.parent} ({path.name})")
    return tensors, metadata


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON object from ``path``, with the file, line and column on a syntax error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from e
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a JSON object, found {type(obj).__name__}")
    return obj


def check_directory(directory: str | os.PathLike) -> Path:
    directory = Path(directory)
    if not directory.exists():
        raise FileNotFoundError(f"{directory}: no such checkpoint directory")
    if not directory.is_dir():
        raise NotADirectoryError(
            f"{directory}: a checkpoint is a directory (config.json + model.safetensors)"
        )
    return directory


def tied_aliases(model_or_state: nn.Module | Mapping[str, Tensor]) -> dict[str, str]:
    """``{alias: source}`` for state-dict entries that are the same tensor as an earlier entry.

    For a module, two names are tied when they hold the same Parameter object (``head.decoder.weight``
    and ``encoder.embeddings.word.weight`` after ``decoder.weight = word.weight``); this works on the
    meta device too. For a mapping of tensors, when they share storage, offset, shape and strides.
    """
    if isinstance(model_or_state, nn.Module):
        state = model_or_state.state_dict(keep_vars=True)
        keys = {name: (id(t),) for name, t in state.items()}
    else:
        keys = {
            name: (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())
            for name, t in model_or_state.items()
        }
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, key in keys.items():
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
    return aliases


# ---------------------------------------------------------------------------------------------------
# architectures


def _architectures() -> dict[str, type]:
    from attnlab.models import ARCHITECTURES

    return ARCHITECTURES


def architecture_of(model: nn.Module) -> tuple[str, dict[str, Any]]:
    """The model's name in ``ARCHITECTURES`` and the ``from_config`` options that rebuild it.

    Options come from ``model.options`` when the class keeps them; otherwise each keyword option of
    ``from_config`` is read back from the attribute of the same name (a sub-module counts as True,
    None as False). ``save_pretrained`` checks the result by rebuilding the model on the meta device.
    """
    import inspect

    archs = _architectures()
    # the model's class, else the nearest registered base: a class that only re-routes the computation
    # (attnlab.accel's FusedEncoder) saves as the architecture it computes (save_pretrained rebuilds it)
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


class _SkipRandomInit(TorchFunctionMode):
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
    archs = _architectures()
    if architecture not in archs:
        raise CheckpointError(f"unknown architecture {architecture!r}; valid: {', '.join(sorted(archs))}")
    cls = archs[architecture]
    if meta:
        with torch.device("meta"):
            return cls.from_config(config, **options)
    if not init:
        with _SkipRandomInit():
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


def _short_list(keys: Iterable[str], limit: int = 12) -> str:
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
            f"missing keys that {architecture} expects: {_short_list(missing)}{_layer_hint(missing, config)}"
        )
    if unexpected:
        problems.append(
            f"unexpected keys that {architecture} does not have: {_short_list(unexpected)}"
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


# ---------------------------------------------------------------------------------------------------
# the public API


def save_pretrained(
    model: nn.Module,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
    hf_layout: bool = True,
) -> Path:
    """Write ``model`` to ``directory`` (created if needed) as ``config.json`` + ``model.safetensors``,
    then ``manifest.json`` listing those two (with ``run_id``, the run that produced the model).

    ``dtype`` (float32 / bfloat16 / float16) casts floating-point tensors on the way out; None keeps
    the model's dtype. With ``hf_layout`` (the default) a model that has an exact HF form is written in
    HF's layout too (HF config fields and tensor names, `attnlab.io.hf_layout`), so HF transformers loads
    the directory as it is. Returns the directory.
    """
    target = resolve_dtype(dtype)
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(f"{type(model).__name__} has no EncoderConfig `config` attribute; cannot save it")
    architecture, options = architecture_of(model)

    state = model.state_dict()
    aliases = tied_aliases(model)
    # Check the architecture and options rebuild the same parameters and ties (cheap: on the meta device).
    rebuilt_model = build_model(architecture, config, options, meta=True)
    rebuilt = rebuilt_model.state_dict()
    if set(rebuilt) != set(state) or any(tuple(rebuilt[k].shape) != tuple(state[k].shape) for k in state):
        diff = _short_list(set(rebuilt) ^ set(state))
        raise CheckpointError(
            f"{architecture}.from_config(config, **{options}) does not rebuild this model "
            f"(differing keys: {diff or 'shapes differ'}); was the model changed after construction?"
        )
    if tied_aliases(rebuilt_model) != aliases:
        raise CheckpointError(
            f"{architecture}.from_config(config, **{options}) ties {tied_aliases(rebuilt_model)} "
            f"but this model ties {aliases}; was the model changed after construction?"
        )

    tensors: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if name in aliases:
            continue
        if target is not None and tensor.is_floating_point():
            tensor = tensor.to(target)
        tensors[name] = tensor
    floats = {t.dtype for t in tensors.values() if t.is_floating_point()}
    stored = (
        dtype_name(target)
        if target is not None
        else (dtype_name(floats.pop()) if len(floats) == 1 else "mixed")
    )
    from attnlab import __version__

    fields: dict[str, Any] = {}  # HF's config fields, when the directory takes HF's layout
    if hf_layout:
        from attnlab.io.hf_layout import HF_FAMILY_FIELD, hf_form

        form = hf_form(model, target)
        if not isinstance(form, str):
            fields, tensors, family = form
            fields[HF_FAMILY_FIELD] = family

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors_atomic(
        tensors, directory / WEIGHTS_NAME, metadata={"format": "pt", "producer": FORMAT_NAME}
    )
    write_json_atomic(
        {
            **fields,
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "attnlab_version": __version__,
            "architecture": architecture,
            "options": options,
            "dtype": stored,
            "tied": aliases,
            "config": config.to_dict(),
        },
        directory / CONFIG_NAME,
    )
    write_manifest(directory, [WEIGHTS_NAME, CONFIG_NAME], run_id=run_id)
    return directory


def write_model_files(
    directory: str | os.PathLike,
    tensors: Mapping[str, Tensor],
    architecture: str,
    config: Mapping[str, Any],
    aliases: Mapping[str, str],
    hf_fields: Mapping[str, Any] | None = None,
) -> Path:
    """``model.safetensors`` (``tensors``, tied aliases already left out) and ``config.json`` (attnlab's
    format fields, ``architecture``, ``tied`` = ``aliases``, ``config``; after ``hf_fields`` when the
    directory takes HF's layout) into ``directory``, each atomically; the caller writes the manifest. For
    the decoder directories (`attnlab.io.causal_lm`, `attnlab.io.transfo_xl`); encoders: `save_pretrained`."""
    from attnlab import __version__

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors_atomic(dict(tensors), directory / WEIGHTS_NAME, metadata={"format": "pt"})
    write_json_atomic(
        {
            **(hf_fields or {}),
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "attnlab_version": __version__,
            "architecture": architecture,
            "tied": dict(aliases),
            "config": dict(config),
        },
        directory / CONFIG_NAME,
    )
    return directory


CAUSAL_LM_ARCHITECTURE = "GPT"  # attnlab.io.causal_lm's directories (config.json "architecture")


def written_by_attnlab(raw: Mapping[str, Any]) -> bool:
    """Whether a ``config.json`` dict is attnlab's own: ``"format": "attnlab"`` and not re-written by HF
    transformers. A directory in HF's layout (`attnlab.io.hf_layout`) that HF loaded and saved again keeps
    attnlab's fields (HF keeps unknown config fields) but may have other weights or another head: HF's
    ``save_pretrained`` adds ``transformers_version``, which attnlab never writes, and such a directory is
    read as the HF checkpoint it now is."""
    return raw.get("format") == FORMAT_NAME and "transformers_version" not in raw


def read_checkpoint_config(
    directory: str | os.PathLike, *, allow_causal_lm: bool = False
) -> tuple[str, dict[str, Any], Any, dict[str, Any]]:
    """``(architecture, options, config, raw config.json)`` of an attnlab checkpoint directory; the config
    class follows the architecture: `GPTConfig` for a causal LM (only with ``allow_causal_lm``: every other
    caller reads encoders, and a GPT directory given to them is an error naming the commands that fit it),
    `EncoderConfig` otherwise."""
    from attnlab.models.config import EncoderConfig
    from attnlab.models.gpt import GPTConfig

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
                "load it with attnlab.io.load_hf or convert it with `attnlab convert`"
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


def attnlab_tensors(
    tensors: dict[str, Tensor], raw: Mapping[str, Any], model: nn.Module, source: str | os.PathLike
) -> dict[str, Tensor]:
    """The weights of a directory under ``model``'s state-dict names: as stored, or mapped back from HF's
    names when ``config.json`` (``raw``) says the directory uses HF's layout (`attnlab.io.hf_layout`)."""
    from attnlab.io.hf_layout import HF_FAMILY_FIELD, to_attnlab_names

    family = raw.get(HF_FAMILY_FIELD)
    if family is None:
        return tensors
    from attnlab.io.hf import FAMILIES

    if family not in FAMILIES:
        raise CheckpointError(
            f"{source}: field {HF_FAMILY_FIELD!r} is {family!r}; valid: {', '.join(FAMILIES)}"
        )
    try:
        return to_attnlab_names(tensors, model, family)
    except CheckpointError as e:  # name the weights file beside the config
        raise CheckpointError(f"{Path(source).parent / WEIGHTS_NAME}: {e}") from None


def load_pretrained(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> nn.Module:
    """Rebuild the model saved by ``save_pretrained`` in ``directory``.

    ``dtype`` None keeps the stored dtype; float32 / bfloat16 / float16 cast floating-point tensors.
    The model is returned in eval mode on ``device``.
    """
    target = resolve_dtype(dtype)
    architecture, options, config, raw = read_checkpoint_config(directory, allow_causal_lm=True)
    if architecture == CAUSAL_LM_ARCHITECTURE:  # a GPT directory: attnlab.io.causal_lm's loader
        from attnlab.io.causal_lm import load_causal_lm

        model = load_causal_lm(directory)
        return (model if target is None else model.to(dtype=target)).to(device).eval()
    weights = Path(directory) / WEIGHTS_NAME
    if not weights.is_file():
        others = sorted(
            p.name for p in Path(directory).iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt")
        )
        hint = f" (found {', '.join(others)}: attnlab never unpickles weights)" if others else ""
        raise FileNotFoundError(f"{weights}: missing weights file{hint}")
    tensors, _ = read_safetensors(weights)
    model = build_model(architecture, config, options, init=False)
    tensors = attnlab_tensors(tensors, raw, model, Path(directory) / CONFIG_NAME)
    load_state_checked(model, tensors, source=str(weights), architecture=architecture, config=config)
    if target is None:
        floats = {t.dtype for t in tensors.values() if t.is_floating_point()}
        target = floats.pop() if len(floats) == 1 else None
    if target is not None:
        model.to(dtype=target)
    return model.to(device).eval()
