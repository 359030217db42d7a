"""``--parallel fsdp`` and its options refused, with the way out, before anything is written, when the run
is not launched by torchrun; ``finetune`` and ``translate-train`` with FSDP on two processes (gloo), their
model written once by rank 0 (pretrain's sharded runs: tests/train/test_train_fsdp.py; distill's:
tests/pretraining/test_distillation.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.io import load


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--parallel", "fsdp"], "launch with torchrun --nproc-per-node N -m attnlab pretrain"),
        (["--activation-checkpointing"], "--activation-checkpointing is an option of --parallel fsdp"),
        (["--parallel", "ddp", "--cpu-offload"], "--cpu-offload is an option of --parallel fsdp"),
    ],
)
def test_pretrain_parallel_options_without_torchrun_are_one_clear_error(tmp_path, capsys, options, expected):
    out = tmp_path / "run"
    code, err = _run(["pretrain", "--output", out, "--max-steps", "1", *options], capsys)
    assert code != 0
    assert expected in err
    assert not out.exists()  # refused before anything was written


def test_pretrain_dry_run_prints_the_memory_per_process_of_ddp_and_fsdp(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = [
        "pretrain",
        "--dry-run",
        "--preset",
        "bert-base-uncased",
        "--world-size",
        "4",
        "--batch-size",
        "8",
    ]
    printed = {}
    for parallel in ("ddp", "fsdp"):
        assert main([*common, "--batch-size", "8", "--max-length", "128", "--parallel", parallel]) == 0
        printed[parallel] = capsys.readouterr().out
    assert "110,104,890 parameters, ddp over 4 process(es)" in printed["ddp"]
    assert "optimizer state (AdamW)   840.0 MiB" in printed["ddp"]
    assert "optimizer state (AdamW)   210.0 MiB" in printed["fsdp"]  # a quarter
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("finetune", ["--model", "bert-tiny", "--task", "sst2", "--data-dir", "missing"]),
        ("translate-train", ["--src-train", "a.en", "--tgt-train", "a.de"]),
    ],
)
def test_fsdp_of_finetune_and_translate_train_without_torchrun_is_refused(tmp_path, capsys, command, argv):
    out = tmp_path / "run"
    code, err = _run([command, *argv, "--output-dir", out, "--parallel", "fsdp"], capsys)
    assert code == 2
    assert f"launch with torchrun --nproc-per-node N -m attnlab {command}" in err
    assert not out.exists()


def _as_rank_0_of_2(monkeypatch) -> None:
    """The commands see the context torchrun's second process would give them (no group is joined)."""
    from attnlab.train import distributed

    context = distributed.DistributedContext(rank=0, world_size=2, backend="gloo")
    monkeypatch.setattr(distributed, "setup_distributed", lambda **_: context)


def test_finetune_with_a_teacher_under_fsdp_is_refused_before_writing(tmp_path, capsys, monkeypatch):
    _as_rank_0_of_2(monkeypatch)
    data, tok = _sentiment_table(tmp_path)
    out = tmp_path / "run"
    argv = ["finetune", "--model", "bert-tiny", "--tokenizer", tok, "--task", "generic", "--data-dir", data,
            "--teacher", tmp_path / "teacher", "--output-dir", out, "--parallel", "fsdp"]  # fmt: skip
    code, err = _run(argv, capsys)
    assert code == 2
    assert "--teacher) with parallel 'fsdp'" in err and "distil with --parallel ddp" in err
    assert not out.exists()


def test_translate_train_under_torchrun_with_minutes_alone_is_refused(tmp_path, capsys, monkeypatch):
    """--minutes plans steps from one process's timing: under torchrun --max-steps must be given too."""
    _as_rank_0_of_2(monkeypatch)
    out = tmp_path / "run"
    argv = ["translate-train", "--src-train", "a.en", "--tgt-train", "a.de", "--minutes", "5",
            "--output-dir", out]  # fmt: skip
    code, err = _run(argv, capsys)
    assert code == 2
    assert "translate-train under torchrun: --minutes plans the steps from one process's timing" in err
    assert not out.exists()


# ------------------------------------------------------------------- two processes on gloo, FSDP


WORDS = "the a film plot was is very quite story actor scene it".split()


