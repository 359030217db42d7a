"""Pre-training heads over the encoder's outputs.

Shapes: B batch, T sequence, H hidden, E' the MLM head's width, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models.config import EncoderConfig
from attnlab.nn.activations import get_activation


class MaskedLMHead(nn.Module):
    """Masked-LM head (Devlin et al. 2019, section 3.1 task 1): ``decoder(norm(act(dense(h)))) + bias``.

    ``dense``: Linear H -> E'; ``norm``: LayerNorm E'; ``decoder``: Linear E' -> V without bias, its
    weight tied to the word embedding (`tie_to`); ``bias``: (V,) output bias. E' = H for BERT/RoBERTa
    and E for ALBERT/ELECTRA, whose word embeddings have size E.
    """

    def __init__(
        self,
        hidden_size: int,
        embedding_size: int,
        vocab_size: int,
        activation: str = "gelu",
        eps: float = 1e-12,
    ) -> None:
        super().__init__()
        self.dense = Linear(hidden_size, embedding_size)
        self.activation = get_activation(activation)
        self.norm = nn.LayerNorm(embedding_size, eps=eps)
        self.decoder = Linear(embedding_size, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    @classmethod
    def from_config(cls, config: EncoderConfig) -> MaskedLMHead:
        return cls(
            config.hidden_size,
            config.embedding_dim,
            config.vocab_size,
            config.activation,
            config.layer_norm_eps,
        )

    def tie_to(self, word_embedding: nn.Embedding) -> None:
        """Share the output projection with the input embedding (Press & Wolf 2017), by assignment."""
        if tuple(word_embedding.weight.shape) != tuple(self.decoder.weight.shape):
            raise ValueError(
                f"cannot tie MLM decoder {tuple(self.decoder.weight.shape)} to word embedding "
                f"{tuple(word_embedding.weight.shape)}: shapes differ"
            )
        self.decoder.weight = word_embedding.weight

    def forward(self, hidden: Tensor) -> Tensor:
        """(B, T, H) -> logits (B, T, V)."""
        return self.decoder(self.norm(self.activation(self.dense(hidden)))) + self.bias


class SentencePairHead(nn.Module):
    """Two-way classifier over the pooled [CLS] output: NSP (BERT) or sentence-order prediction (ALBERT)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.classifier = Linear(hidden_size, 2)

    @classmethod
    def from_config(cls, config: EncoderConfig) -> SentencePairHead:
        return cls(config.hidden_size)

    def forward(self, pooled: Tensor) -> Tensor:
        """(B, H) -> logits (B, 2); for NSP class 0 = "IsNext" (B follows A), 1 = "NotNext"."""
        return self.classifier(pooled)


class ReplacedTokenHead(nn.Module):
    """ELECTRA's discriminator head (Clark et al. 2020, section 2): ``classifier(act(dense(h)))``.

    One logit per token: > 0 means "replaced by the generator".
    """

    def __init__(self, hidden_size: int, activation: str = "gelu") -> None:
        super().__init__()
        self.dense = Linear(hidden_size, hidden_size)
        self.activation = get_activation(activation)
        self.classifier = Linear(hidden_size, 1)

    @classmethod
    def from_config(cls, config: EncoderConfig) -> ReplacedTokenHead:
        return cls(config.hidden_size, config.activation)

    def forward(self, hidden: Tensor) -> Tensor:
        """(B, T, H) -> logits (B, T)."""
        return self.classifier(self.activation(self.dense(hidden))).squeeze(-1)
