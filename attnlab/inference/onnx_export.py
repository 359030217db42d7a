"""Export an attnlab encoder model to ONNX, in a directory ONNX Runtime (`OnnxRunner`) serves from.

The directory holds:

- ``model.onnx``: inputs ``input_ids``, ``attention_mask`` (+ ``token_type_ids`` when the model has segment
  embeddings), all int64 (B, T), with dynamic ``batch`` and ``sequence`` axes; outputs named after the torch
  model's output fields (``logits``; ``start_logits`` + ``end_logits``; ``mlm_logits``; ...) plus
  ``last_hidden_state`` (B, T, H), what the embedding pipeline reads;
- ``model.int8.onnx`` with ``int8=True``: ONNX Runtime's dynamic quantization of the same graph (int8
  weights, activations quantized per call), the peer of `attnlab.inference.quantize`;
- ``config.json``: the attnlab checkpoint config (architecture, options such as label names, EncoderConfig),
  as `attnlab.io.save` writes it, so tools that read a model's config read this one;
- ``onnx.json``: the input and output names, the opset and where the model came from;
- the tokenizer (``tokenizer.json``) and ``manifest.json`` (SHA-256 of every file, checked on load).

The graph comes from ``torch.onnx.export(dynamo=True)`` (``torch.export``): the encoder's checks that read
tensor values are skipped while tracing, so the padding mask is always applied (a graph that dropped it for an
unpadded example would be wrong for padded batches).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab import __version__
from attnlab.atomic import atomic_path, write_json_atomic
from attnlab.io.checkpoint import architecture_of
from attnlab.manifest import write_manifest
from attnlab.models import Encoder

ONNX_NAME = "model.onnx"
ONNX_INT8_NAME = "model.int8.onnx"
ONNX_META = "onnx.json"
DEFAULT_OPSET = 18
# The opsets an export works in: torch's exporter writes opset 18 and converts to others; below 18 the
# conversion fails (LayerNormalization has no earlier version), from 23 on it writes ONNX's Attention op,
# which ONNX Runtime rejects with a padding mask.
MIN_OPSET, MAX_OPSET = 18, 22
SKIPPED_FIELDS = ("loss", "hidden_states", "attentions")
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def _output_fields(output: Any) -> list[str]:
    """The tensor fields of a model output (dataclass) worth exporting, in declaration order."""
    return [
        f.name
        for f in dataclasses.fields(output)
        if f.name not in SKIPPED_FIELDS and isinstance(getattr(output, f.name), Tensor)
    ]


class _Exportable(nn.Module):
    """``model(input_ids, attention_mask[, token_type_ids])`` -> a tuple of tensors in `names` order."""

    def __init__(self, model: nn.Module, fields: list[str], add_hidden: bool, with_types: bool) -> None:
        super().__init__()
        self.model = model
        self.fields = fields
        self.add_hidden = add_hidden
        self.with_types = with_types

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None):
        out = self.model(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids if self.with_types else None,
            output_hidden_states=self.add_hidden,
        )
        values = [getattr(out, name) for name in self.fields]
        if self.add_hidden:  # the last layer's output (after the final LayerNorm with pre-LN)
            values.append(out.hidden_states[-1])
        return tuple(values)


def _example(config: Any, with_types: bool) -> tuple[Tensor, ...]:
    """A padded (2, 8) batch: the second row half padding, so the traced graph keeps the mask."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (2, 8), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    if not with_types:
        return ids, mask
    types = torch.zeros_like(ids)
    types[:, 5:] = 1 if config.type_vocab_size > 1 else 0
    return ids, mask, types


def check_opset(opset: int) -> None:
    """A `ValueError` unless ``opset`` is one `export_onnx` writes (`MIN_OPSET` to `MAX_OPSET`)."""
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(
            f"--opset {opset}: expected {MIN_OPSET} to {MAX_OPSET} (the opsets attnlab's ONNX export writes "
            "and ONNX Runtime runs)"
        )


def file_opset(proto: Any) -> int:
    """The default-domain opset ``proto`` (an ``onnx.ModelProto``) declares."""
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def export_onnx(
    model: nn.Module,
    directory: str | os.PathLike,
    tokenizer: Any = None,
    opset: int = DEFAULT_OPSET,
    int8: bool = False,
    source: str = "",
) -> Path:
    """Write ``model`` (any attnlab encoder architecture but multiple choice) as an ONNX directory.

    Returns the directory. See the module doc for its files. ``directory`` is created only once the graph
    is exported and checked.
    """
    import onnx

    check_opset(opset)
    architecture, options = architecture_of(model)
    if architecture == "EncoderForMultipleChoice":
        raise ValueError("ONNX export: multiple-choice models (B, K, T inputs) are not supported")
    config = model.config
    model = model.cpu().float().eval()
    with_types = config.type_vocab_size > 0
    example = _example(config, with_types)
    with torch.no_grad():
        probe = model(*example[:2], token_type_ids=example[2] if with_types else None)
    fields = _output_fields(probe)
    add_hidden = not isinstance(model, Encoder)  # a base Encoder already returns last_hidden_state
    output_names = fields + (["last_hidden_state"] if add_hidden else [])
    input_names = list(INPUT_NAMES[: 3 if with_types else 2])
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", max=config.max_sequence_length)
    dynamic = {name: {0: batch, 1: seq} for name in input_names}

    wrapper = _Exportable(model, fields, add_hidden, with_types).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and axis-renaming chatter
        program = torch.onnx.export(
            wrapper, example, input_names=input_names, output_names=output_names, opset_version=opset,
            dynamic_shapes=dynamic, dynamo=True, verbose=False,
        )  # fmt: skip
    proto = program.model_proto
    onnx.checker.check_model(proto)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(directory / ONNX_NAME) as tmp:
        onnx.save_model(proto, str(tmp))
    files = [ONNX_NAME]
    if int8:
        quantize_onnx(directory / ONNX_NAME, directory / ONNX_INT8_NAME)
        files.append(ONNX_INT8_NAME)
    write_json_atomic(
        {
            "format": "attnlab",
            "format_version": 1,
            "attnlab_version": __version__,
            "architecture": architecture,
            "options": options,
            "dtype": "float32",
            "tied": [],
            "config": config.to_dict(),
            "backend": "onnx",  # weights live in model.onnx; load with attnlab.inference.OnnxRunner
        },
        directory / "config.json",
    )
    write_json_atomic(
        {
            "inputs": input_names,
            "outputs": output_names,
            "opset": file_opset(proto),  # what model.onnx declares
            "files": {"float32": ONNX_NAME, **({"int8": ONNX_INT8_NAME} if int8 else {})},
            "source": source,
            "torch": torch.__version__,
            "onnx": onnx.__version__,
        },
        directory / ONNX_META,
    )
    files += ["config.json", ONNX_META]
    if tokenizer is not None:
        tokenizer.save(directory / "tokenizer.json")
        files.append("tokenizer.json")
    write_manifest(directory, files)
    return directory


def quantize_onnx(src: str | os.PathLike, dst: str | os.PathLike, per_channel: bool = False) -> Path:
    """ONNX Runtime's dynamic int8 quantization of ``src`` written to ``dst``: MatMul/Gemm weights int8
    (one scale per tensor, ONNX Runtime's default, or per channel), activations uint8 per call."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    dst = Path(dst)
    with atomic_path(dst) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=per_channel)
    return dst


__all__ = [
    "MAX_OPSET",
    "MIN_OPSET",
    "ONNX_INT8_NAME",
    "ONNX_META",
    "ONNX_NAME",
    "check_opset",
    "export_onnx",
    "quantize_onnx",
]
