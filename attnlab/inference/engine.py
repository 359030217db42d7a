"""The model an inference command runs for an encoder's directory, by engine and precision: one loader for
`attnlab.tasks.pipelines` (``attnlab predict``) and `attnlab.serving.service` (``attnlab serve``).

- ``torch``: attnlab's model (`attnlab.io.load`); ``int8``: through
  `attnlab.inference.quantize` (int8 linear layers, CPU);
- ``onnxruntime``: an ``attnlab export MODEL --onnx DIR`` directory on ONNX Runtime
  (`attnlab.inference.onnx_runner.OnnxRunner`); ``int8``: its ``model.int8.onnx`` (``export --int8``).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from attnlab.accel import optimize
from attnlab.inference.onnx_runner import OnnxRunner
from attnlab.inference.quantize import quantize
from attnlab.io import load

BACKENDS = ("torch", "onnxruntime")


def check_engine(backend: str, int8: bool, device: str | torch.device = "cpu") -> None:
    """A clear error for an engine that does not exist or cannot run on ``device``, before any loading."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if int8 and torch.device(device).type != "cpu":
        raise ValueError(f"--int8 runs on the CPU (int8 kernels are CPU-only); got --device {device}")


def load_encoder(
    directory: str | os.PathLike, backend: str = "torch", threads: int | None = None, int8: bool = False
) -> nn.Module:
    """The encoder model (with its head) ``directory`` holds, on ``backend``, int8 if asked; in eval mode.
    ``threads``: ONNX Runtime's intra-op threads (the torch engine uses PyTorch's setting)."""
    check_engine(backend, int8)
    if backend == "onnxruntime":
        return OnnxRunner(directory, threads=threads, int8=int8)

    model = load(directory).eval()
    if int8:
        model = quantize(model, inplace=True)
    return optimize(model)  # the CPU fast paths (attnlab.accel), after quantize: int8 layers stay


__all__ = ["BACKENDS", "check_engine", "load_encoder"]
