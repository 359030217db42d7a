"""Every ``attnlab`` command of the README and the guides runs, in the doc's order, at tiny budgets.

Each doc's commands run in one fresh folder (`doc_chain.Shell`), each reading what the commands above it wrote
(the tour's ``runs/rb/model`` from its ``attnlab pretrain``). What a doc takes as already there (its example
corpus ``books/``, a pre-trained ``MODEL_DIR``) is made once by the test (`GIVEN`); the shared data sets come
from ``../shared/data`` (`shared_data.require`: a failure under ``ATTNLAB_REQUIRE_DATA=1``), cut to their
first lines. ``attnlab serve`` starts, answers the doc's ``curl`` lines (or one request) and stops. The
commands not run are listed in `NOT_RUN` and `PROGRAMS_NOT_RUN`, each with the reason; a fast test checks
that every entry still names a command of the docs. The docs' experiment and benchmark lines (``python
experiments/...``) run in ``test_docs_scripts.py``. The README's walk-through from ``make run`` to a served
classifier is ``tests/test_newcomer.py``.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shlex
import shutil
from pathlib import Path

import pytest
from doc_chain import ROOT, Forker, Shell, attnlab, blocks, commands, data_paths, script_line, small_view
from shared_data import DATA, require

from attnlab.io import load, save
from attnlab.models import get_preset

DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
NEWCOMER_SECTION = "Your own data"  # README.md's walk-through: tests/test_newcomer.py runs it

# The paths each doc takes as already there, and what the test puts there (see `given`).
GIVEN = {
    "README.md": {"corpus.txt": "text", "books/": "corpus"},
    "distillation.md": {
        "runs/pretrain-mlm/model": "mlm",
        "books/": "corpus",
        "bert-base-dir": "bert-base",
        "wiki/": "corpus",
    },
    "finetuning.md": {"runs/rb/model": "mlm", "runs/squad/best": "qa"},
    "hf_interop.md": {"path/to/hf-bert-dir": "hf", "runs/sst2/best": "classifier"},
    "kbert.md": {"MODEL_DIR": "mlm"},
    "long_sequences.md": {"books/": "corpus"},
    "pretraining.md": {"books/": "corpus", "wiki/": "corpus"},
    "serving.md": {"runs/mlm/model": "mlm", "runs/sst2/best": "classifier", "out/onnx": "onnx"},
    "translation.md": {"hyp.de": "hyp", "ref.de": "ref"},
}
# (doc, words the command contains, why it is not run)
NOT_RUN = [
    (
        "elmo.md",
        "elmo_2x4096_512_2048cnn_2xhighway/",
        "AllenNLP's published weights, which a reader downloads",
    ),
]
# a command's first words -> why it is not run
PROGRAMS_NOT_RUN = {
    ("make",): "the Makefile's own targets: CI runs them",
    ("pip",): "installs into the current environment",
    ("source",): "activates the venv; the test runs attnlab from its own interpreter",
    ("torchrun",): "test_docs_snippets.py parses every launch and runs those of at most 2 processes",
    (".venv/bin/python", "-m", "pytest"): "runs the test suite, of which this test is a part",
}
STDIN = {"translate": "A man is riding a bike.\nTwo dogs play in the snow.\n"}
WORDS = "the a film book river city house dog cat man woman child light night day long short old new".split()


def why_not_run(doc: Path, words: list[str]) -> str | None:
    for name, part, reason in NOT_RUN:
        if name == doc.name and part in shlex.join(words):
            return reason
    if script_line(shlex.join(words)) is not None:
        return "an experiment or benchmark script: test_docs_scripts.py runs it at its tiny size"
    if words[0] == "python" and words[1] != "-c":
        return "a script of the doc, run by test_docs_snippets.py where its block runs"
    if words[0] == "attnlab" and "wordnet" in words and not Path("/usr/share/wordnet/data.noun").exists():
        return "WordNet is not installed here (`make wordnet`)"
    return next((why for first, why in PROGRAMS_NOT_RUN.items() if tuple(words[: len(first)]) == first), None)


def chain(doc: Path) -> list[list[str]]:
    """The doc's commands in order: its bash blocks that run or are parsed, less the README's walk-through."""
    return [
        words for b in blocks(doc) if b.lang == "bash" and b.mode in ("run", "parse")
        and not (doc.name == "README.md" and b.section.startswith(NEWCOMER_SECTION))
        for words in commands(b.text)
    ]  # fmt: skip


CHAINS = [doc for doc in DOCS if any(w[0] == "attnlab" for w in chain(doc))]


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))).capitalize() + "." for _ in range(n)
    ]


@pytest.fixture(scope="module")
def given(tmp_path_factory) -> dict[str, Path]:
    """What the docs take as already there, made once: a text corpus, a pre-trained masked LM (and its HF
    export), a classifier and a QA model fine-tuned from it, the classifier's ONNX export, German text."""
    root = tmp_path_factory.mktemp("given")
    corpus = root / "corpus"
    corpus.mkdir()
    for i in range(30):  # a file is a document
        (corpus / f"doc{i:02}.txt").write_text(" ".join(sentences(30, i)) + "\n", encoding="utf-8")
    (root / "corpus.txt").write_text("\n".join(sentences(400, 99)) + "\n", encoding="utf-8")
    attnlab("pretrain", "--corpus", "corpus", "--format", "text", "--max-steps", "2", "--output-dir", "mlm",
            "--no-progress", cwd=root)  # fmt: skip
    table = root / "table"
    table.mkdir()
    for split, seed in (("train", 1), ("dev", 2)):
        rows = [f"{s},{'positive' if len(s) % 2 else 'negative'}" for s in sentences(24, seed)]
        (table / f"{split}.csv").write_text("sentence,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    attnlab("finetune", "--task", "generic", "--data-dir", "table", "--model", "mlm/model", "--epochs", "1",
            "--output-dir", "classifier", "--no-progress", cwd=root)  # fmt: skip
    squad = root / "squad"
    squad.mkdir()
    context = "The National University of Singapore is a university in Singapore."
    answer = {"text": "Singapore", "answer_start": context.rindex("Singapore")}
    qas = [{"id": str(i), "question": "Where is the university?", "answers": [answer]} for i in range(8)]
    data = {"version": "1.1", "data": [{"title": "NUS", "paragraphs": [{"context": context, "qas": qas}]}]}
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        (squad / name).write_text(json.dumps(data), encoding="utf-8")
    attnlab("finetune", "--task", "squad", "--data-dir", "squad", "--model", "mlm/model", "--epochs", "1",
            "--output-dir", "qa", "--no-progress", cwd=root)  # fmt: skip
    attnlab("export", "classifier/best", "--onnx", "onnx", cwd=root)
    bert_base_teacher(root / "mlm" / "model", root / "bert-base")
    for name in ("hyp", "ref"):
        (root / name).write_text("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n", encoding="utf-8")
    return {
        "corpus": corpus, "text": root / "corpus.txt", "mlm": root / "mlm" / "model",
        "hf": root / "mlm" / "hf", "classifier": root / "classifier" / "best", "qa": root / "qa" / "best",
        "onnx": root / "onnx", "hyp": root / "hyp", "ref": root / "ref", "bert-base": root / "bert-base",
    }  # fmt: skip


