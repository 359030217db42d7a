"""`CharCNN`: ELMo's context-independent token encoder (Peters et al. 2018, section 3.4).

character ids (B, T, C) -> embeddings (B*T, E, C) -> one Conv1d per filter width -> max over positions
-> activation -> concatenated (B*T, F) -> highway layers -> linear projection (B, T, P).
The max-pool comes before the activation, as in the released code (for relu/tanh the order does not matter
mathematically; it is kept so that numbers match to the last bit). A padded token (all-zero ids) uses the
zero row of the embedding and its vector is whatever the network makes of it; the biLM masks it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models.elmo.config import CHAR_VOCAB_SIZE, ElmoConfig
from attnlab.nn.highway import Highway

_ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh}


class CharCNN(nn.Module):
    def __init__(self, config: ElmoConfig) -> None:
        super().__init__()
        self.config = config
        self.char_embedding = nn.Embedding(CHAR_VOCAB_SIZE, config.char_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_dim, count, kernel_size=width) for width, count in config.filters
        )
        self.activation = _ACTIVATIONS[config.char_activation]
        self.highway = Highway(config.num_filters, config.num_highway)
        self.projection = Linear(config.num_filters, config.projection_dim)

    def forward(self, char_ids: Tensor) -> Tensor:
        """``char_ids`` (B, T, C) -> token vectors (B, T, P)."""
        B, T, C = char_ids.shape
        x = self.char_embedding(char_ids.view(B * T, C)).transpose(1, 2)  # (B*T, E, C)
        pooled = [self.activation(conv(x).max(dim=-1).values) for conv in self.convolutions]  # (B*T, n_i)
        h = self.highway(torch.cat(pooled, dim=-1))  # (B*T, F)
        return self.projection(h).view(B, T, -1)  # (B, T, P)
