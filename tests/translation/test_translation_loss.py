"""`label_smoothed_cross_entropy` on PyTorch's fused kernel: the smoothing formula with padding ignored, and
the relation to tensor2tensor's V - 1 variant stated in its docstring."""

from __future__ import annotations

import pytest
import torch

from attnlab.translation.loss import label_smoothed_cross_entropy


def _by_hand(logits: torch.Tensor, labels: torch.Tensor, q_target: float, q_other: float) -> float:
    """-sum_k q_k log p_k averaged over the labels that are not -100, with the given target masses."""
    lprobs = torch.log_softmax(logits.double(), dim=-1).reshape(-1, logits.shape[-1])
    total, count = 0.0, 0
    for row, y in zip(lprobs, labels.reshape(-1).tolist()):
        if y == -100:
            continue
        q = torch.full_like(row, q_other)
        q[y] = q_target
        total += float(-(q * row).sum())
        count += 1
    return total / count


def test_uniform_smoothing_over_all_classes_ignoring_padding() -> None:
    torch.manual_seed(0)
    V, eps = 11, 0.1
    logits = torch.randn(3, 5, V)
    labels = torch.randint(0, V, (3, 5))
    labels[0, 3:] = -100
    labels[2, 1:] = -100
    loss, nll, tokens = label_smoothed_cross_entropy(logits, labels, eps)
    assert int(tokens) == int(labels.ne(-100).sum())
    assert float(loss) == pytest.approx(_by_hand(logits, labels, 1 - eps + eps / V, eps / V), abs=1e-5)
    assert float(nll) == pytest.approx(_by_hand(logits, labels, 1.0, 0.0), abs=1e-5)
    assert not nll.requires_grad


def test_tensor2tensor_variant_is_a_rescaled_epsilon() -> None:
    torch.manual_seed(1)
    V, eps = 13, 0.1
    logits = torch.randn(2, 4, V)
    labels = torch.randint(0, V, (2, 4))
    t2t = _by_hand(logits, labels, 1 - eps, eps / (V - 1))  # mass eps over the V - 1 other classes
    ours = label_smoothed_cross_entropy(logits, labels, eps * V / (V - 1))[0]
    assert float(ours) == pytest.approx(t2t, abs=1e-5)
    assert float(label_smoothed_cross_entropy(logits, labels, eps)[0]) != pytest.approx(t2t, abs=1e-5)


def test_padding_only_gives_zero_and_gradients_flow() -> None:
    logits = torch.randn(1, 3, 7, requires_grad=True)
    loss, nll, tokens = label_smoothed_cross_entropy(logits, torch.full((1, 3), -100), 0.1)
    assert float(loss.detach()) == 0.0 and float(nll) == 0.0 and int(tokens) == 0
    loss, _, _ = label_smoothed_cross_entropy(logits, torch.tensor([[1, 2, -100]]), 0.1)
    loss.backward()
    assert logits.grad[0, 2].abs().sum() == 0 and logits.grad[0, :2].abs().sum() > 0
