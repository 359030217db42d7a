"""Batching pre-training instances: pad to the longest sequence and add ``attention_mask``.

Shapes: B batch, T longest sequence in the batch (rounded up to ``pad_to_multiple_of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

# Padding value of each per-token field; fields not listed here and not scalar are rejected.
PAD_VALUES: dict[str, int] = {
    "token_type_ids": 0,
    "labels": -100,
    "word_starts": 0,
    "special_tokens_mask": 1,  # padding is never maskable
    "span_left": -1,
    "span_right": -1,
    "span_position": -1,
}
# Fields the model does not take; dropped unless ``keep_aux=True``.
AUX_FIELDS = ("word_starts", "special_tokens_mask")


class PretrainingCollator:
    """List of instances -> dict of tensors: ``input_ids`` (B, T) padded with ``pad_id``,
    ``attention_mask`` (B, T) 1 for real tokens, the other per-token fields padded (labels with -100),
    and scalar fields such as ``pair_labels`` stacked to (B,).

    Args:
        pad_id: the ``[PAD]`` id.
        pad_to_multiple_of: round T up (e.g. 8 for tensor cores).
        keep_aux: keep ``word_starts`` and ``special_tokens_mask`` (e.g. for masking after collation).
    """

    def __init__(self, pad_id: int, *, pad_to_multiple_of: int | None = None, keep_aux: bool = False) -> None:
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1, got {pad_to_multiple_of}")
        self.pad_id, self.pad_to_multiple_of, self.keep_aux = pad_id, pad_to_multiple_of, keep_aux

    def __call__(self, batch: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        import torch  # deferred: preparing shards in worker processes should not pay for importing torch

        if not batch:
            raise ValueError("cannot collate an empty batch")
        lengths = [len(ex["input_ids"]) for ex in batch]
        t = max(lengths)
        if self.pad_to_multiple_of:
            t = -(-t // self.pad_to_multiple_of) * self.pad_to_multiple_of
        b = len(batch)
        out: dict[str, torch.Tensor] = {}
        keys = [k for k in batch[0] if self.keep_aux or k not in AUX_FIELDS]
        for key in keys:
            if any(key not in ex for ex in batch):
                raise ValueError(f"field {key!r} missing from some instances of the batch")
            values = [ex[key] for ex in batch]
            if np.ndim(values[0]) == 0:
                out[key] = torch.as_tensor(np.asarray(values, dtype=np.int64))
                continue
            if key == "input_ids":
                pad = self.pad_id
            elif key in PAD_VALUES:
                pad = PAD_VALUES[key]
            else:
                raise ValueError(f"no padding value for per-token field {key!r}; known: {sorted(PAD_VALUES)}")
            arr = np.full((b, t), pad, dtype=np.int64)  # (B, T)
            for i, v in enumerate(values):
                if len(v) != lengths[i]:
                    raise ValueError(
                        f"instance {i}: {key!r} has {len(v)} entries, input_ids has {lengths[i]}"
                    )
                arr[i, : len(v)] = v
            out[key] = torch.from_numpy(arr)
        mask = np.zeros((b, t), dtype=np.int64)
        for i, n in enumerate(lengths):
            mask[i, :n] = 1
        out["attention_mask"] = torch.from_numpy(mask)
        return out
