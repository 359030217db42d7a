"""experiments/sentence_pair_probe.py on a tiny ALBERT Table 5: it finds the table's runs among the lab's and
stops unless its recomputed probe gives the lab's numbers; the heads are read as the model reads them and
scored against the right labels; single-sentence blocks and the junction cut are what they say."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from attnlab.ablation.lab import run_table
from attnlab.ablation.probes import sentence_pairs
from attnlab.ablation.tables import get_table

HERE = Path(__file__).resolve().parent


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = _module(HERE.parents[1] / "experiments" / "sentence_pair_probe.py", "sentence_pair_probe")
tiny = _module(HERE.parent / "ablation" / "test_ablate_tiny.py", "ablate_tiny")


@pytest.fixture(scope="module")
def table5(tmp_path_factory):
    """A tiny ALBERT Table 5 of two seeds: (settings, the table's result, the runs the script finds)."""
    settings = tiny._tiny(tmp_path_factory.mktemp("albert"), (0, 1))
    result = run_table(get_table("albert-table5"), settings, log=lambda m: None)
    assert not result.failed
    return settings, result, probe.albert_runs(settings.output, settings.size.pretrain_minutes)


@pytest.mark.slow
def test_the_table_runs_are_found_and_the_lab_probe_recomputed_matches_the_lab(table5):
    settings, result, found = table5
    assert [(fmt, seed) for fmt, seed, *_ in found] == [(f, s) for f in probe.ROWS for s in (0, 1)]
    logged = []
    table = probe.measure_runs(settings.output, settings.size.pretrain_minutes, log=logged.append)
    assert "the lab's probe recomputed equals the lab's result in all 12 the output holds" in logged
    for task in ("nsp", "sop"):
        for row in probe.ROWS.values():
            lab = result.summaries[row, f"{task}_features"].values
            assert table[f"{task} linear, probe pairs (lab cut)"][row] == pytest.approx(lab, abs=1e-6)
    assert set(table["nsp head, held-out instances"]) == {"NSP"}
    assert set(table["sop head, held-out instances"]) == {"SOP"}


def _inputs(seqs):
    for ids, types in seqs:
        yield torch.tensor([ids]), torch.tensor([types])


@pytest.mark.slow
def test_the_head_is_read_as_the_model_reads_it_and_scored_against_its_own_labels(table5, monkeypatch):
    settings, _, found = table5
    _, seed, folder, config = next(r for r in found if r[0] == "sop")
    corpus, special = probe.heldout_corpus(settings.output, config)
    seqs, labels, _, _ = probe.heldout_instances(corpus, special, "sop", 32, 40)
    model = probe.load(folder / "model")
    with torch.no_grad():
        direct = torch.cat(
            [model(ids, token_type_ids=types).pair_logits.argmax(-1) for ids, types in _inputs(seqs)]
        )
    assert torch.equal(probe.head_predictions(model, probe.cls_states(model, seqs)), direct)

    pairs, pair_labels = probe.probe_pairs(corpus, special, "sop", 32, 40, junction=False)
    none_single = torch.zeros(len(seqs), dtype=torch.bool)
    data = {
        "instances": {t: (seqs, labels, none_single, 0.0) for t in ("nsp", "sop")},
        "pairs": {(t, c): (pairs, pair_labels) for t in ("nsp", "sop") for c in ("lab", "junction")},
    }
    # an oracle head, told each example's true label in the head's convention (1 = swapped): scored on the
    # right half against the right labels, it is right every time
    truth = {}  # the same batches as `measure` encodes, so the states are the same to the bit
    for batch, heads in ((seqs, labels), (pairs, 1 - pair_labels)):
        truth |= {c.numpy().tobytes(): int(y) for c, y in zip(probe.cls_states(model, batch), heads)}
    oracle = lambda model, cls: torch.tensor([truth[c.numpy().tobytes()] for c in cls])  # noqa: E731
    monkeypatch.setattr(probe, "head_predictions", oracle)
    row = probe.measure("sop", seed, folder, data)
    assert row["sop head, held-out instances"] == 100.0
    assert row["sop head, probe pairs (lab cut)"] == row["sop head, probe pairs (junction cut)"] == 100.0


@pytest.mark.slow
def test_single_sentence_blocks_and_the_junction_cut_are_what_they_say(table5):
    settings, _, found = table5
    corpus, special = probe.heldout_corpus(settings.output, found[0][3])
    sentences = [s.tolist() for d in range(corpus.n_documents) for s in corpus.document(d)]
    # at 12 tokens many blocks are one sentence: in order, A and then B are pieces of that one sentence
    # (truncation may drop tokens where they meet)
    seqs, labels, single, share = probe.heldout_instances(corpus, special, "sop", 12, 200)
    assert 0 < share < 1 and single.any() and (~single).any()
    for (ids, types), label, one in zip(seqs, labels.tolist(), single.tolist()):
        if one and label == 0:
            words = [(t, k) for t, k in zip(ids, types) if t not in (special.cls, special.sep)]
            a, b = [t for t, k in words if k == 0], [t for t, k in words if k == 1]
            assert any(_in_order(s, a, b) for s in sentences), ids
    half = (12 - 3) // 2  # shorter than the sentences: the junction cut keeps A's end
    pairs, _ = probe.probe_pairs(corpus, special, "nsp", 12, 40, junction=True)
    for (ids, _), (a, b, _) in zip(pairs, sentence_pairs(corpus, "nsp", 40, seed=0)):
        assert ids == [special.cls, *a[-half:].tolist(), special.sep, *b[:half].tolist(), special.sep]


def _at(sentence: list[int], piece: list[int], start: int = 0) -> list[int]:
    return [i for i in range(start, len(sentence) - len(piece) + 1) if sentence[i : i + len(piece)] == piece]


def _in_order(sentence: list[int], a: list[int], b: list[int]) -> bool:
    return any(_at(sentence, b, i + len(a)) for i in _at(sentence, a))


def test_a_folder_without_the_table_runs_is_refused_by_name(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit, match="expected one set of ALBERT Table 5 runs"):
        probe.albert_runs(tmp_path, 1.7)
