"""A training step priced before it runs (`attnlab.train.footprint`): memory and arithmetic from the model's
shape, and the budget's probe refusing a step that cannot fit before it builds anything."""

from __future__ import annotations

import pytest
import torch

from attnlab.models import ARCHITECTURES, EncoderConfig, get_preset
from attnlab.train import budget, footprint
from attnlab.train.config import TrainerConfig
from attnlab.train.footprint import StepDoesNotFit, check_step_fits, step_cost
from attnlab.train.memory_plan import transformer_activation_bytes

TINY = EncoderConfig(vocab_size=50, hidden_size=16, num_heads=2, intermediate_size=32, num_layers=2)


def _model(config: EncoderConfig = TINY) -> torch.nn.Module:
    return ARCHITECTURES["EncoderForPreTraining"].from_config(config)


def test_activation_bytes_follow_korthikanti_equation_one_in_float32():
    # s*b*h*(34 + 5*a*s/h) bytes a layer in 16-bit: 4*1*8*(34 + 5*2*4/8) = 1248; float32 doubles; 3 layers
    assert transformer_activation_bytes(3, 8, 2, 1, 4) == 3 * 2 * 1248


def test_bert_base_at_the_papers_batch_needs_tens_of_gib():
    """BERT-base at 256 x 128 tokens: the run that was killed at 24 GB resident before this check."""
    config = get_preset("bert-base-uncased")
    activations = transformer_activation_bytes(
        config.num_layers, config.hidden_size, config.num_heads, 256, 128
    )
    assert 20 * footprint.GiB < activations < 30 * footprint.GiB


def test_step_cost_counts_weights_state_and_both_products():
    model = _model()
    n = sum(p.numel() for p in model.parameters())
    cost = step_cost(model, batch=4, length=8, accum=2)
    tokens = 4 * 8 * 2
    assert cost.state_bytes == 20 * n
    assert cost.flops == 6.0 * n * tokens + 12.0 * 2 * 8 * 16 * tokens
    assert cost.activation_bytes == transformer_activation_bytes(2, 16, 2, 4, 8)  # micro-batch, not x accum
    assert cost.memory_bytes == cost.state_bytes + cost.activation_bytes


def test_a_model_without_attention_is_priced_by_its_weights():
    lstm = torch.nn.LSTM(8, 8)
    cost = step_cost(lstm, batch=2, length=5)
    assert cost.activation_bytes == 0 and cost.flops > 0


def test_a_step_beyond_the_memory_available_is_refused_in_one_sentence(monkeypatch):
    monkeypatch.setattr(footprint, "available_memory_bytes", lambda: 1000)
    with pytest.raises(StepDoesNotFit, match=r"at 4 x 8 tokens needs about .* GiB of memory .* available"):
        check_step_fits(_model(), 4, 8, seconds=None)


def test_a_step_longer_than_the_budget_is_refused(monkeypatch):
    monkeypatch.setattr(footprint, "matmul_flops_per_second", lambda: 1e3)
    with pytest.raises(StepDoesNotFit, match=r"at least [\d.]+ s on this machine .* 3 steps .* leaves 5 s"):
        check_step_fits(_model(), 4, 8, seconds=5.0)


def test_a_step_that_fits_returns_its_cost():
    cost = check_step_fits(_model(), 4, 8, seconds=60.0)
    assert cost.memory_bytes > 0


def test_the_matmul_rate_is_measured():
    assert footprint.matmul_flops_per_second() > 1e6


def test_the_budget_probe_refuses_before_copying_or_timing(monkeypatch):
    """`estimate_step_time` prices the step on its first batch before it copies the model or runs a step."""
    monkeypatch.setattr(footprint, "available_memory_bytes", lambda: 1000)
    monkeypatch.setattr(budget.copy, "deepcopy", lambda *a: pytest.fail("the probe copied the model"))

    class Loader:
        def iter_epoch(self, epoch):
            while True:
                yield {"input_ids": torch.zeros(4, 8, dtype=torch.long)}

    with pytest.raises(StepDoesNotFit, match="4 x 8 tokens"):
        budget.estimate_steps(_model(), Loader(), TrainerConfig(max_steps=10), seconds=60.0)
