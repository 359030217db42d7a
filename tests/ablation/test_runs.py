"""Run keys and the run store: one folder per configuration and seed, done only with a result.json that
was written for it."""

import json

from attnlab.ablation.runs import RESULT_FILE, RunSpec, RunStore


def test_key_is_the_canonical_configuration_and_seed():
    a = RunSpec("pretrain", {"lr": 1e-3, "recipe": {"b": 1, "a": [1, 2]}}, 0)
    b = RunSpec("pretrain", {"recipe": {"a": (1, 2), "b": 1}, "lr": 0.001}, 0)
    assert a.key == b.key  # key order and tuple/list do not matter
    assert a.key != RunSpec("pretrain", dict(a.config), 1).key
    assert a.key != RunSpec("finetune", dict(a.config), 0).key
    assert a.key != RunSpec("pretrain", {**a.config, "lr": 2e-3}, 0).key


def test_a_run_is_done_only_with_its_own_result(tmp_path):
    store = RunStore(tmp_path)
    spec = RunSpec("features", {"probe": "sst2_features"}, 0)
    assert not store.done(spec)
    folder = store.begin(spec)
    assert folder.is_dir() and not store.done(spec)  # a started run without result.json: not done
    store.finish(spec, {"metrics": {"accuracy": 81.5}, "nan": float("nan")})
    assert store.result(spec) == {"metrics": {"accuracy": 81.5}, "nan": None}
    other = RunSpec("features", {"probe": "sst2_features"}, 1)
    (store.folder(other)).mkdir()
    (store.folder(other) / RESULT_FILE).write_text((folder / RESULT_FILE).read_text())
    assert not store.done(other)  # a result written for another spec does not count


def test_a_damaged_result_is_not_done_and_restart_empties_the_folder(tmp_path):
    store = RunStore(tmp_path)
    spec = RunSpec("finetune", {"probe": "sst2_finetune"}, 0)
    folder = store.begin(spec)
    (folder / RESULT_FILE).write_text('{"spec": ')
    (folder / "partial.bin").write_bytes(b"x")
    assert not store.done(spec)
    store.begin(spec, restart=True)
    assert not (folder / "partial.bin").exists()
    assert json.loads((folder / "spec.json").read_text())["seed"] == 0
