"""``attnlab predict``: a pipeline (fill-mask, qa, ner, classify, embed) over text, one JSON object per input.

attnlab predict qa runs/squad/best --question "What does NUS mean?" --text "The National ..."
attnlab predict ner runs/conll/best --file sentences.txt > entities.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from attnlab.inference.engine import BACKENDS

from .args import device, positive_int

PREDICT_KINDS = ("fill-mask", "qa", "ner", "classify", "embed")


def register(subparsers: argparse._SubParsersAction) -> None:
    _predict_parser(subparsers)


def _predict_parser(subparsers: argparse._SubParsersAction) -> None:
    pr = subparsers.add_parser(
        "predict",
        help="run a pipeline (fill-mask, qa, ner, classify, embed) on text, writing JSON lines",
        description="Inputs come from --text or from --file (one per line; '-' = standard input). For qa, a "
        'line is a JSON object {"question", "context"} or \'question<TAB>context\' (or --question with '
        "--text as the passage); for classify with --pair, 'A<TAB>B'.",
    )
    pr.add_argument("kind", choices=PREDICT_KINDS)
    pr.add_argument("model", metavar="MODEL_DIR", help="an attnlab or HF model directory with its tokenizer")
    src = pr.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="one input")
    src.add_argument("--file", help="one input per line ('-' reads standard input)")
    pr.add_argument("--question", help="qa: the question (--text is then the passage)")
    pr.add_argument("--pair", action="store_true", help="classify: inputs are 'A<TAB>B' sentence pairs")
    pr.add_argument(
        "--top-k", type=positive_int, default=None,
        help="fill-mask / qa / classify: how many answers (default: 5 / 1 / all labels)",
    )  # fmt: skip
    pr.add_argument("--pooling", default="cls", choices=("cls", "mean"), help="embed: pooling")
    pr.add_argument("--word", help="embed: return this word's vector in context instead of the pooled one")
    pr.add_argument("--aggregation", default="simple", choices=("simple", "none"), help="ner: group entities")
    pr.add_argument("--version-2", action="store_true", help="qa: allow the null answer (SQuAD 2.0 models)")
    pr.add_argument(
        "--max-length", type=positive_int, default=None, help="tokens per input (default: the model's limit)"
    )
    pr.add_argument("--batch-size", type=positive_int, default=16, help="inputs per forward pass")
    pr.add_argument("--device", type=device, default="cpu", help="cpu, cuda, cuda:1, ...")
    pr.add_argument(
        "--backend", default="torch", choices=BACKENDS,
        help="onnxruntime: run a directory written by `attnlab export MODEL --onnx DIR` on ONNX Runtime",
    )  # fmt: skip
    pr.add_argument(
        "--int8", action="store_true",
        help="int8 linear layers (torch: attnlab.inference.quantize; onnxruntime: the export's "
        "model.int8.onnx); CPU",
    )  # fmt: skip
    pr.add_argument("--output", help="write the JSON lines here (default: standard output)")
    pr.set_defaults(func=run_predict)


def _inputs(args: argparse.Namespace) -> list[Any]:
    if args.text is not None:
        lines = [args.text]
    elif args.file == "-":
        from .inputs import read_stdin

        lines = [line for line in read_stdin().splitlines() if line.strip()]
    else:
        from .inputs import check_text_file

        check_text_file(args.file, "--file")  # bad bytes name the file and line
        with open(args.file, encoding="utf-8") as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
    if args.kind == "qa":
        out = []
        for n, line in enumerate(lines, 1):
            source = "standard input" if args.file == "-" else args.file
            where = f"{source}:{n}" if args.text is None else "--text"
            if args.question is not None:
                out.append((args.question, line))
            elif line.lstrip().startswith("{"):
                out.append(_qa_object(line, where))
            elif "\t" in line:
                q, c = line.split("\t", 1)
                out.append((q, c))
            else:
                raise ValueError(f"{where}: qa needs --question, or 'question<TAB>context' / JSON lines")
        return out
    if args.kind == "classify" and args.pair:
        out = []
        for n, line in enumerate(lines, 1):
            if "\t" not in line:
                raise ValueError(f"{args.file or '--text'}:{n}: --pair expects 'A<TAB>B'")
            out.append(tuple(line.split("\t", 1)))
        return out
    return lines


def _qa_object(line: str, where: str) -> tuple[str, str]:
    """``(question, context)`` of one JSON line; ``where`` (``FILE:LINE``, ``--text``) names it in errors."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict) or not {"question", "context"} <= set(obj):
        raise ValueError(f"{where}: expected a JSON object with 'question' and 'context'")
    for name in ("question", "context"):
        if not isinstance(obj[name], str):
            raise ValueError(f"{where}: {name} must be a string, got {type(obj[name]).__name__}")
    return obj["question"], obj["context"]


def _check_model(model: str) -> None:
    """A model directory (not a run or checkpoint directory) whose tokenizer fits its embedding."""
    from attnlab.tokenizers import load_tokenizer

    from .model_dirs import check_model_dir, check_vocab_fits

    directory = check_model_dir(model, "MODEL_DIR")
    check_vocab_fits(directory, load_tokenizer(directory))


def run_predict(args: argparse.Namespace) -> int:
    from attnlab.inference.allocator import bound_kernel_caches, keep_freed_memory
    from attnlab.tasks.pipelines import pipeline

    keep_freed_memory()  # batch after batch of forwards: reuse freed memory (ATTNLAB_MALLOC=default: off)
    bound_kernel_caches()  # batches of many shapes: oneDNN's kernels per shape, capped

    names = {"fill-mask": "fill-mask", "qa": "question-answering", "ner": "ner",
             "classify": "text-classification", "embed": "embeddings"}  # fmt: skip
    _check_model(args.model)
    inputs = _inputs(args)
    pipe = pipeline(
        names[args.kind],
        args.model,
        device=args.device,
        batch_size=args.batch_size,
        max_length=args.max_length,
        backend=args.backend,
        int8=args.int8,
    )
    records = []
    if args.kind == "fill-mask":
        outs = pipe(inputs, top_k=args.top_k or 5)
        records = [{"text": t, "predictions": o} for t, o in zip(inputs, outs)]
    elif args.kind == "qa":
        outs = pipe(inputs, top_k=args.top_k or 1, version_2=args.version_2)
        records = [{"question": q, "context": c, "answer": o} for (q, c), o in zip(inputs, outs)]
    elif args.kind == "ner":
        outs = pipe(inputs, aggregation=args.aggregation)
        records = [{"text": t, "entities": o} for t, o in zip(inputs, outs)]
    elif args.kind == "classify":
        outs = pipe(inputs, top_k=args.top_k)
        records = [{"text": t if isinstance(t, str) else list(t), "labels": o} for t, o in zip(inputs, outs)]
    else:
        if args.word:
            records = [{"text": t, "word": args.word, "vector": pipe.word_vector(t, args.word).tolist()}
                       for t in inputs]  # fmt: skip
        else:
            vectors = pipe(inputs, pooling=args.pooling)
            records = [
                {"text": t, "pooling": args.pooling, "vector": v.tolist()} for t, v in zip(inputs, vectors)
            ]
    text = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    if args.output:
        from attnlab.atomic import atomic_write

        with atomic_write(args.output) as f:  # all or nothing
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
