"""Input embeddings: tokens + positions (+ segments), LayerNorm, dropout, optional E -> H projection.

Shapes: B batch, T sequence, V vocabulary, P max positions, E embedding size, H hidden size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import Linear

POSITION_EMBEDDINGS = ("learned", "sinusoidal")


def sinusoidal_table(num_positions: int, dim: int) -> Tensor:
    """The sin/cos table of Vaswani et al. 2017, section 3.5: ``(P, dim)`` float32 with

    ``PE[pos, 2i] = sin(pos / 10000^(2i/dim))`` and ``PE[pos, 2i+1] = cos(pos / 10000^(2i/dim))``.
    """
    position = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    angles = position * inv_freq  # (P, ceil(dim/2))
    table = torch.zeros(num_positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return table.float()


def offset_position_ids(input_ids: Tensor, pad_token_id: int, position_offset: int) -> Tensor:
    """RoBERTa-style positions computed from ``input_ids`` (B, T) -> (B, T) int64.

    Real tokens are numbered ``position_offset, position_offset + 1, ...`` and padding tokens get
    ``position_offset - 1`` (= ``pad_token_id`` when ``position_offset = pad_token_id + 1``, as
    fairseq/HF RoBERTa do: positions start after the padding index).
    """
    not_pad = input_ids.ne(pad_token_id)
    return (torch.cumsum(not_pad, dim=1) * not_pad).long() + (position_offset - 1)


class Embeddings(nn.Module):
    """``project(dropout(norm(word + position + token_type)))``.

    - ``word``: Embedding V x E; ``position``: Embedding P x E (learned, BERT) or a non-persistent
      sin/cos buffer P x E (sinusoidal, the original Transformer); ``token_type``: Embedding T x E,
      absent when ``type_vocab_size == 0`` (DistilBERT, RoBERTa has 1).
    - ``position_offset > 0``: positions computed from ``input_ids`` (see `offset_position_ids`).
    - ``project``: Linear E -> H, only when E != H (ALBERT's factorised embedding, Lan et al. 2020
      section 3.1; ELECTRA's smaller generators). Applied after LayerNorm/dropout, as ALBERT/ELECTRA do.

    Deviation from HF: no ``padding_idx`` on the word embedding (Google's BERT code has none; it
    only zeroes one row at initialisation and freezes its gradient).
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_size: int,
        hidden_size: int,
        max_positions: int,
        type_vocab_size: int = 2,
        position_embedding: str = "learned",
        position_offset: int = 0,
        pad_token_id: int = 0,
        dropout: float = 0.1,
        eps: float = 1e-12,
    ) -> None:
        super().__init__()
        if position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"unknown position_embedding {position_embedding!r}; valid: {', '.join(POSITION_EMBEDDINGS)}"
            )
        self.max_positions = max_positions
        self.position_offset = position_offset
        self.pad_token_id = pad_token_id
        self.word = nn.Embedding(vocab_size, embedding_size)
        if position_embedding == "learned":
            self.position = nn.Embedding(max_positions, embedding_size)
        else:
            self.register_buffer(
                "position", sinusoidal_table(max_positions, embedding_size), persistent=False
            )
        self.token_type = nn.Embedding(type_vocab_size, embedding_size) if type_vocab_size > 0 else None
        self.norm = nn.LayerNorm(embedding_size, eps=eps)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.project = Linear(embedding_size, hidden_size) if embedding_size != hidden_size else None

    @torch.no_grad()
    def tile_positions(self, trained: int, length: int) -> bool:
        """Learned positions ``trained .. length - 1`` (after ``position_offset``) become copies of the
        ``trained`` positions before them, repeated: how Longformer started the positions RoBERTa never had
        (Beltagy et al. 2020, section 5: "copying the 512 position embeddings from RoBERTa multiple times"),
        so that a longer length stage starts from positions that already carry a local order. False (and
        nothing changed) for a sinusoidal table, which has no trained rows."""
        if not isinstance(self.position, nn.Embedding):
            return False
        if not 0 < trained < length <= self.max_positions - self.position_offset:
            raise ValueError(
                f"tile_positions: expected 0 < trained ({trained}) < length ({length}) <= "
                f"{self.max_positions - self.position_offset} positions"
            )
        w, o = self.position.weight, self.position_offset
        w[o + trained : o + length] = w[o : o + trained].repeat(math.ceil(length / trained) - 1, 1)[
            : length - trained
        ]
        return True

    def position_ids(self, input_ids: Tensor) -> Tensor:
        """Default positions: ``arange(T)`` broadcast (1, T), or offset ones (B, T) (RoBERTa)."""
        if self.position_offset > 0:
            return offset_position_ids(input_ids, self.pad_token_id, self.position_offset)
        return torch.arange(input_ids.size(1), device=input_ids.device)[None]

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, position_ids: Tensor | None = None
    ) -> Tensor:
        """(B, T) ids -> (B, T, H). ``token_type_ids`` default to 0 (ignored without segment embeddings)."""
        if position_ids is None:
            position_ids = self.position_ids(input_ids)
        if isinstance(self.position, nn.Embedding):
            pos = self.position(position_ids)
        else:
            pos = self.position[position_ids]
        x = self.word(input_ids) + pos  # (B, T, E)
        if self.token_type is not None:
            if token_type_ids is None:
                x = x + self.token_type.weight[0]
            else:
                x = x + self.token_type(token_type_ids)
        x = self.dropout(self.norm(x))
        return self.project(x) if self.project is not None else x  # (B, T, H)
