"""What the ablation lab's NSP and SOP probes ask of a model, against what its pre-training taught it.

The lab's pair probes (`attnlab.ablation.probes.pair_features`) train a linear classifier on the final
[CLS] state of ``[CLS] A [SEP] B [SEP]`` built from two whole held-out sentences, each cut to its first
``(L - 3) // 2`` tokens. ALBERT's SOP and BERT's NSP pre-training build their pairs differently
(`attnlab.data.instances`): a block of sentences up to the length budget, split at a sentence boundary or,
when the block is a single sentence, inside it; the longer segment cut at either end; and the model's own
head reads the pooled [CLS]. For the pre-training runs an ``attnlab ablate`` output holds (ALBERT Table 5's
rows: no sentence objective, NSP, SOP), this prints, on held-out text only:

1. the share of held-out NSP and SOP blocks that are a single sentence (one layout: the same for both);
2. the NSP and SOP models' own heads on held-out instances of their task (unmasked), and on the probe's
   pairs;
3. the linear [CLS] probe on those held-out instances, on the probe's pairs cut at their junction (A's last
   tokens, B's first), and as the lab computes it, checked against the lab's own results for those models.

Every classifier is trained on the first half of its examples and every score is on the second half, as
the lab's probe scores. The length and the number of pairs are the runs' own (their ``spec.json``).

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
from attnlab.ablation.execute import END_OF_TEXT, data_folder
from attnlab.ablation.probes import encode_batches, pair_sequences, sentence_pairs
from attnlab.ablation.runs import canonical_json
from attnlab.data.instances import PretrainingInstances
from attnlab.data.protocol import SpecialIds
from attnlab.data.sharded_corpus import ShardedCorpus
from attnlab.io import load
from attnlab.tokenizers.files import load_tokenizer

ROWS = {"doc_sentences": "None", "segment_pair": "NSP", "sop": "SOP"}
TASK = {"segment_pair": "nsp", "sop": "sop"}  # the row whose head was trained on the task
INSTANCE_SEED = 7  # held-out instances' draws (any seed: the text is held out from every run)
Sequences = list[tuple[list[int], list[int]]]  # (ids, token types) of each input


def albert_runs(runs: Path, minutes: float) -> list[tuple[str, int, Path, dict]]:
    """(instance format, seed, run folder, configuration) of ALBERT Table 5's finished pre-training runs of
    ``minutes``: the ALBERT runs whose configurations differ in their instance format alone, with one set of
    each row's (ALBERT Tables 3 and 4 add runs of other embedding sizes and sharing, in the SOP format)."""
    groups: dict[str, list[tuple[str, int, Path, dict]]] = {}
    for spec_file in sorted(runs.glob("runs/*/spec.json")):
        spec = json.loads(spec_file.read_text())
        config, folder = spec["config"], spec_file.parent
        if spec["kind"] != "pretrain" or config["recipe"]["name"] != "albert":
            continue
        if abs(config["minutes"] - minutes) > 1e-9 or not (folder / "result.json").is_file():
            continue
        recipe = dict(config["recipe"])
        fmt = recipe.pop("instance_format")
        same = canonical_json({**config, "recipe": recipe})
        groups.setdefault(same, []).append((fmt, int(spec["seed"]), folder, config))
    tables = [g for g in groups.values() if {fmt for fmt, *_ in g} == set(ROWS)]
    if len(tables) != 1:
        raise SystemExit(f"{runs}/runs: expected one set of ALBERT Table 5 runs of {minutes} minutes, "
                         f"found {len(tables)}")  # fmt: skip
    return sorted(tables[0], key=lambda r: (list(ROWS).index(r[0]), r[1]))


def heldout_corpus(runs: Path, config: dict) -> tuple[ShardedCorpus, SpecialIds]:
    """The held-out shards the runs' corpus key names (`attnlab.ablation.execute.LabData.folder`)."""
    folder = data_folder(runs, config["data"])
    if not (folder / "shards" / "heldout").is_dir():
        raise SystemExit(f"{folder}/shards/heldout: the runs' prepared corpus is missing")
    tokenizer = load_tokenizer(folder / "tokenizer")
    tokenizer.add_special_tokens([END_OF_TEXT])  # as the lab loads it
    return ShardedCorpus(folder / "shards" / "heldout", tokenizer), SpecialIds.from_tokenizer(tokenizer)


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
        first, end = data.blocks[i % len(data.blocks)][1:3]  # (shard, first sentence, end, target, doc)
        single.append(bool(end - first == 1))
    share = data.stats.single_sentence_blocks / max(1, data.stats.blocks)
    return seqs, torch.tensor(labels), torch.tensor(single), share


def probe_pairs(
    corpus: ShardedCorpus, special: SpecialIds, task: str, max_length: int, n: int, junction: bool
):
    """The lab's probe pairs (`attnlab.ablation.probes.pair_sequences`) and labels (1 = as written)."""
    pairs = sentence_pairs(corpus, task, n, seed=0)
    return pair_sequences(pairs, special, max_length, junction), torch.tensor([label for *_, label in pairs])


def percent(predicted: torch.Tensor, labels: torch.Tensor) -> float:
    return 100.0 * float((predicted == labels).float().mean()) if len(labels) else float("nan")


def cls_states(model: torch.nn.Module, seqs: Sequences) -> torch.Tensor:
    """The final [CLS] state (N, H) of each sequence: what the lab's pair probes read."""
    return torch.stack([s[0] for s in encode_batches(model.encoder, seqs)])


