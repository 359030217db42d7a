"""The Transformer's parts: sinusoidal table, activations, feed-forward, residual, embeddings."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnlab.nn import (
    ACTIVATIONS,
    Embeddings,
    FeedForward,
    Residual,
    get_activation,
    offset_position_ids,
    sinusoidal_table,
)


# -- sinusoidal positions (Vaswani et al. 2017, section 3.5) ------------------------------------------
def test_sinusoidal_golden_values() -> None:
    pe = sinusoidal_table(50, 8)
    assert pe.shape == (50, 8) and pe.dtype == torch.float32
    assert pe[0].tolist() == [0.0, 1.0] * 4  # sin(0), cos(0)
    # PE(1, 0) = sin(1), PE(1, 1) = cos(1)
    assert pe[1, 0].item() == pytest.approx(0.8414709848, abs=1e-7)
    assert pe[1, 1].item() == pytest.approx(0.5403023059, abs=1e-7)
    # PE(2, 2i=2) = sin(2 / 10000^(2/8)) = sin(0.2)
    assert pe[2, 2].item() == pytest.approx(math.sin(0.2), abs=1e-7)
    # PE(49, 2i+1=7) = cos(49 / 10000^(6/8)) = cos(0.049)
    assert pe[49, 7].item() == pytest.approx(math.cos(0.049), abs=1e-7)


@pytest.mark.parametrize("dim", [6, 7, 16])
def test_sinusoidal_matches_formula_everywhere(dim: int) -> None:
    pe = sinusoidal_table(20, dim)
    for pos in range(20):
        for j in range(dim):
            angle = pos / 10000 ** ((j - j % 2) / dim)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert pe[pos, j].item() == pytest.approx(expected, abs=1e-6)


# -- activations --------------------------------------------------------------------------------------
X = torch.linspace(-5, 5, 101, dtype=torch.float64)
FORMULAS = {
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "gelu_sigmoid": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": lambda x: x.clamp(min=0),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_match_formulas(name: str) -> None:
    torch.testing.assert_close(get_activation(name)(X), FORMULAS[name](X))


def test_activation_golden_and_distinct() -> None:
    assert get_activation("gelu")(torch.tensor(1.0)).item() == pytest.approx(0.8413447460685429, abs=1e-6)
    one = {name: get_activation(name)(torch.tensor(1.0)).item() for name in ACTIVATIONS}
    assert len({round(v, 6) for v in one.values()}) == 4  # the approximations really differ


def test_unknown_activation_lists_valid() -> None:
    with pytest.raises(
        ValueError, match="unknown activation 'swish'; valid: gelu, gelu_sigmoid, gelu_tanh, relu"
    ):
        get_activation("swish")


# -- feed-forward and residual ------------------------------------------------------------------------
def test_feed_forward_is_down_act_up() -> None:
    torch.manual_seed(0)
    ff = FeedForward(8, 20, activation="relu")
    assert ff.up.weight.shape == (20, 8) and ff.down.weight.shape == (8, 20)
    x = torch.randn(2, 3, 8)
    expected = ff.down.bias + torch.relu(x @ ff.up.weight.T + ff.up.bias) @ ff.down.weight.T
    torch.testing.assert_close(ff(x), expected)


class Double(nn.Module):
    def forward(self, x: torch.Tensor, extra: float = 0.0) -> torch.Tensor:
        return 2 * x + extra


def _ln(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)


def test_post_ln_structure() -> None:
    r = Residual(Double(), 6, dropout=0.0, norm_first=False)
    x = torch.randn(3, 4, 6)
    torch.testing.assert_close(r(x, extra=1.0), _ln(x + 2 * x + 1.0))  # norm(x + f(x))
    assert torch.allclose(r(x).mean(-1), torch.zeros(3, 4), atol=1e-5)  # output is normalised


def test_pre_ln_structure() -> None:
    r = Residual(Double(), 6, dropout=0.0, norm_first=True)
    x = 5 + 3 * torch.randn(3, 4, 6)
    torch.testing.assert_close(r(x), x + 2 * _ln(x))  # x + f(norm(x)): the residual stream is not normalised


def test_residual_passes_tuples_through() -> None:
    class Pair(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, str]:
            return x, "probs"

    y, extra = Residual(Pair(), 4, dropout=0.0)(torch.randn(2, 4))
    assert extra == "probs" and y.shape == (2, 4)


def test_residual_dropout_on_sublayer_output_only() -> None:
    r = Residual(Double(), 6, dropout=0.5, norm_first=True).train()
    x = torch.randn(64, 6)
    torch.manual_seed(0)
    delta = r(x) - x  # dropout(f(norm(x))): zeros or 2 * 2 * norm(x)
    kept = delta != 0
    assert 0.2 < kept.float().mean() < 0.8
    torch.testing.assert_close(delta[kept], (4 * _ln(x))[kept])


# -- embeddings ---------------------------------------------------------------------------------------
def test_factorised_embedding_shapes() -> None:
    emb = Embeddings(99, 16, 32, max_positions=20, dropout=0.0)
    assert emb.word.weight.shape == (99, 16)
    assert emb.position.weight.shape == (20, 16)
    assert emb.token_type.weight.shape == (2, 16)
    assert emb.norm.weight.shape == (16,)
    assert isinstance(emb.project, nn.Linear) and emb.project.weight.shape == (32, 16)
    out = emb(torch.randint(0, 99, (3, 5)))
    assert out.shape == (3, 5, 32)
    assert Embeddings(99, 32, 32, max_positions=20).project is None  # E == H: no projection


def test_embedding_sum_then_norm() -> None:
    torch.manual_seed(0)
    emb = Embeddings(99, 8, 8, max_positions=10, dropout=0.0)
    ids = torch.tensor([[3, 4, 5]])
    tt = torch.tensor([[0, 1, 1]])
    raw = emb.word.weight[ids] + emb.position.weight[:3] + emb.token_type.weight[tt]
    torch.testing.assert_close(emb(ids, tt), emb.norm(raw))
    # default token types are 0
    raw0 = emb.word.weight[ids] + emb.position.weight[:3] + emb.token_type.weight[0]
    torch.testing.assert_close(emb(ids), emb.norm(raw0))


def test_roberta_position_ids() -> None:
    pad = 1
    ids = torch.tensor([[0, 31, 32, 2, 1, 1], [0, 40, 2, 1, 1, 1], [0, 5, 6, 7, 8, 2]])
    expected = [[2, 3, 4, 5, 1, 1], [2, 3, 4, 1, 1, 1], [2, 3, 4, 5, 6, 7]]
    assert offset_position_ids(ids, pad, pad + 1).tolist() == expected
    emb = Embeddings(50, 8, 8, max_positions=10, type_vocab_size=1, position_offset=2, pad_token_id=pad)
    assert emb.position_ids(ids).tolist() == expected
    assert Embeddings(50, 8, 8, max_positions=10).position_ids(ids).tolist() == [[0, 1, 2, 3, 4, 5]]


def test_sinusoidal_positions_are_a_non_persistent_buffer() -> None:
    emb = Embeddings(50, 8, 8, max_positions=10, position_embedding="sinusoidal", type_vocab_size=0)
    assert "position" not in dict(emb.named_parameters())
    assert "position" not in emb.state_dict()
    torch.testing.assert_close(emb.position, sinusoidal_table(10, 8))
    assert emb.token_type is None and "token_type.weight" not in emb.state_dict()
    assert emb(torch.randint(0, 50, (2, 4))).shape == (2, 4, 8)


def test_unknown_position_embedding() -> None:
    with pytest.raises(ValueError, match="unknown position_embedding 'rotary'; valid: learned, sinusoidal"):
        Embeddings(50, 8, 8, max_positions=10, position_embedding="rotary")


def test_tile_positions_repeats_the_trained_rows() -> None:
    emb = Embeddings(50, 8, 8, max_positions=16, position_offset=2)  # RoBERTa's offset: positions at rows 2..
    before = emb.position.weight.detach().clone()
    assert emb.tile_positions(3, 8)
    after = emb.position.weight
    for i in range(3, 8):  # position i starts as position i mod 3
        torch.testing.assert_close(after[2 + i], before[2 + i % 3], rtol=0, atol=0)
    torch.testing.assert_close(after[:5], before[:5], rtol=0, atol=0)  # the trained rows and the offset's
    torch.testing.assert_close(after[10:], before[10:], rtol=0, atol=0)  # beyond the new length
    with pytest.raises(ValueError, match=r"length \(15\) <= 14 positions"):
        emb.tile_positions(3, 15)
    sinusoidal = Embeddings(50, 8, 8, max_positions=16, position_embedding="sinusoidal")
    assert not sinusoidal.tile_positions(3, 8)  # nothing trained to copy
