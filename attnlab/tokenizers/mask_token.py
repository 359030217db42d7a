"""The mask token a user writes, read as the model's own: one rule for every fill-mask front end.

Families spell the mask differently (BERT's ``[MASK]``, RoBERTa's ``<mask>``) and a user rarely knows which
the model in hand has. `with_model_mask` rewrites either spelling as the model's token before encoding, and
`no_mask_message` says which token the model has when a text holds none. `attnlab fill-mask`, the
``fill-mask`` pipeline (``attnlab predict fill-mask``) and the server's ``/v1/fill-mask`` all apply it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MASK_SPELLINGS", "mask_token_of", "with_model_mask", "no_mask_message"]

MASK_SPELLINGS = ("[MASK]", "<mask>")  # what users write for "the masked token", whatever the model's is


def mask_token_of(tokenizer: Any) -> tuple[str, int]:
    """``(token, id)`` of the tokenizer's mask token: the first of `MASK_SPELLINGS` in its vocabulary."""
    for token in MASK_SPELLINGS:
        i = tokenizer.token_to_id(token)
        if i is not None:
            return token, int(i)
    raise ValueError(f"the tokenizer has no mask token (tried {', '.join(MASK_SPELLINGS)})")


def with_model_mask(text: str, mask_token: str) -> str:
    """``text`` with each spelling in `MASK_SPELLINGS` written as the model's own ``mask_token``."""
    for spelling in MASK_SPELLINGS:
        if spelling != mask_token:
            text = text.replace(spelling, mask_token)
    return text


def no_mask_message(mask_token: str) -> str:
    """The explanation that follows "no mask in the text": the model's token and the spellings read as it."""
    return f"this model's mask token is {mask_token}; {' and '.join(MASK_SPELLINGS)} are both read as it"
