"""Examples -> model inputs for fine-tuning (BERT section 4, Fig. 4), with every cut and skip counted.

- `classification_features`: ``[CLS] A [SEP] (B [SEP])`` truncated to ``max_length`` (longest first);
  class ids, or float targets for regression.
- `token_classification_features`: the words of a CoNLL sentence joined by spaces and encoded; each token
  is mapped back to its word by its character offset, and `attnlab.tasks.ner_alignment.align_labels`
  labels the first sub-token of each word (others -100). A sentence longer than ``max_length`` becomes
  several windows overlapping by ``stride`` tokens (the tokenizer's overflow windows).
- `qa_features`: ``[CLS] question [SEP] passage window [SEP]``; a question longer than
  ``max_query_length`` tokens is cut (counted); a passage longer than the room left becomes windows that
  overlap by ``stride`` tokens (the tokenizer's overflowing windows; ``stride`` is the *overlap*, as in HF
  tokenizers, where BERT's ``doc_stride`` is the step). Each window gets the start/end token of the answer
  when the whole answer lies inside its passage part, else the [CLS] index (BERT section 4.3: also for
  SQuAD 2.0's unanswerable questions). Each window keeps its passage offsets for post-processing.
- `multiple_choice_features`: one ``[CLS] context [SEP] ending [SEP]`` per choice, shape (K, T).

`collate` pads a list of features into tensors (``input_ids`` with the pad id, ``attention_mask`` 0,
token labels -100). Every function fills a `FeatureReport`: how many examples, features, and each
reason a feature was cut, relabelled or an example skipped.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from attnlab.tasks.examples import MultipleChoiceExample, QAExample, SentenceExample, TokenExample
from attnlab.tasks.ner_alignment import IGNORE_INDEX, align_labels, iob2_continuation
from attnlab.tasks.qa_postprocess import context_offsets
from attnlab.tokenizers import Encoding, Tokenizer

logger = logging.getLogger(__name__)

CLS_TOKENS = ("[CLS]", "<s>", "<cls>")
PAD_TOKENS = ("[PAD]", "<pad>")


@dataclass
class FeatureReport:
    """Counts of what feature building did: ``cut`` (truncations, relabellings) and ``skipped`` (examples
    that gave no feature), each reason with a few sample ids."""

    task: str
    examples: int = 0
    features: int = 0
    cut: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    samples: dict[str, list[str]] = field(default_factory=dict)
    max_samples: int = 3

    def count(self, reason: str, where: str, skipped: bool = False) -> None:
        (self.skipped if skipped else self.cut)[reason] += 1
        bucket = self.samples.setdefault(reason, [])
        if len(bucket) < self.max_samples:
            bucket.append(str(where))

    def summary(self) -> str:
        parts = [f"{self.task}: {self.features} features from {self.examples} examples"]
        if self.cut:
            parts.append(f"counted {dict(self.cut)}")
        if self.skipped:
            parts.append(f"skipped {dict(self.skipped)} (e.g. {[self.samples[k][:2] for k in self.skipped]})")
        return "; ".join(parts)

    def log(self) -> None:
        (logger.warning if self.skipped else logger.info)("%s", self.summary())


@dataclass
class Feature:
    """One model input (a window of an example).

    ``inputs``: lists for the model (``input_ids``, ``attention_mask``, ``token_type_ids``; (T,), or
    (K, T) for multiple choice) and labels (``labels``, or ``start_positions``/``end_positions``).
    The rest is for post-processing: the example it came from, the tokens' word ids (NER), the passage
    offsets of the tokens (QA; None for question/special tokens) and where [CLS] is.
    """

    inputs: dict[str, Any]
    example_index: int
    example_id: str = ""
    word_ids: list[int | None] | None = None
    offsets: list[tuple[int, int] | None] | None = None
    cls_index: int = 0


class FeatureDataset(torch.utils.data.Dataset):
    """Features as a map-style dataset (what `attnlab.train.Trainer` shuffles and batches)."""

    def __init__(self, features: Sequence[Feature], report: FeatureReport | None = None) -> None:
        self.features = list(features)
        self.report = report

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> Feature:
        return self.features[index]

    @property
    def lengths(self) -> list[int]:
        """Tokens of each feature (the longest choice for multiple choice): what length grouping sorts by."""
        return [_length(f.inputs["input_ids"]) for f in self.features]


def _length(ids: Sequence[Any]) -> int:
    return max(len(row) for row in ids) if ids and isinstance(ids[0], (list, tuple)) else len(ids)


# ---------------------------------------------------------------------------------------------------------
# tokenizer settings


@contextlib.contextmanager
def _settings(tokenizer: Tokenizer, max_length: int | None, stride: int = 0, strategy: str = "longest_first"):
    """Temporarily set truncation (and no padding: `collate` pads) on ``tokenizer``."""
    saved = tokenizer.truncation, tokenizer.padding
    try:
        if max_length is None:
            tokenizer.no_truncation()
        else:
            tokenizer.enable_truncation(max_length, stride=stride, strategy=strategy)
        tokenizer.no_padding()
        yield tokenizer
    finally:
        tokenizer.truncation, tokenizer.padding = saved


def special_id(tokenizer: Tokenizer, names: Sequence[str]) -> int | None:
    """The id of the first of ``names`` the tokenizer knows."""
    for name in names:
        tid = tokenizer.token_to_id(name)
        if tid is not None:
            return tid
    return None


def pad_id_of(tokenizer: Tokenizer, default: int = 0) -> int:
    """The tokenizer's padding id ([PAD] or <pad>), else ``default`` (use the model's ``pad_token_id``)."""
    tid = special_id(tokenizer, PAD_TOKENS)
    return default if tid is None else tid


def _check_length(max_length: int, tokenizer: Tokenizer, pair: bool) -> None:
    added = tokenizer.post_processor.added_tokens(pair) if tokenizer.post_processor is not None else 0
    if not isinstance(max_length, int) or max_length <= added:
        raise ValueError(
            f"max_length must be an int larger than the {added} special tokens, got {max_length!r}"
        )


def _inputs(e: Encoding, with_token_types: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"input_ids": list(e.ids), "attention_mask": list(e.attention_mask)}
    if with_token_types:
        out["token_type_ids"] = list(e.type_ids)
    return out


def _label_mapper(label_to_id: Mapping[Any, int] | Callable[[Any], int] | None) -> Callable[[Any], Any]:
    if label_to_id is None:
        return lambda label: label
    if isinstance(label_to_id, Mapping):

        def lookup(label: Any) -> int:
            if label not in label_to_id:
                raise ValueError(f"unknown label {label!r}; expected one of {sorted(map(str, label_to_id))}")
            return label_to_id[label]

        return lookup
    return label_to_id


def _tag_line(guid: str, k: int) -> str:
    """Where word ``k`` of a sentence is: a CoNLL sentence's guid is ``FILE:LINE`` of its first word and its
    words are on consecutive lines, so ``FILE:LINE+k``; any other guid, ``GUID word k+1``."""
    name, _, line = guid.rpartition(":")
    return f"{name}:{int(line) + k}" if name and line.isdigit() else f"{guid} word {k + 1}"


def _check_tags(ex: TokenExample, label_to_id: Mapping[Any, int]) -> None:
    """A tag the model has no class for (a dev tag the training data never had) names its file and line."""
    for k, tag in enumerate(ex.tags):
        if tag not in label_to_id:
            raise ValueError(
                f"{_tag_line(ex.guid, k)}: unknown label {tag!r} (word {ex.words[k]!r}); the model's labels, "
                f"from the training data, are {sorted(map(str, label_to_id))}"
            )


# ---------------------------------------------------------------------------------------------------------
# sentence and sentence-pair classification


def classification_features(
    tokenizer: Tokenizer,
    examples: Sequence[SentenceExample],
    max_length: int = 128,
    label_to_id: Mapping[Any, int] | Callable[[Any], int] | None = None,
    regression: bool = False,
    with_token_types: bool = True,
    report: FeatureReport | None = None,
) -> list[Feature]:
    """One feature per example: ``[CLS] text_a [SEP] (text_b [SEP])``, at most ``max_length`` tokens.

    Labels become ``inputs["labels"]``: ``label_to_id(label)`` (a mapping or function; None keeps the label
    as is) or ``float(label)`` for regression; unlabelled examples get no ``labels``. Truncation (longest
    sequence first, as BERT's ``_truncate_seq_pair``) is counted as ``truncated``.
    """
    report = report if report is not None else FeatureReport("classification")
    _check_length(max_length, tokenizer, pair=True)
    to_id = _label_mapper(label_to_id)
    features = []
    with _settings(tokenizer, max_length):
        for i, ex in enumerate(examples):
            report.examples += 1
            e = tokenizer.encode(ex.text_a, ex.text_b)
            if e.overflowing:
                report.count("truncated", ex.guid)
            inputs = _inputs(e, with_token_types)
            if ex.label is not None:
                try:
                    inputs["labels"] = float(ex.label) if regression else int(to_id(ex.label))
                except ValueError as error:  # a dev label the training data never had: say which example
                    raise ValueError(f"{ex.guid}: {error}") from None
            features.append(Feature(inputs, i, ex.guid))
    report.features += len(features)
    return features


# ---------------------------------------------------------------------------------------------------------
# token classification (NER)


def _word_spans(words: Sequence[str]) -> tuple[str, list[int], list[int]]:
    """The words joined by single spaces, and each word's start and end character."""
    starts, ends, pos = [], [], 0
    for w in words:
        starts.append(pos)
        ends.append(pos + len(w))
        pos += len(w) + 1
    return " ".join(words), starts, ends


def token_word_ids(
    offsets: Sequence[tuple[int, int]],
    sequence_ids: Sequence[int | None],
    starts: Sequence[int],
    ends: Sequence[int],
) -> list[int | None]:
    """Each token's word index from its character offset (None for special tokens and padding)."""
    out: list[int | None] = []
    for (s, e), sid in zip(offsets, sequence_ids):
        if sid is None or e <= s:
            out.append(None)
            continue
        w = bisect.bisect_right(starts, s) - 1
        out.append(w if w >= 0 and s < ends[w] else None)
    return out


def token_classification_features(
    tokenizer: Tokenizer,
    examples: Sequence[TokenExample],
    label_to_id: Mapping[str, int],
    max_length: int = 128,
    stride: int = 32,
    label_all_subtokens: bool = False,
    with_token_types: bool = True,
    report: FeatureReport | None = None,
) -> list[Feature]:
    """Features for NER: each sentence (or each window of a long one) with its word ids and aligned labels.

    Counted: ``split_into_windows`` (a sentence longer than ``max_length``), ``word_without_token`` (a word
    the tokenizer turns into nothing: it is predicted "O" and cannot be learned).
    """
    report = report if report is not None else FeatureReport("token_classification")
    _check_length(max_length, tokenizer, pair=False)
    to_id = _label_mapper(label_to_id)
    features = []
    with _settings(tokenizer, max_length, stride=stride):
        for i, ex in enumerate(examples):
            report.examples += 1
            if ex.tags and isinstance(label_to_id, Mapping):
                _check_tags(ex, label_to_id)
            text, starts, ends = _word_spans(ex.words)
            e = tokenizer.encode(text)
            windows = [e, *e.overflowing]
            if len(windows) > 1:
                report.count("split_into_windows", ex.guid)
            covered: set[int] = set()
            for w in windows:
                word_ids = token_word_ids(w.offsets, w.sequence_ids, starts, ends)
                covered.update(x for x in word_ids if x is not None)
                inputs = _inputs(w, with_token_types)
                if ex.tags:
                    if label_all_subtokens:
                        # continuation pieces of a B-X word are I-X (so one word is never two entities)
                        tag_ids = align_labels(word_ids, list(ex.tags), True, continuation=iob2_continuation)
                        inputs["labels"] = [t if t == IGNORE_INDEX else to_id(t) for t in tag_ids]
                    else:
                        inputs["labels"] = [
                            t if t == IGNORE_INDEX else to_id(t)
                            for t in align_labels(word_ids, list(ex.tags))
                        ]
                features.append(Feature(inputs, i, ex.guid, word_ids=word_ids))
            for _ in range(len(ex.words) - len(covered)):
                report.count("word_without_token", ex.guid)
    report.features += len(features)
    return features


# ---------------------------------------------------------------------------------------------------------
# extractive question answering


def _cls_index(tokenizer: Tokenizer, e: Encoding) -> int:
    cls = special_id(tokenizer, CLS_TOKENS)
    if cls is not None:
        for i, (tid, sid) in enumerate(zip(e.ids, e.sequence_ids)):
            if tid == cls and sid is None:
                return i
    return 0


def _truncate_question(tokenizer: Tokenizer, question: str, max_query_length: int) -> tuple[str, bool]:
    """The question cut after its first ``max_query_length`` tokens (at a token's end character)."""
    with _settings(tokenizer, None):
        q = tokenizer.encode(question, add_special_tokens=False)
    if len(q.ids) <= max_query_length:
        return question, False
    return question[: q.offsets[max_query_length - 1][1]], True


def answer_token_span(
    offsets: Sequence[tuple[int, int] | None], answer_start: int, answer_end: int
) -> tuple[int, int] | None:
    """Token indices ``(start, end)`` (inclusive) of the characters ``[answer_start, answer_end)`` in a window
    whose passage tokens have ``offsets`` (None elsewhere); None when the answer is not wholly inside."""
    ctx = [i for i, o in enumerate(offsets) if o is not None]
    if not ctx or offsets[ctx[0]][0] > answer_start or offsets[ctx[-1]][1] < answer_end:
        return None
    start = next((i for i in ctx if offsets[i][1] > answer_start), None)
    end = next((i for i in reversed(ctx) if offsets[i][0] < answer_end), None)
    if start is None or end is None or end < start:
        return None
    return start, end


def qa_features(
    tokenizer: Tokenizer,
    examples: Sequence[QAExample],
    max_length: int = 384,
    stride: int = 128,
    max_query_length: int = 64,
    training: bool = True,
    with_token_types: bool = True,
    report: FeatureReport | None = None,
) -> list[Feature]:
    """Windows ``[CLS] question [SEP] passage piece [SEP]`` over each example's passage.

    With ``training`` every window gets ``start_positions``/``end_positions``: the answer's tokens when the
    first gold answer lies wholly inside the window's passage part, else the [CLS] index (counted as
    ``answer_outside_window``; unanswerable questions as ``impossible``). Counted too:
    ``question_truncated``, ``split_into_windows``, ``answer_not_token_aligned`` (a gold boundary inside a
    token: the span is widened to whole tokens) and, skipped, ``no_room_for_passage`` (the question fills
    the whole window).
    """
    report = report if report is not None else FeatureReport("qa")
    _check_length(max_length, tokenizer, pair=True)
    if max_query_length < 1:
        raise ValueError(f"max_query_length must be >= 1, got {max_query_length}")
    features = []
    for i, ex in enumerate(examples):
        report.examples += 1
        question, cut = _truncate_question(tokenizer, ex.question, max_query_length)
        if cut:
            report.count("question_truncated", ex.id)
        try:
            with _settings(tokenizer, max_length, stride=stride, strategy="only_second"):
                e = tokenizer.encode(question, ex.context)
        except ValueError as err:  # the question leaves no room, or the stride is not below the room
            if "stride" in str(err):
                raise ValueError(
                    f"qa_features: stride {stride} must be smaller than the passage tokens that fit in a "
                    f"window (max_length {max_length} minus question and special tokens) for {ex.id!r}"
                ) from err
            report.count("no_room_for_passage", ex.id, skipped=True)
            continue
        windows = [e, *e.overflowing]
        if len(windows) > 1:
            report.count("split_into_windows", ex.id)
        for w in windows:
            offsets = context_offsets(w.offsets, w.sequence_ids, 1)
            cls = _cls_index(tokenizer, w)
            inputs = _inputs(w, with_token_types)
            if training:
                span = None
                if ex.is_impossible or not ex.answers:
                    report.count("impossible", ex.id)
                else:
                    text, start = ex.answers[0]
                    span = answer_token_span(offsets, start, start + len(text))
                    if span is None:
                        report.count("answer_outside_window", ex.id)
                    elif (offsets[span[0]][0], offsets[span[1]][1]) != (start, start + len(text)):
                        report.count("answer_not_token_aligned", ex.id)
                inputs["start_positions"], inputs["end_positions"] = span if span is not None else (cls, cls)
            features.append(Feature(inputs, i, ex.id, offsets=offsets, cls_index=cls))
    report.features += len(features)
    return features


# ---------------------------------------------------------------------------------------------------------
# multiple choice


def multiple_choice_features(
    tokenizer: Tokenizer,
    examples: Sequence[MultipleChoiceExample],
    max_length: int = 128,
    with_token_types: bool = True,
    report: FeatureReport | None = None,
) -> list[Feature]:
    """One feature per example with (K, T) inputs: ``[CLS] context [SEP] ending_k [SEP]`` for each choice."""
    report = report if report is not None else FeatureReport("multiple_choice")
    _check_length(max_length, tokenizer, pair=True)
    features = []
    with _settings(tokenizer, max_length):
        for i, ex in enumerate(examples):
            report.examples += 1
            if not ex.endings:
                report.count("no_endings", ex.guid, skipped=True)
                continue
            encs = [tokenizer.encode(ex.context, ending) for ending in ex.endings]
            if any(e.overflowing for e in encs):
                report.count("truncated", ex.guid)
            rows = [_inputs(e, with_token_types) for e in encs]
            inputs: dict[str, Any] = {k: [r[k] for r in rows] for k in rows[0]}
            if ex.label is not None:
                if not 0 <= ex.label < len(ex.endings):
                    raise ValueError(
                        f"{ex.guid}: label {ex.label} is not an ending index in [0, {len(ex.endings)})"
                    )
                inputs["labels"] = int(ex.label)
            features.append(Feature(inputs, i, ex.guid))
    report.features += len(features)
    return features


# ---------------------------------------------------------------------------------------------------------
# batching


def _pad(rows: Sequence[Sequence[int]], value: int, length: int) -> list[list[int]]:
    return [list(r) + [value] * (length - len(r)) for r in rows]


def collate(
    features: Sequence[Feature], pad_id: int = 0, pads: Mapping[str, int] | None = None
) -> dict[str, torch.Tensor]:
    """Pad features into a batch of tensors: (B, T) or (B, K, T) inputs, labels (B,) or (B, T).

    Padding: ``input_ids`` with ``pad_id``, ``attention_mask`` and ``token_type_ids`` with 0, token labels
    with -100, any other list input with 0 or its value in ``pads`` (a feature builder's own inputs, e.g.
    K-BERT's ``branch_ids``, `attnlab.knowledge.features`). Float labels (regression) stay float.
    """
    if not features:
        raise ValueError("collate: no features")
    keys = list(features[0].inputs)
    for f in features:
        if list(f.inputs) != keys:
            raise ValueError(f"collate: features have different keys: {keys} vs {list(f.inputs)}")
    pads = {
        "input_ids": pad_id, "attention_mask": 0, "token_type_ids": 0, "labels": IGNORE_INDEX, **(pads or {})
    }  # fmt: skip
    batch: dict[str, torch.Tensor] = {}
    first = features[0].inputs["input_ids"]
    choices = bool(first) and isinstance(first[0], list)
    if choices:
        length = max(len(row) for f in features for row in f.inputs["input_ids"])
    else:
        length = max(len(f.inputs["input_ids"]) for f in features)
    for key in keys:
        values = [f.inputs[key] for f in features]
        if isinstance(values[0], list):
            if choices:
                data = [_pad(v, pads.get(key, 0), length) for v in values]
            else:
                data = _pad(values, pads.get(key, 0), length)
            batch[key] = torch.tensor(data, dtype=torch.long)
        else:
            dtype = torch.float32 if isinstance(values[0], float) else torch.long
            batch[key] = torch.tensor(values, dtype=dtype)
    return batch


def batches(
    features: Sequence[Feature], batch_size: int, pad_id: int = 0
) -> Iterator[dict[str, torch.Tensor]]:
    """Consecutive padded batches in order (for evaluation and prediction)."""
    for start in range(0, len(features), batch_size):
        yield collate(features[start : start + batch_size], pad_id)
