"""The decoding step's fast path: one-row products on a transposed weight copy (attnlab.nn.linear.small_rows)
and the stacked query/key/value projection (models.decoder.BufferedSelfAttention) give the three-product,
F.linear results, and their cached copies follow the parameters when those change."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnlab.generation import generate
from attnlab.models.gpt import build_gpt
from attnlab.models.gpt_presets import get_gpt_preset
from attnlab.nn.linear import Linear, small_rows


def test_small_rows_path_equals_f_linear_and_follows_the_weight():
    torch.manual_seed(0)
    layer = Linear(48, 40)
    x = torch.randn(1, 1, 48)
    with torch.no_grad():
        assert small_rows(x, layer.weight)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
        layer.weight.add_(1.0)  # an in-place update (an optimizer step) must not leave a stale copy
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
    assert not small_rows(x, layer.weight)  # gradients recorded: the ordinary path
    assert not small_rows(torch.randn(8, 48), layer.weight)  # more rows than a decoding step


def test_generation_after_a_training_step_uses_the_new_weights():
    torch.manual_seed(0)
    cfg = get_gpt_preset("gpt-char-tiny", vocab_size=50, num_layers=2, max_positions=48)
    model = build_gpt(cfg)
    prompt = torch.randint(0, 50, (2, 5))
    for _ in range(2):
        cached = generate(model, prompt, max_new_tokens=12, ignore_eos=True).sequences
        uncached = generate(model, prompt, max_new_tokens=12, ignore_eos=True, use_cache=False).sequences
        assert cached == uncached
        model.train()  # a training step: every projection changes in place
        opt = torch.optim.SGD(model.parameters(), lr=5.0)
        model(prompt, labels=prompt).loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            want = model(prompt[:1]).logits[0, -1].argmax().item()
        assert generate(model, prompt[:1], max_new_tokens=1, ignore_eos=True).sequences[0][0] == want
