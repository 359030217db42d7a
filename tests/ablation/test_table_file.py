"""A table of one's own from a YAML or JSON file: read into the same `Table` the lab's modules define, every
mistake named by its file and field before anything trains, and its runs shared with the lab's."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from attnlab.ablation import table_file
from attnlab.ablation.lab import plan_table
from attnlab.ablation.plan import pretrain_recipe
from attnlab.ablation.settings import LabSettings
from attnlab.ablation.table_file import TableFileError, load_table
from attnlab.ablation.tables import get_table
from attnlab.cli import main

EXAMPLE = Path(__file__).parents[2] / "docs" / "ablation-tables" / "roberta-table3.yaml"
MINIMAL = """
name: mine
probes: [mlm_accuracy]
columns: {mlm_accuracy: MLM}
rows:
  - name: a
    run: {recipe: bert}
    paper: {MLM: 2.0}
  - name: b
    run: {recipe: bert, recipe_overrides: {masking: {rate: 0.15}}}
    paper: {MLM: 1.0}
"""


def _settings(tmp_path: Path) -> LabSettings:
    return LabSettings(output=tmp_path, data_dir=tmp_path)


def _write(tmp_path: Path, text: str, name: str = "mine.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_documented_example_is_a_table_whose_baseline_row_is_the_labs(tmp_path):
    settings = _settings(tmp_path)
    table = load_table(EXAMPLE, settings)
    assert table.name == "roberta-table3" and [r.name for r in table.rows][0] == "bsz 256 (32)"
    assert {(o.better, o.worse) for o in table.expected_orderings() if o.column == "ppl"} == {
        ("bsz 2K (128)", "bsz 256 (32)"),
        ("bsz 8K (512)", "bsz 256 (32)"),
        ("bsz 2K (128)", "bsz 8K (512)"),
    }  # lower perplexity ranks better
    own, _ = plan_table(table, settings)
    lab, _ = plan_table(get_table("bert-table5"), settings)
    for seed in settings.seeds:  # 32 sequences at 2e-3 is the lab's BERT baseline: one run for both
        assert own.model_runs["bsz 256 (32)", seed] == lab.model_runs["BERT_BASE", seed]
        assert own.model_runs["bsz 2K (128)", seed] != lab.model_runs["BERT_BASE", seed]


def test_yaml_and_json_read_alike(tmp_path):
    from_yaml = load_table(_write(tmp_path, MINIMAL), _settings(tmp_path))
    as_json = _write(tmp_path, json.dumps(yaml.safe_load(MINIMAL)), "mine.json")
    assert load_table(as_json, _settings(tmp_path)) == dataclasses.replace(from_yaml, source="mine.json")
    assert from_yaml.source == "mine.yaml" and from_yaml.title == "mine"  # the defaults of what is optional
    assert from_yaml.rows[1].run.recipe_overrides["masking"] == {"rate": 0.15}
    exponent = MINIMAL.replace("rate: 0.15", "rate: 15e-2")  # YAML 1.1 reads 15e-2 as a string: a number here
    assert load_table(_write(tmp_path, exponent), _settings(tmp_path)) == from_yaml
    quoted = MINIMAL.replace("name: a", 'name: "1"').replace("name: b", "name: '0.15'")  # quoted: strings
    assert [r.name for r in load_table(_write(tmp_path, quoted), _settings(tmp_path)).rows] == ["1", "0.15"]


@pytest.mark.parametrize(
    "change, message",
    [
        (("name: mine\n", ""), "name: missing"),
        (("name: mine", "name: bert-table5"), "name: 'bert-table5' is one of the lab's tables"),
        (("name: mine", "name: mine\nseeds: 3"), "seeds: unknown field"),
        (("  - name: a", "  - name: a\n    readouts: bilstm"), "rows[0].readouts: unknown field"),
        (("run: {recipe: bert}", "run: {recipie: bert}"), "rows[0].run.recipie: unknown field"),
        (("run: {recipe: bert}", "run: {recipe: 3}"), "rows[0].run.recipe: expected a string, got 3"),
        (
            ("paper: {MLM: 2.0}", "paper: {MLM: high}"),
            "rows[0].paper.MLM: expected a finite number, got 'high'",
        ),
        (("paper: {MLM: 2.0}", "paper: {MLM: .nan}"), "rows[0].paper.MLM: expected a finite number, got nan"),
        (
            ("paper: {MLM: 2.0}", "paper: {yes: 2.0}"),
            "rows[0].paper: a column's name must be a string, got True",
        ),
        (
            ("{mlm_accuracy: MLM}", "{mlm_accuracy: on}"),
            "columns.mlm_accuracy: expected a column's name, got True",
        ),
        (("{mlm_accuracy: MLM}", "{mlm_accuracy: [MLM]}"), "columns.mlm_accuracy: expected a column's name"),
        (("name: mine", "name: on"), "name: expected a string, got True (YAML reads an unquoted yes, no, on"),
        (("name: mine", "name: ../mine"), "name: '../mine': expected letters, digits"),
        (("probes: [mlm_accuracy]", "probes: []"), "expected at least one probe, each once; got []"),
        (("probes: [mlm_accuracy]", "probes: [mlm_accuracy, mlm_accuracy]"), "each once"),
        (
            ("probes: [mlm_accuracy]", "probes: [mlm_accuracy, bleu]"),
            "row 'a' (pretrain) cannot be scored by bleu",
        ),
        (
            ("run: {recipe: bert}", "run: {kind: translate}"),
            "row 'a' (translate) cannot be scored by mlm_accuracy",
        ),
        (
            ("run: {recipe: bert}", "run: {kind: distill, recipe: roberta}"),
            "rows[0].run.recipe: a distill run does not",
        ),
        (
            ("run: {recipe: bert}", "run: {recipe: bert, distill: {}}"),
            "rows[0].run.distill: a pretrain run does not",
        ),
        (
            ("run: {recipe: bert}", "run: {recipe: bert, recipe_overrides: {lr: .inf}}"),
            "rows[0] (a).run: recipe_overrides.lr: expected a finite number, got inf",
        ),
        (
            ("run: {recipe: bert}", "run: {recipe: bert, recipe_overrides: {stages: 3}}"),
            "expected a list of lengths",
        ),
        (
            ("run: {recipe: bert}", "run: {recipe: gpt, model_overrides: {layerz: 2}}"),
            "rows[0] (a).run: model: unknown GPTConfig field(s) layerz",
        ),
        (
            ("run: {recipe: bert}", "run: {recipe: bert, budget_share: 0}"),
            "rows[0] (a).run: RunConfig.budget_share",
        ),
        (("name: mine", "name: mine\nname: other"), "line 3: invalid YAML: found the key 'name' twice"),
        (("paper: {MLM: 2.0}", "paper: {MLM: yes}"), "got True (YAML reads an unquoted yes"),
        (("  - name: a", "  - name: a\n    readout: svm"), "rows[0] (a): row 'a': readout: expected one of"),
        (
            ("run: {recipe: bert}", "run: {kind: distill, distill: {random_init: 'no'}}"),
            "rows[0] (a).run: distill.random_init: expected true or false, got 'no'",
        ),
        (("probes: [mlm_accuracy]", "probes: [mlm_acc]"), "unknown probe 'mlm_acc'"),
        (("probes: [mlm_accuracy]", "probes: [1]"), "probes[0]: expected a probe's name"),
        (("probes: [mlm_accuracy]", "probes: mlm_accuracy"), "probes: expected a list, got 'mlm_accuracy'"),
        (("run: {recipe: bert}", "run: {recipe: bort}"), "rows[0] (a).run: unknown recipe 'bort'"),
        (("rate: 0.15", "rat: 0.15"), "rows[1] (b).run: masking: unknown field(s) rat"),
        (
            ("run: {recipe: bert}", "run: {recipe: bert, model_overrides: {layers: 2}}"),
            "rows[0] (a).run: model: unknown EncoderConfig field(s) layers; valid: ",
        ),
        (("run: {recipe: bert}", "run: {kind: train}"), "rows[0] (a).run: RunConfig.kind: expected one of"),
        (("  - name: b", "  - name: a"), "at least 2 rows with distinct names"),
        (("rows:", "rows: ["), "line 6: invalid YAML"),
    ],
)
def test_a_mistake_names_the_file_and_the_field(tmp_path, change, message):
    old, new = change
    assert old in MINIMAL
    path = _write(tmp_path, MINIMAL.replace(old, new, 1))
    with pytest.raises(TableFileError, match=r"mine\.yaml: ") as error:
        load_table(path, _settings(tmp_path))
    assert message in str(error.value)


def test_a_json_mistake_names_its_line_and_other_files_are_refused(tmp_path):
    with pytest.raises(TableFileError, match=r"mine\.json: the key 'name' is given twice in one object"):
        load_table(_write(tmp_path, '{"name": "mine", "name": "yours"}', "mine.json"), _settings(tmp_path))
    with pytest.raises(TableFileError, match=r"mine\.json: line 2: not valid JSON"):
        load_table(_write(tmp_path, '{"name": "mine",\n "rows": [,]}', "mine.json"), _settings(tmp_path))
    with pytest.raises(TableFileError, match=r"mine\.toml: expected a \.yaml, \.yml or \.json table file"):
        load_table(_write(tmp_path, MINIMAL, "mine.toml"), _settings(tmp_path))
    with pytest.raises(TableFileError, match=r"gone\.yaml: no such table file"):
        load_table(tmp_path / "gone.yaml", _settings(tmp_path))
    with pytest.raises(TableFileError, match="expected a table"):
        load_table(_write(tmp_path, "[1, 2]", "list.json"), _settings(tmp_path))


def test_the_command_plans_a_table_file_and_reports_its_mistakes(tmp_path, capsys):
    argv = ["ablate", str(_write(tmp_path, MINIMAL)), "--plan", "--data-dir", str(tmp_path)]
    assert main([*argv, "--output", str(tmp_path / "out")]) == 0
    # two rows, three seeds: a pre-training run each, its MLM accuracy its own figure
    assert (
        capsys.readouterr()
        .out.splitlines()[1]
        .startswith("mine                 6 runs: 0 done; to run: 6 pretrain;")
    )
    bad = _write(tmp_path, MINIMAL.replace("recipe: bert}", "recipe: bort}", 1), "bad.yaml")
    assert main(["ablate", str(bad), "--plan", "--data-dir", str(tmp_path)]) == 2
    assert "bad.yaml: rows[0] (a).run: unknown recipe 'bort'" in capsys.readouterr().err


def test_the_128_token_albert_table_is_the_labs_with_one_longer_stage(tmp_path):
    settings = _settings(tmp_path)
    longer = load_table(EXAMPLE.with_name("albert-table5-128.yaml"), settings)
    lab = get_table("albert-table5")
    assert [r.name for r in longer.rows] == [r.name for r in lab.rows] and longer.probes == lab.probes
    assert dict(longer.columns) == dict(lab.columns)
    for ours, theirs in zip(longer.rows, lab.rows):
        assert ours.paper == theirs.paper
        a, _, a_model = pretrain_recipe(ours.run, settings)
        b, _, b_model = pretrain_recipe(theirs.run, settings)
        assert [s.max_length for s in a.stages] == [128] and [s.max_length for s in b.stages] == [32]
        assert dataclasses.replace(a, stages=b.stages) == b and a_model == b_model


def test_the_modules_example_is_a_table_whose_rows_are_bert_table_8s(tmp_path):
    example = "\n".join(line[4:] for line in table_file.__doc__.splitlines() if line.startswith("    "))
    settings = _settings(tmp_path)
    own, _ = plan_table(load_table(_write(tmp_path, example), settings), settings)
    lab, _ = plan_table(get_table("bert-table8"), settings)
    for row in ("80/10/10", "100/0/0"):
        assert own.model_runs[row, 0] == lab.model_runs[row, 0]
