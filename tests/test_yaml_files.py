"""YAML read as data: the numbers YAML 1.1 misses, a key given twice refused, errors naming file and line, no
tag that builds an object."""

import pytest

from attnlab.yaml_files import read_yaml


def test_numbers_yaml_1_1_leaves_as_strings_are_numbers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-3\nbetas: [0.9, 98e-2]\nname: 1e-3x\nsteps: 10\nquoted: '1e-3'\nrow: \"1\"\n")
    assert read_yaml(path) == {
        "lr": 1e-3, "betas": [0.9, 0.98], "name": "1e-3x", "steps": 10, "quoted": "1e-3", "row": "1"
    }  # fmt: skip


def test_a_mistake_names_the_file_and_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1\nstages: [32,\n")
    with pytest.raises(ValueError, match=r"c\.yaml: line 3: invalid YAML"):
        read_yaml(path)
    path.write_bytes(b"lr: \xff\n")
    with pytest.raises(ValueError, match=r"c\.yaml: not UTF-8 text"):
        read_yaml(path)


def test_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1\nmodel: {layers: 2, layers: 3}\n")
    with pytest.raises(ValueError, match=r"c\.yaml: line 2: invalid YAML: found the key 'layers' twice"):
        read_yaml(path)


def test_a_merged_mapping_and_the_keys_beside_it_are_not_keys_given_twice(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("base: &base {lr: 1, layers: 2}\nrun:\n  <<: *base\n  lr: 3\n")
    assert read_yaml(path)["run"] == {"lr": 3, "layers": 2}


def test_a_tag_that_would_build_an_object_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("x: !!python/object/apply:os.system ['echo ran']\n")
    with pytest.raises(ValueError, match=r"c\.yaml: line 1: invalid YAML"):
        read_yaml(path)
