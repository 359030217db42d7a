"""The training commands cap oneDNN's and ideep's per-shape kernel caches before they train, and the cap
caps: token batches come in many shapes, and uncapped caches kept a kernel for each, so a translate-train
run's resident memory grew for hundreds of steps (benchmarks/training_memory.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from attnlab.cli import build_parser
from attnlab.inference import allocator

TRAINING_COMMANDS = [
    ["translate-train", "--data-dir", "data", "--output-dir", "run"],
    ["pretrain"],
    ["pretrain", "--recipe", "elmo"],
    ["finetune", "--task", "sst2", "--data-dir", "data", "--model", "bert-mini"],
    ["distill", "--teacher", "teacher", "--corpus", "corpus.txt"],
]


class Bounded(Exception):
    """Raised by the stand-in for `bound_kernel_caches`: the command reached it, before any work."""


@pytest.mark.parametrize("argv", TRAINING_COMMANDS, ids=lambda argv: " ".join(argv[:3]))
def test_training_commands_cap_the_kernel_caches_first(argv: list[str], monkeypatch) -> None:
    def bound(*args, **kwargs) -> None:
        raise Bounded

    def keep(*args, **kwargs) -> None:
        raise AssertionError("a training command must not keep freed memory (an inference setting)")

    monkeypatch.setattr(allocator, "bound_kernel_caches", bound)
    monkeypatch.setattr(allocator, "keep_freed_memory", keep)
    args = build_parser().parse_args(argv)
    with pytest.raises(Bounded):
        args.func(args)


CYCLE_SHAPES = """
import sys
from attnlab.inference.allocator import bound_kernel_caches
if sys.argv[1] != "default":
    bound_kernel_caches(int(sys.argv[1]))
import torch
weight = torch.randn(64, 64)
for _ in range(2):  # three batch shapes, twice
    for rows in (64, 96, 128):
        torch.ops.mkldnn._linear_pointwise(torch.randn(rows, 64), weight, None, "none", [], "")
"""


def kernel_cache_hits(capacity: str) -> int:
    """oneDNN's kernel cache hits (its verbose log) over two passes of three product shapes."""
    env = {k: v for k, v in os.environ.items() if k not in allocator.KERNEL_CACHES}
    env["ONEDNN_VERBOSE"] = "all"
    done = subprocess.run(
        [sys.executable, "-c", CYCLE_SHAPES, capacity], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return (done.stdout + done.stderr).count("create:cache_hit")


@pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")),
    reason="PyTorch built without oneDNN's linear operator",
)
def test_the_cap_caps() -> None:
    assert kernel_cache_hits("default") == 3  # the second pass finds every shape's kernel
    assert kernel_cache_hits("2") == 0  # two kept: each shape pushed out before it comes again
