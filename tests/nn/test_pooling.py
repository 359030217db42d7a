"""attnlab.nn.pooling: the masked mean against a loop over each sequence's real tokens."""

from __future__ import annotations

import pytest
import torch

from attnlab.nn.pooling import masked_mean


def test_masked_mean_averages_real_tokens_only_and_an_empty_row_is_zero():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 5, 4, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    out = masked_mean(hidden, mask)
    torch.testing.assert_close(out[0], hidden[0, :3].mean(0))
    torch.testing.assert_close(out[1], hidden[1].mean(0))
    assert torch.equal(out[2], torch.zeros(4))  # no tokens: zeros, not NaN
    torch.testing.assert_close(masked_mean(hidden), hidden.mean(1))
    with pytest.raises(ValueError, match=r"attention_mask: expected shape \(3, 5\)"):
        masked_mean(hidden, mask[:, :4])
