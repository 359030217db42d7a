"""Every experiment and benchmark script line of the README and the guides runs, at a tiny size.

A line such as ``env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/local_attention.py --repeats 3`` is found
wherever a doc shows it: in a fenced block whatever its docs-test mode, an indented block or an inline code
span (``\\``-continued lines joined, ``VAR=..`` prefixes kept as its environment). The slow test runs each
with this interpreter, in a fresh folder with ``../shared/data`` beside it (the shared data, big files cut to
their first lines), with the doc's own arguments and the script's `TINY` options, which replace the doc's
values of the same options: a few steps, examples, seconds or repeats. It must exit 0 and write the result
file of `WRITES`. A doc's lines run in order in one folder, so that a line reads what the one above it wrote
(`EARLIER`: the first distillation line's teacher stands in for the later lines' teachers); what a line takes
as already there (`GIVEN`) is made by the test. A fast test checks that every script line
has its `TINY` form and every `TINY` entry still names a script of the docs. The ``attnlab`` commands of the
docs are run by ``test_docs_commands.py``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from doc_chain import ROOT, SCRIPT_LINE, attnlab, child_env, script_line, small_view
from shared_data import DATA, require

DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
INLINE_CODE = re.compile(r"`([^`\n]+)`")

# Each script's tiny form: options that replace the doc's values of the same options (or are added).
TINY = {
    "benchmarks/sharded_training.py": [
        "--memory-preset", "bert-tiny", "--throughput-preset", "bert-tiny", "--steps", "1",
        "--parity-preset", "bert-tiny", "--parity-steps", "2",
    ],
    "experiments/distillation.py": [
        "--teacher-minutes", "0.1", "--distill-minutes", "0.05", "--students", "distilled", "random-init",
        "--finetune-steps", "2", "--tasks", "sst2", "--lr-grid", "1e-3", "--speed-pairs", "8", "--corpus",
        "../shared/data/books/en", "--glue", "../shared/data/glue",
    ],
    "experiments/elmo_conll.py": [
        "--corpus", "../shared/data/books/en", "--conll", "../shared/data/conll2003", "--corpus-chars",
        "20000", "--pretrain-minutes", "0.1", "--epochs", "1", "--max-train", "32", "--max-dev", "16",
        "--output", "runs/elmo_conll",
    ],
    "experiments/finetune_glue.py": [
        "--preset", "bert-tiny", "--vocab-size", "300", "--max-train-examples", "16",
        "--max-eval-examples", "8", "--epochs", "1", "--minutes", "0.05", "--qa-max-length", "128",
        "--qa-stride", "16",
        "--output-dir", "runs/finetune_glue",
    ],
    "experiments/int8_sst2.py": ["--threads", "1"],
    "experiments/sharded_resume_trials.py": ["--trials", "1"],
    "experiments/kbert.py": [
        "--data", "../shared/data/kbert", "--seeds", "0", "--ner-epochs", "1", "--sentiment-epochs", "1",
        "--max-train-examples", "16", "--sentiment-max-train-examples", "16", "--max-dev-examples", "16",
    ],
    "experiments/learning_curve.py": [
        "--attnlab-minutes", "0.1", "--hf-minutes", "0.1", "--eval-every", "2", "--eval-examples", "8",
        "--output", "runs/learning-curve",
    ],
    "experiments/reformer_duplication.py": ["--steps", "2", "--batch", "2", "--log-every", "1"],
    "experiments/transformer_xl.py": [
        "--data", "../shared/data/tinyshakespeare/input.txt", "--steps", "2", "--batch", "2", "--warmup", "1",
        "--log-every", "1", "--speed-chars", "400", "--eval-chars", "512",
    ],
    "experiments/universal_act.py": [
        "--steps", "2", "--curriculum", "1", "--batch-size", "2", "--eval-examples", "4", "--train-n", "4",
        "--test-n", "6", "--log-every", "1", "--output", "runs/universal_act.json",
    ],
    "experiments/universal_transformer.py": [
        "--steps", "2", "--batch-size", "2", "--eval-examples", "4", "--minutes-per-task", "0.1",
        "--log-every", "1", "--output", "runs/universal_transformer.json",
    ],
    "benchmarks/generation.py": [
        "--presets", "gpt-char-tiny", "--new-tokens", "4", "--prompt-len", "4", "--batch-sizes", "1",
        "--repeats", "1",
    ],
    "benchmarks/inference.py": [
        "--models", "bert-tiny", "--threads", "1", "--repeats", "1", "--warmup", "0", "--block", "1",
        "--pause-ms", "0",
    ],
    "benchmarks/local_attention.py": ["--lengths", "256", "--repeats", "1"],
    "benchmarks/reversible_memory.py": ["--length", "256", "--width", "16"],
    "benchmarks/serve.py": [
        "--latency-requests", "5", "--requests", "8", "--clients", "2", "--rounds", "1", "--soak", "8",
        "--warmup", "4",
    ],
    "benchmarks/tokenizers.py": [
        "--data", "../shared/data/books/en", "--mb", "0.05", "--vocab-size", "300", "--encode-mb", "0.02",
        "--slow-mb", "0.01", "--processes", "1", "--work-dir", "tokenizers-work",
    ],
}  # fmt: skip
# The file a script writes: the value of its option (the doc's or TINY's), or a file in that folder.
WRITES = {
    "experiments/distillation.py": ("--output", "results.json"),
    "experiments/finetune_glue.py": ("--output-dir", "results.json"),
    "experiments/kbert.py": ("--output", "results.json"),
    "experiments/learning_curve.py": ("--output", "learning_curve.json"),
    "experiments/universal_act.py": ("--output", ""),
    "experiments/universal_transformer.py": ("--output", ""),
}
# What a doc's lines take as already there: made by the test (path -> `make_given`'s kind), or what an
# earlier line of the doc wrote (path -> that path: the teacher the first distillation line pre-trained).
GIVEN = {"performance.md": {"runs/int8-sst2/best": "sst2"}}
EARLIER = {
    "distillation.md": {
        "runs/staged30-copy/pretrain/model": "runs/distill-exp/teacher/model",
        "runs/ptf-120/pretrain/model": "runs/distill-exp/teacher/model",
        "runs/teacher-45/pretrain/model": "runs/distill-exp/teacher/model",
    },
}
# script -> why it cannot run here (a GPU, a download, another command's output)
NOT_RUN: dict[str, str] = {
    "experiments/sentence_pair_probe.py": "reads the runs of an `attnlab ablate` output; "
    "tests/experiments/test_sentence_pair_probe.py runs it on a tiny table's",
}
TIMEOUT = 300  # seconds a tiny line may take


def _for_gpu(line: ScriptLine) -> bool:
    """A line that fills a table's GPU column (``--device cuda``)."""
    return any(a.startswith("cuda") for a in line.args)