def bert_base_teacher(small: Path, target: Path) -> None:
    """A randomly initialised BERT-base masked LM on ``small``'s tokenizer: the shape of the docs'
    ``bert-base-dir`` teacher (DistilBERT's student is its half)."""
    model = load(small)
    config = dataclasses.replace(
        get_preset("bert-base-uncased"),
        vocab_size=model.config.vocab_size,
        pad_token_id=model.config.pad_token_id,
    )
    save(type(model).from_config(config), target)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(small / name, target / name)


@pytest.fixture(scope="module")
def forker():
    forker = Forker()
    yield forker
    forker.close()


@pytest.fixture(scope="module")
def data_view(tmp_path_factory) -> Path:
    """The shared data with its big files cut to their first lines (made where the data is here)."""
    view = tmp_path_factory.mktemp("shared-data")
    if DATA.is_dir():
        small_view(DATA, view / "data")
    return view / "data"


def test_every_command_not_run_is_in_the_docs() -> None:
    every = [(doc.name, shlex.join(w)) for doc in DOCS for w in chain(doc)]
    for name, part, _ in NOT_RUN:
        assert any(n == name and part in line for n, line in every), f"NOT_RUN: no {part!r} in {name}"
    for first in PROGRAMS_NOT_RUN:
        assert any(line.startswith(shlex.join(first)) for _, line in every), f"PROGRAMS_NOT_RUN: no {first}"
    for name, paths in GIVEN.items():
        text = (ROOT / ("README.md" if name == "README.md" else f"docs/{name}")).read_text(encoding="utf-8")
        for path in paths:
            assert path in text, f"GIVEN: {name} no longer uses {path}"
    assert {doc.name for doc in CHAINS} >= set(GIVEN)


@pytest.mark.slow
@pytest.mark.parametrize("doc", CHAINS, ids=lambda d: d.name)
def test_doc_commands_run(doc: Path, given, data_view, forker, tmp_path) -> None:
    steps = chain(doc)
    require(*(p for words in steps for p in data_paths(words)))
    shell = Shell(tmp_path, data_view, forker)
    for path, kind in GIVEN.get(doc.name, {}).items():
        shell.copy_in(given[kind], path)
    ran = 0
    try:
        for words in steps:
            if why_not_run(doc, words) is None:
                shell.run(words, stdin=STDIN.get(words[1], "") if len(words) > 1 else "")
                ran += words[0] == "attnlab"
        shell.stop_server()
    finally:
        if shell.server is not None:
            shell.server.kill()
    assert ran > 0
