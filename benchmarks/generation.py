"""Text generation speed: attnlab `generate` vs HF transformers' `generate` on the same GPT-2 weights and
prompts, and attnlab with vs without its key/value cache. One run prints every ratio.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/generation.py                  # the table below
    .venv/bin/python benchmarks/generation.py --new-tokens 64 --repeats 1        # a quick look

What it does: for each preset (default `gpt-char-tiny`, 4 layers x 128, 0.9M parameters, and
`gpt-bpe-small`, 6 layers x 384, 8,192-token vocabulary, 14M) with 512 positions and random weights, builds
an attnlab `GPT`, converts the weights in memory into HF's
``GPT2LMHeadModel`` (attnlab.io.hf_gpt2; SDPA attention), and generates ``--new-tokens`` tokens greedily
after random 16-token prompts, EOS ignored so every run makes exactly that many, at batch sizes 1 and 8,
float32 on the CPU. Calls alternate between attnlab and HF (background load hits both alike); the median of
``--repeats`` timed calls is reported, after one untimed warm-up call each, and beside it the median (and
range) of each round's own ratio: a round's two calls run back to back, so that figure holds when the
machine's speed drifts between rounds (the 2-core AMD EPYC drifts by up to 25%). The uncached
attnlab run (``use_cache=False``: the whole prefix recomputed each step) is timed once at batch size 1 for
every preset. The load average (``os.getloadavg``; other work shares the 2 cores) is printed with each
preset. At batch size 1 on CPU a step of the 14M model is bound by reading its weights from memory (56 MB
a token), where the layout MKL reads fastest decides (`attnlab.accel.linear.small_product`); the tiny model
shows the per-step overhead. Every row also
checks that both libraries produced the same tokens.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import torch  # noqa: E402

from attnlab.accel import optimize  # noqa: E402
from attnlab.generation import generate  # noqa: E402
from attnlab.io.hf_gpt2 import config_to_gpt2, state_dict_to_gpt2  # noqa: E402
from attnlab.models.gpt import build_gpt  # noqa: E402
from attnlab.models.gpt_presets import get_gpt_preset  # noqa: E402


def timed(fn, device: torch.device | None = None) -> tuple[float, object]:
    """(seconds, fn()), the GPU's queued work included."""
    cuda = device is not None and device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", default="gpt-char-tiny,gpt-bpe-small", help="GPT presets")
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--batch-sizes", default="1,8")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-uncached", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu or cuda (float32 on either)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for preset in args.presets.split(","):
        bench(preset, args, uncached=not args.skip_uncached)
    return 0


def bench(preset: str, args: argparse.Namespace, uncached: bool) -> None:
    import transformers

    torch.manual_seed(0)
    cfg = get_gpt_preset(preset, max_positions=max(512, args.prompt_len + args.new_tokens),
                         dropout=0.0, embedding_dropout=0.0, attention_dropout=0.0)  # fmt: skip
    device = torch.device(args.device)
    ours = optimize(build_gpt(cfg).eval())  # the CPU fast paths of decoding, as `attnlab generate`
    hf_cfg = transformers.GPT2Config(**{k: v for k, v in config_to_gpt2(cfg).items() if k != "model_type"})
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    missing = hf.load_state_dict(state_dict_to_gpt2(ours.state_dict(), cfg), strict=False)
    assert not missing.unexpected_keys and set(missing.missing_keys) <= {"lm_head.weight"}
    hf.tie_weights()
    ours, hf = ours.to(device), hf.to(device)
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    print(
        f"# {preset} ({sum(p.numel() for p in ours.parameters()) / 1e6:.1f}M parameters), greedy, "
        f"{args.prompt_len}-token prompts, {args.new_tokens} new tokens, float32 "
        + (torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU")
        + f", {torch.get_num_threads()} thread(s), torch {torch.__version__}, transformers "
        f"{transformers.__version__}, median of {args.repeats}; load average "
        + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    print(f"{'B':>3}  {'attnlab tok/s':>13}  {'HF tok/s':>9}  {'attnlab/HF':>10}  {'paired (range)':>19}  "
          "same tokens")  # fmt: skip
    g = torch.Generator().manual_seed(1)
    uncached_row = None
    for b in [int(x) for x in args.batch_sizes.split(",")]:
        ids = torch.randint(1, cfg.vocab_size, (b, args.prompt_len), generator=g).to(device)
        mask = torch.ones_like(ids)

        def run_ours(use_cache: bool = True, ids=ids, mask=mask):
            return generate(
                ours, ids, mask, max_new_tokens=args.new_tokens, ignore_eos=True, use_cache=use_cache
            )

        def run_hf(ids=ids, mask=mask):
            with torch.inference_mode():
                return hf.generate(
                    input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens, do_sample=False,
                    num_beams=1, eos_token_id=None, pad_token_id=0,
                )  # fmt: skip

        run_ours(), run_hf()  # warm-up
        t_ours, t_hf = [], []
        for _ in range(args.repeats):
            dt, mine = timed(run_ours, device)
            t_ours.append(dt)
            dt, ref = timed(run_hf, device)
            t_hf.append(dt)
        same = mine.sequences == ref[:, args.prompt_len :].tolist()
        tok = b * args.new_tokens
        mo, mh = statistics.median(t_ours), statistics.median(t_hf)
        paired = [h / o for o, h in zip(t_ours, t_hf, strict=True)]  # each round's two adjacent calls
        spread = f"{statistics.median(paired):.2f} ({min(paired):.2f}-{max(paired):.2f})"
        print(f"{b:>3}  {tok / mo:>13.1f}  {tok / mh:>9.1f}  {mh / mo:>10.2f}  {spread:>19}  {same}")
        if b == 1 and uncached:
            dt, slow = timed(lambda: run_ours(use_cache=False), device)
            uncached_row = (tok / dt, mo, dt, slow.sequences == mine.sequences)
    if uncached_row is not None:
        rate, cached_s, uncached_s, same = uncached_row
        print(
            f"attnlab B=1 without cache: {rate:.1f} tok/s ({uncached_s:.2f} s vs {cached_s:.2f} s cached): "
            f"cached is {uncached_s / cached_s:.2f}x faster; same tokens: {same}"
        )


if __name__ == "__main__":
    sys.exit(main())
