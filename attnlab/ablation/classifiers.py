"""The classifiers a frozen-feature probe trains on an encoder's final states, chosen per row (`Row.readout`):

- ``linear``: softmax regression on standardised features, full-batch L-BFGS with a fixed L2 penalty (BERT's
  feature-based approach, Devlin et al. 2019 section 5.3, with one layer's states);
- ``bilstm``: a BiLSTM over the standardised states, then the same linear layer on its outputs (BERT Table
  5's "+ BiLSTM" row; its size is Table 7's feature-based BiLSTM, two layers as wide as the features),
  trained with Adam for a fixed number of epochs.

Both read out a sequence's label from the mean of its states (``pool="mean"``) or its first state
(``pool="first"``, [CLS]), and a token's label from its own state. Nothing is chosen on the evaluation data.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

READOUTS = ("linear", "bilstm")
POOLS = ("mean", "first")
L2 = 1e-3  # the linear classifier's weight penalty, per feature dimension, fixed before any result
LBFGS_STEPS = 100
BILSTM_LAYERS = 2  # Devlin et al. 2019, Table 7: "a two-layer 768-dimensional BiLSTM" at H = 768
BILSTM_EPOCHS = 5
BILSTM_LR = 3e-3
BILSTM_BATCH = 32


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
    return states.mean(0) if pool == "mean" else states[0]


def _check(readout: str, pool: str | None = None) -> None:
    if readout not in READOUTS:
        raise ValueError(f"readout: expected one of {', '.join(READOUTS)}, got {readout!r}")
    if pool is not None and pool not in POOLS:
        raise ValueError(f"pool: expected one of {', '.join(POOLS)}, got {pool!r}")


def classify_sequences(
    readout: str, train: Sequence[torch.Tensor], train_y: torch.Tensor, test: Sequence[torch.Tensor],
    n_classes: int, seed: int, pool: str = "mean",
) -> torch.Tensor:  # fmt: skip
    """One label per sequence of states (T_i, H): the predicted class of each test sequence."""
    _check(readout, pool)
    if readout == "linear":
        pooled = [torch.stack([_pool(s, pool) for s in part]) for part in (train, test)]
        return linear_probe(pooled[0], train_y, pooled[1], n_classes, seed)
    labels = [y.reshape(1) for y in train_y]
    return torch.cat(_bilstm(train, labels, test, n_classes, seed, pool))


def classify_tokens(
    readout: str, train: Sequence[torch.Tensor], train_y: Sequence[torch.Tensor],
    test: Sequence[torch.Tensor], n_classes: int, seed: int,
) -> list[torch.Tensor]:  # fmt: skip
    """One label per state: ``train_y[i]`` (T_i,) labels ``train[i]`` (T_i, H); the predicted classes of each
    test sequence."""
    _check(readout)
    if readout == "bilstm":
        return _bilstm(train, list(train_y), test, n_classes, seed, None)
    lengths = [len(s) for s in test]
    predicted = linear_probe(torch.cat(list(train)), torch.cat(list(train_y)), torch.cat(list(test)),
                             n_classes, seed)  # fmt: skip
    return list(predicted.split(lengths))


class BiLSTMReadout(nn.Module):
    """A BiLSTM over (B, T, H) states, then a linear layer on each output or on their pool."""

    def __init__(self, width: int, n_classes: int, pool: str | None) -> None:
        super().__init__()
        self.pool = pool
        self.lstm = nn.LSTM(width, width, num_layers=BILSTM_LAYERS, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(2 * width, n_classes)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, C) per token, or (B, C) per sequence when pooled; padding beyond ``lengths``."""
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=x.shape[1])
        if self.pool == "mean":  # (B, 2H): the mean over each sequence's own positions
            valid = (torch.arange(x.shape[1])[None, :] < lengths[:, None]).unsqueeze(-1)
            out = (out * valid).sum(1) / lengths[:, None]
        elif self.pool == "first":
            out = out[:, 0]
        return self.linear(out)


def _bilstm(
    train: Sequence[torch.Tensor], train_y: Sequence[torch.Tensor], test: Sequence[torch.Tensor],
    n_classes: int, seed: int, pool: str | None,
) -> list[torch.Tensor]:  # fmt: skip
    """Train a `BiLSTMReadout` (per token, or per sequence with ``pool``); each test sequence's classes."""
    torch.manual_seed(seed)
    kept = [i for i, s in enumerate(train) if len(s)]  # a sentence cut to nothing teaches nothing
    train, train_y = [train[i] for i in kept], [train_y[i] for i in kept]
    every = torch.cat(train)
    mean, std = every.mean(0), every.std(0).clamp_min(1e-6)
    model = BiLSTMReadout(every.shape[1], n_classes, pool)
    optimizer = torch.optim.Adam(model.parameters(), lr=BILSTM_LR)
    order = torch.Generator().manual_seed(seed)

    def batch(states: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = torch.tensor([len(s) for s in states])
        return pad_sequence([(s - mean) / std for s in states], batch_first=True), lengths

    model.train()
    with torch.enable_grad():
        for _ in range(BILSTM_EPOCHS):
            for idx in torch.randperm(len(train), generator=order).split(BILSTM_BATCH):
                x, lengths = batch([train[i] for i in idx])
                targets = pad_sequence([train_y[i] for i in idx], batch_first=True, padding_value=-100)
                logits = model(x, lengths)
                loss = nn.functional.cross_entropy(logits.reshape(-1, n_classes), targets.reshape(-1))
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
            predicted = model(x, lengths).argmax(-1)
            out.extend(predicted[i : i + 1] if pool else predicted[i, : len(s)] for i, s in enumerate(chunk))
    return out
