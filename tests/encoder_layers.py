"""What the tests of an encoder layer's inference paths share (test_fused_layer, test_flat_layer): a tiny
encoder with LayerNorms away from identity, optimized for inference (attnlab.accel.optimize), a padded batch,
a call counter, and both paths' outputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnlab.accel import fused_layers, optimize
from attnlab.models import Encoder, EncoderConfig

TINY = EncoderConfig(
    vocab_size=99, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=48,
    max_position_embeddings=64, hidden_dropout=0.1, attention_dropout=0.1,
)  # fmt: skip


def model(**changes: object) -> Encoder:
    torch.manual_seed(0)
    m = Encoder(dataclasses.replace(TINY, **changes)).eval()
    with torch.no_grad():  # LayerNorm weights and biases away from 1 and 0, so a swapped norm shows
        for name, p in m.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return optimize(m)


def inputs(b: int = 3, t: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 99, (b, t), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0  # padding in two rows, of different lengths
    mask[1, 3:] = 0
    return ids, mask


class Spy:
    """Counts the calls of ``owner.name`` (a function the code looks up there at each call); ``args`` keeps
    each call's positional arguments."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> None:
        self.calls = 0
        self.args: list[tuple] = []
        real = getattr(owner, name)

        def counted(*args: object, **kwargs: object) -> object:
            self.calls += 1
            self.args.append(args)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


def both(m: torch.nn.Module, *args: object, **kwargs: object) -> tuple[object, object]:
    """(module calls, fast paths) outputs of the same call."""
    with torch.inference_mode():
        with fused_layers(False):
            ref = m(*args, **kwargs)
        got = m(*args, **kwargs)
    return ref, got
