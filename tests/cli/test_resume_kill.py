"""kill -9 and --resume: `attnlab finetune` and `attnlab translate-train` killed mid-run and resumed end with
the weights and optimizer state of an uninterrupted run, bit for bit (CPU, one thread).

The default tests kill at a fixed step from inside the process (a Trainer callback sends SIGKILL to its
own process after the step's update, before that step's checkpoint: the worst moment, the step's work
is lost). The slow tests kill from outside at random moments, several times over one run, saves included.

Run as a script (``python tests/cli/test_resume_kill.py --kill-at K -- ATTNLAB ARGS``) it runs the command and
kills itself after optimizer step K.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the script form runs from anywhere
    sys.path.insert(0, str(ROOT))

from attnlab.cli import main  # noqa: E402
from attnlab.train.checkpoint import (  # noqa: E402
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint,
    read_model_file,
)

SCRIPT = Path(__file__)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

EN = ["a dog runs .", "two men play football .", "a woman reads a book .", "the cat sleeps .",
      "a boy jumps ."]  # fmt: skip
DE = ["ein hund rennt .", "zwei männer spielen fußball .", "eine frau liest ein buch .",
      "die katze schläft .", "ein junge springt ."]  # fmt: skip
WORDS = "the a film plot was is very quite story actor scene it".split()


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the two commands


def translate_data(root: Path) -> Path:
    data = root / "m30k"
    data.mkdir()
    _write(data / "train.en", EN * 4)
    _write(data / "train.de", DE * 4)
    return data


def translate_argv(data: Path, out: Path, steps: int = 10) -> list[str]:
    return [
        "translate-train", "--data-dir", str(data), "--output-dir", str(out), "--preset", "transformer-tiny",
        "--layers", "1", "--d-model", "32", "--d-ff", "64", "--heads", "2", "--vocab-size", "330",
        "--max-steps", str(steps), "--save-every", "2", "--average-last", "2", "--warmup", "2",
        "--max-tokens", "64", "--no-progress", "--threads", "1", "--device", "cpu",
    ]  # fmt: skip


def finetune_data(root: Path) -> tuple[Path, Path]:
    from attnlab.tokenizers import bert_wordpiece

    data = root / "table"
    data.mkdir()
    rng = random.Random(0)
    for split, n in (("train", 64), ("dev", 16)):
        rows = ["sentence,label"]
        for _ in range(n):
            good = rng.random() < 0.5
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            words.insert(rng.randint(0, len(words)), "good" if good else "bad")
            rows.append(f"{' '.join(words)},{'pos' if good else 'neg'}")
        _write(data / f"{split}.csv", rows)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", *WORDS]
    tok = root / "tok"
    bert_wordpiece({t: i for i, t in enumerate(vocab)}).save(tok)
    return data, tok


def finetune_argv(data: Path, tok: Path, out: Path, epochs: int = 2) -> list[str]:
    return [
        "finetune", "--task", "generic", "--data-dir", str(data), "--model", "bert-tiny", "--tokenizer",
        str(tok), "--output-dir", str(out), "--epochs", str(epochs), "--batch-size", "16", "--lr", "1e-3",
        "--max-length", "24", "--save-every", "2", "--no-progress", "--device", "cpu",
    ]  # fmt: skip


# --------------------------------------------------------------------------- helpers


def run_here(argv: list[str]) -> int:
    """The command in this process, on one thread (the reduction order of the killed subprocess)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return main(argv)
    finally:
        torch.set_num_threads(threads)


def assert_same_checkpoint(a: Path, b: Path) -> None:
    """Weights and the whole training state (optimizer, schedule, RNG, loader position) are identical."""
    ca, cb = read_checkpoint(a), read_checkpoint(b)
    assert ca.tensors.keys() == cb.tensors.keys()
    for key, value in ca.tensors.items():
        assert torch.equal(value, cb.tensors[key]), f"{a.name}: weight {key} differs"
    _assert_equal(ca.state, cb.state, a.name)


def _assert_equal(x, y, where: str) -> None:
    if isinstance(x, torch.Tensor):
        assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y), where
    elif isinstance(x, dict):
        assert x.keys() == y.keys(), where
        for key in x:
            _assert_equal(x[key], y[key], f"{where}.{key}")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y)):
            _assert_equal(u, v, f"{where}[{i}]")
    else:
        assert x == y or (x != x and y != y), f"{where}: {x!r} != {y!r}"


class Crash(BaseException):
    """Raised by a step callback: the run stops dead, nothing saved (what kill -9 leaves, in-process)."""


