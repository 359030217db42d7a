"""YAML read as data: numbers as YAML 1.1 misses them, errors naming file and line, no tag that runs code."""

import pytest

from attnlab.yaml_files import read_yaml


def test_numbers_yaml_1_1_leaves_as_strings_are_numbers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-3\nbetas: [0.9, 98e-2]\nname: 1e-3x\nsteps: 10\n")
    assert read_yaml(path) == {"lr": 1e-3, "betas": [0.9, 0.98], "name": "1e-3x", "steps": 10}


def test_a_mistake_names_the_file_and_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1\nstages: [32,\n")
    with pytest.raises(ValueError, match=r"c\.yaml: line 3: invalid YAML"):
        read_yaml(path)
    path.write_bytes(b"lr: \xff\n")
    with pytest.raises(ValueError, match=r"c\.yaml: not UTF-8 text"):
        read_yaml(path)


def test_a_tag_that_would_build_an_object_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("x: !!python/object/apply:os.system ['echo ran']\n")
    with pytest.raises(ValueError, match=r"c\.yaml: line 1: invalid YAML"):
        read_yaml(path)
