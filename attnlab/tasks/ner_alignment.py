"""Word-level tags ↔ sub-word tokens for token classification (pure functions).

A word can become several sub-word tokens; BERT (§5.3) "use[s] the representation of the first
sub-token as the input to the token-level classifier over the NER label set". So in training the first
sub-token of each word carries the word's label and every other position (continuation pieces and the
special tokens) carries ``ignore_index`` (-100, what ``torch.nn.functional.cross_entropy`` ignores by
default); at prediction time each word takes the prediction at its first sub-token.

``word_ids`` follow the tokenizer's convention: for each token (T,), the index of the word it came from
(0-based within the example) or ``None`` for special tokens ([CLS], [SEP], padding).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

IGNORE_INDEX = -100


def _check_word_ids(word_ids: Sequence[int | None], num_words: int | None) -> None:
    """Each word's tokens must be contiguous and word ids must lie in ``[0, num_words)``."""
    seen: set[int] = set()
    previous = None
    for t, wid in enumerate(word_ids):
        if wid is None:
            previous = None
            continue
        if not isinstance(wid, int) or wid < 0 or (num_words is not None and wid >= num_words):
            limit = f"[0, {num_words})" if num_words is not None else "a non-negative int"
            raise ValueError(f"token {t}: word id {wid!r} must be in {limit}")
        if wid != previous and wid in seen:
            raise ValueError(
                f"token {t}: word {wid} appears again after other tokens (a word's pieces must be contiguous)"
            )
        seen.add(wid)
        previous = wid


def align_labels(
    word_ids: Sequence[int | None],
    word_labels: Sequence[Any],
    label_all_subtokens: bool = False,
    continuation: Mapping[Any, Any] | Callable[[Any], Any] | None = None,
    ignore_index: Any = IGNORE_INDEX,
) -> list[Any]:
    """Token labels (T,) from word labels: the first sub-token of each word gets the word's label.

    Args:
        word_ids: (T,) word index per token, ``None`` for special tokens.
        word_labels: one label per word (ids or tag strings).
        label_all_subtokens: also label continuation pieces (instead of ``ignore_index``); their label is
            ``continuation(label)`` (a mapping or function, e.g. ``B-PER`` → ``I-PER`` so a word is not
            read as several entities) or the word's label when ``continuation`` is ``None``.
        ignore_index: the label of positions the loss must skip.

    A window that starts inside a word (a long sentence split with stride) labels that word's first
    token *in the window*.
    """
    _check_word_ids(word_ids, len(word_labels))
    if continuation is None:
        follow = lambda label: label
    elif isinstance(continuation, Mapping):
        follow = lambda label: continuation.get(label, label)
    else:
        follow = continuation
    out: list[Any] = []
    previous = None
    for wid in word_ids:
        if wid is None:
            out.append(ignore_index)
        elif wid != previous:
            out.append(word_labels[wid])
        else:
            out.append(follow(word_labels[wid]) if label_all_subtokens else ignore_index)
        previous = wid
    return out


def word_predictions(
    word_ids: Sequence[int | None],
    token_predictions: Sequence[Any],
    num_words: int | None = None,
    default: Any = None,
) -> list[Any]:
    """Word-level predictions from token-level ones: each word takes its first sub-token's prediction.

    Args:
        word_ids: (T,) word index per token, ``None`` for special tokens.
        token_predictions: (T,) predicted label (id or tag) per token.
        num_words: how many words the example has (default: the largest word id + 1).
        default: the prediction for words with no token (cut off by truncation, or a word the tokenizer
            turned into nothing). ``None`` makes such words an error that names them.
    """
    if len(word_ids) != len(token_predictions):
        raise ValueError(f"{len(word_ids)} word ids but {len(token_predictions)} token predictions")
    if num_words is None:
        num_words = 1 + max((w for w in word_ids if w is not None), default=-1)
    _check_word_ids(word_ids, num_words)
    out: list[Any] = [None] * num_words
    found = [False] * num_words
    for wid, pred in zip(word_ids, token_predictions):
        if wid is not None and not found[wid]:
            out[wid] = pred
            found[wid] = True
    missing = [i for i, ok in enumerate(found) if not ok]
    if missing:
        if default is None:
            raise ValueError(f"word(s) {missing[:10]} have no token (truncated?); pass default= to fill them")
        for i in missing:
            out[i] = default
    return out


def merge_window_predictions(
    windows: Sequence[tuple[Sequence[int | None], Sequence[Any]]], num_words: int, default: Any = None
) -> list[Any]:
    """Word predictions of one sentence split into several windows: the first window covering a word wins.

    ``windows``: ``(word_ids, token_predictions)`` per window, in order; word ids index the whole sentence.
    """
    out: list[Any] = [None] * num_words
    found = [False] * num_words
    for word_ids, preds in windows:
        if len(word_ids) != len(preds):
            raise ValueError(f"{len(word_ids)} word ids but {len(preds)} token predictions in a window")
        _check_word_ids(word_ids, num_words)
        previous = None
        for wid, pred in zip(word_ids, preds):
            if wid is not None and wid != previous and not found[wid]:
                out[wid] = pred
                found[wid] = True
            previous = wid
    missing = [i for i, ok in enumerate(found) if not ok]
    if missing:
        if default is None:
            raise ValueError(f"word(s) {missing[:10]} are in no window; pass default= to fill them")
        for i in missing:
            out[i] = default
    return out


def iob2_continuation(tag: str) -> str:
    """``B-X`` → ``I-X``, anything else unchanged: the label of continuation pieces of an IOB2 word."""
    return "I-" + tag[2:] if tag.startswith("B-") else tag
