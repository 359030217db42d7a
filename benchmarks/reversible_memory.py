"""Training memory of the Reformer's reversible layers against depth (the target: 12 layers <= 1.2x 2).

Each configuration runs in a fresh process (so one's peak cannot hide another's): it builds the model and a
batch, notes the resident memory, runs forward + backward (one training step without the optimizer) and
reports

- ``peak``: the process's peak resident memory during the step minus the resident memory before it (what the
step
  needs on top of the model: activations kept for backward, gradients, temporaries), and
- ``saved``: the bytes autograd keeps for the backward pass (every distinct tensor handed to
  ``saved_tensors_hooks``), the activation memory proper.

Compared in the same run: the same blocks as a reversible stack and as an ordinary residual stack, 2 and 12
layers, LSH attention (4 hashes, chunks of 64), width 64, 4,096 positions, batch 1: long and narrow, so
activations, not parameters, dominate, as in the paper's setting (64K tokens). Children run with
``MALLOC_MMAP_THRESHOLD_=65536`` so glibc returns freed blocks (otherwise heap fragmentation adds to the peak
with every allocation: 1.22x for the reversible stack instead of 1.01x). Memory figures are not timing
figures: the load on the machine does not change them, but it is printed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/reversible_memory.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def child(layers: int, reversible: bool, length: int, width: int) -> None:
    import torch

    from attnlab.models.reformer import Reformer, ReformerConfig

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = ReformerConfig(
        vocab_size=256, max_positions=length, hidden_size=width, num_heads=2, intermediate_size=4 * width,
        attention_layers=["lsh"] * layers, num_hashes=4, num_buckets=64, lsh_chunk_length=64,
        reversible=reversible, ffn_chunk_size=512,
    )  # fmt: skip
    model = Reformer(cfg)
    ids = torch.randint(0, 256, (1, length))
    for p in model.parameters():  # gradients allocated up front: the same for both stacks, not activations
        p.grad = torch.zeros_like(p)
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    before = rss_kib()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(ids, labels=ids).loss
    loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"peak_mib": (peak - before) / 1024, "saved_mib": sum(saved.values()) / 2**20,
                      "params": params}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--child", nargs=2, metavar=("LAYERS", "REVERSIBLE"))
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1] == "1", args.length, args.width)
        return
    print(f"load: {os.getloadavg()[0]:.2f} (1-minute average)")
    print(f"Reformer LSH (4 hashes, chunks 64), width {args.width}, {args.length:,} positions, batch 1; "
          "one forward + backward per fresh process")  # fmt: skip
    results = {}
    for layers in (2, 12):
        for reversible in (True, False):
            cmd = [sys.executable, __file__, "--child", str(layers), str(int(reversible)),
                   "--length", str(args.length), "--width", str(args.width)]  # fmt: skip
            # glibc keeps freed heap memory mapped (fragmentation inflates the peak with the number of
            # allocations); serving large blocks by mmap makes resident memory follow live tensors
            env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            results[layers, reversible] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{'stack':<11} {'layers':>6} {'params':>9} {'step peak MiB':>14} {'saved for backward MiB':>23}")
    for (layers, reversible), r in results.items():
        name = "reversible" if reversible else "ordinary"
        print(f"{name:<11} {layers:>6} {r['params']:>9,} {r['peak_mib']:>14.1f} {r['saved_mib']:>23.1f}")
    for reversible in (True, False):
        name = "reversible" if reversible else "ordinary"
        a, b = results[2, reversible], results[12, reversible]
        ratio = b["peak_mib"] / a["peak_mib"]
        verdict = f" (target <= 1.2: {'PASS' if ratio <= 1.2 else 'FAIL'})" if reversible else ""
        print(f"{name}: 12 layers / 2 layers = {ratio:.2f}x step memory, "
              f"{b['saved_mib'] / max(a['saved_mib'], 1e-9):.2f}x saved activations{verdict}")  # fmt: skip
    print("paper (Kitaev et al. 2020, section 3 and Table 5): reversible layers make activation memory "
          "independent of the number of layers (n_l absent from the reversible rows' memory)")  # fmt: skip


if __name__ == "__main__":
    main()