@dataclass
class ScriptLine:
    doc: Path
    line: int
    env: dict[str, str]
    script: str
    args: list[str]

    @property
    def id(self) -> str:
        return f"{self.doc.name}:{self.line}:{self.script.split('/')[1]}"


def script_lines(doc: Path) -> list[ScriptLine]:
    """The doc's experiment and benchmark lines, once each, in the doc's order: from fenced and indented
    blocks (continuations joined) and from inline code spans."""
    found, seen = [], set()
    lines = doc.read_text(encoding="utf-8").splitlines()
    in_fence, i = False, 0
    while i < len(lines):
        line, start = lines[i], i + 1
        if line.startswith("```"):
            in_fence = not in_fence
            i += 1
            continue
        candidates = []
        if in_fence or line.startswith("    ") and SCRIPT_LINE.match(line.strip()):
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            candidates.append(line.strip())
        else:
            candidates += INLINE_CODE.findall(line)
        for text in candidates:
            parsed = script_line(text)
            if parsed is not None and (key := repr(parsed)) not in seen:
                seen.add(key)
                found.append(ScriptLine(doc, start, *parsed))
        i += 1
    return found


def options(words: list[str]) -> list[tuple[str, list[str]]]:
    """``--a 1 --b --c x y`` -> [(--a, [1]), (--b, []), (--c, [x, y])]."""
    out = []
    for word in words:
        if word.startswith("--"):
            out.append((word, []))
        else:
            out[-1][1].append(word)
    return out


# a script's other mode (a flag of the doc's line) with options of its own
TINY_MODES = {
    ("benchmarks/serve.py", "--generation"): ["--requests", "4", "--clients", "2", "--sequential", "2"],
}  # fmt: skip


def tiny(script: str, args: list[str]) -> list[str]:
    """``args`` with the script's `TINY` options (those of its mode in `TINY_MODES` where the line names
    one) in place of the doc's values of the same options."""
    modes = TINY_MODES.items()
    mode = next((extra for (name, flag), extra in modes if name == script and flag in args), None)
    small = options(TINY[script] if mode is None else mode)
    replaced = {option for option, values in small if values}
    kept, skipping = [], False
    for word in args:
        if word.startswith("--"):
            skipping = word in replaced
        if not skipping:
            kept.append(word)
    return kept + [w for option, values in small if values or option not in kept for w in (option, *values)]


