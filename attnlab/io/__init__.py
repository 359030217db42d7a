"""attnlab.io: model directories, every family, one way in and one way out.

- `load(directory)` / `save(model, directory)` (`attnlab.io.api`): attnlab's directories and HF transformers'
  for encoders (BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT, with heads), GPT, Transformer-XL, Reformer, ELMo,
  the Universal Transformer and (registered by `attnlab.translation`) translation models.
- Layers, bottom up: `format` (safetensors, ties, manifest), `checkpoint` (encoder architectures), the HF
  conversions (`hf_tables`, `hf`, `hf_tasks`, `hf_encoders`, `hf_layout`, `hf_gpt2`, `hf_transfo_xl`,
  `hf_reformer`), `registry`, `families/*`, `api`.

See docs/architecture.md.
"""

import warnings
from pathlib import Path
from typing import Any

from attnlab.io.api import family_of, load, save
from attnlab.io.checkpoint import architecture_of
from attnlab.io.format import DTYPES, CheckpointError
from attnlab.io.hf import infer_family, is_hf_directory
from attnlab.io.hf_encoders import to_hf
from attnlab.io.hf_tables import FAMILIES
from attnlab.io.registry import ModelFamily, register


def load_pretrained(directory: Any, dtype: Any = None, device: Any = "cpu") -> Any:
    """Deprecated: `load`."""
    warnings.warn("attnlab.io.load_pretrained is deprecated; use attnlab.io.load", DeprecationWarning, 2)
    return load(directory, dtype=dtype, device=device)


def save_pretrained(model: Any, directory: Any, dtype: Any = None, run_id: Any = None, **kw: Any) -> Path:
    """Deprecated: `save`."""
    warnings.warn("attnlab.io.save_pretrained is deprecated; use attnlab.io.save", DeprecationWarning, 2)
    return save(model, directory, dtype=dtype, run_id=run_id, **kw)


def load_hf(directory: Any, architecture: Any = None, dtype: Any = None, device: Any = "cpu") -> Any:
    """Deprecated: `load` (HF directories are one of the layouts it reads)."""
    warnings.warn("attnlab.io.load_hf is deprecated; use attnlab.io.load", DeprecationWarning, 2)
    return load(directory, dtype=dtype, device=device, architecture=architecture)


def save_hf(model: Any, directory: Any, **kw: Any) -> Path:
    """Deprecated: `save` with ``hf=True``."""
    message = "attnlab.io.save_hf is deprecated; use attnlab.io.save(..., hf=True)"
    warnings.warn(message, DeprecationWarning, 2)
    return save(model, directory, hf=True, **kw)


__all__ = [
    "DTYPES",
    "FAMILIES",
    "CheckpointError",
    "ModelFamily",
    "architecture_of",
    "family_of",
    "infer_family",
    "is_hf_directory",
    "load",
    "load_hf",
    "load_pretrained",
    "register",
    "save",
    "save_hf",
    "save_pretrained",
    "to_hf",
]
