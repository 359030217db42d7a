"""ELMo pre-trained on the Gutenberg books, then used as frozen features by a CoNLL-2003 NER tagger.

    OMP_NUM_THREADS=1 python experiments/elmo_conll.py       # about 40 min on a loaded 2-core machine
    python experiments/elmo_conll.py --pretrain-minutes 1 --epochs 1 --max-train 500 --output runs/elmo-smoke

The targets: ELMo features add >= 2 F1 on CoNLL-2003 dev over the same tagger on word embeddings
learned from the training data alone (same tagger, same budget), and a scalar mix over all biLM layers
scores >= the top layer alone (the direction of the paper's Table 2).

1. ``pretrain_elmo`` (what ``attnlab pretrain --recipe elmo`` runs) on the first ``--corpus-chars`` characters
   of ``../shared/data/books/en`` for ``--pretrain-minutes``: preset ``elmo-cpu`` (512 filters, 2 highway
   layers, 2 x LSTM 512 cells -> 128, residual), a 20,000-word cased vocabulary with an adaptive softmax.
   Shrunk from the paper's 2x4096_512 on the 1B Word Benchmark (10 epochs on 32 GPUs for two weeks) to
   fit a 2-core CPU: about 1/300 of the parameters and a few million words of books.
2. The biLM's layers for every CoNLL sentence, computed once (frozen biLM, stateless).
3. One tagger, three inputs, the same budget (``--epochs`` over the training set, Adam, the same seed):
   ``words``: a 100-d word embedding learned from CoNLL train only (words seen twice or more, lowercased,
   the rest <unk>); ``+ELMo top``: the same plus the top biLM layer; ``+ELMo mix``: the same plus a learned
   scalar mix (softmax weights, gamma) over all three layers, with or without each layer normalised first
   (the paper's section 3.2), chosen by ``--mix-layer-norm heldout`` on the last 10% of CoNLL train (both
   mixes trained on the other 90%), never on dev. Tagger: dropout 0.5 -> BiLSTM (1 layer,
   200 per direction) -> dropout -> softmax over the IOB2 tags. Dev F1 by seqeval (attnlab.metrics.ner),
   read after the last epoch (no choice of epoch on dev).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.metrics.ner import ner_metrics  # noqa: E402
from attnlab.models.elmo import embed_sentences  # noqa: E402
from attnlab.nn.scalar_mix import ScalarMix  # noqa: E402
from attnlab.pretraining.elmo import ElmoRecipe, pretrain_elmo  # noqa: E402
from attnlab.tasks.loaders.conll import load_conll  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
PAPER = {
    "NER test F1 (Table 1)": ("90.15", "92.22"),
    "SRL dev F1, last layer -> all layers (Table 2)": ("81.9", "82.2"),
    "SQuAD dev F1, last layer -> all layers (Table 2)": ("84.7", "85.2"),
}


class Tagger(nn.Module):
    """word embedding [+ ELMo features] -> BiLSTM -> tag scores. ``elmo``: None, "top" or "mix"."""

    def __init__(self, n_words: int, n_tags: int, elmo: str | None, elmo_dim: int, n_layers: int) -> None:
        super().__init__()
        self.words = nn.Embedding(n_words, 100, padding_idx=0)
        self.elmo = "mix" if elmo == "mix-ln" else elmo
        # "mix-ln": each layer normalised before weighting (the paper's section 3.2 remedy when the layers'
        # scales differ: layer 0 here is the character CNN's [x; x], the LSTM layers are projected)
        self.mix = ScalarMix(n_layers, layer_norm=elmo == "mix-ln") if elmo in ("mix", "mix-ln") else None
        width = 100 + (elmo_dim if elmo else 0)
        self.dropout = nn.Dropout(0.5)
        self.lstm = nn.LSTM(width, 200, batch_first=True, bidirectional=True)
        self.out = nn.Linear(400, n_tags)

    def forward(self, word_ids: torch.Tensor, layers: torch.Tensor | None) -> torch.Tensor:
        x = self.words(word_ids)  # (B, T, 100)
        if self.elmo == "top":
            x = torch.cat([x, layers[-1]], dim=-1)
        elif self.elmo == "mix":
            x = torch.cat([x, self.mix(layers)], dim=-1)  # layers (L, B, T, D)
        h, _ = self.lstm(self.dropout(x))
        return self.out(self.dropout(h))  # (B, T, n_tags)


def batches(examples, features, word_index, tag_index, order, batch_size):
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        T = max(len(examples[i].words) for i in idx)
        words = torch.zeros(len(idx), T, dtype=torch.long)
        tags = torch.full((len(idx), T), -100, dtype=torch.long)
        layers = None
        if features is not None:
            L, D = features[idx[0]].shape[0], features[idx[0]].shape[-1]
            layers = torch.zeros(L, len(idx), T, D)
        for b, i in enumerate(idx):
            ex = examples[i]
            n = len(ex.words)
            words[b, :n] = torch.tensor([word_index.get(w.lower(), 1) for w in ex.words])
            tags[b, :n] = torch.tensor([tag_index[t] for t in ex.tags])
            if features is not None:
                layers[:, b, :n] = features[i].float()
        yield idx, words, tags, layers


def run_tagger(name, elmo, train, dev, feats_train, feats_dev, word_index, tags, args, log):
    torch.manual_seed(args.seed)
    tag_index = {t: i for i, t in enumerate(tags)}
    L, D = (feats_train[0].shape[0], feats_train[0].shape[-1]) if feats_train is not None else (0, 0)
    model = Tagger(len(word_index) + 2, len(tags), elmo, D, L)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    use = feats_train if elmo else None
    started = time.monotonic()
    g = torch.Generator().manual_seed(args.seed)
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train), generator=g).tolist()
        for _, words, gold, layers in batches(train, use, word_index, tag_index, order, 32):
            loss = nn.functional.cross_entropy(
                model(words, layers).flatten(0, 1), gold.flatten(), ignore_index=-100
            )
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
        log(f"  {name}: epoch {epoch + 1} done ({(time.monotonic() - started) / 60:.1f} min)")
    model.eval()
    pred, true = [], []
    with torch.no_grad():
        order = sorted(range(len(dev)), key=lambda i: len(dev[i].words))
        for idx, words, _, layers in batches(
            dev, feats_dev if elmo else None, word_index, tag_index, order, 64
        ):
            scores = model(words, layers).argmax(-1)
            for b, i in enumerate(idx):
                pred.append([tags[k] for k in scores[b, : len(dev[i].words)].tolist()])
                true.append(list(dev[i].tags))
    f1 = 100 * ner_metrics(true, pred)["f1"]
    extra = ""
    if model.mix is not None:
        weights = [round(w, 2) for w in model.mix.weights().tolist()]
        extra = f" (mix weights {weights}, gamma {model.mix.gamma.item():.2f})"
    log(f"  {name}: dev F1 {f1:.2f}{extra}")
    return f1, time.monotonic() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", default=str(DATA / "books" / "en"))
    parser.add_argument("--conll", default=str(DATA / "conll2003"))
    parser.add_argument("--corpus-chars", type=int, default=8_000_000, help="characters of books read")
    parser.add_argument("--pretrain-minutes", type=float, default=14.0)
    parser.add_argument("--preset", default="elmo-cpu")
    parser.add_argument("--epochs", type=int, default=3, help="tagger epochs, the same for every input")
    parser.add_argument("--max-train", type=int, default=None, help="CoNLL training sentences (default all)")
    parser.add_argument("--max-dev", type=int, default=None, help="dev sentences (default all; smoke runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--mix-layer-norm", choices=("heldout", "no", "yes"), default="heldout",
        help="layer-normalise each biLM layer in the scalar mix: chosen on held-out CoNLL train (default), "
        "or fixed",
    )  # fmt: skip
    parser.add_argument("--skip-pretrain", action="store_true", help="reuse OUTPUT/elmo/model")
    parser.add_argument("--output", default="runs/elmo_conll")
    args = parser.parse_args(argv)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    log_file = open(out / "log.txt", "a", encoding="utf-8")

    def log(message: str) -> None:
        print(message, flush=True)
        log_file.write(message + "\n")
        log_file.flush()

    load = os.getloadavg()
    log(f"elmo_conll: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    t0 = time.monotonic()
    if args.skip_pretrain:
        from attnlab.io import load

        bilm = load(out / "elmo" / "model", expect="elmo")
        ppl = "(reused)"
    else:
        recipe = ElmoRecipe(
            preset=args.preset,
            minutes=args.pretrain_minutes,
            max_steps=2000,
            seed=args.seed,
            eval_sentences=500,
        )
        result = pretrain_elmo(
            recipe, [args.corpus], "text", out / "elmo", progress=False, max_chars=args.corpus_chars, log=log
        )
        bilm, m = result.model, result.metrics
        ppl = (
            f"held-out perplexity forward {m['eval_ppl_forward']:.1f}, backward {m['eval_ppl_backward']:.1f} "
            f"(unigram {result.unigram_ppl:.0f}) after {result.steps} steps, {result.seconds / 60:.1f} min"
        )
        log(f"biLM: {ppl}")
    train = list(load_conll(Path(args.conll) / "train.txt"))
    dev = list(load_conll(Path(args.conll) / "valid.txt"))
    if args.max_train:
        train = train[: args.max_train]
    if args.max_dev:
        dev = dev[: args.max_dev]
    t1 = time.monotonic()
    bilm.eval()
    torch.manual_seed(0)

    def features(examples):
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].words))
        vectors = embed_sentences(
            bilm, [list(examples[i].words) for i in order], batch_size=64, dtype=torch.float16
        )
        out_ = [None] * len(examples)
        for i, v in zip(order, vectors):
            out_[i] = v
        return out_

    feats_train, feats_dev = features(train), features(dev)
    log(
        f"ELMo features for {len(train):,} + {len(dev):,} sentences in {(time.monotonic() - t1) / 60:.1f} min"
    )
    counts: dict[str, int] = {}
    for ex in train:
        for w in ex.words:
            counts[w.lower()] = counts.get(w.lower(), 0) + 1
    word_index = {
        w: i + 2 for i, w in enumerate(sorted(w for w, c in counts.items() if c >= 2))
    }  # 0 pad, 1 unk
    tags = sorted({t for ex in train for t in ex.tags})
    mix_kind = {"no": "mix", "yes": "mix-ln"}.get(args.mix_layer_norm)
    if mix_kind is None:  # "heldout": choose on the last 10% of CoNLL train, never on dev
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed)).tolist()
        cut = len(train) - len(train) // 10
        fit, held = [train[i] for i in order[:cut]], [train[i] for i in order[cut:]]
        feats_fit, feats_held = [feats_train[i] for i in order[:cut]], [feats_train[i] for i in order[cut:]]
        held_f1 = {}
        for kind in ("mix", "mix-ln"):
            held_f1[kind], _ = run_tagger(
                f"choice {kind} (held-out train)", kind, fit, held, feats_fit, feats_held, word_index, tags,
                args, log,
            )  # fmt: skip
        mix_kind = max(held_f1, key=held_f1.get)
        log(
            f"scalar mix chosen on held-out CoNLL train ({len(held):,} sentences): "
            + ", ".join(f"{k} {v:.2f}" for k, v in held_f1.items())
            + f" -> {mix_kind}"
        )
    results = {}
    for name, elmo in (("words", None), ("+ELMo top", "top"), ("+ELMo mix", mix_kind)):
        results[name] = run_tagger(
            name, elmo, train, dev, feats_train, feats_dev, word_index, tags, args, log
        )
    base, top, mix = (results[k][0] for k in ("words", "+ELMo top", "+ELMo mix"))
    lines = [
        "",
        f"CoNLL-2003 dev entity F1 (seqeval), one seed ({args.seed}), {args.epochs} tagger epochs each, "
        f"{len(train):,} training sentences; biLM {args.preset}: {ppl}; mix: {mix_kind}",
        f"{'input':<14}{'dev F1':>8}{'minutes':>9}",
        *[f"{k:<14}{v[0]:>8.2f}{v[1] / 60:>9.1f}" for k, v in results.items()],
        "",
        f"ELMo (scalar mix, the paper's use) adds {mix - base:+.2f} F1 (top layer {top - base:+.2f}); "
        f"target >= +2: {'PASS' if mix - base >= 2 else 'FAIL'}",
        f"scalar mix - top layer: {mix - top:+.2f}; target >= 0: {'PASS' if mix >= top else 'FAIL'}",
        "",
        "the paper (Peters et al. 2018), full-size biLM on 1B words, beside (not the same data or model):",
        *[f"  {k}: {a} -> {b}" for k, (a, b) in PAPER.items()],
        f"total {(time.monotonic() - t0) / 60:.1f} min; load average at the end {os.getloadavg()[0]:.2f}",
    ]
    for line in lines:
        log(line)
    return 0 if math.isfinite(base) else 1


if __name__ == "__main__":
    raise SystemExit(main())