def _sentiment_table(root: Path) -> tuple[Path, Path]:
    """A one-sentence classification table (CSV: sentence, label) and a WordPiece tokenizer for it."""
    from attnlab.tokenizers import bert_wordpiece

    data = root / "table"
    data.mkdir()
    rng = random.Random(0)
    for split, n in (("train", 48), ("dev", 16)):
        rows = ["sentence,label"]
        for _ in range(n):
            good = rng.random() < 0.5
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            words.insert(rng.randint(0, len(words)), "good" if good else "bad")
            rows.append(f"{' '.join(words)},{int(good)}")
        (data / f"{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", *WORDS]
    bert_wordpiece({t: i for i, t in enumerate(vocab)}).save(root / "tok")
    return data, root / "tok"


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["fsdp", "ddp"])
def test_finetune_on_two_processes_keeps_one_best_model(tmp_path, parallel):
    """Two CPU processes (gloo) fine-tune, the encoder's layers sharded (fsdp: every rank evaluates, FSDP's
    forward is collective) or replicated (ddp: rank 0 evaluates); rank 0 alone writes the best epoch's
    model (gathered from the shards under fsdp) and the results."""
    from torchrun import run_cli_under_torchrun

    data, tok = _sentiment_table(tmp_path)
    out = tmp_path / "ft"
    argv = ["finetune", "--model", "bert-tiny", "--tokenizer", str(tok), "--task", "generic", "--data-dir",
            str(data), "--batch-size", "8", "--lr", "1e-3", "--max-length", "24", "--epochs", "2",
            "--no-progress", "--output-dir", str(out), "--parallel", parallel]  # fmt: skip
    stdout = run_cli_under_torchrun(tmp_path, argv, on_cpu=("--device", "cpu"))
    assert stdout.count("median dev") == 1  # rank 0 alone reports
    results = json.loads((out / "results.json").read_text())
    (run,) = results["runs"]
    assert run["steps"] == 2 * 3  # 48 examples, 24 a process, batches of 8: 3 steps an epoch
    state = json.loads(
        (out / "lr0.001-seed0" / "checkpoints" / "step-000006" / "trainer_state.json").read_text()
    )
    assert state["world_size"] == 2 and state["config"]["parallel"] == parallel
    model = load(out / "best")
    assert type(model).__name__ == "EncoderForSequenceClassification"
    assert not any(p.is_meta for p in model.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["fsdp", "ddp"])
def test_translate_train_on_two_processes_averages_the_last_checkpoints(tmp_path, parallel):
    """translate-train over two CPU processes, its layers sharded (fsdp: the last checkpoints, sharded, are
    read whole by rank 0) or replicated (ddp); rank 0 averages them into the model it writes once."""
    from torchrun import run_cli_under_torchrun

    rng = random.Random(0)
    en = [" ".join(rng.choice(["a", "dog", "cat", "runs", "sleeps", "the", "big"]) for _ in range(5))
          for _ in range(60)]  # fmt: skip
    de = [s.replace("dog", "hund").replace("cat", "katze").replace("the", "der") for s in en]
    (tmp_path / "a.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    out = tmp_path / "tt"
    argv = ["translate-train", "--src-train", str(tmp_path / "a.en"), "--tgt-train", str(tmp_path / "a.de"),
            "--output-dir", str(out), "--preset", "transformer-tiny", "--layers", "2", "--d-model", "32",
            "--d-ff", "64", "--heads", "2", "--vocab-size", "300", "--max-steps", "4", "--save-every", "2",
            "--warmup", "1", "--max-tokens", "64", "--average-last", "2", "--no-progress",
            "--parallel", parallel]  # fmt: skip
    run_cli_under_torchrun(tmp_path, argv, on_cpu=("--device", "cpu"))
    report = json.loads((out / "data_report.json").read_text())
    assert report["averaged"] == ["step-000002", "step-000004"] and report["steps"] == 4
    sharded = (out / "checkpoints" / "step-000004" / "sharded" / "__1_0.distcp").is_file()
    assert sharded == (parallel == "fsdp")
    from attnlab.translation.family import load_seq2seq  # what `attnlab translate` reads it with

    model = load_seq2seq(out / "model")
    assert model.config.num_layers == 2 and not any(p.is_meta for p in model.parameters())


def test_a_command_leaves_the_process_group_it_joined(monkeypatch, capsys):
    """Every command ends by leaving its process group, so that a torchrun worker does not leave it to the
    interpreter's exit; the group is left for real (a one-process gloo group here)."""
    import torch.distributed as dist

    import attnlab.cli
    from attnlab.train import distributed  # noqa: F401 (imported by a command that joins a group)

    calls = []
    monkeypatch.setattr(attnlab.cli, "leave_process_group", lambda: calls.append(1))
    assert _run(["ablate", "--list"], capsys)[0] == 0 and calls == [1]
    monkeypatch.undo()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        attnlab.cli.leave_process_group()
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():  # the other tests must not find a group
            dist.destroy_process_group()
