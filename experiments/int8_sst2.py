"""SST-2 dev accuracy of one fine-tuned model in float32 and int8 (the goal: int8 within 0.5 points).

    attnlab finetune --task sst2 --data-dir ../shared/data/glue/SST-2 --model MODEL \\
        --output-dir runs/int8-sst2 --epochs 1 --minutes 4 --device cpu --no-progress
    python experiments/int8_sst2.py runs/int8-sst2/best [--data-dir ../shared/data/glue/SST-2]

Scores the whole dev set (872 sentences) with the text-classification pipeline on: attnlab float32, attnlab
int8 (`attnlab.inference.quantize`), and, when onnxruntime is installed, ONNX Runtime float32 and int8 (the
model exported with `attnlab.inference.export_onnx`). Prints accuracy, the change against float32 in points,
and how many predictions changed. Nothing is tuned on dev: the model is what ``attnlab finetune`` kept.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a fine-tuned SST-2 model directory (e.g. runs/int8-sst2/best)")
    p.add_argument("--data-dir", default="../shared/data/glue/SST-2")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from attnlab.inference import quantize
    from attnlab.io import load as load_model
    from attnlab.tasks.finetune import get_task, load_split
    from attnlab.tasks.pipelines import TextClassificationPipeline
    from attnlab.tokenizers import load_tokenizer

    data = Path(args.data_dir)
    if not (data / "dev.tsv").is_file():
        print(f"{data / 'dev.tsv'}: no such file (see ../shared/data/README)", file=sys.stderr)
        return 2
    spec = get_task("sst2")
    dev = load_split(spec, data, "dev")
    texts = [ex.text_a for ex in dev]
    names = dict(zip(spec.labels, spec.label_names or spec.labels))  # "0"/"1" in the file -> model's names
    gold = [names[str(ex.label)] for ex in dev]
    model = load_model(args.model).eval()
    if set(model.id2label.values()) != set(gold):  # a model that names its labels "0"/"1"
        gold = [str(ex.label) for ex in dev]
    tokenizer = load_tokenizer(args.model)
    models = {"attnlab fp32": model, "attnlab int8": quantize(model)}
    tmp = tempfile.TemporaryDirectory(prefix="int8-sst2-")
    try:
        from attnlab.inference.onnx_export import export_onnx
        from attnlab.inference.onnx_runner import OnnxRunner

        export_onnx(model, tmp.name, int8=True)
        models["ORT fp32"] = OnnxRunner(tmp.name, threads=args.threads)
        models["ORT int8"] = OnnxRunner(tmp.name, threads=args.threads, int8=True)
    except ImportError as e:
        print(f"# ONNX Runtime left out: {e}")
    print(f"# {args.model}: SST-2 dev, {len(texts)} sentences, {args.threads} threads")
    predictions = {}
    for name, m in models.items():
        pipe = TextClassificationPipeline(m, tokenizer, batch_size=32)
        start = time.perf_counter()
        predictions[name] = [out[0]["label"] for out in pipe(texts)]
        seconds = time.perf_counter() - start
        acc = 100 * sum(p == g for p, g in zip(predictions[name], gold)) / len(gold)
        base = predictions["attnlab fp32"]
        base_acc = 100 * sum(p == g for p, g in zip(base, gold)) / len(gold)
        changed = sum(a != b for a, b in zip(predictions[name], base))
        print(f"{name:<14} accuracy {acc:6.2f}  change {acc - base_acc:+.2f} points  "
              f"predictions changed {changed:>3}/{len(gold)}  ({seconds:.1f} s)")  # fmt: skip
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
