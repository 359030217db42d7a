"""What the ablation lab's NSP and SOP probes ask of a model, against what its pre-training taught it.

The lab's pair probes (`attnlab.ablation.probes.pair_features`) train a linear classifier on the final
[CLS] state of ``[CLS] A [SEP] B [SEP]`` built from two whole held-out sentences, each cut to its first
``(L - 3) // 2`` tokens. ALBERT's SOP and BERT's NSP pre-training build their pairs differently
(`attnlab.data.instances`): a block of sentences up to the length budget, split at a sentence boundary or,
when the block is a single sentence, inside it; the longer segment cut at either end; and the model's own
head reads the pooled [CLS]. For the pre-training runs an ``attnlab ablate`` output holds (ALBERT Table 5's
rows: no sentence objective, NSP, SOP), this prints, on held-out text only:

1. the share of held-out NSP and SOP instances whose block is a single sentence;
2. the NSP and SOP models' own heads on held-out instances of their task, and on the probe's scored pairs;
3. the linear [CLS] probe on those held-out instances, on the probe's pairs cut at their junction (A's last
   tokens, B's first), and as the lab computes it.

    python experiments/sentence_pair_probe.py --runs runs/ablations-books --minutes 6.8

The docs page is docs/ablations.md ("What the SOP probe asks of a model").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from attnlab.ablation.classifiers import linear_probe
from attnlab.ablation.execute import END_OF_TEXT
from attnlab.ablation.probes import encode_batches, sentence_pairs
from attnlab.ablation.settings import SIZES
from attnlab.data.instances import PretrainingInstances
from attnlab.data.protocol import SpecialIds
from attnlab.data.sharded_corpus import ShardedCorpus
from attnlab.io import load
from attnlab.tokenizers.files import load_tokenizer

ROWS = {"doc_sentences": "None", "segment_pair": "NSP", "sop": "SOP"}
TASK = {"segment_pair": "nsp", "sop": "sop"}  # the row whose head was trained on the task
INSTANCE_SEED = 7  # held-out instances' draws (any seed: the text is held out from every run)
Sequences = list[tuple[list[int], list[int]]]  # (ids, token types) of each input


def albert_runs(runs: Path, minutes: float) -> list[tuple[str, int, Path]]:
    """(instance format, seed, run folder) of ALBERT Table 5's finished pre-training runs of ``minutes``:
    the ALBERT runs whose configurations differ in their instance format alone, with one set of each row's
    (ALBERT Tables 3 and 4 add runs of other embedding sizes and sharing, in the SOP format)."""
    groups: dict[str, list[tuple[str, int, Path]]] = {}
    for spec_file in sorted(runs.glob("runs/*/spec.json")):
        spec = json.loads(spec_file.read_text())
        config, folder = spec["config"], spec_file.parent
        if spec["kind"] != "pretrain" or config["recipe"]["name"] != "albert":
            continue
        if abs(config["minutes"] - minutes) > 1e-9 or not (folder / "result.json").is_file():
            continue
        recipe = dict(config["recipe"])
        fmt = recipe.pop("instance_format")
        same = json.dumps({**config, "recipe": recipe}, sort_keys=True)
        groups.setdefault(same, []).append((fmt, int(spec["seed"]), folder))
    tables = [g for g in groups.values() if {fmt for fmt, _, _ in g} == set(ROWS)]
    if len(tables) != 1:
        raise SystemExit(f"{runs}/runs: expected one set of ALBERT Table 5 runs of {minutes} minutes, "
                         f"found {len(tables)}")  # fmt: skip
    return sorted(tables[0], key=lambda r: (list(ROWS).index(r[0]), r[1]))


def heldout_instances(corpus: ShardedCorpus, special: SpecialIds, fmt: str, max_length: int, n: int):
    """``n`` held-out instances as pre-training builds them: their sequences, the head's labels (1 = NotNext
    / swapped), whether each block is a single sentence; and that share over every block."""
    data = PretrainingInstances(corpus, special, fmt, max_length=max_length, seed=INSTANCE_SEED)
    picked = np.random.default_rng(INSTANCE_SEED).choice(len(data), size=min(n, len(data)), replace=False)
    seqs, labels, single = [], [], []
    for i in picked.tolist():
        item = data[i]
        seqs.append((item["input_ids"].tolist(), item["token_type_ids"].tolist()))
        labels.append(int(item["pair_labels"]))
        first, end = data.blocks[i % len(data.blocks)][1:3]
        single.append(bool(end - first == 1))
    share = data.stats.single_sentence_blocks / max(1, data.stats.blocks)
    return seqs, torch.tensor(labels), torch.tensor(single), share


def probe_pairs(
    corpus: ShardedCorpus, special: SpecialIds, task: str, max_length: int, n: int, junction: bool
):
    """The lab's probe pairs and labels (1 = as written), each sentence cut to ``(L - 3) // 2`` tokens: its
    first ones as the lab's probe cuts them, or A's last ones (``junction``: where the two sentences meet)."""
    half = (max_length - 3) // 2
    seqs, labels = [], []
    for a, b, label in sentence_pairs(corpus, task, n, seed=0):
        a = [int(t) for t in (a[-half:] if junction else a[:half])]
        b = [int(t) for t in b[:half]]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        seqs.append(([special.cls, *a, special.sep, *b, special.sep], types))
        labels.append(label)
    return seqs, torch.tensor(labels)


def percent(predicted: torch.Tensor, labels: torch.Tensor) -> float:
    return 100.0 * float((predicted == labels).float().mean()) if len(labels) else float("nan")


def linear_cls(cls: torch.Tensor, labels: torch.Tensor, seed: int) -> float:
    """The lab's linear probe on [CLS] states (N, H): trained on the first half, accuracy on the second."""
    cut = len(cls) // 2
    return percent(linear_probe(cls[:cut], labels[:cut], cls[cut:], 2, seed), labels[cut:])


