"""The classifiers a frozen-feature probe trains on an encoder's final states, chosen per row (`Row.readout`):

- ``linear``: softmax regression on standardised features, full-batch L-BFGS with a fixed L2 penalty. A
  deliberate simplification of BERT's feature-based approach (Devlin et al. 2019, section 5.3, which puts a
  BiLSTM under the classifier): cheap, and as low in variance as a classifier gets;
- ``bilstm``: section 5.3's readout, for BERT Table 5's "+ BiLSTM" row: a BiLSTM over the standardised
  states ("a randomly initialized two-layer 768-dimensional BiLSTM" at H = 768; here two layers of H units
  a direction), then a softmax layer on its 2H outputs, all trained with Adam and no weight penalty.

Both read out a sequence's label from the mean of its states (``pool="mean"``) or its first state
(``pool="first"``, [CLS]), and a token's label from its own state. Every setting below was fixed before any
result; nothing is chosen on the evaluation data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

from attnlab.ablation.table import READOUTS

POOLS = ("mean", "first")
L2 = 1e-3  # the linear classifier's weight penalty, per feature dimension
LBFGS_STEPS = 100
# the BiLSTM's training: a fixed number of passes (no early stopping on the evaluation data); the learning
# rate was checked on synthetic sequences only (tests/ablation/test_classifiers.py)
BILSTM = {"layers": 2, "epochs": 5, "lr": 3e-3, "batch": 32}


def readout_key(readout: str) -> Any:
    """What identifies a readout in a probe run's configuration: its name and, for the BiLSTM, its training
    settings (so that changing one is another run)."""
    return readout if readout == "linear" else {"kind": readout, **BILSTM}


def linear_probe(
    train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, n_classes: int, seed: int
) -> torch.Tensor:
    """Softmax regression on standardised features (N, H); the predicted class of each test row."""
    torch.manual_seed(seed)
    mean, std = train_x.mean(0), train_x.std(0).clamp_min(1e-6)
    x, t = (train_x - mean) / std, (test_x - mean) / std
    linear = nn.Linear(x.shape[1], n_classes)
    optimizer = torch.optim.LBFGS(linear.parameters(), max_iter=LBFGS_STEPS, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(linear(x), train_y) + L2 * linear.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    with torch.no_grad():
        return linear(t).argmax(-1)


def _pool(states: torch.Tensor, pool: str) -> torch.Tensor:
    """(T, H) -> (H,): the mean of the states or the first one."""
    return states.mean(0) if pool == "mean" else states[0]


def _check(
    readout: str, pool: str | None, train: Sequence[torch.Tensor], test: Sequence[torch.Tensor]
) -> None:
    if readout not in READOUTS:
        raise ValueError(f"readout: expected one of {', '.join(READOUTS)}, got {readout!r}")
    if pool is not None and pool not in POOLS:
        raise ValueError(f"pool: expected one of {', '.join(POOLS)}, got {pool!r}")
    if not any(len(s) for s in train):
        raise ValueError(f"{readout} readout: every one of the {len(train)} training sequences is empty")
    if pool is not None and not all(len(s) for s in test):
        empty = [i for i, s in enumerate(test) if not len(s)]
        raise ValueError(
            f"{readout} readout: test sequence(s) {empty[:5]} are empty; a pooled label needs a state"
        )


def classify_sequences(
    readout: str, train: Sequence[torch.Tensor], train_y: torch.Tensor, test: Sequence[torch.Tensor],
    n_classes: int, seed: int, pool: str = "mean", device: str = "cpu",
) -> torch.Tensor:  # fmt: skip
    """One label per sequence of states (T_i, H): the predicted class of each test sequence. The linear
    readout runs on the CPU; the BiLSTM on ``device``."""
    _check(readout, pool, train, test)
    if readout == "linear":
        pooled = [torch.stack([_pool(s, pool) for s in part]) for part in (train, test)]
        return linear_probe(pooled[0], train_y, pooled[1], n_classes, seed)
    labels = [y.reshape(1) for y in train_y]
    return torch.cat(_bilstm(train, labels, test, n_classes, seed, pool, device))


def classify_tokens(
    readout: str, train: Sequence[torch.Tensor], train_y: Sequence[torch.Tensor],
    test: Sequence[torch.Tensor], n_classes: int, seed: int, device: str = "cpu",
) -> list[torch.Tensor]:  # fmt: skip
    """One label per state: ``train_y[i]`` (T_i,) labels ``train[i]`` (T_i, H); the predicted classes of each
    test sequence (an empty one gets none)."""
    _check(readout, None, train, test)
    if readout == "bilstm":
        return _bilstm(train, list(train_y), test, n_classes, seed, None, device)
    lengths = [len(s) for s in test]
    predicted = linear_probe(torch.cat(list(train)), torch.cat(list(train_y)), torch.cat(list(test)),
                             n_classes, seed)  # fmt: skip
    return list(predicted.split(lengths))


class BiLSTMReadout(nn.Module):
    """A BiLSTM over (B, T, H) states, then a linear layer on each output or on their pool."""

    def __init__(self, width: int, n_classes: int, pool: str | None) -> None:
        super().__init__()
        self.pool = pool
        self.lstm = nn.LSTM(width, width, num_layers=BILSTM["layers"], batch_first=True, bidirectional=True)
        self.linear = nn.Linear(2 * width, n_classes)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, C) per token, or (B, C) per sequence when pooled; ``x`` beyond ``lengths`` (B,)
        is padding, which nothing reads (packed)."""
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=x.shape[1])
        if self.pool == "mean":  # (B, 2H): the mean over each sequence's own positions
            valid = (torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]).unsqueeze(-1)
            out = (out * valid).sum(1) / lengths[:, None]
        elif self.pool == "first":
            out = out[:, 0]  # (B, 2H)
        return self.linear(out)