def _stop_after(step: int, stop) -> None:
    """Make every Trainer built from now on call ``stop()`` right after optimizer step ``step``."""
    from attnlab.train import trainer as trainer_module

    original = trainer_module.Trainer.__init__

    def init(self, *a, **kw) -> None:
        original(self, *a, **kw)
        self.callbacks.append(lambda trainer, record: stop() if trainer.step == step else None)

    trainer_module.Trainer.__init__ = init


def interrupt(how: str, step: int, argv: list[str], monkeypatch) -> None:
    """Stop the command after optimizer step ``step``, before that step's checkpoint is written: by SIGKILL
    in a subprocess, or by an exception in this process (fast)."""
    if how == "sigkill":
        cmd = [sys.executable, str(SCRIPT), "--kill-at", str(step), "--", *argv]
        done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
        assert done.returncode == -signal.SIGKILL, done.stderr
        return
    from attnlab.train import trainer as trainer_module

    with monkeypatch.context() as m:
        m.setattr(trainer_module.Trainer, "__init__", trainer_module.Trainer.__init__)
        _stop_after(step, lambda: (_ for _ in ()).throw(Crash()))
        with pytest.raises(Crash):
            run_here(argv)


HOW = ["crash", pytest.param("sigkill", marks=pytest.mark.slow)]


# --------------------------------------------------------------------------- fixed kill point


@pytest.mark.parametrize("how", HOW)
def test_translate_train_killed_then_resumed_is_bit_identical(
    tmp_path: Path, capsys, monkeypatch, how
) -> None:
    data = translate_data(tmp_path)
    reference, out = tmp_path / "reference", tmp_path / "killed"
    interrupt(how, 5, translate_argv(data, out), monkeypatch)
    assert [p.name for p in list_checkpoints(out / "checkpoints")] == ["step-000002", "step-000004"]
    assert not (out / "model").exists()

    assert run_here(translate_argv(data, out)) == 2  # neither --resume nor --overwrite: refused
    assert "holds an earlier run" in capsys.readouterr().err
    assert run_here(translate_argv(data, out) + ["--resume"]) == 0
    err = capsys.readouterr().err
    assert "resumed from" in err and "step-000004" in err and "resuming with the run's tokenizer" in err
    assert run_here(translate_argv(data, reference)) == 0

    assert_same_checkpoint(reference / "checkpoints" / "step-000010", out / "checkpoints" / "step-000010")
    report = json.loads((out / "data_report.json").read_text())
    assert report["averaged"] == ["step-000008", "step-000010"] and report["steps"] == 10
    ref_model = read_model_file(reference / "model" / "model.safetensors")
    model = read_model_file(out / "model" / "model.safetensors")
    for key, value in ref_model.items():
        assert torch.equal(value, model[key]), f"averaged model: {key} differs"


@pytest.mark.parametrize("how", HOW)
def test_finetune_killed_then_resumed_is_bit_identical(tmp_path: Path, capsys, monkeypatch, how) -> None:
    data, tok = finetune_data(tmp_path)
    reference, out = tmp_path / "reference", tmp_path / "killed"
    interrupt(how, 5, finetune_argv(data, tok, out), monkeypatch)  # 4 steps an epoch: in the second
    run = out / "lr0.001-seed0"
    assert latest_checkpoint(run / "checkpoints").name == "step-000004"

    assert run_here(finetune_argv(data, tok, out)) == 2
    assert "holds an earlier run" in capsys.readouterr().err
    assert run_here(finetune_argv(data, tok, out) + ["--resume"]) == 0
    assert run_here(finetune_argv(data, tok, reference)) == 0

    final = "checkpoints/step-000008"
    assert_same_checkpoint(reference / "lr0.001-seed0" / final, run / final)
    ref, got = (json.loads((d / "results.json").read_text()) for d in (reference, out))
    for r in (ref, got):
        for one in r["runs"]:
            one.pop("minutes"), one.pop("best_dir")
    assert ref["runs"] == got["runs"] and ref["median"] == got["median"]
    assert (reference / "best" / "config.json").read_text() == (out / "best" / "config.json").read_text()
    best_ref, best = (read_model_file(d / "best" / "model.safetensors") for d in (reference, out))
    for key, value in best_ref.items():  # not the bytes: safetensors' header order varies by process
        assert torch.equal(value, best[key]), f"best model: {key} differs"


def test_overwrite_starts_afresh_and_learns_a_new_tokenizer(tmp_path: Path) -> None:
    data = translate_data(tmp_path)
    out = tmp_path / "run"
    assert run_here(translate_argv(data, out, steps=2)) == 0
    first = json.loads((out / "run.json").read_text())["run_id"]
    (out / "tokenizer.json").write_text("{}")  # a stale tokenizer must not be read back
    (out / "checkpoints" / "step-000010").mkdir()  # nor a stale checkpoint averaged
    assert run_here(translate_argv(data, out, steps=2) + ["--overwrite"]) == 0
    assert json.loads((out / "run.json").read_text())["run_id"] != first
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-000002"]
    assert json.loads((out / "tokenizer.json").read_text())["model"]["type"] == "BPE"


