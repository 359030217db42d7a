"""The docs' shell commands, found and run as a reader runs them.

`blocks` and `commands` read the fenced blocks of a Markdown file; `Shell` runs a doc's commands in order in
one folder, so that each command reads what the earlier ones wrote (``runs/rb/model`` from the pre-training
above it), at tiny budgets (`tiny`: ``--minutes`` shrunk, ``--max-steps 2``, a few examples), with
``../shared/data`` next to the folder: a view of the shared data with the big files cut to their first lines.
``attnlab serve`` runs bounded: it starts on a free port, answers the ``curl`` lines after it (or one request
of the test's own) and stops at the next command. With a `Forker`, each ``attnlab`` command is a fork of one
process that imported attnlab once (a fresh process all the same, without the import's seconds). Used by
``test_docs_commands.py`` (every guide) and ``tests/test_newcomer.py`` (the README's walk-through);
`script_line` finds the experiment and benchmark lines that ``test_docs_scripts.py`` runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from shared_data import DATA

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- docs-test: (skip|parse) \((.+)\) -->")
API_KEY = "docs-test-key"  # $KEY in the docs' commands


@dataclass
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    section: str = ""  # the heading above the block
    mode: str = "run"  # run | parse | skip
    reason: str = ""

    @property
    def id(self) -> str:
        return f"{self.doc.name}:{self.line}"


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, each with its language, the heading above it and its docs-test marker."""
    found, lines = [], doc.read_text(encoding="utf-8").splitlines()
    i, section = 0, ""
    while i < len(lines):
        if lines[i].startswith("#"):
            section = lines[i].lstrip("#").strip()
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        block = Block(doc, i + 1, fence.group(1), "\n".join(lines[i + 1 : end]) + "\n", section)
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(previous)
        if marker:
            block.mode, block.reason = marker.group(1), marker.group(2)
        found.append(block)
        i = end + 1
    return found


def commands(text: str) -> list[list[str]]:
    """Shell commands of a bash block: continuations joined, comments dropped, the part after a pipe, a
    trailing ``&`` (run in the background) dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if "|" in words:
            words = words[len(words) - words[::-1].index("|") :]
        if words and words[-1] == "&":
            words = words[:-1]
        if words:
            out.append(words)
    return out


# Each command's budget in the tests: options set whatever the doc says, and options whose value is replaced
# where the doc gives them.
TINY_SET = {
    "pretrain": {"--max-steps": "2", "--batch-size": "4", "--eval-examples": "16", "--no-progress": None},
    "distill": {"--max-steps": "2", "--batch-size": "4", "--eval-examples": "16", "--no-progress": None},
    "finetune": {
        "--epochs": "1", "--max-train-examples": "16", "--max-eval-examples": "16", "--batch-size": "8",
        "--no-progress": None,
    },
    "evaluate": {"--max-eval-examples": "16"},
    "translate-train": {
        "--max-steps": "2", "--preset": "transformer-tiny", "--vocab-size": "1000", "--max-tokens": "256",
        "--no-progress": None,
    },
    "perplexity": {"--max-tokens": "256"},
    "tokenizer": {"--no-progress": None},
}  # fmt: skip
TINY_REPLACE = {"--minutes": "0.2", "--selection-examples": "4", "--max-new-tokens": "8"}
# --paper fixes the steps, batch and lengths: the budget alone is shrunk, and the command either trains in it
# or refuses in one sentence a step this machine cannot hold or time (`attnlab.train.footprint`)
PAPER_SET = {"--minutes": "0.2", "--eval-examples": "16", "--no-progress": None}
PAPER_REFUSAL = re.compile(
    r"error: one step of .* (needs about [\d.]+ GiB of memory|takes at least [\d.]+ s)"
)


def set_option(words: list[str], option: str, value: str | None) -> list[str]:
    """``words`` with ``option`` given ``value`` (a flag where None): the doc's value replaced, else added."""
    if option in words:
        if value is not None:
            i = words.index(option)
            words = [*words[: i + 1], value, *words[i + 2 :]]
        return words
    return [*words, option] if value is None else [*words, option, value]


def tiny(words: list[str]) -> list[str]:
    """An ``attnlab`` command at a test's budget: a few steps and examples, a resumed run 2 steps further."""
    if "--paper" in words:
        for option, value in PAPER_SET.items():
            words = set_option(words, option, value)
        return words
    for option, value in TINY_SET.get(words[1], {}).items():
        if option == "--max-steps" and "--resume" in words:
            value = "4"
        words = set_option(words, option, value)
    for option, value in TINY_REPLACE.items():
        if option in words:
            words = set_option(words, option, value)
    return words


SCRIPT_LINE = re.compile(
    r"^((?:env\s+)?(?:[A-Z_][A-Z0-9_]*=\S+\s+)*)(?:python3?|\.venv/bin/python)\s+"
    r"((?:experiments|benchmarks)/[a-z_0-9]+\.py)\b"
)