def _bilstm(
    train: Sequence[torch.Tensor], train_y: Sequence[torch.Tensor], test: Sequence[torch.Tensor],
    n_classes: int, seed: int, pool: str | None, device: str,
) -> list[torch.Tensor]:  # fmt: skip
    """Train a `BiLSTMReadout` (per token, or per sequence with ``pool``); each test sequence's classes."""
    torch.manual_seed(seed)
    kept = [i for i, s in enumerate(train) if len(s)]  # a sentence cut to nothing teaches nothing
    train, train_y = [train[i] for i in kept], [train_y[i] for i in kept]
    every = torch.cat(train)
    mean, std = every.mean(0), every.std(0).clamp_min(1e-6)
    model = BiLSTMReadout(every.shape[1], n_classes, pool).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=BILSTM["lr"])
    order = torch.Generator().manual_seed(seed)

    def batch(states: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T_max, H) standardised and padded, and the lengths (B,)."""
        lengths = torch.tensor([len(s) for s in states], device=device)
        return pad_sequence([(s - mean) / std for s in states], batch_first=True).to(device), lengths

    model.train()
    with torch.enable_grad():
        for _ in range(BILSTM["epochs"]):
            for idx in torch.randperm(len(train), generator=order).split(BILSTM["batch"]):
                x, lengths = batch([train[i] for i in idx])
                targets = pad_sequence([train_y[i] for i in idx], batch_first=True, padding_value=-100)
                logits = model(x, lengths)
                loss = nn.functional.cross_entropy(
                    logits.reshape(-1, n_classes), targets.to(device).reshape(-1)
                )
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    model.eval()
    out: list[torch.Tensor] = []
    with torch.no_grad():
        for start in range(0, len(test), 256):
            chunk = test[start : start + 256]
            nonempty = [s if len(s) else s.new_zeros(1, s.shape[-1]) for s in chunk]  # packing needs >= 1
            x, lengths = batch(nonempty)
            predicted = model(x, lengths).argmax(-1).cpu()
            out.extend(predicted[i : i + 1] if pool else predicted[i, : len(s)] for i, s in enumerate(chunk))
    return out
