"""``attnlab ablate``: the table list, the plan, and its errors before any work."""

import dataclasses

import pytest

from attnlab.ablation.lab import estimate_tables, plan_table
from attnlab.ablation.plan import OVERHEAD_SECONDS
from attnlab.ablation.settings import LabSettings
from attnlab.ablation.tables import get_table
from attnlab.cli import main
from attnlab.cli.ablate import list_tables


def test_list_names_every_table_with_rows_and_probes(capsys):
    assert main(["ablate", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == list_tables().strip()
    for name in ("bert-table8", "roberta-table1", "albert-table5", "distilbert-table4", "transformer-table3"):
        assert name in out
    assert "80/10/10" in out and "sst2_features" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ablate"], "name a table"),
        (["ablate", "bert-table99"], "unknown table 'bert-table99'"),
        (["ablate", "bert-table8", "--data-dir", "/no/such/folder"], "--data-dir /no/such/folder"),
        (["ablate", "bert-table8", "--compare", "a", "b"], "--compare reads two output folders"),
    ],
)
def test_errors_name_what_was_expected(argv, message, capsys, tmp_path):
    assert main([*argv, "--output", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_plan_prints_every_tables_runs_and_writes_nothing(capsys, tmp_path):
    output = tmp_path / "out"
    assert main(["ablate", "all", "--plan", "--data-dir", str(tmp_path), "--output", str(output)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("sizes (cpu): bert-tiny, 32 tokens")
    assert "1.70 min a pre-training run" in lines[0]
    table5 = next(line for line in lines if line.startswith("bert-table5 "))
    assert "45 runs: 0 done; to run: 9 pretrain, 36 features; about 31 min" in table5
    # BERT Table 8's baseline row (3 models, their SST-2 and CoNLL feature probes) is BERT Table 5's
    table8 = next(line for line in lines if line.startswith("bert-table8 "))
    assert "0 done, 9 trained by an earlier table" in table8
    assert lines[-1].startswith("all ") and "369 runs to run" in lines[-1]
    assert not output.exists()  # no plans, no corpus, no runs


def test_plan_counts_the_runs_already_done(tmp_path):
    settings = LabSettings(output=tmp_path, data_dir=tmp_path)
    table = get_table("roberta-table1")
    before = estimate_tables([table], settings)[0]
    plan, store = plan_table(table, settings)
    assert before.minutes == plan.estimated_minutes(store)
    done = plan.runs[0].spec  # a pre-training run
    store.begin(done)
    store.finish(done, {"model_dir": "model"})
    after = estimate_tables([table], settings)[0]
    assert (after.runs, after.done, after.pending["pretrain"]) == (18, 1, before.pending["pretrain"] - 1)
    one_run = plan.run_minutes + OVERHEAD_SECONDS["pretrain"] / 60
    assert after.minutes == pytest.approx(before.minutes - one_run)


def test_plan_says_when_minutes_cannot_hold_the_runs_allowance(capsys, tmp_path):
    argv = ["ablate", "bert-table8", "--plan", "--minutes", "5", "--data-dir", str(tmp_path)]
    assert main([*argv, "--output", str(tmp_path / "out")]) == 0
    assert "about 22 min (over --minutes: the runs' fixed allowance is 21 min)" in capsys.readouterr().out
    assert not (tmp_path / "out").exists()  # the division is not kept either


def _finish(store, spec, result):
    store.begin(spec)
    store.finish(spec, result)


def test_plan_counts_what_the_planner_reuses_and_what_minutes_retrain(tmp_path):
    settings = LabSettings(output=tmp_path, data_dir=tmp_path)
    table5, table8 = get_table("bert-table5"), get_table("bert-table8")
    plan5, store = plan_table(table5, settings)
    for run in plan5.runs:  # BERT Table 5 done at the standard budget
        _finish(store, run.spec, {"model_dir": "model"} if run.spec.kind == "pretrain" else {"metrics": {}})
    first, second = estimate_tables([table5, table8], settings)
    assert (first.done, sum(first.pending.values()), first.minutes) == (45, 0, 0.0)
    plan8, store = plan_table(table8, settings)
    assert second.done == 9 and second.minutes == pytest.approx(plan8.estimated_minutes(store))
    # at minutes of its own no run is one BERT Table 5 trained: --minutes is divided over all 72
    minutes = dataclasses.replace(settings, minutes=60.0)
    (divided,) = estimate_tables([table8], minutes)
    assert divided.done == 0 and sum(divided.pending.values()) == 72
    assert divided.minutes == pytest.approx(60.0, abs=0.01)


def test_plan_leaves_out_the_runs_a_failed_run_blocks(tmp_path):
    settings = LabSettings(output=tmp_path, data_dir=tmp_path)
    table = get_table("roberta-table1")
    plan, store = plan_table(table, settings)
    failed = plan.runs[0].spec  # a pre-training run, whose two feature probes need its model
    _finish(store, failed, {"error": "RuntimeError: boom"})
    (estimate,) = estimate_tables([table], settings)
    assert (estimate.done, estimate.blocked, estimate.pending["pretrain"]) == (1, 2, 5)
    one = plan.run_minutes + OVERHEAD_SECONDS["pretrain"] / 60
    probes = 2 * OVERHEAD_SECONDS["features"] / 60
    assert estimate.minutes == pytest.approx(plan.estimated_minutes(store) - probes)
    assert estimate.minutes == pytest.approx(5 * one + 10 * OVERHEAD_SECONDS["features"] / 60)


def test_plan_needs_no_data_folder(capsys, tmp_path):
    argv = ["ablate", "roberta-table1", "--plan", "--data-dir", str(tmp_path / "none")]
    assert main([*argv, "--output", str(tmp_path / "out")]) == 0
    assert "roberta-table1       18 runs: 0 done" in capsys.readouterr().out


def test_plan_leaves_out_what_a_failed_teacher_blocks_down_the_chain(tmp_path):
    settings = LabSettings(output=tmp_path, data_dir=tmp_path, seeds=(0,))
    table = get_table("distilbert-table4")
    plan, store = plan_table(table, settings)
    teacher = next(r.spec for r in plan.runs if r.spec.kind == "pretrain")
    _finish(store, teacher, {"error": "RuntimeError: boom"})
    (estimate,) = estimate_tables([table], settings)
    # the 5 students it teaches, and their 10 feature probes, which need the students: 15 left out
    assert (estimate.runs, estimate.blocked, estimate.done) == (16, 15, 1)
    assert estimate.pending == {} and estimate.minutes == 0.0
