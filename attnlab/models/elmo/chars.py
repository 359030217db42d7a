"""Words to character ids, with AllenNLP's ``ELMoCharacterMapper`` conventions (what released weights
were trained on).

A word is its UTF-8 bytes (at most ``max_chars - 2``: longer words are truncated, as the original does)
between a begin-of-word (258) and an end-of-word (259) marker, padded with 260 to ``max_chars``. The
sentence markers ``<S>`` and ``</S>`` are the single characters 256 and 257 between the word markers.
Every id is then shifted by one, so that an all-zero row is a padded (absent) token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

MAX_CHARS = 50
BOS_CHAR, EOS_CHAR, BOW_CHAR, EOW_CHAR, PAD_CHAR = 256, 257, 258, 259, 260
BOS_TOKEN, EOS_TOKEN = "<S>", "</S>"


def _marker(char: int, max_chars: int) -> list[int]:
    ids = [PAD_CHAR] * max_chars
    ids[0], ids[1], ids[2] = BOW_CHAR, char, EOW_CHAR
    return [i + 1 for i in ids]


def word_char_ids(word: str, max_chars: int = MAX_CHARS) -> list[int]:
    """``max_chars`` ids for ``word`` (``<S>``/``</S>`` give the sentence markers)."""
    if word == BOS_TOKEN:
        return _marker(BOS_CHAR, max_chars)
    if word == EOS_TOKEN:
        return _marker(EOS_CHAR, max_chars)
    data = word.encode("utf-8", "ignore")[: max_chars - 2]
    ids = [PAD_CHAR] * max_chars
    ids[0] = BOW_CHAR
    ids[1 : len(data) + 1] = data
    ids[len(data) + 1] = EOW_CHAR
    return [i + 1 for i in ids]


def is_truncated(word: str, max_chars: int = MAX_CHARS) -> bool:
    return word not in (BOS_TOKEN, EOS_TOKEN) and len(word.encode("utf-8", "ignore")) > max_chars - 2


def batch_char_ids(
    sentences: Sequence[Sequence[str]], max_chars: int = MAX_CHARS, boundaries: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(char_ids (B, T, max_chars), mask (B, T) bool)``; with ``boundaries`` every sentence is wrapped
    in ``<S>`` ... ``</S>`` (T = longest + 2), as the biLM reads it. Empty sentences are an error."""
    for i, sentence in enumerate(sentences):
        if len(sentence) == 0:
            raise ValueError(f"sentence {i} is empty: ELMo needs at least one token per sentence")
        for word in sentence:
            if not isinstance(word, str) or not word:
                raise ValueError(f"sentence {i}: token {word!r} is not a non-empty string")
    rows = [[BOS_TOKEN, *s, EOS_TOKEN] if boundaries else list(s) for s in sentences]
    length = max((len(r) for r in rows), default=0)
    ids = torch.zeros(len(rows), length, max_chars, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor([word_char_ids(w, max_chars) for w in row])
        mask[b, : len(row)] = True
    return ids, mask
