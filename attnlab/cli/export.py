"""``attnlab export``: a model directory as ONNX, for ONNX Runtime and other runtimes.

attnlab export runs/sst2/best --onnx out/sst2-onnx            # model.onnx + config.json + tokenizer.json
attnlab export hf/bert-base-uncased --onnx out/bert --int8    # + model.int8.onnx (dynamic quantization)
attnlab predict classify out/sst2-onnx --text "great film" --backend onnxruntime

MODEL is an attnlab or HF encoder directory (pre-trained or fine-tuned; not multiple choice). The ONNX graph
has dynamic batch and sequence axes; its outputs are named after the torch model's fields (see
`attnlab.inference.onnx_export`). The export is checked: the ONNX Runtime outputs on a padded batch must equal
PyTorch's within 1e-4, or the command fails.
"""

from __future__ import annotations

import argparse
import sys

from .args import positive_int

PARITY_ATOL = 1e-4


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a model directory to ONNX (dynamic batch and sequence axes) for ONNX Runtime",
        description="Write MODEL (an attnlab or HF encoder directory) as an ONNX directory: model.onnx, "
        "config.json, onnx.json, tokenizer.json, manifest.json; --int8 adds ONNX Runtime's dynamic int8 "
        "quantization. The export is verified against PyTorch on a padded batch (max abs difference 1e-4).",
    )
    p.add_argument("model", metavar="MODEL", help="model directory (config.json, weights, tokenizer files)")
    p.add_argument("--onnx", metavar="DIR", required=True, help="output directory (created if needed)")
    p.add_argument("--opset", type=positive_int, default=18, help="ONNX opset version, 18 to 22")
    p.add_argument("--int8", action="store_true", help="also write model.int8.onnx (dynamic int8)")
    p.set_defaults(func=run_export)


def _parity(model, directory, tokenizer) -> float:
    """Max abs difference between PyTorch and ONNX Runtime on a padded batch of two sentences."""
    import torch

    from attnlab.inference.onnx_runner import OnnxRunner

    runner = OnnxRunner(directory, threads=1)
    g = torch.Generator().manual_seed(1)
    t = min(16, model.config.max_sequence_length)
    ids = torch.randint(0, model.config.vocab_size, (2, t), generator=g)
    mask = torch.ones_like(ids)
    mask[1, t // 2 :] = 0
    types = torch.zeros_like(ids) if model.config.type_vocab_size > 0 else None
    with torch.inference_mode():
        ref = model(ids, attention_mask=mask, token_type_ids=types)
    got = runner(ids, attention_mask=mask, token_type_ids=types)
    worst = 0.0
    for name in runner.output_names:
        if not hasattr(ref, name):
            continue  # last_hidden_state of a task model: not a field of its torch output
        a, b = getattr(ref, name).float(), getattr(got, name)
        keep = mask.bool() if a.dim() >= 2 and a.shape[:2] == mask.shape else None
        diff = (a - b).abs() if keep is None else (a - b).abs()[keep]  # padded positions are free
        worst = max(worst, float(diff.max()))
    return worst


def run_export(args: argparse.Namespace) -> int:
    import shutil
    from pathlib import Path

    from attnlab.inference.onnx_export import check_opset, export_onnx
    from attnlab.io import load
    from attnlab.tokenizers import load_tokenizer

    from .model_dirs import check_model_dir

    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise ValueError(f"ONNX export needs onnx and onnxruntime: pip install 'attnlab[onnx]' ({e})") from e
    check_opset(args.opset)
    src = check_model_dir(args.model, "MODEL")
    out = Path(args.onnx)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--onnx {out}: exists and is not a directory")
    if out.resolve() == src.resolve():
        raise ValueError(f"--onnx {out}: the model's own directory; choose another")
    from attnlab.models import Encoder

    model = load(src).float().eval()
    if not isinstance(model, Encoder) and not isinstance(getattr(model, "encoder", None), Encoder):
        raise ValueError(f"{src}: {type(model).__name__} is not an encoder model; ONNX export takes encoders")
    tokenizer = load_tokenizer(src)
    created = not out.exists()
    try:
        export_onnx(model, out, tokenizer=tokenizer, opset=args.opset, int8=args.int8, source=str(src))
        diff = _parity(model, out, tokenizer)
        if diff > PARITY_ATOL:
            raise ValueError(
                f"{out}: ONNX Runtime's outputs differ from PyTorch's by {diff:.2e} (> {PARITY_ATOL}); "
                "the export is not usable"
            )
    except BaseException:
        if created and out.is_dir():  # no half-written export left behind
            shutil.rmtree(out, ignore_errors=True)
        raise
    files = "model.onnx" + (", model.int8.onnx" if args.int8 else "")
    print(f"{src} -> {out} ({files}; ONNX Runtime vs PyTorch max abs difference {diff:.1e})", file=sys.stderr)
    return 0
