"""Every table's definition is valid: its rows build valid recipes, model configs, distillation and
translation configs (constructed, not trained), its paper columns give orderings, and its default
budget fits an hour on 2 cores."""

import dataclasses
from pathlib import Path

import pytest

from attnlab.ablation.classifiers import BILSTM, readout_key
from attnlab.ablation.execute import LabData
from attnlab.ablation.plan import Planner, check_run, pretrain_recipe
from attnlab.ablation.runs import RunStore
from attnlab.ablation.settings import SIZES, LabSettings
from attnlab.ablation.table import PROBES, Row, RunConfig, Table
from attnlab.ablation.tables import TABLES, get_table

REQUIRED = {
    "bert-table5", "bert-table8", "bert-figure5", "roberta-table1", "roberta-table2", "albert-table3",
    "albert-table4", "albert-table5", "distilbert-table4", "transformer-table3", "electra-spanbert",
}  # fmt: skip


def _settings(tmp_path: Path, device: str = "cpu") -> LabSettings:
    return LabSettings(output=tmp_path, data_dir=tmp_path, size=SIZES[device])


def test_the_required_tables_are_defined():
    assert REQUIRED <= set(TABLES)


@pytest.mark.parametrize("name", sorted(TABLES))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_row_builds_a_valid_configuration(name, device, tmp_path):
    table, settings = get_table(name), _settings(tmp_path, device)
    for row in table.rows:
        check_run(row.run, settings)  # recipes, model, distillation and translation configs built
        if row.run.kind == "pretrain":
            recipe, _, _ = pretrain_recipe(row.run, settings)
            assert recipe.max_steps >= 1


def test_a_run_that_cannot_be_built_is_named(tmp_path):
    settings = _settings(tmp_path)
    with pytest.raises(
        ValueError, match="model: unknown EncoderConfig field.s. hidden; valid: .*hidden_size"
    ):
        check_run(RunConfig(model_overrides={"hidden": 64}), settings)
    with pytest.raises(
        ValueError, match="distill: unknown DistillationConfig field.s. alpha; valid: .*random_init"
    ):
        check_run(RunConfig(kind="distill", distill={"alpha": 1.0}), settings)
    with pytest.raises(ValueError, match="GPTConfig.num_layers: expected a positive int, got 0"):
        check_run(RunConfig(recipe="gpt", model_overrides={"num_layers": 0}), settings)
    with pytest.raises(ValueError, match="model: unknown TransfoXLConfig field.s. layerz"):
        check_run(RunConfig(recipe="transfo-xl", model_overrides={"layerz": 2}), settings)
    check_run(RunConfig(recipe="transfo-xl"), settings)  # at the lab's sizes: a Transformer-XL preset
    with pytest.raises(ValueError, match="distill.random_init: expected true or false, got 'false'"):
        check_run(RunConfig(kind="distill", distill={"random_init": "false"}), settings)
    with pytest.raises(ValueError, match="model: unknown Seq2SeqConfig field.s. heads"):
        check_run(RunConfig(kind="translate", model_overrides={"heads": 4}), settings)
    with pytest.raises(ValueError, match="DistillationConfig: alpha_ce, alpha_mlm and alpha_cos are all 0"):
        check_run(
            RunConfig(kind="distill", distill=dict.fromkeys(("alpha_ce", "alpha_mlm", "alpha_cos"), 0)),
            settings,
        )


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_table_names_its_paper_and_judges_orderings(name):
    table = get_table(name)
    assert table.paper and table.source and table.note
    assert table.columns, "a table judges at least one probe against a paper column"
    orderings = table.expected_orderings()
    assert orderings
    for o in orderings:
        better, worse = table.row(o.better).paper[o.column], table.row(o.worse).paper[o.column]
        assert (better > worse) == PROBES[o.probe].higher_is_better and o.diff == pytest.approx(
            better - worse
        )
        assert o.probe in table.probes and PROBES[o.probe]


def test_ties_in_the_paper_rank_nothing():
    a = Row("a", RunConfig(), {"x": 1.0})
    b = Row("b", RunConfig(recipe="mlm"), {"x": 1.0})
    table = Table("t", "T", "P", "Table 1", (a, b), ("mlm_accuracy",), {"mlm_accuracy": "x"})
    assert table.expected_orderings() == []


def test_a_perplexity_column_ranks_the_lower_value_better():
    a = Row("a", RunConfig(), {"ppl": 4.9})
    b = Row("b", RunConfig(recipe="mlm"), {"ppl": 5.3})
    table = Table("t", "T", "P", "Table 3", (a, b), ("mlm_perplexity",), {"mlm_perplexity": "ppl"})
    (o,) = table.expected_orderings()
    assert (o.better, o.worse) == ("a", "b") and o.diff == pytest.approx(-0.4)


def test_a_table_is_checked_when_defined():
    row = Row("a", RunConfig(), {"x": 1.0})
    with pytest.raises(ValueError, match="distinct names"):
        Table("t", "T", "P", "S", (row, row), ("mlm_accuracy",))
    with pytest.raises(ValueError, match="unknown probe"):
        Table("t", "T", "P", "S", (row, Row("b", RunConfig())), ("no_such_probe",))
    with pytest.raises(ValueError, match="column 'x' names probe 'no_such_probe', not measured"):
        Table("t", "T", "P", "S", (row, Row("b", RunConfig())), ("mlm_accuracy",), {"no_such_probe": "x"})
    with pytest.raises(ValueError, match="kind"):
        RunConfig(kind="train")


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_default_budget_fits_an_hour_on_two_cores(name, tmp_path):
    settings = _settings(tmp_path)
    store = RunStore(tmp_path / "runs")
    plan = Planner(settings, LabData(settings, 2048), store).plan(get_table(name))
    assert plan.estimated_minutes(store) <= 60.0


