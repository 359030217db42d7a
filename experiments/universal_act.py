"""Adaptive computation time over depth: does the Universal Transformer ponder longer on harder inputs?
(Dehghani et al. 2019, section 2.2 and their bAbI figures: the UT with ACT takes more steps on the tasks that
need more supporting facts; Graves 2016, "Adaptive Computation Time for Recurrent Neural Networks", section
3.1: more steps on parity vectors with more non-zero bits.)

    .venv/bin/python experiments/universal_act.py --seed 0        # about 8-15 minutes on one thread

Measured (2026-11-28, 1 thread, three seeds side by side; held-out examples; "steps": the mean number of
steps ACT took at the last bit, whose label needs all n bits; accuracy over every bit / the last bit):

    seed  kept  n = 2-20     steps at n = 2/5/10/15/20  n = 30              n = 40
    0     4000  1.000/1.000  2.00/5.00/10.00/15.00/20.00  0.993/0.840, 29.77  0.918/0.506, 35.06
    1     4000  1.000/1.000  2.00/5.00/10.00/15.00/20.00  1.000/1.000, 30.00  1.000/1.000, 40.00
    2     2750  1.000/1.000  2.00/5.00/10.00/15.00/20.00  1.000/1.000, 30.00  1.000/1.000, 40.04

ACT takes n steps at the last bit of an n-bit input, exactly, at every training length (Spearman 1.000):
**more steps on harder inputs**, the target, met on every seed. It learned the depth by itself: each
position halts once the bits before it have arrived along the window. At n = 40, twice the longest training
length, seeds 1 and 2 take 40 steps and stay exact; seed 0 stops at about 35 (the last bit at a guess).
Without the held-out selection (``--select-every 0``) seed 2 relapsed at step 2,900 to two steps everywhere
and never recovered (once every position halts early the later steps are not computed, so nothing pulls it
back); the selection kept its step-2,750 state. Seeds 0 and 1 without selection: the same numbers (their last
state is the one kept). ``--halted transform`` (seed 0, no selection): the same n steps, 1.000 at n = 40.

What did not work on the way: on parity with one answer after [SEP] and no label on the bits
(experiments/universal_transformer.py's task) ACT did not learn at any initial halting bias tried; and a
miniature of bAbI's multi-hop questions (2-token assignments ``c b``, ``b 7`` in random order among
distractor chains, then the query c; 1-4 hops; full attention, pre-LN, up to 10 steps) was learned neither by
ACT nor by a fixed 6-step UT in 4,000-8,000 steps (0.33-0.49: picking one of the digits present).

Task: **running parity**, generated. An example is [BOS] and n random bits; every bit is labelled with the
parity of the bits up to it::

    [BOS]  1  0  1  1        labels  -  1  1  0  1        (the last label is the parity of all n bits)

so the label at position i needs i bits, and the last one needs all n: n is the difficulty. Training lengths
n are 1..20 (the largest rising from 2 to 20 over ``--curriculum`` steps); held-out examples of n = 2 .. 20
and of n = 30 and 40 (longer than any training example) are scored, with the mean number of steps ACT takes
at the last bit (the answer).

Model (`attnlab.models.universal`, the shared blocks): one post-LN layer, width 64, 4 heads, FFN 256, whose
self-attention sees only the position before each (`attnlab.nn.local_attention.LocalSelfAttention`, window 1,
causal), the input added again before every step, no timestep signal (the parity model of
experiments/universal_transformer.py), with `attnlab.nn.act.AdaptiveComputationTime` deciding each position's
depth: up to ``--max-steps`` (42), halting threshold 0.99, initial halting bias 1.0 (tensor2tensor's), ponder
weight ``--ponder-weight`` (1e-2). ``--halted copy`` (the default) keeps a halted position's state for the
later steps, as the paper's text has it ("once the per-symbol recurrent block halts, its state is simply
copied to the next step"); ``--halted transform`` transforms it on, as tensor2tensor's code does. Adam lr 1e-3
(200 warm-up steps, linear decay to 0), batch 32, gradient clipping 1.0; the state tested is the one that
scored best on 200 held-out examples of the training lengths (``--select-every`` 250 steps; never a test
length). With the window, what position i has gathered moves one position a step, so a right answer at the
last bit needs information that has travelled n positions: a model that gets it right must take more steps on
longer inputs, and ACT must find out how many by itself.

    .venv/bin/python experiments/universal_act.py

``--no-act`` trains the same UT at the fixed depth ``--max-steps`` instead.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

# Run as a script, Python puts experiments/ first on sys.path; take it off so names cannot shadow libraries.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import torch  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from attnlab.models.universal import TaggingModel, UniversalStack, count_parameters, make_layer  # noqa: E402
from attnlab.nn.act import AdaptiveComputationTime  # noqa: E402
from attnlab.nn.local_attention import LocalSelfAttention  # noqa: E402

PAD, BOS, ZERO, ONE = 0, 1, 2, 3
VOCAB = 4
EVAL_LENGTHS = (2, 5, 10, 15, 20, 30, 40)


def example(n: int, rng: random.Random) -> tuple[list[int], list[int]]:
    """([BOS] x_1 .. x_n, labels): each bit labelled with the parity of the bits up to it (BOS: -100)."""
    ids, labels, parity = [BOS], [-100], 0
    for _ in range(n):
        bit = rng.randrange(2)
        parity ^= bit
        ids.append(ZERO + bit)
        labels.append(ZERO + parity)
    return ids, labels


def batch(lengths: list[int], longest: int, rng: random.Random, offsets: bool) -> dict[str, torch.Tensor]:
    """One example per length, padded, as `TaggingModel`'s arguments. With ``offsets`` the positions start
    at a random offset within a sequence of ``longest`` bits, so a test length's positions are not new
    numbers (the paper's "positions starting with randomized offsets"); without, at 0."""
    rows = [example(n, rng) for n in lengths]
    t = max(len(x) for x, _ in rows)
    ids = torch.full((len(rows), t), PAD)
    labels = torch.full((len(rows), t), -100)
    mask = torch.zeros(len(rows), t, dtype=torch.long)
    for i, (x, y) in enumerate(rows):
        ids[i, : len(x)], labels[i, : len(y)], mask[i, : len(x)] = torch.tensor(x), torch.tensor(y), 1
    start = rng.randrange(longest + 2 - t) if offsets else 0
    positions = torch.arange(start, start + t)[None]
    return {"input_ids": ids, "attention_mask": mask, "positions": positions, "labels": labels}


def build(args: argparse.Namespace) -> TaggingModel:
    act = None
    if not args.no_act:
        act = AdaptiveComputationTime(
            64, args.max_steps, threshold=0.99, bias_init=args.halting_bias, copy_halted=args.halted == "copy"
        )
    window = LocalSelfAttention(64, 4, 1, causal=True)  # the position before each, and itself
    layer = make_layer(64, 4, 256, self_attention=window)  # post-LN
    stack = UniversalStack(
        layer, 64, args.max_steps, args.test_n + 2, act=act, inject_input=True, timestep_signal=False
    )
    return TaggingModel(VOCAB, 64, stack, ponder_weight=0.0 if args.no_act else args.ponder_weight)


@torch.no_grad()
def evaluate(model: TaggingModel, n: int, args: argparse.Namespace) -> dict:
    """Accuracy (every bit; the last bit) and ACT's steps at the last bit over held-out examples of n bits."""
    model.eval()
    rng = random.Random(10_000 + n)  # held out: the training stream is seeded from --seed
    right = total = answer_right = 0
    answer_steps: list[float] = []
    for start in range(0, args.eval_examples, 100):
        b = batch([n] * min(100, args.eval_examples - start), args.test_n, rng, offsets=False)
        labels = b.pop("labels")
        out = model(**b)
        ok = (out.logits.argmax(-1) == labels) & (labels != -100)
        right += int(ok.sum())
        total += int((labels != -100).sum())
        answer_right += int(ok[:, n].sum())  # position n: the last bit
        if out.steps is not None:
            answer_steps += out.steps[:, n].tolist()
    model.train()
    result = {"n": n, "accuracy": right / total, "answer_accuracy": answer_right / args.eval_examples}
    if answer_steps:
        result["answer_steps"] = sum(answer_steps) / len(answer_steps)
        result["answer_steps_all"] = answer_steps
    return result


@torch.no_grad()
def validate(model: TaggingModel, args: argparse.Namespace) -> tuple[float, float]:
    """(accuracy over every bit, loss with the ponder cost) on 10 held-out examples of each training length,
    their own random stream: what ``--select-every`` keeps the best state by (never a test length)."""
    model.eval()
    b = batch([n for n in range(1, args.train_n + 1) for _ in range(10)], args.test_n,
              random.Random(5000 + args.seed), offsets=True)  # fmt: skip
    out = model(**b)
    scored = b["labels"] != -100
    model.train()
    return float(((out.logits.argmax(-1) == b["labels"]) & scored).sum() / scored.sum()), float(out.loss)


def train(args: argparse.Namespace) -> tuple[TaggingModel, int, float, dict | None]:
    """Train ``--steps`` steps; returns (model, steps, seconds, the selection: step and held-out scores, or
    None without ``--select-every``). With it the model returned is the best state kept."""
    torch.manual_seed(args.seed)
    model = build(args)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98))
    warmup = 200

    def factor(s: int) -> float:  # linear warm-up, then linear decay to 0 at --steps
        return min((s + 1) / warmup, max(0.0, (args.steps - s) / max(1, args.steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    rng = random.Random(args.seed + 1)
    losses: list[float] = []
    best: tuple[tuple[float, float], int, dict] | None = None  # ((accuracy, -loss), step, state)
    start = time.time()
    for step in range(args.steps):
        longest = args.train_n  # --curriculum: the longest rises from 2 to --train-n over its steps
        if args.curriculum:
            longest = min(args.train_n, 2 + (args.train_n - 2) * step // args.curriculum)
        b = batch([rng.randint(1, longest) for _ in range(args.batch_size)], args.test_n, rng, offsets=True)
        out = model(**b)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(out.loss.item())
        if (step + 1) % args.log_every == 0:
            recent = sum(losses[-args.log_every :]) / args.log_every
            line = f"step {step + 1:5d} loss {recent:.4f} ({time.time() - start:.0f} s), longest n {longest}"
            if out.steps is not None:  # each row's last bit: its answer
                last = b["attention_mask"].sum(1) - 1
                line += f", steps at the answer {out.steps[torch.arange(len(last)), last].mean():.2f}"
            print(line, flush=True)
        if args.select_every and ((step + 1) % args.select_every == 0 or step + 1 == args.steps):
            acc, loss = validate(model, args)
            if best is None or (acc, -loss) > best[0]:
                best = (acc, -loss), step + 1, {k: v.clone() for k, v in model.state_dict().items()}
    seconds = time.time() - start
    if best is None:
        return model, len(losses), seconds, None
    model.load_state_dict(best[2])
    kept = {"step": best[1], "held_out_accuracy": best[0][0], "held_out_loss": -best[0][1]}
    print(f"kept the state of step {best[1]} (held-out accuracy at n <= {args.train_n}: {best[0][0]:.3f})")
    return model, len(losses), seconds, kept


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-n", type=int, default=20, help="training lengths 1..this")
    p.add_argument("--test-n", type=int, default=40, help="the longest length tested")
    p.add_argument("--max-steps", type=int, default=None, help="ACT's maximum (--no-act: the depth); "
                   "default --test-n + 2")  # fmt: skip
    p.add_argument("--no-act", action="store_true", help="a fixed-depth UT of --max-steps steps")
    p.add_argument(
        "--halted", choices=("copy", "transform"), default="copy",
        help="a halted position's state: copied to the later steps (the paper) or transformed on "
        "(tensor2tensor)",
    )  # fmt: skip
    p.add_argument("--halting-bias", type=float, default=1.0, help="ACT's initial halting bias")
    p.add_argument("--ponder-weight", type=float, default=1e-2, help="tau, the ponder cost's weight")
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--curriculum", type=int, default=2000, help="the longest n rises from 2 over these steps")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eval-examples", type=int, default=500)
    p.add_argument(
        "--select-every", type=int, default=250,
        help="score 200 held-out examples of the training lengths every this many steps and test the best "
        "state (0: the last)",
    )  # fmt: skip
    p.add_argument("--log-every", type=int, default=250)
    p.add_argument("--output", default="runs/universal_act.json")
    args = p.parse_args()
    args.max_steps = args.max_steps or args.test_n + 2
    if not 2 <= args.train_n <= args.test_n:
        p.error(f"want 2 <= --train-n <= --test-n; got {args.train_n}, {args.test_n}")
    torch.set_num_threads(args.threads)
    model, steps, seconds, kept = train(args)
    lengths = sorted(n for n in {*EVAL_LENGTHS, args.train_n, args.test_n} if n <= args.test_n)
    rows = [evaluate(model, n, args) for n in lengths]
    print(f"\n{count_parameters(model)} parameters, {steps} steps in {seconds:.0f} s; n = 1..{args.train_n} "
          f"in training")  # fmt: skip
    print(f"{'n':>4s} {'accuracy':>9s} {'last bit':>9s} {'steps at the last bit':>22s}")
    for r in rows:
        ponder = f"{r['answer_steps']:22.2f}" if "answer_steps" in r else f"{'-':>22s}"
        longer = "  (longer than in training)" if r["n"] > args.train_n else ""
        print(f"{r['n']:4d} {r['accuracy']:9.3f} {r['answer_accuracy']:9.3f} {ponder}{longer}")
    summary = {"args": vars(args), "parameters": count_parameters(model), "seconds": seconds, "rows": rows,
               "selected": kept}  # fmt: skip
    if not args.no_act:
        trained = [r for r in rows if r["n"] <= args.train_n]
        ns = [r["n"] for r in trained for _ in r["answer_steps_all"]]
        ponder = [s for r in trained for s in r["answer_steps_all"]]
        rho = float(spearmanr(ns, ponder).statistic) if len(set(ponder)) > 1 else 0.0
        means = [r["answer_steps"] for r in rows]
        rising = all(b > a for a, b in zip(means, means[1:]))
        summary["spearman_n_steps"], summary["steps_rise_with_n"] = rho, rising
        print(
            f"Spearman(n, steps at the last bit) over the training lengths: {rho:.3f}; the mean steps rise "
            f"with every longer n: {'yes' if rising else 'no'} (target: more steps on harder inputs)"
        )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
