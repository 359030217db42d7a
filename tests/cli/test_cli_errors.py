"""`attnlab.cli.main`'s error handler: a full disk, a read-only directory, a NaN loss or a damaged weights
file is one line naming what happened and where, with exit code 2; a bug keeps its traceback; ``--debug``
re-raises everything."""

from __future__ import annotations

import argparse
import errno
import json

import pytest
from safetensors import SafetensorError

from attnlab.cli import main
from attnlab.cli.errors import user_message
from attnlab.train.trainer import NonFiniteLossError


def _bleu_files(tmp_path):
    (tmp_path / "h.de").write_text("ein hund\n", encoding="utf-8")
    (tmp_path / "r.de").write_text("ein hund\n", encoding="utf-8")
    return ["bleu", str(tmp_path / "h.de"), str(tmp_path / "r.de")]


def _raise(error: BaseException):
    def fail(*args, **kwargs):
        raise error

    return fail


@pytest.mark.parametrize(
    ("error", "fragments"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/runs/x/model.safetensors"),
         ["no space left", "/runs/x/model.safetensors", "--output-dir"]),
        (OSError(errno.EROFS, "Read-only file system", "/ro/out"), ["/ro/out", "read-only file system"]),
        (PermissionError(errno.EACCES, "Permission denied", "/locked/out"),
         ["/locked/out", "permission denied"]),
        (NonFiniteLossError("loss is nan at step 7 (of 10); stopped before the update. Last good checkpoint: "
                            "/r/checkpoints/step-000005"), ["step 7", "step-000005", "lower learning rate"]),
    ],
)  # fmt: skip
def test_user_errors_are_one_line_with_exit_code_2(error, fragments, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("attnlab.metrics.bleu.corpus_bleu", _raise(error))
    assert main(_bleu_files(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab bleu: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def test_a_full_disk_names_the_last_good_checkpoint(tmp_path) -> None:
    step = tmp_path / "run" / "checkpoints" / "step-000200"
    step.mkdir(parents=True)
    (step / "trainer_state.json").write_text(json.dumps({"step": 200}), encoding="utf-8")
    args = argparse.Namespace(output_dir=str(tmp_path / "run"))
    message = user_message(OSError(errno.ENOSPC, "No space left on device", str(step.parent)), args)
    assert f"last good checkpoint: {step}" in message
    empty = argparse.Namespace(output_dir=str(tmp_path / "other"))
    message = user_message(OSError(errno.ENOSPC, "No space left on device", "x"), empty)
    assert "no checkpoint was saved" in message


@pytest.mark.parametrize("given", ["afile", "afile/sub"])
def test_a_file_where_the_output_directory_goes_names_the_option(tmp_path, capsys, given) -> None:
    """mkdir meeting a file (FileExistsError for the path, NotADirectoryError for a path under a file) says
    which option and which file, not "File exists"."""
    (tmp_path / "afile").write_text("a user's file\n", encoding="utf-8")
    corpus = tmp_path / "c.txt"
    corpus.write_text("one sentence.\n", encoding="utf-8")
    out = tmp_path / given
    assert main(["pretrain", "--corpus", str(corpus), "--output-dir", str(out), "--max-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert f"--output-dir {out}: {tmp_path / 'afile'} is a file, expected a directory" in err
    assert (tmp_path / "afile").read_text(encoding="utf-8") == "a user's file\n"
    exists = FileExistsError(errno.EEXIST, "File exists", str(tmp_path / "afile"))
    other = user_message(exists, argparse.Namespace())
    assert other.startswith(f"{tmp_path / 'afile'}: ") and "--output-dir" not in other


def test_damaged_safetensors_names_the_file(tmp_path, capsys) -> None:
    """safetensors' own error does not name the file; the handler finds it in the failing call."""
    from safetensors.torch import load_file

    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{")
    with pytest.raises(SafetensorError) as caught:
        load_file(str(path))
    assert str(path) not in str(caught.value)
    message = user_message(caught.value, argparse.Namespace())
    assert str(path) in message and "damaged" in message


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch) -> None:
    """A ValueError raised outside attnlab's code (here: this test's) is not a user error: it propagates."""
    monkeypatch.setattr("attnlab.metrics.bleu.corpus_bleu", _raise(ValueError("internal shape mismatch")))
    with pytest.raises(ValueError, match="internal shape mismatch"):
        main(_bleu_files(tmp_path))


def test_debug_re_raises_user_errors(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        main(["--debug", "bleu", str(tmp_path / "no.de"), str(tmp_path / "no.de")])
    with pytest.raises(FileNotFoundError):
        main(["bleu", str(tmp_path / "no.de"), str(tmp_path / "no.de"), "--debug"])


def test_standard_input_that_is_not_utf8_is_named(monkeypatch) -> None:
    """translate and predict read standard input through read_stdin: bad bytes name it, no traceback."""
    import io

    from attnlab.cli.inputs import read_stdin

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a dog\n\xff\xfe\n"), encoding="utf-8"))
    with pytest.raises(ValueError, match="standard input: not valid UTF-8"):
        read_stdin()