# --------------------------------------------------------------------------- random kill points


def _has_checkpoint(out: Path) -> bool:
    """Whether a finished checkpoint (``checkpoints/step-*/manifest.json``) exists under ``out``. Written
    with os.walk, which skips a directory that vanishes while it is listed: the trainer renames its
    ``.tmp-step-*`` directory into place while we poll, and Path.glob raises FileNotFoundError on that
    race."""
    for root, _dirs, files in os.walk(out):
        here = Path(root)
        if "manifest.json" in files and here.name.startswith("step-") and here.parent.name == "checkpoints":
            return True
    return False


def _kill_randomly(argv: list[str], out: Path, rng: random.Random, kills: int) -> int:
    """Start the command, kill it with SIGKILL at a random moment after its first checkpoint, resume with
    --resume, ``kills`` times; then let it finish. Returns how many kills landed mid-run."""
    landed = 0
    for attempt in range(kills + 1):
        cmd = [sys.executable, "-m", "attnlab", *argv, *(["--resume"] if attempt else [])]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
        if attempt == kills:
            output, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, output
            break
        deadline = time.monotonic() + 120
        while not _has_checkpoint(out) and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 1.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            landed += 1
        proc.communicate(timeout=60)
    return landed


@pytest.mark.slow
@pytest.mark.parametrize("command", ["translate-train", "finetune"])
def test_kill_at_random_moments_then_resume_is_bit_identical(tmp_path: Path, command: str) -> None:
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    if command == "translate-train":
        data = translate_data(tmp_path)

        def argv(out: Path) -> list[str]:
            return translate_argv(data, out, steps=60)

        final = "checkpoints/step-000060"
    else:
        data, tok = finetune_data(tmp_path)

        def argv(out: Path) -> list[str]:
            return finetune_argv(data, tok, out, epochs=8)

        final = "lr0.001-seed0/checkpoints/step-000032"
    out = tmp_path / "killed"
    landed = _kill_randomly(argv(out), out, rng, kills=3)
    assert landed >= 1, f"no kill landed mid-run (seed {seed})"
    assert run_here(argv(tmp_path / "reference")) == 0
    assert_same_checkpoint(tmp_path / "reference" / final, out / final)


# --------------------------------------------------------------------------- the script form


def _script(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kill-at", type=int, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    _stop_after(args.kill_at, lambda: os.kill(os.getpid(), signal.SIGKILL))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    torch.set_num_threads(1)
    return main(command)


if __name__ == "__main__":
    sys.exit(_script(sys.argv[1:]))


def test_finetune_stopped_by_a_signal_ends_the_command(tmp_path: Path, capsys, monkeypatch) -> None:
    """SIGTERM/SIGINT (here the Trainer's own stop request, which the signal handler sets) saves the run's
    checkpoint and ends the command: a learning-rate sweep does not go on to its next run as if the budget
    were spent, and --resume finishes it exactly."""
    data, tok = finetune_data(tmp_path)
    argv = finetune_argv(data, tok, tmp_path / "out")
    argv[argv.index("--lr") + 1 : argv.index("--lr") + 2] = ["1e-3", "2e-3"]
    from attnlab.train import trainer as trainer_module

    with monkeypatch.context() as m:
        original = trainer_module.Trainer.__init__

        def init(self, *a, **kw) -> None:
            original(self, *a, **kw)
            self.callbacks.append(lambda t, record: t.request_stop("SIGTERM") if t.step == 3 else None)

        m.setattr(trainer_module.Trainer, "__init__", init)
        assert run_here(argv) == 130
    err = capsys.readouterr().err
    assert "interrupted:" in err and "--resume continues" in err
    out = tmp_path / "out"
    assert (out / "lr0.001-seed0" / "checkpoints").is_dir()
    assert not (out / "lr0.002-seed0").exists() and not (out / "results.json").exists()
    # resumed with another head or schedule than the checkpoints were made under: refused, each named
    assert run_here(argv + ["--resume", "--pooling", "mean", "--epochs", "3"]) == 2
    err = capsys.readouterr().err
    assert "--resume with other settings" in err
    assert "epochs: 2.0 when the run started, 3.0 now" in err and "pooling: 'cls' when the run started" in err
    assert run_here(argv + ["--resume"]) == 0
    assert (out / "lr0.002-seed0").is_dir() and (out / "results.json").is_file()