@torch.no_grad()
def head_predictions(model: torch.nn.Module, cls: torch.Tensor) -> torch.Tensor:
    """The model's pair head on its pooled [CLS] states (N, H): 1 = NotNext / swapped."""
    return model.pair_head(model.encoder.pooler(cls[:, None])).argmax(-1)


def measure(fmt: str, seed: int, folder: Path, data: dict) -> dict[str, float]:
    """One model's scores: the linear probe on both tasks, its own head on the task it learned."""
    model = load(folder / "model")  # EncoderForPreTraining; its encoder is the one the lab's probes read
    row: dict[str, float] = {}
    for task in ("nsp", "sop"):
        own = TASK.get(fmt) == task
        seqs, labels, single, _ = data["instances"][task]
        cls, cut = cls_states(model, seqs), len(seqs) // 2
        row[f"{task} linear, held-out instances"] = percent(
            linear_probe(cls[:cut], labels[:cut], cls[cut:], 2, seed), labels[cut:]
        )
        if own:
            predicted, y, one = head_predictions(model, cls[cut:]), labels[cut:], single[cut:]
            row[f"{task} head, held-out instances"] = percent(predicted, y)
            row[f"{task} head, single-sentence blocks"] = percent(predicted[one], y[one])
            row[f"{task} head, multi-sentence blocks"] = percent(predicted[~one], y[~one])
        for cut_name in ("lab", "junction"):
            seqs, labels = data["pairs"][task, cut_name]
            cls, cut = cls_states(model, seqs), len(seqs) // 2
            predicted = linear_probe(cls[:cut], labels[:cut], cls[cut:], 2, seed)
            row[f"{task} linear, probe pairs ({cut_name} cut)"] = percent(predicted, labels[cut:])
            if own:  # the head's 1 (NotNext / swapped) is the probe's 0
                head = head_predictions(model, cls[cut:])
                row[f"{task} head, probe pairs ({cut_name} cut)"] = percent(head, 1 - labels[cut:])
    return row


def lab_results(runs: Path, folder: Path, seed: int) -> dict[str, float]:
    """The lab's own linear NSP and SOP probe results for the model in ``folder``, where it has them."""
    found = {}
    for spec_file in runs.glob("runs/*/spec.json"):
        spec = json.loads(spec_file.read_text())
        config = spec["config"]
        if spec["kind"] != "features" or config.get("model") != folder.name or spec["seed"] != seed:
            continue
        done = spec_file.parent / "result.json"
        if config["probe"] in ("nsp_features", "sop_features") and "readout" not in config and done.is_file():
            metrics = json.loads(done.read_text())["result"].get("metrics", {})
            if isinstance(metrics.get("accuracy"), (int, float)):  # a failed run records its error
                found[f"{config['probe'][:3]} linear, probe pairs (lab cut)"] = metrics["accuracy"]
    return found


def measure_runs(runs: Path, minutes: float, log=print) -> dict:
    """{measurement: {row: [each seed's value]}} over ALBERT Table 5's runs of ``minutes`` in ``runs``;
    stops where the lab's probe recomputed differs from the lab's result for the same model."""
    found = albert_runs(runs, minutes)
    config = found[0][3]
    max_length = max(stage["max_length"] for stage in config["recipe"]["stages"])
    n = config["size"]["feature_examples"]
    corpus, special = heldout_corpus(runs, config)
    data: dict = {"instances": {}, "pairs": {}}
    for task, fmt in (("nsp", "segment_pair"), ("sop", "sop")):
        data["instances"][task] = heldout_instances(corpus, special, fmt, max_length, n)
        log(f"{task}: {100 * data['instances'][task][3]:.1f}% of held-out blocks at {max_length} tokens "
            "are one sentence")  # fmt: skip
        for cut in ("lab", "junction"):
            data["pairs"][task, cut] = probe_pairs(corpus, special, task, max_length, n, cut == "junction")
    table: dict[str, dict[str, list[float]]] = {}
    checked = 0
    for fmt, seed, folder, _ in found:
        row = measure(fmt, seed, folder, data)
        for name, lab in lab_results(runs, folder, seed).items():
            if abs(row[name] - lab) > 1e-6:
                raise SystemExit(f"{folder.name}: {name} recomputed {row[name]:.6f}, the lab's {lab:.6f}")
            checked += 1
        for name, value in row.items():
            table.setdefault(name, {}).setdefault(ROWS[fmt], []).append(value)
        log(f"measured {ROWS[fmt]} seed {seed} ({folder.name})")
    log(f"the lab's probe recomputed equals the lab's result in all {checked} the output holds")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="an `attnlab ablate --output` folder")
    parser.add_argument("--minutes", type=float, required=True, help="the pre-training runs' minutes")
    args = parser.parse_args(argv)
    table = measure_runs(args.runs, args.minutes, lambda m: print(m, flush=True))
    print(f"\n| measurement (% accuracy, mean ± sd over seeds) | {' | '.join(ROWS.values())} |")
    print("|---|" + "---|" * len(ROWS))
    for name, cells in table.items():
        shown = [f"{np.mean(v):.1f} ± {np.std(v, ddof=1):.1f}" if len(v := cells.get(r, [])) > 1
                 else (f"{v[0]:.1f}" if v else "") for r in ROWS.values()]  # fmt: skip
        print(f"| {name} | {' | '.join(shown)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
