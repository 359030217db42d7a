"""Fill-mask inference: the masked LM's top-k tokens at each mask of a text.

Loads an attnlab checkpoint or a HF transformers directory holding a masked-LM head and its tokenizer files.
Shapes: T tokens of the text, V vocabulary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnlab.io import load
from attnlab.limits import FILL_MASK_WHAT, check_top_k, fillable_tokens
from attnlab.models import EncoderForPreTraining, ReplacedTokenDetection
from attnlab.tokenizers import load_tokenizer
from attnlab.tokenizers.mask_token import mask_token_of, no_mask_message, with_model_mask


@dataclass(frozen=True)
class Prediction:
    token: str  # the vocabulary entry (e.g. "##ing", "Ġthe")
    text: str  # the entry decoded as text
    score: float  # softmax probability
    token_id: int


def load_masked_lm(directory: str | os.PathLike) -> tuple[EncoderForPreTraining, Any]:
    """``(model, tokenizer)`` from an attnlab or HF directory with a masked-LM head and tokenizer files."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such model directory")
    model = load(d)
    if isinstance(model, ReplacedTokenDetection):
        raise ValueError(
            f"{d}: an ELECTRA discriminator predicts replaced tokens, not masked ones; use the generator "
            "(attnlab pretrain writes it to OUTPUT/generator)"
        )
    if type(model).__name__ == "GPT":
        raise ValueError(
            f"{d}: holds a causal language model (GPT), which has no masked-LM head; use `attnlab generate` "
            "or `attnlab perplexity` with it"
        )
    if not isinstance(model, EncoderForPreTraining):
        raise ValueError(f"{d}: holds a {type(model).__name__}, which has no masked-LM head")
    return model, load_tokenizer(d)


@torch.no_grad()
def fill_mask(model: nn.Module, tokenizer: Any, text: str, top_k: int = 5) -> list[list[Prediction]]:
    """The ``top_k`` predictions for every mask token in ``text``, in order of the masks; ``[MASK]`` and
    ``<mask>`` are read as the model's mask token (`attnlab.tokenizers.mask_token`, as the pipeline's)."""
    if top_k < 1:
        raise ValueError(f"top_k: expected >= 1, got {top_k}")
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    check_top_k(top_k, fillable_tokens(model.config.vocab_size, special), "--top-k", FILL_MASK_WHAT)
    mask, mask_id = mask_token_of(tokenizer)
    encoding = tokenizer.encode(with_model_mask(text, mask))
    ids = torch.tensor([encoding.ids], dtype=torch.long)  # (1, T)
    positions = (ids[0] == mask_id).nonzero().flatten().tolist()
    if not positions:
        raise ValueError(f"no {mask} in the text {text!r}; {no_mask_message(mask)}")
    config = model.config
    kwargs = {}
    if config.type_vocab_size > 0:
        kwargs["token_type_ids"] = torch.tensor([encoding.type_ids], dtype=torch.long)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        out = model(ids.to(device), **{k: v.to(device) for k, v in kwargs.items()})
    finally:
        model.train(was_training)
    probs = torch.softmax(out.mlm_logits[0, positions].float(), dim=-1)  # (masks, V)
    k = min(top_k, probs.size(-1))
    scores, top = probs.topk(k, dim=-1)
    return [
        [
            Prediction(
                token=tokenizer.id_to_token(i) or f"<{i}>",
                text=tokenizer.decode([i]).strip(),
                score=float(s),
                token_id=i,
            )
            for s, i in zip(row_scores.tolist(), row_ids.tolist())
        ]
        for row_scores, row_ids in zip(scores, top)
    ]


def format_predictions(text: str, predictions: list[list[Prediction]]) -> str:
    """Human-readable lines: the text, then for each mask its candidates with scores."""
    lines = [text]
    for m, preds in enumerate(predictions, 1):
        shown = "  ".join(f"{p.text or p.token} ({p.score:.3f})" for p in preds)
        lines.append(f"  mask {m}: {shown}" if len(predictions) > 1 else f"  {shown}")
    return "\n".join(lines)
