"""The lab's machinery with the training replaced by fakes that count their calls: caching (a second
`ablate` trains nothing; two tables sharing a row train it once), resume after a kill, failures recorded,
and the outputs written. The real training is `test_ablate_tiny.py`'s (slow)."""

import dataclasses
import json
from pathlib import Path

import pytest

from attnlab.ablation import execute, probes, report
from attnlab.ablation.execute import LabData
from attnlab.ablation.lab import plan_table, run_table
from attnlab.ablation.settings import SIZES, LabSettings
from attnlab.ablation.stats import AGREES, DISAGREES
from attnlab.ablation.tables import get_table


class Fakes:
    """Stand-ins for the runs: a model folder and a score that depends on the configuration."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self.kill_next = False
        monkeypatch.setattr(execute, "run_pretrain", self.pretrain)
        monkeypatch.setattr(execute, "run_distill", self.pretrain)
        monkeypatch.setattr(execute, "run_finetune", self.finetune)
        for name in ("sst2_features", "conll_features"):
            monkeypatch.setattr(probes, name, self.features)
        monkeypatch.setattr(probes, "pair_features", lambda *a, **k: self.features(*a, **k))
        monkeypatch.setattr(LabData, "load", lambda self: (None, None, None))

    def pretrain(self, folder: Path, *args, **kwargs) -> dict:
        if self.kill_next:
            self.kill_next = False
            (folder / "run.json").write_text("{}")  # what a run leaves before it is killed
            raise KeyboardInterrupt
        self.calls.append("pretrain")
        (folder / "model").mkdir(exist_ok=True)
        seed = args[-3]
        static = getattr(args[1], "static_masking", False)  # run_pretrain(folder, data, recipe, ...)
        if static:
            (folder / "model" / "static").touch()
        return {"model_dir": "model", "metrics": {"mlm_accuracy": 30.0 + seed - (5 if static else 0)}}

    def finetune(self, folder: Path, *args, **kwargs) -> dict:
        self.calls.append("finetune")
        return {"metrics": {"f1": 50.0}}

    def features(self, model_dir: Path, *args, seed: int, **kwargs) -> dict:
        self.calls.append("features")
        # the static row's model is worse by 5 points, seed to seed spread 1 point
        score = 60.0 + seed - (5 if (Path(model_dir) / "static").exists() else 0)
        return {"accuracy": score, "f1": score}


@pytest.fixture
def fakes(monkeypatch):
    return Fakes(monkeypatch)


def _settings(tmp_path: Path) -> LabSettings:
    return LabSettings(output=tmp_path, data_dir=tmp_path, size=SIZES["cpu"], seeds=(0, 1, 2))


def test_a_second_ablate_trains_nothing(fakes, tmp_path):
    settings = _settings(tmp_path)
    first = run_table(get_table("roberta-table1"), settings, log=lambda m: None)
    assert first.trained == 18 and first.reused == 0  # 2 rows x 3 seeds x (model + 2 feature probes)
    assert fakes.calls.count("pretrain") == 6
    fakes.calls.clear()
    second = run_table(get_table("roberta-table1"), settings, log=lambda m: None)
    assert fakes.calls == [] and second.trained == 0 and second.reused == 18
    assert second.summaries == first.summaries


def test_two_tables_sharing_a_row_train_it_once(fakes, tmp_path):
    settings = _settings(tmp_path)
    run_table(get_table("roberta-table1"), settings, log=lambda m: None)
    fakes.calls.clear()
    result = run_table(get_table("bert-table8"), settings, log=lambda m: None)
    # 6 rows, of which 80/10/10 is RoBERTa Table 1's "dynamic" row: 5 new rows x 3 seeds
    assert fakes.calls.count("pretrain") == 15
    assert result.summaries["80/10/10", "mlm_accuracy"].n == 3


def test_a_killed_run_is_done_again_and_the_others_are_kept(fakes, tmp_path):
    settings = _settings(tmp_path)
    fakes.kill_next = True
    with pytest.raises(KeyboardInterrupt):
        run_table(get_table("roberta-table1"), settings, log=lambda m: None)
    plan, store = plan_table(get_table("roberta-table1"), settings)
    first = plan.runs[0].spec
    assert store.folder(first).is_dir() and not store.done(first)  # the killed run: no result.json
    result = run_table(get_table("roberta-table1"), settings, log=lambda m: None)
    assert store.done(first) and result.trained == 18


def test_a_pretraining_run_left_by_a_kill_resumes(monkeypatch, tmp_path):
    seen = {}

    class Result:
        model_dir, steps, seconds, eval_metrics = (
            tmp_path / "run" / "model",
            3,
            1.0,
            {"eval_mlm_accuracy": 0.25},
        )

    def fake_pretrain(*args, **kwargs):
        seen.update(kwargs)
        return Result()

    monkeypatch.setattr(execute, "pretrain", fake_pretrain)
    monkeypatch.setattr(LabData, "load", lambda self: (None, None, None))
    folder = tmp_path / "run"
    folder.mkdir()
    data = LabData(_settings(tmp_path), 2048)
    record = execute.run_pretrain(folder, data, None, "bert-tiny", {}, 0.1, 0, "cpu", print)
    assert seen["resume"] is False and seen["overwrite"] is True
    assert record["metrics"]["mlm_accuracy"] == pytest.approx(25.0)  # percent
    (folder / "run.json").write_text("{}")  # an earlier attempt's run record: continue from its checkpoints
    execute.run_pretrain(folder, data, None, "bert-tiny", {}, 0.1, 0, "cpu", print)
    assert seen["resume"] is True and seen["overwrite"] is False


def test_a_failed_run_is_recorded_and_its_probes_are_not_measured(fakes, monkeypatch, tmp_path):
    def broken(folder, *args, **kwargs):
        if getattr(args[1], "static_masking", False):
            raise ValueError("no such thing")
        return fakes.pretrain(folder, *args, **kwargs)

    monkeypatch.setattr(execute, "run_pretrain", broken)
    result = run_table(get_table("roberta-table1"), _settings(tmp_path), log=lambda m: None)
    assert any("no such thing" in e for e in result.failed.values())
    assert result.summaries["static", "sst2_features"].n == 0
    assert {o.verdict for o in result.orderings} == {"not measured"}


def test_the_outputs_hold_the_paper_the_measurements_and_the_verdicts(fakes, tmp_path):
    settings = _settings(tmp_path)
    result = run_table(get_table("roberta-table1"), settings, log=lambda m: None, command="attnlab ablate x")
    written = report.write_table(result, tmp_path / "out")
    assert [p.name for p in written] == ["roberta-table1.md", "roberta-table1.json", "roberta-table1.png"]
    data = json.loads(written[1].read_text())
    assert data["command"] == "attnlab ablate x"
    assert data["rows"][0]["paper"] == {"SQuAD 2.0": 78.3, "MNLI-m": 84.3, "SST-2": 92.5}
    # the fake static model is 5 points worse, seeds spread 1: separated, in the paper's direction
    verdicts = {o["probe"]: o["verdict"] for o in data["orderings"]}
    assert verdicts == {"sst2_features": AGREES, "conll_features": AGREES}
    markdown = written[0].read_text()
    assert "| static | 78.3 |" in markdown and "agrees" in markdown and "attnlab ablate x" in markdown
    assert written[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = tmp_path / "out.md"
    report.update_summary(page, tmp_path / "out")
    report.update_summary(page, tmp_path / "out")  # the block is replaced, not added again
    text = page.read_text()
    assert text.count("Overall:") == 1 and "2 orderings, 2 separated beyond noise (100%), 2 of those" in text
    assert DISAGREES not in {o.verdict for o in result.orderings}


def test_a_probe_that_never_moves_is_said_to_measure_nothing(fakes, monkeypatch, tmp_path):
    flat = {"accuracy": 0.0, "f1": 0.0}  # e.g. BLEU 0 in every run: a model that learned nothing
    monkeypatch.setattr(probes, "sst2_features", lambda *a, **k: flat)
    result = run_table(get_table("roberta-table1"), _settings(tmp_path), log=lambda m: None)
    assert report.unmoved_probes(result) == {"sst2_features": 0.0}  # conll_features still moves
    markdown = report.table_markdown(result)
    assert "SST-2 frozen-feature accuracy did not move: every run scored 0.00" in markdown
    assert json.loads(report.write_table(result, tmp_path / "out")[1].read_text())["unmoved_probes"] == {
        "sst2_features": 0.0
    }


def test_the_outputs_name_their_sizes_and_machine_and_where_the_gpu_column_is(fakes, tmp_path):
    result = run_table(get_table("roberta-table1"), _settings(tmp_path), log=lambda m: None)
    assert result.size == "cpu" and result.hardware.endswith("cores)")
    cpu = report.table_markdown(result)
    assert "the lab's cpu sizes (bert-tiny, 32 tokens, a WordPiece of 2,048 tokens" in cpu
    assert "GPU column: not yet run (`attnlab ablate roberta-table1 --device cuda" in cpu
    gpu = dataclasses.replace(result, size="cuda", hardware="NVIDIA H100 80GB HBM3")
    markdown = report.table_markdown(gpu)
    assert "the lab's cuda sizes (bert-mini, 128 tokens, a WordPiece of 8,192 tokens" in markdown
    assert "on NVIDIA H100 80GB HBM3." in markdown and "not yet run" not in markdown
    assert "This is the table's GPU column" in markdown
    data = json.loads(report.write_table(gpu, tmp_path / "gpu")[1].read_text())
    assert (data["size"], data["hardware"]) == ("cuda", "NVIDIA H100 80GB HBM3")


def test_cuda_trains_larger_sizes_without_other_changes(tmp_path):
    cpu = _settings(tmp_path)
    gpu = dataclasses.replace(cpu, device="cuda", size=SIZES["cuda"])
    presets = [
        plan_table(get_table("roberta-table1"), s)[0].runs[0].spec.config["preset"] for s in (cpu, gpu)
    ]
    assert presets == ["bert-tiny", "bert-mini"]
