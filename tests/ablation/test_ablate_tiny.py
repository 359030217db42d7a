"""One table end to end with real training at a tiny budget: a corpus, SST-2 and CoNLL-2003 files made
here, two seeds, a few pre-training steps a row; TABLE.md/.json/.png written; a second run trains nothing."""

import dataclasses
import json
import random
from pathlib import Path

import pytest

from attnlab.ablation import report
from attnlab.ablation.lab import run_table
from attnlab.ablation.settings import SIZES, LabSettings
from attnlab.ablation.tables import get_table

WORDS = "the cat dog sat on a mat ran to house tree river bank went home good bad film plot".split()
NAMES = ("Paris", "London", "Smith", "Jones")


def _data(root: Path) -> Path:
    rng = random.Random(0)
    sentence = lambda: " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + " ."  # noqa: E731
    docs = ["\n".join(sentence() for _ in range(6)) for _ in range(40)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    sst = root / "glue" / "SST-2"
    sst.mkdir(parents=True)
    for split, n in (("train", 80), ("dev", 40)):
        rows = [f"{sentence()} {'good' if i % 2 else 'bad'}\t{i % 2}" for i in range(n)]
        (sst / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    conll = root / "conll2003"
    conll.mkdir()
    for name, n in (("train.txt", 60), ("valid.txt", 30)):
        lines = ["-DOCSTART- -X- -X- O", ""]
        for _ in range(n):
            for word in sentence().split():
                lines.append(f"{word} NN O O")
            lines += [f"{rng.choice(NAMES)} NNP B-NP B-PER", ""]
        (conll / name).write_text("\n".join(lines))
    return root


@pytest.mark.slow
def test_a_table_end_to_end_at_a_tiny_budget(tmp_path):
    data = _data(tmp_path / "data")
    size = dataclasses.replace(SIZES["cpu"], pretrain_minutes=0.02, feature_examples=40, finetune_examples=40)
    settings = LabSettings(
        output=tmp_path / "out", data_dir=data, corpus=(str(data / "corpus.txt"),), seeds=(0, 1), size=size
    )
    table = get_table("roberta-table1")
    result = run_table(table, settings, log=lambda m: None)
    assert not result.failed and result.trained == 12
    for row in table.rows:
        for probe in table.probes:
            assert result.summaries[row.name, probe].n == 2
    written = report.write_table(result, tmp_path / "out")
    assert all(p.is_file() for p in written)
    data = json.loads(written[1].read_text())
    assert [o["verdict"] for o in data["orderings"]]  # judged, whatever the tiny runs measured
    again = run_table(table, settings, log=lambda m: None)
    assert again.trained == 0 and again.summaries == result.summaries
