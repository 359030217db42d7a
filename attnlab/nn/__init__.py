"""attnlab.nn: the Transformer's paper-agnostic parts (see docs/architecture.md)."""

from attnlab.nn.activations import ACTIVATIONS, SigmoidGELU, get_activation
from attnlab.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from attnlab.nn.embeddings import POSITION_EMBEDDINGS, Embeddings, offset_position_ids, sinusoidal_table
from attnlab.nn.feedforward import FeedForward
from attnlab.nn.highway import Highway
from attnlab.nn.masks import causal_mask, combine_masks, padding_mask, to_additive
from attnlab.nn.residual import Residual
from attnlab.nn.scalar_mix import ScalarMix

__all__ = [
    "ACTIVATIONS",
    "POSITION_EMBEDDINGS",
    "Embeddings",
    "FeedForward",
    "Highway",
    "MultiHeadAttention",
    "Residual",
    "ScalarMix",
    "SigmoidGELU",
    "causal_mask",
    "combine_masks",
    "get_activation",
    "offset_position_ids",
    "padding_mask",
    "scaled_dot_product_attention",
    "sinusoidal_table",
    "to_additive",
]
