"""experiments/sentence_pair_probe.py on a tiny ALBERT Table 5: it finds the table's runs among the lab's,
its probe recomputed gives the lab's own NSP and SOP numbers, and each head is scored on its own task."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from attnlab.ablation.lab import run_table
from attnlab.ablation.tables import get_table

HERE = Path(__file__).resolve().parent


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = _module(HERE.parents[1] / "experiments" / "sentence_pair_probe.py", "sentence_pair_probe")
tiny = _module(HERE.parent / "ablation" / "test_ablate_tiny.py", "ablate_tiny")


@pytest.mark.slow
def test_the_lab_probe_recomputed_gives_the_lab_numbers(tmp_path):
    settings = tiny._tiny(tmp_path, (0, 1))
    result = run_table(get_table("albert-table5"), settings, log=lambda m: None)
    assert not result.failed
    minutes = settings.size.pretrain_minutes
    found = probe.albert_runs(settings.output, minutes)
    assert [(fmt, seed) for fmt, seed, _ in found] == [(f, s) for f in probe.ROWS for s in (0, 1)]
    pairs = settings.size.feature_examples
    table = probe.measure_runs(settings.output, minutes, 32, pairs, log=lambda m: None)
    for task in ("nsp", "sop"):
        for row in probe.ROWS.values():
            lab = result.summaries[row, f"{task}_features"].values
            assert table[f"{task} linear, probe pairs (lab cut)"][row] == pytest.approx(lab, abs=1e-6)
    assert set(table["nsp head, held-out instances"]) == {"NSP"}
    assert set(table["sop head, held-out instances"]) == {"SOP"}
    assert all(0 <= v <= 100 for cells in table.values() for vs in cells.values() for v in vs if v == v)


def test_a_folder_without_the_table_runs_is_refused_by_name(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit, match="expected one set of ALBERT Table 5 runs"):
        probe.albert_runs(tmp_path, 1.7)
