"""`attnlab.errors`: which errors are a user's, shared by the CLI and the library's own commands."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.cli.errors import raised_in_attnlab as cli_raised_in_attnlab
from attnlab.data.corpus import read_documents
from attnlab.errors import input_error_message, raised_in_attnlab


def test_an_error_raised_by_a_library_is_a_bug_and_one_by_attnlab_is_the_users(tmp_path):
    with pytest.raises(ValueError) as numpy_error:
        np.zeros(3).reshape(2, 2)
    assert not raised_in_attnlab(numpy_error.value) and input_error_message(numpy_error.value) is None
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"one.\n\xff two.\n")
    with pytest.raises(ValueError) as ours:
        list(read_documents([str(bad)], "lines"))
    assert raised_in_attnlab(ours.value) and str(bad) in input_error_message(ours.value)
    assert cli_raised_in_attnlab is raised_in_attnlab  # cli.errors' name kept


def test_input_errors_are_one_line():
    assert "not valid UTF-8" in input_error_message(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid"))
    assert input_error_message(FileNotFoundError(2, "No such file or directory", "x.txt")) == (
        "x.txt: No such file or directory"
    )
