"""experiments/pretrain_then_finetune.py: scores read from `attnlab finetune`'s results.json, targets."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "pretrain_then_finetune.py"
spec = importlib.util.spec_from_file_location("pretrain_then_finetune", SCRIPT)
ptf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ptf)


def results(lr: float, runs: list[tuple[float, int, dict[str, float], int]]) -> dict:
    """A results.json as `attnlab finetune` writes it: runs of (lr, seed, best metrics, steps)."""
    return {
        "learning_rate": lr,
        "runs": [{"learning_rate": a, "seed": s, "best": b, "steps": n} for a, s, b, n in runs],
    }


def test_mean_std_is_the_sample_deviation_and_none_for_one_value():
    assert ptf.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert ptf.mean_std([4.0]) == (4.0, None)
    mean, std = ptf.mean_std([])
    assert math.isnan(mean) and std is None


def test_seed_scores_take_the_chosen_learning_rate_in_seed_order():
    r = results(1e-4, [
        (3e-5, 0, {"accuracy": 0.9}, 10),
        (1e-4, 1, {"accuracy": 0.7}, 10),
        (1e-4, 0, {"accuracy": 0.6}, 12),
    ])  # fmt: skip
    assert ptf.seed_scores(r, "accuracy") == [0.6, 0.7]
    assert math.isnan(ptf.seed_scores(r, "f1")[0])
    assert ptf.mean_steps(r) == 11


def test_compare_judges_the_first_metric_against_the_task_target_in_points():
    pre = results(3e-5, [(3e-5, s, {"accuracy": v}, 100) for s, v in enumerate((0.80, 0.82, 0.84))])
    rnd = results(3e-5, [(3e-5, s, {"accuracy": v}, 100) for s, v in enumerate((0.78, 0.79, 0.80))])
    (row,) = ptf.compare("sst2", pre, rnd)
    assert row["pretrained"]["mean"] == pytest.approx(82.0)
    assert row["pretrained"]["std"] == pytest.approx(2.0)
    assert row["difference"] == pytest.approx(3.0)
    assert row["target"] == 3.0 and row["passed"] is True


def test_compare_reads_percent_results_as_points_and_older_fraction_files_times_100():
    """results.json says ``"scale": "percent"`` (attnlab.metrics.scale); a file without it holds fractions."""
    pre = {**results(3e-5, [(3e-5, 0, {"accuracy": 82.0}, 100)]), "scale": "percent"}
    rnd = results(3e-5, [(3e-5, 0, {"accuracy": 0.79}, 100)])
    (row,) = ptf.compare("sst2", pre, rnd)
    assert row["pretrained"]["mean"] == pytest.approx(82.0)
    assert row["random_init"]["mean"] == pytest.approx(79.0)
    assert row["difference"] == pytest.approx(3.0) and row["passed"] is True


def test_compare_gives_secondary_metrics_no_target_and_glue_tasks_must_not_be_worse():
    pre = results(3e-5, [(3e-5, 0, {"f1": 0.80, "accuracy": 0.70}, 50)])
    rnd = results(3e-5, [(3e-5, 0, {"f1": 0.81, "accuracy": 0.60}, 50)])
    f1, accuracy = ptf.compare("mrpc", pre, rnd)
    assert (f1["metric"], f1["target"], f1["passed"]) == ("f1", 0.0, False)
    assert (accuracy["metric"], accuracy["target"], accuracy["passed"]) == ("accuracy", None, None)
    tie = ptf.compare(
        "cola", results(3e-5, [(3e-5, 0, {"mcc": 0.0}, 9)]), results(3e-5, [(3e-5, 0, {"mcc": 0.0}, 9)])
    )
    assert tie[0]["passed"] is True  # equal is not worse


def test_table_and_verdict_name_every_row_and_the_tasks_that_fail():
    good = results(3e-5, [(3e-5, 0, {"f1": 0.9}, 5)])
    bad = results(3e-5, [(3e-5, 0, {"f1": 0.5}, 5)])
    rows = ptf.compare("conll2003", good, bad) + ptf.compare("mrpc", bad, good)
    text = ptf.format_table(rows)
    assert "conll2003" in text and "PASS" in text and "FAIL" in text and "90.00 (1)" in text
    assert ptf.verdict(rows) == "FAIL: 1 of 2 tasks meet their target (not met: mrpc)"
    assert ptf.verdict(rows[:1]).startswith("PASS: 1 of 1")


def finetune_args(**overrides) -> object:
    args = ptf.parse_args(["--seeds", "0", "1", "--lr", "1e-4", "1e-3", "--selection-examples", "500",
                           "--finetune-minutes", "3"])  # fmt: skip
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def earlier_result(**change) -> dict:
    runs = [{"learning_rate": lr, "seed": s, "minutes": 3.02, "epochs": [{"accuracy": 0.5}],
             "stopped_by_time": True} for lr in (1e-4, 1e-3) for s in (0, 1)]  # fmt: skip
    return {"runs": runs, "selection_examples": 500} | change


def test_a_reused_control_must_have_been_finetuned_as_this_run_would():
    assert ptf.same_finetuning(finetune_args(), "sst2", earlier_result()) is None
    assert "seeds [0, 1], not [0, 1, 2]" in ptf.same_finetuning(
        finetune_args(seeds=[0, 1, 2]), "sst2", earlier_result()
    )
    assert "learning rates" in ptf.same_finetuning(finetune_args(lr=[3e-4]), "sst2", earlier_result())
    assert "--selection-examples 0" in ptf.same_finetuning(
        finetune_args(), "sst2", earlier_result(selection_examples=None)
    )
    assert "minutes, not 5" in ptf.same_finetuning(
        finetune_args(finetune_minutes=5.0), "sst2", earlier_result()
    )
    assert "step budget" in ptf.same_finetuning(
        finetune_args(finetune_minutes=None), "sst2", earlier_result()
    )
    # the step budget: one evaluation per epoch (SST-2's is 1 epoch), none stopped by the clock
    stepped = earlier_result()
    for r in stepped["runs"]:
        r["stopped_by_time"] = False
    assert ptf.same_finetuning(finetune_args(finetune_minutes=None), "sst2", stepped) is None
    three = finetune_args(finetune_minutes=None, glue_seeds=[0, 1])  # RTE: BERT's 3 epochs
    assert "step budget of 3" in ptf.same_finetuning(three, "rte", stepped)


def test_a_reused_control_must_hold_the_same_weights_and_tokenizer(tmp_path):
    import torch
    from safetensors.torch import save_file

    def control(name: str, weight: torch.Tensor, vocab: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        save_file({"embeddings.weight": weight, "bias": torch.zeros(3)}, str(d / "model.safetensors"))
        (d / "vocab.txt").write_text(vocab)
        return d

    w = torch.randn(4, 3)
    ours = control("ours", w, "[PAD]\na\n")
    assert ptf.same_control(ours, control("same", w.clone(), "[PAD]\na\n")) is None
    assert "1 tensors differ" in ptf.same_control(ours, control("other", w + 1e-7, "[PAD]\na\n"))
    assert "vocab.txt: not the same file" in ptf.same_control(ours, control("vocab", w.clone(), "[PAD]\nb\n"))


def test_a_missing_earlier_control_is_named(tmp_path):
    (tmp_path / "ours").mkdir()
    assert (
        ptf.same_control(tmp_path / "ours", tmp_path / "gone")
        == f"{tmp_path / 'gone' / 'model.safetensors'}: no such file"
    )


def test_combine_pools_the_seeds_of_several_runs_and_refuses_what_does_not_pool(tmp_path):
    """--combine: the runs of the chosen learning rate from each output directory, pooled; another chosen
    learning rate, selection split or budget, a repeated seed or a missing task is named instead."""
    import json

    def write(out: str, start: str, result: dict) -> Path:
        path = tmp_path / out / "finetune" / start / "rte" / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
        return tmp_path / out

    def rte(seeds, lr=1e-3, epochs=3.0, selection=250, other_lr=True):
        runs = [{"learning_rate": lr, "seed": s, "epochs": [{}] * 3, "dev": {"accuracy": 0.5 + s / 100},
                 "steps": 70 * epochs, "stopped_by_time": False} for s in seeds]  # fmt: skip
        if other_lr:  # a run at a learning rate not chosen: never pooled
            runs.append({"learning_rate": 9.0, "seed": 99, "epochs": [{}], "dev": {}, "steps": 1})
        return {"learning_rate": lr, "selection_examples": selection, "runs": runs}

    a, b = write("a", "pretrained", rte([0])), write("b", "pretrained", rte([1, 2], other_lr=False))
    merged = ptf.merged_result("rte", "pretrained", [a, b])
    assert [r["seed"] for r in merged["runs"]] == [0, 1, 2]
    assert ptf.seed_scores(merged, "accuracy") == pytest.approx([0.50, 0.51, 0.52])
    c = write("c", "pretrained", rte([0]))
    assert "repeats seed(s) [0]" in ptf.merged_result("rte", "pretrained", [a, c])
    d = write("d", "pretrained", rte([5], lr=1e-4))
    assert "learning_rate 0.0001" in ptf.merged_result("rte", "pretrained", [a, d])
    e = write("e", "pretrained", rte([6], selection=0))
    assert "selection_examples 0" in ptf.merged_result("rte", "pretrained", [a, e])
    f = write("f", "pretrained", rte([7], epochs=1.0))
    assert "other steps" in ptf.merged_result("rte", "pretrained", [a, f])
    assert "no such file" in ptf.merged_result("rte", "random-init", [a, b])


def test_constant_scores_predict_the_most_frequent_training_label(tmp_path):
    """MRPC's F1 of "always a paraphrase" and SST-2's accuracy of the majority label, from GLUE-format files;
    STS-B has no constant score (no correlation)."""
    sst = tmp_path / "glue" / "SST-2"
    sst.mkdir(parents=True)
    (sst / "train.tsv").write_text("sentence\tlabel\na\t1\nb\t1\nc\t0\n")
    (sst / "dev.tsv").write_text("sentence\tlabel\nd\t1\ne\t0\nf\t0\ng\t0\n")
    mrpc = tmp_path / "glue" / "MRPC"
    mrpc.mkdir(parents=True)
    head = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (mrpc / "train.tsv").write_text(head + "1\t1\t2\ta\tb\n1\t3\t4\tc\td\n0\t5\t6\te\tf\n")
    (mrpc / "dev.tsv").write_text(head + "1\t1\t2\ta\tb\n0\t3\t4\tc\td\n1\t5\t6\te\tf\n")
    scores = ptf.constant_scores(["sst2", "mrpc", "stsb"], tmp_path)
    assert scores == pytest.approx({"sst2": 25.0, "mrpc": 80.0})  # MRPC: P 2/3, R 1, F1 0.8
    assert "sst2 accuracy 25.00, mrpc f1 80.00" in ptf.constant_line(scores)
