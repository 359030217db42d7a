"""``attnlab serve MODEL_DIR``: the model over HTTP (FastAPI + uvicorn), with the web page at ``/``.

attnlab serve runs/mlm/model                      # http://127.0.0.1:8000/ (page), /docs (API)
attnlab serve runs/sst2/best --port 9000 --api-key "$KEY" --max-batch-tokens 8192 --max-wait-ms 10

The endpoints follow what MODEL_DIR holds (see `attnlab.serving.service`). Needs the ``serve`` extra:
``pip install 'attnlab[serve]'``.
"""

from __future__ import annotations

import argparse
import os
import sys

from attnlab.inference.engine import BACKENDS

from .args import non_negative_float, non_negative_int, positive_float, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve a model over HTTP (JSON API, dynamic batching, metrics, web page with attention view)",
        description="Serve MODEL_DIR over HTTP: /v1/<endpoint> for what the model can do (fill-mask, "
        "classify, ner, qa, embed, generate, translate, attention), /health, /ready, /metrics, /docs, and "
        "a web page at /. Ctrl-C or SIGTERM stops it after in-flight requests finish.",
    )
    p.add_argument(
        "model", metavar="MODEL_DIR", help="a model directory (attnlab or HF; GPT; translate-train)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=non_negative_int, default=8000, help="TCP port (0: any free port)")
    batching = p.add_argument_group("dynamic batching")
    batching.add_argument(
        "--max-batch-tokens", type=positive_int, default=4096,
        help="padded tokens per batch (requests x longest request)",
    )  # fmt: skip
    batching.add_argument(
        "--max-wait-ms", type=non_negative_float, default=5.0,
        help="how long the oldest request waits for others to join its batch",
    )  # fmt: skip
    batching.add_argument(
        "--max-batch-size", type=positive_int, default=64, help="requests per batch (1: no batching)"
    )
    batching.add_argument(
        "--max-queue", type=positive_int, default=256, help="requests waiting; more get 503 + Retry-After"
    )
    batching.add_argument(
        "--no-continuous", dest="continuous", action="store_false",
        help="GPT: run each generation as a batch of its own (default: it joins the running decode batch)",
    )  # fmt: skip
    limits = p.add_argument_group("limits")
    limits.add_argument(
        "--max-body-bytes", type=positive_int, default=1_000_000, help="larger request bodies get 413"
    )
    limits.add_argument(
        "--timeout-s", type=positive_float, default=30.0, help="a request not answered by then gets 504"
    )
    limits.add_argument(
        "--api-key",
        help="require this key (Authorization: Bearer KEY or X-API-Key) on /v1/* and /metrics "
        "(default: $ATTNLAB_API_KEY when set, else none)",
    )
    p.add_argument("--backend", choices=BACKENDS, default="torch", help="inference engine (encoders)")
    p.add_argument(
        "--int8", action="store_true",
        help="encoders: int8 linear layers (torch: attnlab.inference.quantize; onnxruntime: the export's "
        "model.int8.onnx); CPU",
    )  # fmt: skip
    p.add_argument("--threads", type=positive_int, help="torch threads for the model (default: torch's)")
    p.add_argument(
        "--cpu-gemm", choices=["default", "onednn"], default="default",
        help="float32 CPU matmuls: PyTorch's F.linear, or attnlab's oneDNN path (faster on large models; its "
        "memory grows with every new batch shape a server sees: benchmarks/serve.py measured +17%% RSS over "
        "10,000 requests, flat with F.linear)",
    )  # fmt: skip
    p.add_argument("--access-log", action="store_true", help="log every request (uvicorn's access log)")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise ValueError(
            f"serving needs FastAPI and uvicorn ({e}); install them: pip install 'attnlab[serve]'"
        ) from e
    from attnlab.serving.app import create_app
    from attnlab.serving.server import serve
    from attnlab.serving.service import load_service
    from attnlab.serving.settings import ServeSettings

    settings = ServeSettings(
        host=args.host, port=args.port, max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
        max_batch_size=args.max_batch_size, max_queue=args.max_queue, max_body_bytes=args.max_body_bytes,
        timeout_s=args.timeout_s, api_key=args.api_key or os.environ.get("ATTNLAB_API_KEY") or None,
        backend=args.backend, continuous=args.continuous,
    )  # fmt: skip
    from attnlab.accel import set_cpu_gemm

    set_cpu_gemm(args.cpu_gemm, "--cpu-gemm")
    from attnlab.inference.allocator import bound_kernel_caches, keep_freed_memory

    keep_freed_memory()  # forward after forward: reuse freed memory (ATTNLAB_MALLOC=default: off)
    bound_kernel_caches()  # a new batch shape with almost every batch: oneDNN's kernels per shape, capped
    service = load_service(args.model, backend=args.backend, threads=args.threads, int8=args.int8)
    print(
        f"attnlab serve: {service.architecture} from {service.directory} on http://{args.host}:{args.port}/ "
        f"({', '.join('/v1/' + e for e in service.endpoints)})",
        file=sys.stderr,
        flush=True,
    )
    serve(create_app(service, settings), settings, access_log=args.access_log)
    return 0