ALL = [line for doc in DOCS for line in script_lines(doc)]
DOCS_WITH_SCRIPTS = sorted({line.doc for line in ALL})


def test_every_script_line_has_a_tiny_form() -> None:
    assert len({line.script for line in ALL}) >= 10, [line.id for line in ALL]
    for line in ALL:
        assert line.script in TINY or line.script in NOT_RUN, f"{line.id}: {line.script} has no TINY form"
        assert (ROOT / line.script).is_file(), f"{line.id}: {line.script} does not exist"
    used = {line.script for line in ALL}
    for script in [*TINY, *NOT_RUN, *WRITES]:
        assert script in used, f"{script}: no doc runs it any more"
    uses = [(name, path) for name, paths in GIVEN.items() for path in paths]
    uses += [(name, path) for name, paths in EARLIER.items() for pair in paths.items() for path in pair]
    for name, path in uses:
        assert path in (ROOT / "docs" / name).read_text(encoding="utf-8"), f"{name} no longer uses {path}"


def test_a_line_is_parsed_as_the_reader_runs_it() -> None:
    doc_line = "env OMP_NUM_THREADS=2 .venv/bin/python experiments/transformer_xl.py --threads 2 --steps 4000"
    env, script, args = script_line(doc_line)
    assert (env, script, args) == ({"OMP_NUM_THREADS": "2"}, "experiments/transformer_xl.py",
                                   ["--threads", "2", "--steps", "4000"])  # fmt: skip
    small = tiny(script, args)
    assert small.count("--steps") == 1 and small[small.index("--steps") + 1] == "2"
    assert small[:2] == ["--threads", "2"]
    many = tiny("experiments/distillation.py", ["--tasks", "sst2", "mrpc", "--skip-distill"])
    assert "mrpc" not in many and "--skip-distill" in many
    assert script_line("python benchmarks/generation.py --skip-uncached [--threads 2]")[2] == [
        "--skip-uncached", "--threads", "2",
    ]  # fmt: skip
    assert script_line("attnlab pretrain --corpus x") is None


@pytest.fixture(scope="module")
def data_view(tmp_path_factory) -> Path:
    view = tmp_path_factory.mktemp("shared-data")
    if DATA.is_dir():
        small_view(DATA, view / "data", max_files=6)
    return view / "data"


def make_given(kind: str, target: Path, cwd: Path) -> None:
    """At ``target``: an SST-2 classifier (``sst2``) fine-tuned from a masked LM pre-trained for 2 steps."""
    teacher = cwd / "given-teacher"
    if not teacher.exists():
        attnlab("pretrain", "--corpus", "../shared/data/books/en", "--format", "text", "--max-steps", "2",
                "--batch-size", "4", "--eval-examples", "16", "--output-dir", str(teacher), "--no-progress",
                cwd=cwd)  # fmt: skip
    source = teacher / "model"
    if kind == "sst2":  # the only kind today
        attnlab("finetune", "--task", "sst2", "--data-dir", "../shared/data/glue/SST-2", "--model",
                str(source), "--epochs", "1", "--max-train-examples", "32", "--batch-size", "8",
                "--output-dir", str(cwd / "given-sst2"), "--no-progress", cwd=cwd)  # fmt: skip
        source = cwd / "given-sst2" / "best"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(source)


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS_WITH_SCRIPTS, ids=lambda d: d.name)
def test_doc_script_lines_run(doc: Path, data_view, tmp_path) -> None:
    require(DATA)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(data_view)
    cwd = tmp_path / "work"
    cwd.mkdir()
    for path, kind in GIVEN.get(doc.name, {}).items():
        make_given(kind, cwd / path, cwd)
    for path, earlier in EARLIER.get(doc.name, {}).items():
        (cwd / path).parent.mkdir(parents=True, exist_ok=True)
        (cwd / path).symlink_to(cwd / earlier)  # there once the earlier line ran
    for line in script_lines(doc):
        if line.script in NOT_RUN or (_for_gpu(line) and not torch.cuda.is_available()):
            continue  # a GPU column's command runs where a GPU is
        args = tiny(line.script, line.args)
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(ROOT / line.script), *args], cwd=cwd, env={**child_env(), **line.env},
            capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        command = f"{line.id}: `{shlex.join([line.script, *args])}`"
        assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stderr[-4000:]}"
        if line.script in WRITES:
            option, name = WRITES[line.script]
            written = cwd / args[args.index(option) + 1] / name
            assert written.is_file(), f"{command} wrote no {written}"
        print(f"{command}: {time.monotonic() - started:.1f} s")
