"""``attnlab ablate``: the table list, and its errors before any work."""

import pytest

from attnlab.cli import main
from attnlab.cli.ablate import list_tables


def test_list_names_every_table_with_rows_and_probes(capsys):
    assert main(["ablate", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == list_tables().strip()
    for name in ("bert-table8", "roberta-table1", "albert-table5", "distilbert-table4", "transformer-table3"):
        assert name in out
    assert "80/10/10" in out and "sst2_features" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ablate"], "name a table"),
        (["ablate", "bert-table99"], "unknown table 'bert-table99'"),
        (["ablate", "bert-table8", "--data-dir", "/no/such/folder"], "--data-dir /no/such/folder"),
        (["ablate", "bert-table8", "--compare", "a", "b"], "--compare reads two output folders"),
    ],
)
def test_errors_name_what_was_expected(argv, message, capsys, tmp_path):
    assert main([*argv, "--output", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
