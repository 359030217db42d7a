"""CPU inference paths beside eager PyTorch.

- `onnx_export.export_onnx`: an attnlab model to ``model.onnx`` (dynamic batch and sequence axes) in a
  directory that also holds ``config.json``, the tokenizer and ``onnx.json``; ``int8=True`` adds
  ``model.int8.onnx`` (ONNX Runtime's dynamic quantization). ``attnlab export MODEL --onnx OUT``.
- `onnx_runner.OnnxRunner`: runs such a directory on ONNX Runtime with the call the pipelines make on a
  torch model (``runner(input_ids=..., attention_mask=..., token_type_ids=...)`` -> an output with the same
  field names), so ``pipeline(task, directory, backend="onnxruntime")`` and the server use it unchanged.
- `quantize.quantize`: attnlab's own int8 path: every linear layer (an optimized model's `FastLinear` is not
  caught by ``torch.ao``'s dynamic quantization) becomes an int8 dynamically quantized linear.
- `allocator.keep_freed_memory`: glibc keeps freed blocks for the next forward instead of unmapping them
  (large batches' tensors were faulted in afresh every forward); `allocator.bound_kernel_caches`: oneDNN's
  per-shape kernel caches capped; `attnlab serve` and `predict` call both, the training commands the cap.
- `engine.load_encoder`: the model `predict` and `serve` run for an encoder directory, by ``--backend``
  (torch or onnxruntime) and ``--int8``.

Importing this package does not import onnx or onnxruntime; the functions that need them do.
"""

from attnlab.inference.allocator import keep_freed_memory
from attnlab.inference.quantize import Int8Linear, quantize

__all__ = ["Int8Linear", "OnnxRunner", "export_onnx", "keep_freed_memory", "quantize"]


def __getattr__(name: str):
    if name == "OnnxRunner":
        from attnlab.inference.onnx_runner import OnnxRunner

        return OnnxRunner
    if name == "export_onnx":
        from attnlab.inference.onnx_export import export_onnx

        return export_onnx
    raise AttributeError(f"module 'attnlab.inference' has no attribute {name!r}")