def script_line(text: str) -> tuple[dict[str, str], str, list[str]] | None:
    """A doc's experiment or benchmark line, ``[env] [VAR=VALUE ...] python SCRIPT ARGS  # comment``, as
    (environment, script, arguments); None for any other command. An optional part ``[--threads 2]`` is kept
    without its brackets. ``test_docs_scripts.py`` runs these lines."""
    match = SCRIPT_LINE.match(text)
    if match is None:
        return None
    env = dict(word.split("=", 1) for word in match.group(1).split() if word != "env")
    args = shlex.split(text[match.end() :], comments=True)
    args = [word.removeprefix("[").removesuffix("]") for word in args]
    return env, match.group(2), args


def make_target(target: str) -> list[list[str]]:
    """The ``attnlab`` commands of a Makefile target's recipe (``$(BIN)/attnlab pretrain`` -> ``attnlab
    pretrain``), so that a test runs what ``make TARGET`` runs."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        words = shlex.split(line.strip())
        if words and words[0].endswith("/attnlab"):
            recipe.append(["attnlab", *words[1:]])
    return recipe


def small_view(source: Path, target: Path, max_lines: int = 2000, max_files: int = 3) -> None:
    """``target``: ``source``'s tree with each large line-based file cut to its first ``max_lines`` lines
    (JSON kept whole) and a folder of many files (a corpus of books) cut to its first ``max_files``."""
    target.mkdir(parents=True, exist_ok=True)
    entries = sorted(source.iterdir())
    files = [e for e in entries if e.is_file()]
    if len(files) > 10:
        entries = [e for e in entries if not e.is_file()] + files[:max_files]
    for entry in entries:
        if entry.is_dir():
            small_view(entry, target / entry.name, max_lines, max_files)
        elif entry.stat().st_size > 256_000 and entry.suffix != ".json":
            with entry.open("rb") as src, (target / entry.name).open("wb") as dst:
                for n, line in enumerate(src):
                    if n >= max_lines:
                        break
                    dst.write(line)
        else:
            (target / entry.name).symlink_to(entry)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def child_env() -> dict[str, str]:
    """The environment of the commands: this checkout's attnlab first on the import path, ``$KEY`` set."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT), "KEY": API_KEY}


