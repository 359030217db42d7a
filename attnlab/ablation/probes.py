"""Frozen-feature probes: a classifier on a trained encoder's features (BERT's feature-based approach,
Devlin et al. 2019 section 5.3), cheap and low in variance, so that small models separate.

- ``sst2_features``: the mean of the final states of each sentence -> positive/negative, accuracy on dev;
- ``conll_features``: each word's first token's final state -> its IOB2 tag, entity F1 (seqeval) on dev;
- ``nsp_features`` / ``sop_features``: [CLS]'s final state of ``[CLS] A [SEP] B [SEP]`` built from the
  held-out pre-training documents -> next sentence or random one (NSP), in order or swapped (SOP); the
  pairs are split in halves, trained on one and scored on the other.

The classifier is the row's readout (`attnlab.ablation.classifiers`): softmax regression on standardised
features by default, a BiLSTM under it for BERT Table 5's "+ BiLSTM" row. Scores are percent.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from attnlab.ablation.classifiers import classify_sequences, classify_tokens
from attnlab.data.protocol import SpecialIds
from attnlab.io import load
from attnlab.io.api import family_of
from attnlab.metrics.ner import ner_metrics
from attnlab.models.gpt import GPT, position_ids_from_mask
from attnlab.tasks.registry import get_task, load_split
from attnlab.tasks.task_model import load_task_model
from attnlab.tokenizers import load_tokenizer


class CausalFeatures(torch.nn.Module):
    """A GPT's final states in an encoder's place (BERT Table 5's left-to-right row): ``forward`` returns
    ``last_hidden_state`` (B, T, H), each token's state seeing only the tokens before it."""

    def __init__(self, gpt: GPT, pad_token_id: int) -> None:
        super().__init__()
        self.gpt = gpt
        self.config = SimpleNamespace(pad_token_id=pad_token_id, type_vocab_size=0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: Any = None):
        g, t = self.gpt, input_ids.shape[1]
        x = g.embed(input_ids, position_ids_from_mask(attention_mask, t))  # (B, T, H)
        return SimpleNamespace(last_hidden_state=g.decoder(x, g.self_mask(t, 0, attention_mask, x)))


def load_encoder(model_dir: str | Path, device: str = "cpu") -> tuple[torch.nn.Module, Any]:
    """The encoder of a saved model directory (any of the family's pre-training or task models, or a GPT's
    decoder as `CausalFeatures`), in eval mode, with its tokenizer."""
    if family_of(model_dir).name == "gpt2":
        tokenizer = load_tokenizer(model_dir)
        gpt = load(model_dir, device=device)
        return CausalFeatures(gpt, SpecialIds.from_tokenizer(tokenizer).pad).eval(), tokenizer
    with warnings.catch_warnings():  # the task head is not used: its "newly initialised" warning is noise
        warnings.simplefilter("ignore")
        model = load_task_model(model_dir, "EncoderForTokenClassification", num_labels=2, device=device)
    return model.encoder.eval(), load_tokenizer(model_dir)


@torch.no_grad()
def encode_batches(
    encoder: torch.nn.Module, sequences: Sequence[tuple[list[int], list[int]]], batch_size: int = 64
) -> list[torch.Tensor]:
    """Final states (T_i, H) of each (ids, type_ids) sequence, batched with padding."""
    config = encoder.config
    device = next(encoder.parameters()).device
    out: list[torch.Tensor] = []
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start : start + batch_size]
        longest = max(len(ids) for ids, _ in chunk)
        ids = torch.full((len(chunk), longest), config.pad_token_id, dtype=torch.long)
        types = torch.zeros((len(chunk), longest), dtype=torch.long)
        mask = torch.zeros((len(chunk), longest), dtype=torch.long)
        for i, (seq, typ) in enumerate(chunk):
            ids[i, : len(seq)] = torch.tensor(seq)
            types[i, : len(typ)] = torch.tensor(typ)
            mask[i, : len(seq)] = 1
        token_types = types.to(device) if config.type_vocab_size > 0 else None
        hidden = encoder(ids.to(device), attention_mask=mask.to(device), token_type_ids=token_types)
        states = hidden.last_hidden_state.float().cpu()  # (B, T, H)
        out.extend(states[i, : len(seq)] for i, (seq, _) in enumerate(chunk))
    return out


def _cut(ids: list[int], types: list[int], max_length: int, sep: int) -> tuple[list[int], list[int]]:
    if len(ids) <= max_length:
        return ids, types
    return ids[: max_length - 1] + [sep], types[:max_length]


def sst2_features(model_dir: Path, data_dir: Path, *, examples: int, max_length: int, seed: int,
                  device: str = "cpu", readout: str = "linear") -> dict[str, Any]:  # fmt: skip
    """SST-2 dev accuracy of a classifier on the mean of each sentence's features (the linear readout's
    input; the BiLSTM's outputs are pooled the same way), trained on the first ``examples`` training
    sentences."""
    spec = get_task("sst2")
    train = load_split(spec, data_dir / "glue" / "SST-2", "train")[:examples]
    dev = load_split(spec, data_dir / "glue" / "SST-2", "dev")
    encoder, tokenizer = load_encoder(model_dir, device)
    sep = SpecialIds.from_tokenizer(tokenizer).sep

    def features(rows: Sequence[Any]) -> list[torch.Tensor]:
        seqs = []
        for row in rows:
            enc = tokenizer.encode(row.text_a)
            seqs.append(_cut(list(enc.ids), list(enc.type_ids), max_length, sep))
        return encode_batches(encoder, seqs)

    labels = sorted({r.label for r in train})
    y = torch.tensor([labels.index(r.label) for r in train])
    predicted = classify_sequences(
        readout, features(train), y, features(dev), len(labels), seed, "mean", device
    )
    gold = torch.tensor([labels.index(r.label) for r in dev])
    return {
        "accuracy": 100.0 * float((predicted == gold).float().mean()),
        "train": len(train),
        "dev": len(dev),
    }