def test_a_row_two_tables_share_is_one_run(tmp_path):
    settings = _settings(tmp_path)
    store = RunStore(tmp_path / "runs")
    planner = Planner(settings, LabData(settings, 2048), store)
    table8 = planner.plan(get_table("bert-table8"))
    table1 = planner.plan(get_table("roberta-table1"))
    table5 = planner.plan(get_table("bert-table5"))
    for seed in settings.seeds:
        baseline = table8.model_runs["80/10/10", seed].key
        assert table1.model_runs["dynamic", seed].key == baseline
        assert table5.model_runs["BERT_BASE", seed].key == baseline
        assert table8.model_runs["100/0/0", seed].key != baseline


def test_the_translation_sizes_decide_only_the_translation_runs(tmp_path):
    """Encoder runs are keyed without the translation's sizes: choosing those again retrains nothing else."""
    settings = _settings(tmp_path)
    other = dataclasses.replace(
        settings, size=dataclasses.replace(settings.size, translate_max_tokens=512, translate_overrides={})
    )
    keys = []
    for s in (settings, other):
        planner = Planner(s, LabData(s, 2048), RunStore(tmp_path / "runs"))
        plans = [planner.plan(get_table(name)) for name in ("bert-table5", "transformer-table3")]
        keys.append([[r.spec.key for r in plan.runs] for plan in plans])
    assert keys[0][0] == keys[1][0]  # BERT Table 5's runs and probes: the same keys
    assert not set(keys[0][1]) & set(keys[1][1])  # every translation run is another


def test_minutes_are_divided_over_the_runs_still_needed(tmp_path):
    settings = dataclasses.replace(_settings(tmp_path), minutes=30.0)
    store = RunStore(tmp_path / "runs")
    plan = Planner(settings, LabData(settings, 2048), store).plan(get_table("roberta-table1"))
    assert plan.estimated_minutes(store) == pytest.approx(30.0, rel=0.01)
    minutes = [r.spec.config["minutes"] for r in plan.runs if r.spec.kind == "pretrain"]
    assert minutes == [pytest.approx(plan.run_minutes, abs=1e-3)] * 6  # 2 rows x 3 seeds, equal budgets
    assert plan.run_minutes > SIZES["cpu"].pretrain_minutes  # 30 minutes over 6 runs


def test_the_division_is_kept_for_the_same_command(tmp_path):
    settings = dataclasses.replace(_settings(tmp_path), minutes=30.0)
    store = RunStore(tmp_path / "runs")
    first = Planner(settings, LabData(settings, 2048), store).plan(get_table("roberta-table1"))
    assert (tmp_path / "plans" / "roberta-table1.json").is_file()
    store.begin(first.runs[0].spec)
    store.finish(first.runs[0].spec, {"model_dir": "model"})  # one run done: the division stays
    again = Planner(settings, LabData(settings, 2048), store).plan(get_table("roberta-table1"))
    assert [r.spec.key for r in again.runs] == [r.spec.key for r in first.runs]
    other = dataclasses.replace(settings, minutes=20.0)
    fewer = Planner(other, LabData(other, 2048), store).plan(get_table("roberta-table1"))
    assert fewer.run_minutes < first.run_minutes


def test_a_readout_is_checked_and_only_frozen_feature_probes_have_one():
    with pytest.raises(ValueError, match="readout: expected one of linear, bilstm, got 'svm'"):
        Row("a", RunConfig(), readout="svm")
    rows = (Row("a", RunConfig(), {"x": 1.0}), Row("b", RunConfig(), {"x": 2.0}, readout="bilstm"))
    Table("t", "T", "P", "S", rows, ("sst2_features",), {"sst2_features": "x"})
    with pytest.raises(ValueError, match="row 'b' reads out by bilstm.*conll_finetune"):
        Table("t", "T", "P", "S", rows, ("sst2_features", "conll_finetune"), {"sst2_features": "x"})
    with pytest.raises(ValueError, match="row 'b' reads out by bilstm.*without one: mlm_accuracy"):
        Table("t", "T", "P", "S", rows, ("mlm_accuracy",), {"mlm_accuracy": "x"})


def test_the_bilstm_row_probes_the_left_to_right_runs_with_its_own_readout(tmp_path):
    settings = _settings(tmp_path)
    plan = Planner(settings, LabData(settings, 2048), RunStore(tmp_path / "runs")).plan(
        get_table("bert-table5")
    )
    for seed in settings.seeds:
        assert plan.model_runs["+ BiLSTM", seed] == plan.model_runs["LTR & No NSP", seed]
        for probe in ("sst2_features", "conll_features", "nsp_features"):
            linear, bilstm = plan.cells["LTR & No NSP", probe, seed], plan.cells["+ BiLSTM", probe, seed]
            # the linear readout's keys are those it had before readouts; the BiLSTM's hold its settings
            assert "readout" not in linear.config
            assert bilstm.config == {**linear.config, "readout": readout_key("bilstm")}
            assert bilstm.config["readout"]["epochs"] == BILSTM["epochs"] and bilstm.key != linear.key