def attnlab(*args: str, cwd: Path) -> str:
    """Runs ``attnlab ARGS`` in ``cwd`` as a command of the docs; its stdout, or a failure with its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "attnlab", *args], cwd=cwd, env=child_env(), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"`attnlab {shlex.join(args)}` exited {done.returncode}: {done.stderr[-4000:]}"
    )
    return done.stdout


# A process that imports attnlab once, then forks a child for each command: the child runs `attnlab.cli.main`
# as `python -m attnlab` would, in its own folder, environment and files, and the import (most of a small
# command's time) is paid once. Nothing runs in it before a fork but the import.
FORKER = """
import atexit, json, os, sys
import attnlab.cli
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(job["cwd"]); os.environ.clear(); os.environ.update(job["env"])
        for fd, (name, mode) in enumerate([(job["stdin"], os.O_RDONLY), (job["stdout"], os.O_WRONLY),
                                           (job["stderr"], os.O_WRONLY)]):
            os.dup2(os.open(name, mode), fd)
        sys.stdin = open(0, closefd=False)
        sys.argv = ["attnlab", *job["argv"]]
        try:
            code = attnlab.cli.main(job["argv"])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            import traceback; traceback.print_exc(); code = 1
        atexit._run_exitfuncs(); sys.stdout.flush(); sys.stderr.flush(); os._exit(code or 0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


class Forker:
    """`FORKER` running: ``run(argv, cwd, env, stdin)`` is ``attnlab ARGV`` -> (exit code, stdout, stderr)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", FORKER], env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def run(self, argv: list[str], cwd: Path, env: dict, stdin: str) -> tuple[int, str, str]:
        files = {name: cwd / f".attnlab-{name}" for name in ("stdin", "stdout", "stderr")}
        files["stdin"].write_text(stdin)
        for name in ("stdout", "stderr"):
            files[name].write_text("")
        job = {"argv": argv, "cwd": str(cwd), "env": env, **{k: str(v) for k, v in files.items()}}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        code = int(self.process.stdout.readline())
        out, err = (files[name].read_text() for name in ("stdout", "stderr"))
        for path in files.values():
            path.unlink()
        return code, out, err

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


class Shell:
    """A doc's commands run in ``folder/work`` as a reader runs them, ``../shared/data`` beside it; with a
    `Forker`, the ``attnlab`` commands are forked from it instead of started afresh."""

    def __init__(self, folder: Path, data_view: Path | None = None, forker: Forker | None = None) -> None:
        self.forker = forker
        self.cwd = folder / "work"
        self.cwd.mkdir(parents=True, exist_ok=True)
        if data_view is not None:
            (folder / "shared").mkdir(exist_ok=True)
            (folder / "shared" / "data").symlink_to(data_view)
        self.env = child_env()
        self.server: subprocess.Popen | None = None
        self.server_log: Path | None = None
        self.port = 0
        self.key: str | None = None
        self.answered = False  # the running server answered a request
        self.log: list[str] = []  # what ran, for a failure's message

    def run(self, words: list[str], stdin: str = "") -> str:
        """Runs one command as the doc writes it (``attnlab`` at the test's budget); returns its stdout."""
        words = [re.sub(r"\$(\w+)", lambda m: self.env.get(m.group(1), m.group(0)), w) for w in words]
        if words[0] != "curl" and words[:2] != ["kill", "%1"]:
            self.stop_server()
        if words[0] == "curl":
            return self.curl(words)
        if words[:2] == ["kill", "%1"]:
            return self.stop_server()
        if words[0] == "python" and words[1] == "-c":
            return self._process([sys.executable, *words[1:]], words, stdin)
        if words[0] != "attnlab":
            raise ValueError(f"`{shlex.join(words)}`: no way to run {words[0]!r} here")
        words = tiny(words)
        if words[1] == "serve":
            return self.start_server(words)
        return self._process([sys.executable, "-m", "attnlab", *words[1:]], words, stdin)

    def _process(self, argv: list[str], words: list[str], stdin: str) -> str:
        self.log.append(shlex.join(words))
        if self.forker is not None and words[0] == "attnlab":
            code, out, err = self.forker.run(words[1:], self.cwd, self.env, stdin)
        else:
            done = subprocess.run(
                argv, cwd=self.cwd, env=self.env, input=stdin, capture_output=True, text=True, timeout=600
            )
            code, out, err = done.returncode, done.stdout, done.stderr
        if code == 2 and "--paper" in words and PAPER_REFUSAL.search(err):
            return out  # the paper's step does not fit this machine, said in one sentence
        if code != 0:
            raise AssertionError(
                f"`{shlex.join(words)}` exited {code} in {self.cwd}\n"
                f"ran before it: {self.log[:-1]}\nstderr:\n{err[-4000:]}"
            )
        return out

    def start_server(self, words: list[str]) -> str:
        self.port = free_port()
        words = set_option(words, "--port", str(self.port))
        self.key = words[words.index("--api-key") + 1] if "--api-key" in words else None
        self.log.append(shlex.join(words))
        self.server_log = self.cwd / f"serve-{self.port}.log"
        with self.server_log.open("w") as log:
            self.server = subprocess.Popen(
                [sys.executable, "-m", "attnlab", *words[1:]], cwd=self.cwd, env=self.env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise AssertionError(f"`{shlex.join(words)}` ended: {self.server_log.read_text()[-4000:]}")
            try:
                if http(f"http://127.0.0.1:{self.port}/ready")[0] == 200:
                    return ""
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(
            f"`{shlex.join(words)}`: not ready in 180 s: {self.server_log.read_text()[-4000:]}"
        )

    def curl(self, words: list[str]) -> str:
        """``curl [-s] [-H HEADER] [-d BODY] URL`` to the running server (on its port, whatever the doc's)."""
        assert self.server is not None, f"`{shlex.join(words)}`: no server is running"
        headers, body, url = {}, None, None
        rest = iter(words[1:])
        for word in rest:
            if word == "-H":
                name, value = next(rest).split(":", 1)
                headers[name.strip()] = value.strip()
            elif word == "-d":
                body = next(rest).encode()
            elif not word.startswith("-"):
                url = re.sub(
                    r"^(https?://)?(localhost|127\.0\.0\.1)(:\d+)?", f"http://127.0.0.1:{self.port}", word
                )
        self.log.append(shlex.join(words))
        status, text = http(url, body, {**headers, **self._auth()})
        assert status == 200, f"`{shlex.join(words)}`: HTTP {status}: {text}"
        self.answered = True
        return text

    def _auth(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def request_of_its_own(self) -> None:
        """One request to a server no doc line asked: classify (else embed) a sentence."""
        base = f"http://127.0.0.1:{self.port}"
        status, text = http(f"{base}/v1/info", headers=self._auth())
        assert status == 200, f"/v1/info: HTTP {status}: {text}"
        served = json.loads(text)["endpoints"]
        endpoint = next(e for e in ("/v1/classify", "/v1/embed", "/v1/generate") if e in served)
        body = json.dumps({"text": "the film was great"}).encode()
        status, text = http(base + endpoint, body, {"Content-Type": "application/json", **self._auth()})
        assert status == 200, f"{endpoint}: HTTP {status}: {text}"

    def stop_server(self) -> str:
        """Stops the running server (SIGTERM, as Ctrl-C), after one request if no doc line made one."""
        if self.server is None:
            return ""
        try:
            if not self.answered:
                self.request_of_its_own()
        finally:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
            self.server, self.answered = None, False
        return ""

    def copy_in(self, source: Path, path: str) -> None:
        """Puts ``source`` (a file or folder made by the test) where the doc expects ``path``."""
        target = self.cwd / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)


def data_paths(words: list[str]) -> list[Path]:
    """The shared data a command reads (``../shared/data/X`` -> ``DATA/X``)."""
    found = []
    for word in words:
        for part in word.split(","):
            if part.startswith("../shared/data/"):
                found.append(DATA / part[len("../shared/data/") :])
    return found
