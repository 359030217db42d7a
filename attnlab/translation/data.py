"""Parallel text for translation: reading aligned files, a joint BPE vocabulary, token-count batches.

- `read_parallel`: two aligned files, one sentence per line. Files of different lengths raise an error naming
  both files and their line counts; pairs with an empty side are skipped and counted.
- `train_joint_bpe`: one BPE vocabulary learned on source and target text together (section 5.1 of the
  paper: "a shared source-target vocabulary of about 37000 tokens"), with attnlab's BPE trainer. The
  pipeline is SentencePiece-style (spaces kept as "▁", so decoding gives back detokenised text) with byte
  fallback: a character never seen in training becomes its UTF-8 bytes, never an unknown token.
- `encode_pairs`: ids with EOS appended on both sides; pairs longer than ``max_length`` tokens on either
  side are filtered and counted.
- `TokenBatchLoader`: "sentence pairs were batched together by approximate sequence length. Each training
  batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target
  tokens" (section 5.1). Pairs are sorted by length and cut into batches whose *padded* size (sentences x
  longest sentence) stays within ``max_tokens`` on each side; the batch order is shuffled each epoch by
  (seed, epoch), and the loader's state (epoch, position) resumes exactly under `attnlab.train.Trainer`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.tokenizers import Tokenizer, sentencepiece_bpe
from attnlab.tokenizers import pre_tokenizers as pre
from attnlab.tokenizers.trainers import BpeTrainer
from attnlab.train.data import ResumableLoader

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)  # ids 0, 1, 2, 3
BYTE_TOKENS = tuple(f"<0x{b:02X}>" for b in range(256))  # byte fallback pieces, ids 4 .. 259
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(BYTE_TOKENS) + 1  # room for one learned symbol


@dataclass
class ParallelText:
    """Aligned sentence pairs read from two files, with what was dropped."""

    source: list[str]
    target: list[str]
    src_path: str = ""
    tgt_path: str = ""
    lines: int = 0  # lines in each file
    skipped_empty: int = 0  # pairs with an empty (whitespace-only) side
    empty_lines: list[int] = field(default_factory=list)  # their 1-based line numbers (first 20)

    def __len__(self) -> int:
        return len(self.source)

    def report(self) -> str:
        where = (
            f" (lines {', '.join(map(str, self.empty_lines))}{', ...' if self.skipped_empty > 20 else ''})"
        )
        return (
            f"{self.src_path} / {self.tgt_path}: {self.lines} lines, {len(self)} pairs kept, "
            f"{self.skipped_empty} skipped for an empty side{where if self.skipped_empty else ''}"
        )


def _read_lines(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 file; a missing file, a directory or bytes that are not UTF-8 raise an error
    naming the file (and the line)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: expected a text file with one sentence per line, found a directory")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(
            f"{path}:{line}: not valid UTF-8 ({e.reason} at byte {e.start}); parallel text must be UTF-8"
        ) from None
    lines = text.splitlines()  # \n, \r\n, and the Unicode separators
    return lines


def read_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike) -> ParallelText:
    """Read two aligned files (UTF-8, one sentence per line); skip and count pairs with an empty side."""
    src, tgt = _read_lines(src_path), _read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(
            f"parallel files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}; "
            "they must be aligned one sentence per line"
        )
    out = ParallelText([], [], str(src_path), str(tgt_path), lines=len(src))
    for number, (s, t) in enumerate(zip(src, tgt), start=1):
        s, t = s.strip(), t.strip()
        if not s or not t:
            out.skipped_empty += 1
            if len(out.empty_lines) < 20:
                out.empty_lines.append(number)
            continue
        out.source.append(s)
        out.target.append(t)
    if not out.source:
        what = "are empty" if not src else f"have an empty side on all {len(src)} lines"
        raise ValueError(f"{src_path} / {tgt_path}: no sentence pairs; the files {what}")
    return out


def bpe_pre_tokenizer() -> pre.PreTokenizer:
    return pre.Metaspace("▁", prepend_scheme="always")


def train_joint_bpe(texts: Iterable[str], vocab_size: int, show_progress: bool = False) -> Tokenizer:
    """A joint BPE tokenizer learned on ``texts`` (source and target sentences together).

    Ids: ``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3, then the 256 byte pieces, then the learned
    symbols. ``vocab_size`` counts all of them.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size={vocab_size} leaves no room for learned symbols after the "
            f"{len(SPECIAL_TOKENS) + len(BYTE_TOKENS)} special and byte tokens"
        )
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *BYTE_TOKENS],
        unk_token=UNK,
        byte_fallback=True,
        show_progress=show_progress,
        processes=1,
        pre_tokenize=bpe_pre_tokenizer().pre_tokenize_str,
    )
    model = trainer.train_from_iterator(texts)
    return sentencepiece_bpe(model, special_tokens=list(SPECIAL_TOKENS))


