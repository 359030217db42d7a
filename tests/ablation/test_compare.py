"""``attnlab ablate --compare A B``: two runs' verdicts side by side, counted from their TABLE.json files."""

import json

import pytest

from attnlab.ablation.compare import compare_folders, comparison_markdown
from attnlab.cli import main


def _table(folder, name, verdicts):
    """A TABLE.json as the lab writes it, with one ordering per verdict (rows r0 > r1, r0 > r2, ...)."""
    folder.mkdir(parents=True, exist_ok=True)
    orderings = [
        {"probe": "sst2_features", "better": "r0", "worse": f"r{i + 1}", "verdict": v}
        for i, v in enumerate(verdicts)
    ]
    (folder / f"{name}.json").write_text(json.dumps({"table": name, "orderings": orderings}))


def test_counts_separated_agreeing_and_unchanged_verdicts(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _table(a, "t1", ["agrees", "disagrees", "not separated", "agrees"])
    _table(b, "t1", ["agrees", "not separated", "not separated", "disagrees"])
    _table(a, "t2", ["not measured", "agrees"])
    _table(b, "t2", ["not measured", "agrees"])
    _table(a, "only-in-a", ["agrees"])  # a table the other run lacks is left out
    rows = compare_folders(a, b)
    assert [r.table for r in rows] == ["t1", "t2"]
    t1 = rows[0]
    assert (t1.orderings, t1.separated_a, t1.agreed_a) == (4, 3, 2)
    assert (t1.separated_b, t1.agreed_b, t1.same_verdict) == (2, 1, 2)
    text = comparison_markdown(rows, "A", "B")
    assert "| `t1` | 3 / 4 (75%) | 2 (67%) | 2 / 4 (50%) | 1 (50%) | 2 of 4 (50%) |" in text
    assert "| all | 4 / 6 (67%) | 3 (75%) | 3 / 6 (50%) | 2 (67%) | 4 of 6 (67%) |" in text


def test_the_command_prints_the_comparison(tmp_path, capsys):
    _table(tmp_path / "a", "t", ["agrees"])
    _table(tmp_path / "b", "t", ["disagrees"])
    assert main(["ablate", "--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert (
        "| `t` | 1 / 1 (100%) | 1 (100%) | 1 / 1 (100%) | 0 (0%) | 0 of 1 (0%) |" in capsys.readouterr().out
    )


def test_different_orderings_or_no_shared_table_is_a_clear_error(tmp_path):
    _table(tmp_path / "a", "t", ["agrees", "agrees"])
    _table(tmp_path / "b", "t", ["agrees"])
    with pytest.raises(ValueError, match="t: .* judge different orderings"):
        compare_folders(tmp_path / "a", tmp_path / "b")
    with pytest.raises(FileNotFoundError, match="no table written to both"):
        compare_folders(tmp_path / "a", tmp_path / "empty")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "t.json").write_text('{"rows": []}')
    with pytest.raises(ValueError, match=r"c/t.json: not a table written by attnlab ablate"):
        compare_folders(tmp_path / "a", tmp_path / "c")