def conll_features(model_dir: Path, data_dir: Path, *, examples: int, max_length: int, seed: int,
                   device: str = "cpu", readout: str = "linear") -> dict[str, Any]:  # fmt: skip
    """CoNLL-2003 dev entity F1 of a classifier on each word's first-token features (the BiLSTM readout
    runs over a sentence's words), trained on the first ``examples`` training sentences; words cut off by
    ``max_length`` are tagged O."""
    spec = get_task("conll2003")
    train = load_split(spec, data_dir / "conll2003", "train")[:examples]
    dev = load_split(spec, data_dir / "conll2003", "dev")[:examples]
    encoder, tokenizer = load_encoder(model_dir, device)
    sep = SpecialIds.from_tokenizer(tokenizer).sep
    tags = sorted({t for r in train for t in r.tags} | {"O"})

    def word_features(rows: Sequence[Any]) -> tuple[list[torch.Tensor], list[dict[int, int]]]:
        seqs, firsts = [], []
        for row in rows:
            enc = tokenizer.encode(list(row.words), is_pretokenized=True)
            ids, types = _cut(list(enc.ids), list(enc.type_ids), max_length, sep)
            first: dict[int, int] = {}
            for pos, word in enumerate(enc.word_ids[: len(ids)]):
                if word is not None and word not in first:
                    first[word] = pos
            seqs.append((ids, types))
            firsts.append(first)
        states = encode_batches(encoder, seqs)
        return [s[list(f.values())] if f else s[:0] for s, f in zip(states, firsts)], firsts

    train_states, train_firsts = word_features(train)
    y = [torch.tensor([tags.index(r.tags[w]) for w in f], dtype=torch.long)
         for r, f in zip(train, train_firsts)]  # fmt: skip
    dev_states, dev_firsts = word_features(dev)
    predicted = classify_tokens(readout, train_states, y, dev_states, len(tags), seed, device)
    y_pred = []
    for row, first, classes in zip(dev, dev_firsts, predicted):
        words = ["O"] * len(row.words)
        for w, c in zip(first, classes.tolist()):
            words[w] = tags[c]
        y_pred.append(words)
    scores = ner_metrics([list(r.tags) for r in dev], y_pred)
    return {"f1": 100.0 * scores["f1"], "accuracy": 100.0 * scores["accuracy"], "train": len(train),
            "dev": len(dev)}  # fmt: skip


def sentence_pairs(heldout: Any, task: str, n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Up to ``n`` (A, B, label) pairs of consecutive held-out sentences: NSP's negatives take B from
    another document, SOP's swap A and B (label 1: as written)."""
    rng = random.Random(seed)
    docs = [heldout.document(d) for d in range(heldout.n_documents)]
    docs = [d for d in docs if len(d) >= 2]
    if len(docs) < 2:
        raise ValueError(f"{task} probe: the held-out corpus has fewer than 2 documents of 2 sentences")
    candidates = [(d, i) for d, doc in enumerate(docs) for i in range(len(doc) - 1)]
    rng.shuffle(candidates)
    pairs = []
    for d, i in candidates[:n]:
        a, b = docs[d][i], docs[d][i + 1]
        if rng.random() < 0.5:
            pairs.append((a, b, 1))
        elif task == "nsp":
            other = rng.choice([k for k in range(len(docs)) if k != d])
            pairs.append((a, rng.choice(docs[other]), 0))
        else:
            pairs.append((b, a, 0))
    return pairs


def pair_sequences(
    pairs: Sequence[tuple[np.ndarray, np.ndarray, int]],
    special: SpecialIds,
    max_length: int,
    junction: bool = False,
) -> list[tuple[list[int], list[int]]]:
    """``[CLS] A [SEP] B [SEP]`` (ids, token types) of each pair, each sentence cut to ``(L - 3) // 2``
    tokens: its first ones, or A's last ones (``junction``: keeps where the two sentences meet)."""
    half = (max_length - 3) // 2
    seqs = []
    for a, b, _ in pairs:
        a = [int(t) for t in (a[-half:] if junction else a[:half])]
        b = [int(t) for t in b[:half]]
        seqs.append(
            ([special.cls, *a, special.sep, *b, special.sep], [0] * (len(a) + 2) + [1] * (len(b) + 1))
        )
    return seqs


def pair_features(model_dir: Path, heldout: Any, task: str, *, examples: int, max_length: int, seed: int,
                  device: str = "cpu", readout: str = "linear") -> dict[str, Any]:  # fmt: skip
    """NSP or SOP accuracy of a classifier on [CLS]'s final state (the BiLSTM's output there), trained on
    half the pairs and scored on the other half."""
    encoder, tokenizer = load_encoder(model_dir, device)
    pairs = sentence_pairs(heldout, task, examples, seed=0)  # the same pairs for every model
    states = encode_batches(encoder, pair_sequences(pairs, SpecialIds.from_tokenizer(tokenizer), max_length))
    y = torch.tensor([label for _, _, label in pairs])
    cut = len(pairs) // 2
    predicted = classify_sequences(readout, states[:cut], y[:cut], states[cut:], 2, seed, "first", device)
    return {"accuracy": 100.0 * float((predicted == y[cut:]).float().mean()), "pairs": len(pairs)}