def special_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """``{"pad": .., "unk": .., "bos": .., "eos": ..}`` of a tokenizer made by `train_joint_bpe`."""
    ids = {}
    for name, token in zip(("pad", "unk", "bos", "eos"), SPECIAL_TOKENS):
        i = tokenizer.token_to_id(token)
        if i is None:
            raise ValueError(f"tokenizer has no {token!r}: it was not made by train_joint_bpe")
        ids[name] = i
    return ids


@dataclass
class EncodedPairs:
    """``examples[i] = (source ids + [eos], target ids + [eos])``, and the pairs filtered for length."""

    examples: list[tuple[list[int], list[int]]]
    too_long: int = 0
    max_length: int | None = None

    def __len__(self) -> int:
        return len(self.examples)


def encode_text(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    eos = special_ids(tokenizer)["eos"]
    return [tokenizer.encode(t, add_special_tokens=False).ids + [eos] for t in texts]


def encode_pairs(tokenizer: Tokenizer, data: ParallelText, max_length: int | None = None) -> EncodedPairs:
    """Encode both sides (EOS appended); drop and count pairs with a side over ``max_length`` tokens."""
    src, tgt = encode_text(tokenizer, data.source), encode_text(tokenizer, data.target)
    out = EncodedPairs([], max_length=max_length)
    for s, t in zip(src, tgt):
        if max_length is not None and (len(s) > max_length or len(t) > max_length):
            out.too_long += 1
            continue
        out.examples.append((s, t))
    if data.source and not out.examples:
        raise ValueError(
            f"{data.src_path} / {data.tgt_path}: all {len(data)} pairs have a side longer than max_length="
            f"{max_length} tokens; raise --max-length"
        )
    return out


def collate(
    examples: Sequence[tuple[list[int], list[int]]], pad_id: int, start_id: int
) -> dict[str, torch.Tensor]:
    """Pad a batch: ``input_ids``/``attention_mask`` (B, S), ``decoder_input_ids``/``labels`` (B, T).

    ``decoder_input_ids = [start, y_1 .. y_n]`` (teacher forcing) and ``labels = [y_1 .. y_n, eos]``, -100
    at padding (ignored by the loss).
    """
    b = len(examples)
    s_len = max(len(s) for s, _ in examples)
    t_len = max(len(t) for _, t in examples)
    input_ids = torch.full((b, s_len), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((b, s_len), dtype=torch.long)
    decoder_input_ids = torch.full((b, t_len), pad_id, dtype=torch.long)
    labels = torch.full((b, t_len), -100, dtype=torch.long)
    for i, (s, t) in enumerate(examples):
        input_ids[i, : len(s)] = torch.tensor(s)
        attention_mask[i, : len(s)] = 1
        labels[i, : len(t)] = torch.tensor(t)
        decoder_input_ids[i, 0] = start_id
        decoder_input_ids[i, 1 : len(t)] = torch.tensor(t[:-1])
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "decoder_input_ids": decoder_input_ids,
        "labels": labels,
    }


def token_batches(lengths: Sequence[tuple[int, int]], max_tokens: int) -> list[list[int]]:
    """Indices grouped into batches by length: sorted by (source, target) length, then cut greedily so that
    ``sentences * longest source <= max_tokens`` and the same for targets.

    A single pair longer than ``max_tokens`` on a side forms a batch of its own (the only batches over the
    bound; filter with ``max_length <= max_tokens`` to have none).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i][0], lengths[i][1], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest_s = longest_t = 0
    for i in order:
        s, t = lengths[i]
        ls, lt = max(longest_s, s), max(longest_t, t)
        if current and ((len(current) + 1) * ls > max_tokens or (len(current) + 1) * lt > max_tokens):
            batches.append(current)
            current, ls, lt = [], s, t
        current.append(i)
        longest_s, longest_t = ls, lt
    if current:
        batches.append(current)
    return batches


class TokenBatchLoader(ResumableLoader):
    """Re-iterable token-count batches of encoded pairs with an exactly resumable (epoch, position) state.

    Batches are fixed once (`token_batches`); epoch ``e`` visits them in the order
    ``numpy.random.default_rng([seed, e]).permutation`` (or in length order with ``shuffle=False``). It is a
    `ResumableLoader` by interface (epoch, position, ``iter_epoch``, state), so the trainer reads its
    fractional epoch for the logs; its batches are cut by tokens, not by the base class's batch size.
    """

    lengths = None  # no length grouping: the batches are already cut by length
    num_workers = 0

    def __init__(
        self,
        examples: Sequence[tuple[list[int], list[int]]],
        max_tokens: int,
        pad_id: int,
        start_id: int,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        """``rank`` of ``world_size`` (under torchrun): of every ``world_size`` consecutive batches of the
        epoch's order, this process reads the ``rank``-th; the tail that does not divide is left out."""
        if not examples:
            raise ValueError("TokenBatchLoader: no examples (all filtered or empty input)")
        if not 0 <= rank < world_size:
            raise ValueError(f"TokenBatchLoader: need 0 <= rank < world_size, got {rank} and {world_size}")
        self.rank, self.world_size = rank, world_size
        self.examples = examples
        self.max_tokens = max_tokens
        self.pad_id = pad_id
        self.start_id = start_id
        self.seed = seed
        self.shuffle = shuffle
        self.batches = token_batches([(len(s), len(t)) for s, t in examples], max_tokens)
        if len(self.batches) < world_size:
            raise ValueError(
                f"TokenBatchLoader: {len(self.batches)} batches of {max_tokens} tokens for {world_size} "
                "processes; give more pairs or a smaller --max-tokens"
            )
        self.epoch = 0
        self.position = 0

    def __len__(self) -> int:
        """Batches per epoch on this process."""
        return len(self.batches) // self.world_size

    def epoch_order(self, epoch: int) -> list[int]:
        """This process's batch indices of ``epoch``, in reading order."""
        if not self.shuffle:
            order = list(range(len(self.batches)))
        else:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.batches)).tolist()
        return order[: len(self) * self.world_size][self.rank :: self.world_size]

    def batch(self, index: int) -> dict[str, torch.Tensor]:
        return collate([self.examples[i] for i in self.batches[index]], self.pad_id, self.start_id)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        """The rest of the current epoch, then the loader moves to the next epoch."""
        if self.position >= len(self):
            self.epoch, self.position = self.epoch + 1, 0
        epoch = self.epoch
        order = self.epoch_order(epoch)
        while self.epoch == epoch and self.position < len(order):
            index = order[self.position]
            self.position += 1
            yield self.batch(index)
        if self.epoch == epoch:
            self.epoch, self.position = epoch + 1, 0

    def iter_epoch(self, epoch: int = 0) -> Iterator[dict[str, torch.Tensor]]:
        """All batches of ``epoch`` without touching the state (evaluation)."""
        return (self.batch(i) for i in self.epoch_order(epoch))

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "batches": len(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed", self.seed) != self.seed or state.get("batches", len(self)) != len(self):
            raise ValueError(
                f"TokenBatchLoader.load_state_dict: saved with seed={state.get('seed')} and "
                f"{state.get('batches')} batches, this loader has seed={self.seed} and {len(self)}: "
                "the order would differ"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
