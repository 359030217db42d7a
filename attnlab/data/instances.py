"""Pre-training instances over a :class:`~attnlab.data.shards.ShardedCorpus`: RoBERTa's Table 2, ALBERT's SOP.

Formats (``fmt``):

``"segment_pair"``   BERT's original input (RoBERTa's SEGMENT-PAIR + NSP): contiguous sentences of one
                     document up to the target length, split at a random sentence into A and B; half the
                     time B is replaced by a segment from another document (``pair_labels`` 1 = NotNext).
``"sentence_pair"``  SENTENCE-PAIR + NSP: A is one natural sentence, B the next one or (half the time) a
                     random sentence of another document.
``"full_sentences"`` FULL-SENTENCES, no NSP: contiguous sentences packed up to the maximum length; they may
                     cross documents, with an extra separator between documents (RoBERTa, section 4.2).
``"doc_sentences"``  DOC-SENTENCES, no NSP: the same without crossing documents.
``"sop"``            ALBERT's sentence-order prediction (Lan et al. 2020, section 3.2): A and B are two
                     consecutive segments of one document, swapped half the time (``pair_labels`` 1 = swap).

How determinism works (fairseq style): the *blocks* (which sentences form an instance and the target
length) are laid out once from ``seed``; everything random inside an instance (split point, random
document, swap, truncation side) is drawn from ``numpy.random.default_rng([seed, epoch, index])``. An
instance is therefore a pure function of (seed, epoch, index), which makes the trainer's resume exact.
With ``static=True`` the epoch is ignored (BERT's static data); ``dupe_factor`` repeats the blocks k times
with different draws (BERT's ``dupe_factor=10``).

Output of ``dataset[i]`` (numpy arrays, T = length of this instance):
    ``input_ids`` (T,) int64 with the ``[CLS] A [SEP] B [SEP]`` template (``<s> A </s></s> B </s>`` with
    ``template="roberta"``), ``token_type_ids`` (T,) int64, ``word_starts`` (T,) bool (special tokens count
    as words of their own), ``special_tokens_mask`` (T,) bool, and ``pair_labels`` (int) for NSP/SOP.

Shapes in comments: T tokens of one instance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.data.protocol import SpecialIds
from attnlab.data.sharded_corpus import ShardedCorpus

INSTANCE_FORMATS = ("segment_pair", "sentence_pair", "full_sentences", "doc_sentences", "sop")
PAIR_FORMATS = ("segment_pair", "sentence_pair", "sop")
TEMPLATES = ("bert", "roberta")

# Streams of the per-instance generator: instance building and masking draw independent numbers.
STREAM_INSTANCE = 0
STREAM_MASKING = 1
_STREAM_LAYOUT = 0xB10C


def instance_rng(seed: int, epoch: int, index: int, stream: int = STREAM_INSTANCE) -> np.random.Generator:
    """The generator for (seed, epoch, index); ``stream`` separates independent uses."""
    return np.random.default_rng([seed, epoch, index, stream])


@dataclass
class InstanceStats:
    documents: int = 0
    documents_too_short: int = 0  # fewer than two sentences: no pair can be made (pair formats)
    blocks: int = 0
    blocks_truncated: int = 0  # blocks whose single sentence exceeds the length budget (cut at read time)
    single_sentence_blocks: int = 0  # pair formats: split inside the sentence (see PretrainingInstances)


class PretrainingInstances:
    """A map-style dataset of pre-training instances (``__len__``/``__getitem__``), deterministic per index.

    Args:
        corpus: the prepared shards.
        special: ids of ``[CLS]``/``[SEP]`` (or ``<s>``/``</s>``), ``[MASK]`` and ``[PAD]``.
        fmt: one of ``INSTANCE_FORMATS``.
        max_length: tokens per instance including special tokens (BERT: 128 for 90% of steps, then 512).
        short_seq_prob: probability that a block gets a random shorter target length in [2, max] (BERT's
            0.1, to reduce the pre-train/fine-tune length mismatch). Default: 0.1 for ``segment_pair`` and
            ``sop`` (BERT, ALBERT), 0 for the others (RoBERTa trains on full-length sequences only).
        nsp_random_prob: probability that B is taken from another document (BERT: 0.5); also ALBERT's
            swap probability for ``sop``.
        seed: layout and per-instance draws.
        dupe_factor: repeat the blocks this many times with different draws (BERT's static data used 10).
        static: ignore the epoch (static data); otherwise call :meth:`set_epoch` each epoch.
        template: ``"bert"`` (token types 0/1) or ``"roberta"`` (double separator, all token types 0).

    Deviation from BERT's ``create_pretraining_data.py``: a block holding a single sentence (a sentence as
    long as the target) is split inside the sentence rather than forced to a random "NotNext" B, which
    keeps the NSP/SOP labels balanced; and when B is replaced, A's unused continuation is not put back
    into the stream (blocks are fixed so that ``len`` does not depend on draws).
    """

    def __init__(
        self,
        corpus: ShardedCorpus,
        special: SpecialIds,
        fmt: str = "segment_pair",
        *,
        max_length: int = 128,
        short_seq_prob: float | None = None,
        nsp_random_prob: float = 0.5,
        seed: int = 0,
        dupe_factor: int = 1,
        static: bool = False,
        template: str = "bert",
    ) -> None:
        if fmt not in INSTANCE_FORMATS:
            raise ValueError(
                f"unknown instance format {fmt!r}; expected one of {', '.join(INSTANCE_FORMATS)}"
            )
        if template not in TEMPLATES:
            raise ValueError(f"unknown template {template!r}; expected one of {', '.join(TEMPLATES)}")
        self.pair = fmt in PAIR_FORMATS
        n_special = (4 if template == "roberta" else 3) if self.pair else 2
        if max_length < n_special + 2:
            raise ValueError(
                f"max_length={max_length} leaves no room for text with {fmt!r} (needs >= {n_special + 2})"
            )
        if short_seq_prob is None:
            short_seq_prob = 0.1 if fmt in ("segment_pair", "sop") else 0.0
        for name, p in (("short_seq_prob", short_seq_prob), ("nsp_random_prob", nsp_random_prob)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        if dupe_factor < 1:
            raise ValueError(f"dupe_factor must be >= 1, got {dupe_factor}")
        self.corpus, self.special, self.fmt, self.template = corpus, special, fmt, template
        self.max_length = max_length
        self.max_tokens = max_length - n_special  # text tokens per instance
        self.short_seq_prob, self.nsp_random_prob = short_seq_prob, nsp_random_prob
        self.seed, self.dupe_factor, self.static = seed, dupe_factor, static
        self.epoch = 0
        self.stats = InstanceStats(documents=corpus.n_documents)
        # (n_blocks, 5) int32: shard, first sentence, end sentence (exclusive), target length, global document
        self.blocks = self._layout()
        self.stats.blocks = len(self.blocks)
        if len(self.blocks) == 0:
            raise ValueError(
                f"{corpus.directory}: no {fmt!r} instance can be built from {corpus.n_documents} documents "
                f"({self.stats.documents_too_short} too short for a pair)"
            )
        if fmt in ("segment_pair", "sentence_pair") and nsp_random_prob > 0 and corpus.n_documents < 2:
            raise ValueError(
                f"{corpus.directory}: NSP needs at least 2 documents to draw a random B, found 1"
            )

    # ----------------------------------------------------------------------------------------- layout

    def _target(self, rng: np.random.Generator) -> int:
        if self.short_seq_prob > 0 and rng.random() < self.short_seq_prob:
            return int(rng.integers(2, self.max_tokens + 1))
        return self.max_tokens

    def _layout(self) -> np.ndarray:
        rng = np.random.default_rng([self.seed, _STREAM_LAYOUT])
        parts: list[np.ndarray] = []
        c = self.corpus
        doc_base = 0
        for sh, shard in enumerate(c.shards):
            # one shard's blocks as Python tuples at a time (a whole corpus of them would not fit)
            blocks: list[tuple[int, int, int, int, int]] = []
            lens = np.diff(np.asarray(shard.sent_offsets)).tolist()
            doc_offsets = np.asarray(shard.doc_offsets).tolist()
            if self.fmt == "full_sentences":
                self._pack(blocks, rng, sh, lens, doc_offsets, doc_base, cross=True)
            elif self.fmt == "doc_sentences":
                self._pack(blocks, rng, sh, lens, doc_offsets, doc_base, cross=False)
            else:
                for d in range(len(doc_offsets) - 1):
                    s0, s1 = doc_offsets[d], doc_offsets[d + 1]
                    if s1 - s0 < 2:
                        self.stats.documents_too_short += 1
                        continue
                    if self.fmt == "sentence_pair":
                        for i in range(s0, s1 - 1):
                            blocks.append((sh, i, i + 2, self.max_tokens, doc_base + d))
                    else:
                        self._segments(blocks, rng, sh, lens, s0, s1, doc_base + d)
            doc_base += shard.n_documents
            # int32 halves the table (26M blocks for 3.3B tokens at length 128); indices are per shard
            parts.append(np.asarray(blocks, dtype=np.int32).reshape(-1, 5))
        out = np.concatenate(parts) if parts else np.zeros((0, 5), np.int32)
        if self.fmt in ("segment_pair", "sop"):
            single = out[:, 2] - out[:, 1] == 1
            self.stats.single_sentence_blocks = int(single.sum())
            n_tokens = np.zeros(len(out), dtype=np.int64)
            for sh, shard in enumerate(c.shards):
                rows = out[:, 0] == sh
                so = np.asarray(shard.sent_offsets)
                n_tokens[rows] = so[out[rows, 2].astype(np.int64)] - so[out[rows, 1].astype(np.int64)]
            self.stats.blocks_truncated = int((single & (n_tokens > self.max_tokens)).sum())
        return out

    def _pack(self, blocks, rng, sh, lens, doc_offsets, doc_base, cross: bool) -> None:
        """FULL-/DOC-SENTENCES: greedy packing of whole sentences up to the target length."""
        doc_of_start = {s: d for d, s in enumerate(doc_offsets[:-1])}
        start, used, target, doc, block_doc = -1, 0, 0, 0, 0
        for i, n in enumerate(lens):
            new_doc = i in doc_of_start
            if new_doc and start >= 0 and not cross:
                self._close(blocks, sh, start, i, used, target, doc_base + block_doc)
                start = -1
            sep = 1 if (new_doc and start >= 0) else 0  # RoBERTa's extra separator between documents
            if start >= 0 and used + sep + n > target:
                self._close(blocks, sh, start, i, used, target, doc_base + block_doc)
                start, sep = -1, 0
            if new_doc:
                doc = doc_of_start[i]
            if start < 0:
                start, used, target, block_doc = i, n, self._target(rng), doc
            else:
                used += sep + n
        if start >= 0:
            self._close(blocks, sh, start, len(lens), used, target, doc_base + block_doc)

    def _close(self, blocks, sh, s0, s1, used, target, doc) -> None:
        if used > self.max_tokens:
            self.stats.blocks_truncated += 1
        blocks.append((sh, s0, s1, target, doc))

    def _segments(self, blocks, rng, sh, lens, s0, s1, doc) -> None:
        """BERT: accumulate sentences of one document until the target length, then emit a block.

        A trailing single sentence left at the document's end joins the previous block (BERT would pair it
        with a forced random B; the joined block is truncated to fit like any other).
        """
        start, used, target = s0, 0, self._target(rng)
        first_block = len(blocks)
        for i in range(s0, s1):
            used += lens[i]
            if i == s1 - 1 or used >= target:
                if i == s1 - 1 and i == start and len(blocks) > first_block:
                    prev = blocks[-1]
                    blocks[-1] = (prev[0], prev[1], i + 1, prev[3], prev[4])
                    break
                blocks.append((sh, start, i + 1, target, doc))
                start, used, target = i + 1, 0, self._target(rng)

    # ----------------------------------------------------------------------------------------- items

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose draws ``__getitem__`` returns (ignored when ``static``)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.blocks) * self.dupe_factor

    def rng(self, index: int, stream: int = STREAM_INSTANCE) -> np.random.Generator:
        return instance_rng(self.seed, 0 if self.static else self.epoch, index, stream)

    def __getitem__(self, index: int) -> dict[str, np.ndarray | int]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"instance {index} out of range for {len(self)} instances")
        index = index % len(self)
        sh, s0, s1, target, doc = (int(v) for v in self.blocks[index % len(self.blocks)])
        rng = self.rng(index)
        if not self.pair:
            return self._single(sh, s0, s1)
        return self._pair(rng, sh, s0, s1, target, doc)

    def _tokens(self, sh: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        shard = self.corpus.shards[sh]
        return np.asarray(shard.ids[lo:hi], dtype=np.int64), np.asarray(shard.word_starts[lo:hi], dtype=bool)

    def _single(self, sh: int, s0: int, s1: int) -> dict[str, np.ndarray | int]:
        shard = self.corpus.shards[sh]
        so, do = shard.sent_offsets, shard.doc_offsets
        lo, hi = int(so[s0]), int(so[s1])
        ids, ws = self._tokens(sh, lo, hi)
        # FULL-SENTENCES: an extra separator where a document starts inside the block
        inner = np.asarray(do[np.searchsorted(do, s0, "right") : np.searchsorted(do, s1, "left")])
        at = np.asarray(so[inner], dtype=np.int64) - lo  # (n_sep,) token positions of the new documents
        ids = np.insert(ids, at, self.special.sep)
        ws = np.insert(ws, at, True)
        sp = np.zeros(len(ids), dtype=bool)
        sp[at + np.arange(len(at))] = True
        m = self.max_tokens  # only a lone over-long sentence is cut here
        input_ids = np.concatenate([[self.special.cls], ids[:m], [self.special.sep]]).astype(np.int64)
        return {
            "input_ids": input_ids,
            "token_type_ids": np.zeros_like(input_ids),
            "word_starts": np.concatenate([[True], ws[:m], [True]]),
            "special_tokens_mask": np.concatenate([[True], sp[:m], [True]]),
        }

    def _random_segment(self, rng: np.random.Generator, doc: int, want: int) -> tuple[int, int, int]:
        """(shard, lo, hi) token range of sentences from a random other document, at least ``want`` tokens
        or to the document's end (BERT's ``random_document`` loop)."""
        c = self.corpus
        other = int(rng.integers(c.n_documents - 1))
        other += other >= doc  # uniform over the documents other than ``doc``
        sh = int(c.doc_shard[other])
        d0, d1 = int(c.doc_start[other]), int(c.doc_end[other])
        first = int(rng.integers(d0, d1))
        if self.fmt == "sentence_pair":
            last = first + 1
        else:
            cum = np.cumsum(np.diff(np.asarray(c.shards[sh].sent_offsets[first : d1 + 1])))
            last = first + min(int(np.searchsorted(cum, want)), d1 - first - 1) + 1
        so = c.shards[sh].sent_offsets
        return sh, int(so[first]), int(so[last])

    def _pair(self, rng, sh, s0, s1, target, doc) -> dict[str, np.ndarray | int]:
        so = self.corpus.shards[sh].sent_offsets
        if s1 - s0 == 1:  # one long sentence: split inside it (see class docstring)
            lo, hi = int(so[s0]), int(so[s1])
            cut = lo + int(rng.integers(1, hi - lo)) if hi - lo >= 2 else hi
        else:
            cut = int(so[s0 + int(rng.integers(1, s1 - s0))])
        a = (sh, int(so[s0]), cut)
        b = (sh, cut, int(so[s1]))
        label = 0
        if rng.random() < self.nsp_random_prob:
            label = 1
            if self.fmt == "sop":
                a, b = b, a
            else:
                b = self._random_segment(rng, doc, max(1, target - (a[2] - a[1])))
        a_ids, a_ws = self._tokens(*a)
        b_ids, b_ws = self._tokens(*b)
        a_ids, a_ws, b_ids, b_ws = _truncate_pair(a_ids, a_ws, b_ids, b_ws, self.max_tokens, rng)
        return self._assemble_pair(a_ids, a_ws, b_ids, b_ws, label)

    def _assemble_pair(self, a_ids, a_ws, b_ids, b_ws, label: int) -> dict[str, np.ndarray | int]:
        cls, sep = self.special.cls, self.special.sep
        mid = [sep, sep] if self.template == "roberta" else [sep]
        input_ids = np.concatenate([[cls], a_ids, mid, b_ids, [sep]]).astype(np.int64)
        n_a = 1 + len(a_ids) + len(mid)
        token_type_ids = np.zeros_like(input_ids)
        if self.template == "bert":
            token_type_ids[n_a:] = 1  # segment B, inclusive of its final [SEP]
        special = np.zeros(len(input_ids), dtype=bool)
        special[[0, *range(1 + len(a_ids), n_a), len(input_ids) - 1]] = True
        word_starts = special.copy()
        word_starts[1 : 1 + len(a_ids)] = a_ws
        word_starts[n_a : n_a + len(b_ids)] = b_ws
        # a segment truncated from the front starts mid-word: its first token opens a (partial) word
        word_starts[[1, n_a]] = True
        return {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "word_starts": word_starts,
            "special_tokens_mask": special,
            "pair_labels": label,
        }


def _truncate_pair(a_ids, a_ws, b_ids, b_ws, max_tokens: int, rng: np.random.Generator):
    """BERT's ``truncate_seq_pair``: drop one token at a time from the longer segment, from the front or
    the back with equal probability, until both fit in ``max_tokens``."""
    a_lo, a_hi, b_lo, b_hi = 0, len(a_ids), 0, len(b_ids)
    excess = a_hi + b_hi - max_tokens
    if excess > 0:
        front = rng.random(excess) < 0.5
        for k in range(excess):
            if a_hi - a_lo > b_hi - b_lo:
                if front[k]:
                    a_lo += 1
                else:
                    a_hi -= 1
            elif front[k]:
                b_lo += 1
            else:
                b_hi -= 1
    return a_ids[a_lo:a_hi], a_ws[a_lo:a_hi], b_ids[b_lo:b_hi], b_ws[b_lo:b_hi]


# --------------------------------------------------------------------------------------------- schedule


@dataclass(frozen=True)
class LengthPhase:
    start_step: int  # inclusive
    end_step: int  # exclusive
    max_length: int


@dataclass(frozen=True)
class LengthSchedule:
    """Sequence length by training step, e.g. BERT's two phases (Devlin et al. 2019, appendix A.2)."""

    phases: tuple[LengthPhase, ...]

    def max_length_at(self, step: int) -> int:
        for p in self.phases:
            if p.start_step <= step < p.end_step:
                return p.max_length
        if step < 0 or not self.phases:
            raise ValueError(f"step {step} outside the schedule {self.phases}")
        return self.phases[-1].max_length  # past the end: keep the last length

    def phase_at(self, step: int) -> int:
        return next(
            (i for i, p in enumerate(self.phases) if p.start_step <= step < p.end_step), len(self.phases) - 1
        )


def two_phase_schedule(
    total_steps: int, short_length: int = 128, long_length: int = 512, short_fraction: float = 0.9
) -> LengthSchedule:
    """BERT: "we pre-train the model with sequence length of 128 for 90% of the steps. Then, we train the
    rest 10% of the steps of sequence of 512 to learn the positional embeddings."

    Build one :class:`PretrainingInstances` per phase (``max_length=128`` and ``512``) and switch at
    ``schedule.phases[1].start_step``.
    """
    if total_steps < 1 or not 0.0 <= short_fraction <= 1.0:
        raise ValueError(
            f"need total_steps >= 1 and short_fraction in [0, 1], got {total_steps}, {short_fraction}"
        )
    switch = round(total_steps * short_fraction)
    phases = [LengthPhase(0, switch, short_length), LengthPhase(switch, total_steps, long_length)]
    return LengthSchedule(tuple(p for p in phases if p.end_step > p.start_step))
