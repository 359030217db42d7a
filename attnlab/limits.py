"""Option values checked against what a loaded model, or the integer type an option feeds, can use.

Argument parsers check the form of a value (a positive integer); only where the model is known can a value
be too large for it: more tokens than its position embeddings, more candidates than its vocabulary holds.
Each check raises a ValueError that names the option, the model's limit and the valid range, instead of
clamping the value silently or failing later inside torch. No torch import: every layer may use it.
"""

from __future__ import annotations

INT64_MAX = 2**63 - 1  # torch.long: step counters, token limits
SEED_MAX = 2**64 - 1  # torch.Generator.manual_seed takes an unsigned 64-bit seed


def check_range(option: str, value: int, low: int, high: int, why: str) -> None:
    """``low <= value <= high``, else a ValueError: ``{option} {value}: {why}; choose {low} to {high}``."""
    if not low <= value <= high:
        raise ValueError(f"{option} {value}: {why}; choose {low} to {high}")


def check_max_length(
    value: int | None, limit: int, option: str = "max_length", model: str = "this model"
) -> None:
    """A token length asked for (None: the model's own) against the positions ``model`` reads."""
    if value is not None:
        check_range(option, value, 1, limit, f"{model} reads at most {limit} tokens (its positions)")


def check_top_k(
    value: int | None, candidates: int, option: str = "top_k", what: str = "tokens it can predict"
) -> None:
    """A number of candidates asked for against how many there are (``candidates``, e.g. the vocabulary
    less its special tokens)."""
    if value is not None:
        check_range(option, value, 1, candidates, f"the model has {candidates} {what}")


def fillable_tokens(vocab_size: int, special_ids: set[int]) -> int:
    """How many of a masked LM's ``vocab_size`` tokens can fill a mask: all but the special ones."""
    return vocab_size - len({i for i in special_ids if 0 <= i < vocab_size})


FILL_MASK_WHAT = "tokens besides its special ones ([CLS], [MASK], ...) to fill a mask with"
