"""`OnnxRunner`: an ``attnlab export --onnx`` directory on ONNX Runtime, called as the pipelines call a torch
model.

For the server (``attnlab serve --backend onnxruntime``) and ``pipeline(task, dir, backend="onnxruntime")``::

    from attnlab.inference.onnx_runner import OnnxRunner
    runner = OnnxRunner("out/onnx", threads=2)           # int8=True: model.int8.onnx
    out = runner(input_ids=ids, attention_mask=mask, token_type_ids=types)   # torch (B, T) int tensors
    out.logits                                           # torch float32, as the torch model's output field

What it offers beside the call, as a torch model does: ``config`` (the `EncoderConfig`), ``architecture``
(the attnlab architecture name, e.g. ``"EncoderForSequenceClassification"``), ``options``, ``id2label``,
``eval()``/``to("cpu")`` (no-ops; another device is an error), ``encoder`` (the last hidden state, for the
embedding pipeline) and ``output_names``.

ONNX Runtime's intra-op threads spin while waiting for work by default, which steals the CPU from whatever
runs next (another engine in a benchmark, the server's tokenizer); ``spinning=False`` (the default) turns
that off. ``threads`` None uses ``torch.get_num_threads()``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab.inference.onnx_export import ONNX_INT8_NAME, ONNX_META, ONNX_NAME
from attnlab.io.checkpoint import read_checkpoint_config
from attnlab.io.format import read_json
from attnlab.manifest import verify_directory


class OnnxOutput:
    """The InferenceSession's outputs as attributes (torch tensors), like the torch model's dataclass."""

    def __init__(self, values: dict[str, Tensor]) -> None:
        self.__dict__.update(values)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in vars(self).items())
        return f"OnnxOutput({shapes})"


class _LastHiddenState:
    """What the embedding pipeline calls as ``model.encoder(**batch)``: the last hidden state only."""

    def __init__(self, runner: OnnxRunner) -> None:
        self.runner = runner

    def __call__(self, output_hidden_states: bool = False, **batch: Tensor) -> OnnxOutput:
        if output_hidden_states:
            raise ValueError("the ONNX model returns the last layer's hidden states only (layer=-1)")
        out = self.runner(**batch)
        return OnnxOutput({"last_hidden_state": out.last_hidden_state})


def session_options(threads: int | None = None, spinning: bool = False) -> Any:
    """ONNX Runtime session options: all graph optimisations, ``threads`` intra-op threads (None: torch's
    count), one inter-op thread, and intra-op spinning off unless ``spinning``."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads or torch.get_num_threads()
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "1" if spinning else "0")
    return opts


class OnnxRunner:
    """An exported directory (see `attnlab.inference.onnx_export`) on ONNX Runtime's CPU provider."""

    is_onnx_runner = True

    def __init__(
        self,
        directory: str | os.PathLike,
        threads: int | None = None,
        spinning: bool = False,
        int8: bool = False,
    ) -> None:
        import onnxruntime as ort

        d = Path(directory)
        name = ONNX_INT8_NAME if int8 else ONNX_NAME
        path = d / name
        if not path.is_file():
            hint = " (export with --int8)" if int8 and (d / ONNX_NAME).is_file() else ""
            raise FileNotFoundError(
                f"{path}: no such file{hint}; expected a directory from `attnlab export MODEL --onnx DIR`"
            )
        if not (d / ONNX_META).is_file():
            raise FileNotFoundError(f"{d / ONNX_META}: no such file; not an `attnlab export --onnx` dir")
        verify_directory(d, [name, ONNX_META])
        self.architecture, self.options, self.config, _ = read_checkpoint_config(d)
        meta = read_json(d / ONNX_META)
        self.input_names = list(meta["inputs"])
        self.output_names = list(meta["outputs"])
        self.directory = d
        self.threads = threads or torch.get_num_threads()
        self.session = ort.InferenceSession(
            str(path), sess_options=session_options(threads, spinning), providers=["CPUExecutionProvider"]
        )
        got = [i.name for i in self.session.get_inputs()]
        if got != self.input_names:
            raise ValueError(f"{path}: graph inputs {got} differ from {d / ONNX_META}'s {self.input_names}")
        self.training = False

    # -- what pipelines use of a torch model -----------------------------------------------------------
    @property
    def id2label(self) -> dict[int, str]:
        labels = self.options.get("labels")
        n = self.options.get("num_labels", 0)
        return {i: (labels[i] if labels else f"LABEL_{i}") for i in range(n)}

    @property
    def encoder(self) -> _LastHiddenState:
        return _LastHiddenState(self)

    def eval(self) -> OnnxRunner:
        return self

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> OnnxRunner:
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"the onnxruntime backend runs on the CPU; device {device} is not supported")
        if dtype is not None and dtype != torch.float32:
            raise ValueError(f"the onnxruntime backend runs the exported float32 graph, not {dtype}")
        return self

    def __call__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        **unused: Any,
    ) -> OnnxOutput:
        """(B, T) integer tensors (or arrays) -> `OnnxOutput` with one torch tensor per graph output."""
        for key, value in unused.items():
            if value not in (None, False):
                raise ValueError(f"the onnxruntime backend does not take {key}={value!r}")
        ids = _int64(input_ids)
        if ids.ndim != 2:
            raise ValueError(f"input_ids: expected shape (B, T), got {tuple(ids.shape)}")
        limit = self.config.max_sequence_length
        if ids.shape[1] > limit:
            raise ValueError(f"input_ids: sequence length {ids.shape[1]} exceeds the maximum {limit}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"input_ids: token ids must be in [0, {self.config.vocab_size - 1}]")
        feed = {"input_ids": ids}
        feed["attention_mask"] = np.ones_like(ids) if attention_mask is None else _int64(attention_mask)
        if "token_type_ids" in self.input_names:
            feed["token_type_ids"] = np.zeros_like(ids) if token_type_ids is None else _int64(token_type_ids)
        for name, value in feed.items():
            if value.shape != ids.shape:
                raise ValueError(f"{name}: expected the shape of input_ids {ids.shape}, got {value.shape}")
        values = self.session.run(self.output_names, feed)
        return OnnxOutput({name: torch.from_numpy(v) for name, v in zip(self.output_names, values)})

    forward = __call__

    def __repr__(self) -> str:
        return f"OnnxRunner({str(self.directory)!r}, {self.architecture}, threads={self.threads})"


def _int64(x: Any) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(x, dtype=np.int64)


__all__ = ["OnnxOutput", "OnnxRunner", "session_options"]