@torch.no_grad()
def measure(fmt: str, seed: int, folder: Path, data: dict) -> dict[str, float]:
    """One model's measurements: the linear probe on both tasks, and its own head on the task it learned."""
    model = load(folder / "model")  # EncoderForPreTraining; its encoder is the one the lab's probes read

    def cls_states(seqs: Sequences) -> torch.Tensor:  # (N, H)
        return torch.stack([s[0] for s in encode_batches(model.encoder, seqs)])

    def head(cls: torch.Tensor) -> torch.Tensor:  # the pair head on the pooled [CLS]: 1 = NotNext / swapped
        return model.pair_head(model.encoder.pooler(cls[:, None])).argmax(-1)

    row: dict[str, float] = {}
    for task in ("nsp", "sop"):
        seqs, labels, single, _ = data["instances"][task]
        cls = cls_states(seqs)
        row[f"{task} linear, held-out instances"] = linear_cls(cls, labels, seed)
        if TASK.get(fmt) == task:
            predicted = head(cls)
            row[f"{task} head, held-out instances"] = percent(predicted, labels)
            row[f"{task} head, single-sentence blocks"] = percent(predicted[single], labels[single])
            row[f"{task} head, multi-sentence blocks"] = percent(predicted[~single], labels[~single])
        for cut in ("lab", "junction"):
            seqs, labels = data["pairs"][task, cut]
            cls = cls_states(seqs)
            row[f"{task} linear, probe pairs ({cut} cut)"] = linear_cls(cls, labels, seed)
            if TASK.get(fmt) == task:  # the half the lab scores; the head's 1 is the probe's 0
                half = len(cls) // 2
                row[f"{task} head, probe pairs ({cut} cut)"] = percent(head(cls[half:]), 1 - labels[half:])
    return row


def measure_runs(runs: Path, minutes: float, max_length: int, n: int, log=print) -> dict:
    """{measurement: {row: [each seed's value]}} over ALBERT Table 5's runs of ``minutes`` in ``runs``."""
    heldout = sorted(runs.glob("data/*/shards/heldout"))
    if len(heldout) != 1:
        raise SystemExit(f"{runs}/data: expected one prepared corpus, found {len(heldout)}")
    found = albert_runs(runs, minutes)
    tokenizer = load_tokenizer(heldout[0].parents[1] / "tokenizer")
    tokenizer.add_special_tokens([END_OF_TEXT])  # as the lab loads it (`attnlab.ablation.execute.LabData`)
    corpus, special = ShardedCorpus(heldout[0], tokenizer), SpecialIds.from_tokenizer(tokenizer)
    data: dict = {"instances": {}, "pairs": {}}
    for task, fmt in (("nsp", "segment_pair"), ("sop", "sop")):
        data["instances"][task] = heldout_instances(corpus, special, fmt, max_length, n)
        log(f"{task}: {100 * data['instances'][task][3]:.1f}% of held-out blocks at {max_length} tokens "
            "are one sentence")  # fmt: skip
        for cut in ("lab", "junction"):
            data["pairs"][task, cut] = probe_pairs(corpus, special, task, max_length, n, cut == "junction")
    table: dict[str, dict[str, list[float]]] = {}
    for fmt, seed, folder in found:
        for name, value in measure(fmt, seed, folder, data).items():
            table.setdefault(name, {}).setdefault(ROWS[fmt], []).append(value)
        log(f"measured {ROWS[fmt]} seed {seed} ({folder.name})")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="an `attnlab ablate --output` folder")
    parser.add_argument("--minutes", type=float, required=True, help="the pre-training runs' minutes")
    parser.add_argument("--max-length", type=int, default=32, help="the runs' pre-training length")
    parser.add_argument("--pairs", type=int, default=SIZES["cpu"].feature_examples,
                        help="pairs and held-out instances a task (the lab's feature examples)")  # fmt: skip
    args = parser.parse_args(argv)
    table = measure_runs(args.runs, args.minutes, args.max_length, args.pairs, lambda m: print(m, flush=True))
    print(f"\n| measurement (% accuracy, mean ± sd over seeds) | {' | '.join(ROWS.values())} |")
    print("|---|" + "---|" * len(ROWS))
    for name, cells in table.items():
        shown = [f"{np.mean(v):.1f} ± {np.std(v, ddof=1):.1f}" if len(v := cells.get(r, [])) > 1 else ""
                 for r in ROWS.values()]  # fmt: skip
        print(f"| {name} | {' | '.join(shown)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
