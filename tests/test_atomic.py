"""attnlab.atomic: all-or-nothing writes."""

from __future__ import annotations

import json

import pytest

from attnlab.atomic import atomic_path, atomic_write, write_json_atomic


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path) -> None:
    target = tmp_path / "f.json"
    write_json_atomic({"v": 1}, target)
    with pytest.raises(RuntimeError):
        with atomic_write(target) as f:
            f.write('{"v": 2, "half')
            raise RuntimeError("crash while writing")
    assert json.loads(target.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


def test_writes_replace_the_target(tmp_path) -> None:
    target = tmp_path / "f.bin"
    with atomic_write(target, "wb") as f:
        f.write(b"abc")
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"xyz")
        assert target.read_bytes() == b"abc"  # not replaced before the block ends
    assert target.read_bytes() == b"xyz"
    write_json_atomic(["é"], tmp_path / "u.json", ensure_ascii=False)
    assert (tmp_path / "u.json").read_text(encoding="utf-8") == '[\n  "é"\n]\n'
