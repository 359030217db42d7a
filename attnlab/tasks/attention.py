"""Attention weights of a text, for pictures: what `attnlab attention`, the server's ``/v1/attention`` and the
web page's attention view (``attnlab/serving/static/attention.js``) show.

``attention_weights(model, tokenizer, text, text_pair=None)`` returns plain Python values::

    {"tokens": [str, ...], "pieces": [str, ...], "layers": L, "heads": N,
     "attentions": [[[[float]]]]}    # [layer][head][from_token][to_token], softmax probabilities

``tokens`` are labels a reader can read: each token's text as the tokenizer's ``decode`` of that token alone
gives it (HF's ``decode([id])``: byte-level BPE's ``Ġthe`` is `` the``, ``Ã©`` is ``é``), a leading space
shown as ``␣`` so that it stays visible in a picture; ``pieces`` are the vocabulary's own strings.

For an encoder (any attnlab model holding an `attnlab.models.Encoder`: base, masked LM, task models; HF
directories load as those) the probabilities come from ``Encoder.forward(output_attentions=True)``, the
explicit attention path; each row sums to 1. For a GPT (`attnlab.models.gpt.GPT`) they come from the same
explicit path with the causal mask, so row i is zero after token i. With ALBERT's sharing each layer's entry
is the probabilities of that layer's run of the shared sub-layer (they differ per layer: the inputs do).

`load_attention_model(directory)` loads what a directory holds (an encoder directory, attnlab or HF, or a
causal LM directory) with its tokenizer, for callers that start from a path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.io import load
from attnlab.io.format import CONFIG_NAME, read_json
from attnlab.models import Encoder
from attnlab.models.gpt import GPT
from attnlab.tokenizers import load_tokenizer

MAX_TOKENS_DEFAULT = 512  # a GPT's context is its own limit; this is only the encoders' fallback
SPACE_MARK = "\u2423"  # ␣: a token's leading space, visible in labels


def token_text(tokenizer: Any, token_id: int) -> str:
    """The text of one token as ``decode([token_id])`` gives it (special tokens kept): no byte-level
    markers (``Ġ``), no byte-to-character mapping (``Ã©`` is ``é``); the vocabulary's piece when it decodes
    to nothing (a token that is only a marker)."""
    text = tokenizer.decode([token_id], skip_special_tokens=False)
    return text if text else str(tokenizer.id_to_token(token_id))


def token_labels(tokenizer: Any, ids: list[int]) -> list[str]:
    """`token_text` of each id with leading spaces shown as ``␣`` (labels of pictures and token lists)."""
    labels = []
    for token_id in ids:
        text = token_text(tokenizer, token_id)
        stripped = text.lstrip(" ")
        labels.append(SPACE_MARK * (len(text) - len(stripped)) + stripped)
    return labels


def _encoder_of(model: nn.Module) -> nn.Module | None:
    if isinstance(model, Encoder):
        return model
    encoder = getattr(model, "encoder", None)
    return encoder if isinstance(encoder, Encoder) else None


def _gpt_attentions(model: nn.Module, input_ids: Tensor) -> list[Tensor]:
    """Per layer (1, N, T, T) probabilities of a `GPT` (the causal mask applied), by running its decoder
    layers with ``need_weights`` (``DecoderLayer.forward`` does not return them)."""
    t = input_ids.size(1)
    positions = torch.arange(t, device=input_ids.device)[None]
    x = model.embed(input_ids, positions)  # (1, T, H)
    mask = model.self_mask(t, 0, None, x)  # (T, T) additive causal mask
    attentions = []
    for layer in model.decoder.layers:
        x, probs = layer.self_attn(x, mask=mask, need_weights=True)
        x = layer.feed_forward(x)
        attentions.append(probs)
    return attentions


def attention_weights(
    model: nn.Module,
    tokenizer: Any,
    text: str,
    text_pair: str | None = None,
    decimals: int | None = None,
) -> dict[str, Any]:
    """The attention probabilities of every layer and head for ``text`` (and ``text_pair``).

    Args:
        model: an attnlab encoder model (anything holding an `Encoder`) or a `GPT`.
        tokenizer: the model's `attnlab.tokenizers.Tokenizer`.
        text, text_pair: the sentence (pair); the pair needs an encoder (segments A and B).
        decimals: round the probabilities (smaller JSON for pages); None keeps float32's values.

    Raises ValueError for an empty text, an input longer than the model's maximum, or a model that has no
    attention this function can read.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text is empty; give a sentence to show the attention of")
    if text_pair is not None and (not isinstance(text_pair, str) or not text_pair.strip()):
        raise ValueError("text_pair is empty; leave it out or give a second sentence")
    encoder = _encoder_of(model)

    is_gpt = isinstance(model, GPT)
    if encoder is None and not is_gpt:
        raise ValueError(
            f"{type(model).__name__}: not an encoder (BERT family) or GPT model; attention weights need one"
        )
    if is_gpt and text_pair is not None:
        raise ValueError("text_pair needs an encoder (sentence pairs); this is a GPT causal language model")
    limit = encoder.config.max_sequence_length if encoder is not None else model.config.max_positions
    saved = tokenizer.truncation, tokenizer.padding
    try:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        enc = tokenizer.encode(text) if text_pair is None else tokenizer.encode(text, text_pair)
    finally:
        tokenizer.truncation, tokenizer.padding = saved
    if not enc.ids:
        raise ValueError(f"text {text!r} has no tokens")
    if len(enc.ids) > limit:
        raise ValueError(
            f"the input is {len(enc.ids)} tokens long; this model reads at most {limit}: shorten the text"
        )
    device = next(model.parameters()).device
    ids = torch.tensor([enc.ids], dtype=torch.long, device=device)  # (1, T)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            if is_gpt:
                attentions = _gpt_attentions(model, ids)
            else:
                kwargs = {}
                if encoder.config.type_vocab_size > 0:
                    kwargs["token_type_ids"] = torch.tensor([enc.type_ids], dtype=torch.long, device=device)
                attentions = list(encoder(ids, output_attentions=True, **kwargs).attentions)
    finally:
        model.train(was_training)
    stacked = torch.stack([a[0] for a in attentions]).float().cpu()  # (L, N, T, T)
    if not torch.isfinite(stacked).all():
        raise ValueError("the model produced non-finite attention (NaN/Inf); its weights are damaged")
    if decimals is not None:
        stacked = stacked.round(decimals=decimals)
    return {
        "tokens": token_labels(tokenizer, list(enc.ids)),
        "pieces": list(enc.tokens),
        "layers": int(stacked.size(0)),
        "heads": int(stacked.size(1)),
        "attentions": stacked.tolist(),
    }


def load_attention_model(directory: str | os.PathLike) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` from a model directory: an attnlab or HF encoder directory, or a causal LM
    directory (attnlab GPT or HF GPT-2)."""
    d = Path(directory)
    if not d.is_dir():
        raise NotADirectoryError(f"{d}: expected a model directory (config.json + model.safetensors)")
    if not (d / CONFIG_NAME).is_file():
        raise FileNotFoundError(f"{d / CONFIG_NAME}: no such file; expected a model directory")
    raw = read_json(d / CONFIG_NAME)
    if raw.get("architecture") == "GPT" or raw.get("model_type") in ("gpt2", "openai-gpt"):
        model = load(d, expect="gpt2")
    elif raw.get("model_type") == "marian":
        raise ValueError(f"{d}: a translation model; attention views read encoders and GPT models")
    else:
        model = load(d)
        if _encoder_of(model) is None:
            raise ValueError(f"{d}: {type(model).__name__} holds no encoder; attention views need one")
    return model.eval(), load_tokenizer(d)


__all__ = ["attention_weights", "load_attention_model", "token_labels", "token_text"]
