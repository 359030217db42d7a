"""Translation speed: attnlab `Seq2Seq` vs HF transformers `MarianMTModel` of the same size and weights.

    .venv/bin/python benchmarks/translation.py                       # base size (N=6, 512/2048/8), V=8000
    .venv/bin/python benchmarks/translation.py --layers 2 --d-model 64 --d-ff 256 --heads 4 --vocab 1000 \\
        --batch 8 --train-steps 3 --sentences 8 --max-new 12      # quick sanity run

Both models get identical weights (attnlab's init copied into Marian's layout with
`attnlab.translation.marian.state_dict_to_marian`; sinusoids in Marian's concatenated layout, decoder start
= pad), so they compute the same function and, in the beam-search part, produce the same outputs (checked
and reported): the work is the same.

- Training: ``--train-steps`` timed steps (after one warm-up step) of forward, label-smoothed loss (0.1),
  backward and Adam on the same random batches (B = ``--batch``, source/target lengths ``--src-len`` /
  ``--tgt-len``); tokens/s counts source + target tokens. Dropout 0.1 in both.
- Beam search: ``--sentences`` random source sentences in batches of ``--decode-batch``, beam ``--beam``,
  no length penalty, exactly ``--max-new`` steps allowed; sentences/s. HF: ``generate(num_beams=...,
  length_penalty=0.0, early_stopping=False)``; attnlab: `beam_search(alpha=0.0)` (identical rules).

The runs alternate attnlab and HF so that load on the machine hits both alike; the table gives the
median over ``--repeats`` and the ratio attnlab / HF (> 1: attnlab is faster, for both throughputs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# Run as a script, Python puts benchmarks/ first on sys.path, where a sibling script's name (tokenizers.py)
# would shadow the library of that name that transformers imports. Take the folder off the path.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attnlab.accel import optimize, set_cpu_gemm  # noqa: E402
from attnlab.translation import Seq2SeqConfig, beam_search, build_model  # noqa: E402
from attnlab.translation.marian import state_dict_to_marian  # noqa: E402

PAD, EOS = 0, 1


def make_pair(args: argparse.Namespace):
    from transformers import MarianConfig, MarianMTModel

    cfg = Seq2SeqConfig(
        vocab_size=args.vocab, pad_token_id=PAD, bos_token_id=PAD, eos_token_id=EOS,
        decoder_start_token_id=PAD, num_layers=args.layers, d_model=args.d_model, d_ff=args.d_ff,
        num_heads=args.heads, dropout=0.1, label_smoothing=0.1, sinusoidal_layout="concatenated",
        max_positions=512,
    )  # fmt: skip
    hc = MarianConfig(
        vocab_size=args.vocab, d_model=args.d_model, encoder_layers=args.layers, decoder_layers=args.layers,
        encoder_attention_heads=args.heads, decoder_attention_heads=args.heads, encoder_ffn_dim=args.d_ff,
        decoder_ffn_dim=args.d_ff, activation_function="relu", dropout=0.1, max_position_embeddings=512,
        scale_embedding=True, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD,
        forced_eos_token_id=None, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    ours = optimize(build_model(cfg))  # the CPU fast paths, as `attnlab translate` runs it
    hf = MarianMTModel(hc)
    result = hf.load_state_dict(state_dict_to_marian(ours.state_dict(), cfg), strict=False)
    assert all("embed_positions" in k for k in result.missing_keys), result.missing_keys
    return ours, hf


def batches(args: argparse.Namespace, n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        src = torch.randint(2, args.vocab, (args.batch, args.src_len), generator=g)
        tgt = torch.randint(2, args.vocab, (args.batch, args.tgt_len), generator=g)
        dec = torch.cat([torch.full((args.batch, 1), PAD), tgt[:, :-1]], dim=1)
        out.append(
            {
                "input_ids": src,
                "attention_mask": torch.ones_like(src),
                "decoder_input_ids": dec,
                "labels": tgt,
            }
        )
    return out


def train_seconds(model: torch.nn.Module, data: list[dict], hf: bool) -> float:
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step(batch: dict) -> None:
        if hf:
            logits = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                decoder_input_ids=batch["decoder_input_ids"],
            ).logits  # fmt: skip
            loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), label_smoothing=0.1)
        else:
            loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step(data[0])  # warm-up
    start = time.perf_counter()
    for batch in data[1:]:
        step(batch)
    return time.perf_counter() - start


@torch.no_grad()
def decode(
    model: torch.nn.Module, src: torch.Tensor, args: argparse.Namespace, hf: bool
) -> tuple[float, list]:
    model.eval()
    outputs: list[list[int]] = []
    start = time.perf_counter()
    for i in range(0, src.size(0), args.decode_batch):
        ids = src[i : i + args.decode_batch]
        mask = torch.ones_like(ids)
        if hf:
            seqs = model.generate(
                input_ids=ids, attention_mask=mask, num_beams=args.beam, max_new_tokens=args.max_new,
                do_sample=False, length_penalty=0.0, early_stopping=False,
            )  # fmt: skip
            for row in seqs[:, 1:].tolist():
                outputs.append(row[: row.index(EOS)] if EOS in row else row)
        else:
            hyps = beam_search(
                model,
                ids,
                mask,
                beam_size=args.beam,
                alpha=0.0,
                max_length_offset=10_000,
                max_length=args.max_new,
            )
            outputs.extend(h.tokens for h in hyps)
    return time.perf_counter() - start, outputs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--src-len", type=int, default=24)
    p.add_argument("--tgt-len", type=int, default=24)
    p.add_argument("--train-steps", type=int, default=5)
    p.add_argument("--sentences", type=int, default=32)
    p.add_argument("--decode-batch", type=int, default=16)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-new", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    p.add_argument(
        "--cpu-gemm",
        choices=("auto", "onednn", "default"),
        default="auto",
        help="attnlab's float32 CPU matmuls: auto (its default: oneDNN with AVX-512, else F.linear), oneDNN, "
        "or F.linear as HF uses",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    set_cpu_gemm(args.cpu_gemm)

    ours, hf = make_pair(args)
    n_params = sum(p.numel() for p in {id(q): q for q in ours.parameters()}.values())
    data = batches(args, args.train_steps + 1)
    tokens = args.train_steps * args.batch * (args.src_len + args.tgt_len)
    src = torch.randint(
        2, args.vocab, (args.sentences, args.src_len), generator=torch.Generator().manual_seed(2)
    )

    train = {"attnlab": [], "hf": []}
    dec = {"attnlab": [], "hf": []}
    same = True
    for _ in range(args.repeats):
        # fresh copies so that each training run starts from the same weights
        a, h = make_pair(args)
        train["attnlab"].append(tokens / train_seconds(a, data, hf=False))
        train["hf"].append(tokens / train_seconds(h, data, hf=True))
        ta, out_a = decode(ours, src, args, hf=False)
        th, out_h = decode(hf, src, args, hf=True)
        dec["attnlab"].append(args.sentences / ta)
        dec["hf"].append(args.sentences / th)
        same = same and out_a == out_h

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    print(
        f"model: N={args.layers}, d_model={args.d_model}, d_ff={args.d_ff}, h={args.heads}, V={args.vocab}, "
        f"{n_params / 1e6:.1f}M parameters; torch {torch.__version__}, {torch.get_num_threads()} threads, CPU"
    )
    print(f"{'measure':<44} {'attnlab':>10} {'HF Marian':>10} {'ratio':>7}")
    rows = [
        (f"train tokens/s (B={args.batch}, S=T={args.src_len})", train),
        (f"beam-{args.beam} sentences/s ({args.max_new} new tokens max)", dec),
    ]
    for name, values in rows:
        a, h = med(values["attnlab"]), med(values["hf"])
        print(f"{name:<44} {a:>10.1f} {h:>10.1f} {a / h:>7.2f}")
    print(f"beam outputs identical: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
