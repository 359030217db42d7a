"""`ElmoBiLM`: the bidirectional language model whose layers are ELMo (Peters et al. 2018, section 3.1).

    char ids (B, T, C) with <S> ... </S> -> CharCNN -> x (B, T, P)            layer 0 (as [x; x], 2P)
        -> BiLSTMStack: forward and backward LSTMP layers, residual          layers 1..L (B, T, 2P)
        -> shared softmax: forward state at t predicts word t+1, backward state at t predicts word t-1

The token encoder and the softmax are shared by the two directions (section 3.1: "tie the parameters for
both the token representation and Softmax layer in the forward and backward direction"). The loss is the
mean of the two directions' mean negative log-likelihoods (bilm-tf's 0.5 * (forward + backward)).
The softmax is a full one, or torch's adaptive softmax (Grave et al. 2017) for large vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models.elmo.char_cnn import CharCNN
from attnlab.models.elmo.config import ElmoConfig
from attnlab.models.elmo.lstm import BiLSTMStack


class WordSoftmax(nn.Module):
    """``nll(hidden (N, P), target (N,)) -> (N,)`` over ``vocab_size`` words: full or adaptive."""

    def __init__(self, dim: int, vocab_size: int, cutoffs: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        if cutoffs:
            self.adaptive = nn.AdaptiveLogSoftmaxWithLoss(dim, vocab_size, list(cutoffs), div_value=4.0)
            self.linear = None
        else:
            self.adaptive = None
            self.linear = Linear(dim, vocab_size)

    def nll(self, hidden: Tensor, target: Tensor) -> Tensor:
        if self.adaptive is not None:
            return -self.adaptive(hidden, target).output  # (N,)
        return F.cross_entropy(self.linear(hidden).float(), target, reduction="none")

    def log_prob(self, hidden: Tensor) -> Tensor:  # (N, V)
        if self.adaptive is not None:
            return self.adaptive.log_prob(hidden)
        return torch.log_softmax(self.linear(hidden).float(), dim=-1)


@dataclass
class ElmoOutput:
    layers: list[Tensor]  # L+1 tensors (B, T, 2P): [x; x], then each LSTM layer (forward half first)
    mask: Tensor  # (B, T) bool
    loss: Tensor | None = None  # 0.5 * (forward + backward mean NLL)
    nll_forward: Tensor | None = None  # summed over the predicted words
    nll_backward: Tensor | None = None
    num_predictions: Tensor | None = None  # words predicted per direction
    metrics: dict[str, Tensor] = field(default_factory=dict)


class ElmoBiLM(nn.Module):
    def __init__(self, config: ElmoConfig) -> None:
        super().__init__()
        self.config = config
        self.token_encoder = CharCNN(config)
        self.lstm = BiLSTMStack(
            config.projection_dim, config.cell_size, config.projection_dim, config.num_layers,
            residual=config.residual, cell_clip=config.cell_clip, proj_clip=config.proj_clip,
            dropout=config.dropout,
        )  # fmt: skip
        self.dropout = nn.Dropout(config.dropout)
        self.softmax = (
            WordSoftmax(config.projection_dim, config.vocab_size, config.adaptive_cutoffs)
            if config.vocab_size
            else None
        )

    @classmethod
    def from_config(cls, config: ElmoConfig) -> ElmoBiLM:
        return cls(config)

    @property
    def num_layers(self) -> int:  # representations: the token layer and every LSTM layer
        return self.config.num_layers + 1

    def set_stateful(self, stateful: bool) -> None:
        """Keep each LSTM's final state for the next batch (long documents in pieces); off by default."""
        self.lstm.stateful = stateful
        self.lstm.reset_states()

    def reset_states(self) -> None:
        self.lstm.reset_states()

    def forward(
        self, char_ids: Tensor, mask: Tensor | None = None, word_ids: Tensor | None = None
    ) -> ElmoOutput:
        """``char_ids`` (B, T, C) with the sentence markers, ``mask`` (B, T) (default: non-zero rows);
        ``word_ids`` (B, T) softmax ids of the same tokens (-100 where nothing is predicted) give the loss."""
        if mask is None:
            mask = (char_ids > 0).any(dim=-1)
        mask = mask.bool()
        x = self.token_encoder(char_ids)  # (B, T, P)
        layers = [torch.cat([x, x], dim=-1)] + self.lstm(self.dropout(x), mask)
        out = ElmoOutput(layers=layers, mask=mask)
        if word_ids is None:
            return out
        if self.softmax is None:
            raise ValueError("ElmoBiLM: this model has no softmax (vocab_size 0), so it cannot score words")
        P = self.config.projection_dim
        top = self.dropout(layers[-1])
        fwd, bwd = top[:, :-1, :P], top[:, 1:, P:]  # (B, T-1, P): forward at t -> t+1; backward at t+1 -> t
        nll_f = self._nll(fwd, word_ids[:, 1:])
        nll_b = self._nll(bwd, word_ids[:, :-1])
        n = (word_ids[:, 1:] != -100).sum()
        out.nll_forward, out.nll_backward, out.num_predictions = nll_f, nll_b, n
        denom = n.clamp(min=1)
        out.loss = 0.5 * (nll_f + nll_b) / denom
        out.metrics = {
            "ppl_forward": torch.exp(nll_f.detach() / denom),
            "ppl_backward": torch.exp(nll_b.detach() / denom),
        }
        return out

    def _nll(self, hidden: Tensor, target: Tensor) -> Tensor:  # summed NLL over target != -100
        keep = target != -100
        return self.softmax.nll(hidden[keep], target[keep]).sum()


def count_parameters(model: ElmoBiLM, softmax: bool = False) -> int:
    """Parameters as the released files count them: the frozen zero ``bias_hh`` (one bias per gate) and the
    padded-token row of the character embedding are not parameters there; the softmax only if asked."""
    total = 0
    for name, p in model.named_parameters():
        if name.startswith("softmax.") and not softmax:
            continue
        if name.endswith("bias_hh_l0"):
            continue
        total += p.numel()
    return total - model.config.char_dim
