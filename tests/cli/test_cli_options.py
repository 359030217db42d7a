"""The command line as people expect it: ``--version``, ``python -m attnlab``, every
option's default in ``--help``, and every numeric option range-checked where it is parsed."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from attnlab import __version__
from attnlab.cli import build_parser, main
from attnlab.cli.args import NUMERIC_TYPES, describe_defaults, device, positive_int


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(_commands(sub, f"{prefix}{name} "))
    return found


COMMANDS = _commands(build_parser())


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    skip = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
    return [a for a in parser._actions if a.option_strings and not isinstance(a, skip) and a.dest != "debug"]


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"attnlab {__version__}"


def test_python_dash_m_attnlab() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "attnlab", "--version"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == f"attnlab {__version__}"


def test_every_command_is_covered() -> None:
    assert {
        "finetune",
        "evaluate",
        "predict",
        "translate-train",
        "translate",
        "bleu",
        "tokenizer train",
    } <= set(COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_shows_every_default(name: str) -> None:
    """Each option that is not required and not an on/off flag states its default in its help."""
    parser = COMMANDS[name]
    either_or = {id(a) for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    missing = []
    for action in _options(parser):
        if (
            action.required
            or id(action) in either_or
            or (action.nargs == 0 and action.default in (False, None))
        ):
            continue
        if "default" not in (action.help or "").lower():
            missing.append(action.option_strings[0])
    assert not missing, f"attnlab {name} --help gives no default for {missing}"
    parser.format_help()  # renders (a "%" in a default must be escaped)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_numeric_options_are_range_checked(name: str) -> None:
    """No option is parsed with a bare ``int``/``float`` (0 and negative values were taken as "unset"): each
    uses a type from attnlab.cli.args that says its range (a seed is >= 0, every size and count >= 1)."""
    bare = [a.option_strings[0] for a in _options(COMMANDS[name]) if a.type in (int, float)]
    assert not bare, f"attnlab {name}: {bare} accept any number; use a type from attnlab.cli.args"
    for action in _options(COMMANDS[name]):
        if action.type is not None and action.type not in NUMERIC_TYPES:
            assert not callable(action.type) or action.type in (str, device), action.option_strings


@pytest.mark.parametrize(
    ("text", "ok"),
    [("1", 1), ("32", 32), ("0", None), ("-1", None), ("1.5", None), ("x", None), ("", None)],
)
def test_positive_int(text: str, ok: int | None) -> None:
    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError, match=repr(text).replace("(", r"\(")):
            positive_int(text)
    else:
        assert positive_int(text) == ok


def test_describe_defaults_leaves_stated_defaults_alone() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--a", type=int, default=3)
    p.add_argument("--b", type=int, default=4, help="four (default 4)")
    p.add_argument("--c", default="50%", help="a share")
    describe_defaults(p)
    helps = {a.dest: a.help for a in p._actions}
    assert (
        helps["a"] == "default: 3"
        and helps["b"] == "four (default 4)"
        and helps["c"] == "a share (default: 50%%)"
    )
    p.format_help()  # "%%" is argparse's escape: formatting must not fail


def test_finetune_shows_a_progress_bar_by_default() -> None:
    parser = build_parser()
    base = ["finetune", "--task", "sst2", "--data-dir", "d", "--model", "m"]
    assert parser.parse_args(base).progress is True
    assert parser.parse_args([*base, "--no-progress"]).progress is False


def test_one_name_for_the_output_directory() -> None:
    """``--output-dir`` everywhere a command writes a directory; the older ``--output``/``--out`` stay."""
    parser = build_parser()
    avg = ["translate-average", "run"]
    assert parser.parse_args([*avg, "--output-dir", "a"]).output_dir == "a"
    assert parser.parse_args([*avg, "--output", "a"]).output_dir == "a"
    tok = ["tokenizer", "train", "--kind", "bpe", "--vocab-size", "300", "--files", "c.txt"]
    assert parser.parse_args([*tok, "--output-dir", "t"]).out == "t"
    assert parser.parse_args([*tok, "--out", "t"]).out == "t"


def test_finetune_writes_tensorboard_and_a_loss_curve(tmp_path, capsys) -> None:
    """Every training command leaves TensorBoard scalars and a loss-curve PNG in its run directory."""
    from attnlab.tokenizers import bert_wordpiece

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film", "a"]
    bert_wordpiece({w: i for i, w in enumerate(words)}).save(tmp_path / "tok")
    data = tmp_path / "data"
    data.mkdir()
    rows = "".join(f"a {w} film,{int(w == 'good')}\n" for w in ["good", "bad"] * 8)
    for split in ("train", "dev"):
        (data / f"{split}.csv").write_text("sentence,label\n" + rows, encoding="utf-8")
    out = tmp_path / "run"
    argv = ["finetune", "--task", "generic", "--data-dir", str(data), "--model", "bert-tiny", "--tokenizer",
            str(tmp_path / "tok"), "--output-dir", str(out), "--epochs", "1", "--batch-size", "8",
            "--max-length", "8", "--no-progress", "--device", "cpu"]  # fmt: skip
    assert main(argv) == 0
    (run,) = [p for p in out.iterdir() if (p / "log.jsonl").is_file()]
    assert (run / "loss_curve.png").stat().st_size > 0
    assert any((run / "tensorboard").iterdir())
    # --selection-examples: held-out training rows choose, dev scores the chosen model (its own column)
    capsys.readouterr()
    assert main([*argv, "--overwrite", "--selection-examples", "4"]) == 0
    printed = capsys.readouterr().out
    assert "chosen on 4 held-out training examples" in printed and "dev accuracy" in printed.splitlines()[0]
    assert json.loads((out / "results.json").read_text())["train_examples"] == 12


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_command_takes_abbreviated_options(name: str) -> None:
    """argparse's prefix matching would read an option a command lacks as a longer one it has (``translate
    --max-length 5`` became ``--max-length-offset 5``): every parser refuses abbreviations."""
    assert COMMANDS[name].allow_abbrev is False


def test_an_abbreviated_option_is_an_error(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["translate", "model", "--max-length", "5"])
    assert stop.value.code == 2
    assert "--max-length" in capsys.readouterr().err
