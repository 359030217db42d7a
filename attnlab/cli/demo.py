"""``attnlab demo``: a tour of the model core on random data (no files, no downloads).

Builds a small encoder (bert-mini with a tiny vocabulary), runs a padded batch through it and through a
pre-training composition, checks that the fast (SDPA) and explicit attention paths agree, and prints the
parameter counts of every preset (built on the meta device, so nothing is allocated).
"""

from __future__ import annotations

import argparse
import time

from .args import non_negative_int, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run a small encoder on a padded random batch and print shapes and parameter counts",
        description="Demonstrate the Transformer core: a bert-mini-shaped encoder on random token ids with "
        "padding, fast vs explicit attention agreement, and every preset's parameter count.",
    )
    demo.add_argument("--preset", default="bert-mini", help="preset to run (default: bert-mini)")
    demo.add_argument(
        "--vocab-size", type=positive_int, default=1000, help="vocabulary size override (default: 1000)"
    )
    demo.add_argument(
        "--batch-size", type=positive_int, default=4, help="sequences in the batch (default: 4)"
    )
    demo.add_argument(
        "--seq-len", type=positive_int, default=32, help="length of the longest sequence (default: 32)"
    )
    demo.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default: 0)")
    demo.set_defaults(func=run_demo)


def _millions(n: int) -> str:
    return f"{n / 1e6:,.2f}M"


def run_demo(args: argparse.Namespace) -> int:
    import torch

    from attnlab.models import PRESETS, Encoder, EncoderForPreTraining, count_parameters, get_preset

    if args.batch_size < 1 or args.seq_len < 2:
        raise SystemExit("attnlab demo: --batch-size must be >= 1 and --seq-len >= 2")
    torch.manual_seed(args.seed)
    config = get_preset(args.preset, vocab_size=args.vocab_size)
    print(
        f"preset {args.preset} with vocab_size={config.vocab_size}: "
        f"L={config.num_layers} H={config.hidden_size} "
        f"N={config.num_heads} I={config.intermediate_size} E={config.embedding_dim} sharing={config.sharing}"
    )

    model = EncoderForPreTraining.from_config(config, pair_head=config.add_pooler).eval()
    encoder: Encoder = model.encoder
    B, T = args.batch_size, args.seq_len
    lengths = torch.linspace(T, max(2, T // 2), B).long()  # decreasing lengths: later rows padded
    input_ids = torch.randint(1, config.vocab_size, (B, T))
    attention_mask = (torch.arange(T)[None] < lengths[:, None]).long()
    input_ids[attention_mask == 0] = config.pad_token_id
    labels = torch.where(torch.rand(B, T) < 0.15, input_ids, torch.full_like(input_ids, -100))
    labels[attention_mask == 0] = -100
    print(f"batch: input_ids {tuple(input_ids.shape)}, lengths {lengths.tolist()}")

    with torch.inference_mode():
        encoder(input_ids, attention_mask=attention_mask)  # warm-up, so the timings compare the paths
        encoder(input_ids, attention_mask=attention_mask, output_attentions=True)
        start = time.perf_counter()
        fast = encoder(input_ids, attention_mask=attention_mask)
        fast_ms = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        full = encoder(
            input_ids, attention_mask=attention_mask, output_hidden_states=True, output_attentions=True
        )
        explicit_ms = (time.perf_counter() - start) * 1e3
        out = model(input_ids, attention_mask=attention_mask, labels=labels)

    print(f"last_hidden_state {tuple(fast.last_hidden_state.shape)}  (B, T, H)")
    if fast.pooled_output is not None:
        print(f"pooled_output     {tuple(fast.pooled_output.shape)}  (B, H)")
    print(
        f"hidden_states     {len(full.hidden_states)} x {tuple(full.hidden_states[0].shape)}"
        "  (embeddings + L)"
    )
    print(f"attentions        {len(full.attentions)} x {tuple(full.attentions[0].shape)}  (B, N, T, T)")
    print(
        f"mlm_logits        {tuple(out.mlm_logits.shape)}  (B, T, V), loss at init {out.loss.item():.3f} "
        f"(ln V = {torch.log(torch.tensor(float(config.vocab_size))).item():.3f})"
    )

    real = attention_mask.bool()
    diff = (fast.last_hidden_state - full.last_hidden_state)[real].abs().max().item()
    pad_attention = max(
        a[~real[:, None, None, :].expand_as(a)].abs().max().item() if (~real).any() else 0.0
        for a in full.attentions
    )
    print(
        f"fast (SDPA) vs explicit attention: max |difference| on real tokens {diff:.2e} "
        f"({fast_ms:.1f} ms vs {explicit_ms:.1f} ms); max probability on padding keys {pad_attention:.1e}"
    )
    tied = model.mlm_head.decoder.weight is encoder.embeddings.word.weight
    print(f"MLM decoder tied to the word embedding: {tied}")

    print()
    print(f"{'preset':<26}{'L':>4}{'H':>6}{'N':>4}{'E':>6}{'sharing':>10}{'encoder params':>17}")
    for name in PRESETS:
        c = get_preset(name)
        print(
            f"{name:<26}{c.num_layers:>4}{c.hidden_size:>6}{c.num_heads:>4}{c.embedding_dim:>6}{c.sharing:>10}"
            f"{count_parameters(c):>17,}"
        )
    print(
        f"(this demo model: {_millions(count_parameters(model))} including heads, tied weights counted once)"
    )
    return 0 if diff < 1e-4 else 1
