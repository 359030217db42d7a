"""attnlab.io: checkpoints (``config.json`` + ``model.safetensors``) and HF transformers interop.

- `save_pretrained` / `load_pretrained`: attnlab's own checkpoints (attnlab.io.checkpoint).
- `load_hf` / `save_hf` (`to_hf` in memory): directories that HF transformers writes and reads,
  for BERT, RoBERTa, ALBERT, ELECTRA and DistilBERT (attnlab.io.hf).

See docs/architecture.md.
"""

from attnlab.io.checkpoint import DTYPES, CheckpointError, load_pretrained, save_pretrained
from attnlab.io.hf import FAMILIES, infer_family, is_hf_directory, load_hf, save_hf, to_hf

__all__ = [
    "DTYPES",
    "FAMILIES",
    "CheckpointError",
    "infer_family",
    "is_hf_directory",
    "load_hf",
    "load_pretrained",
    "save_hf",
    "save_pretrained",
    "to_hf",
]
