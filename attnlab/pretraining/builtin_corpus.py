"""A corpus every Python installation ships: the docstrings of the standard library's own sources.

``attnlab pretrain`` with no ``--corpus`` trains on it, so that the main job runs anywhere without a
download. Each module under ``sysconfig.get_paths()["stdlib"]`` (sorted paths, so the order is deterministic;
tests, ``site-packages``, demo and IDLE sources left out) is one document: its module, class and function
docstrings (``ast.get_docstring``, cleaned), split into paragraphs and sentences. Doctest lines (``>>>``,
``...``) and paragraphs that look like code or tables are dropped, since they read poorly as prose.
"""

from __future__ import annotations

import ast
import os
import re
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from attnlab.atomic import atomic_write
from attnlab.data.sentences import split_sentences

SKIP_PARTS = frozenset({"test", "tests", "site-packages", "idlelib", "turtledemo", "__pycache__", "lib2to3"})
_WORD = re.compile(r"[A-Za-z]{2,}")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources(root: str | os.PathLike | None = None) -> list[Path]:
    """The stdlib's ``.py`` files, sorted, without tests, third-party packages and demos."""
    root = Path(root) if root is not None else stdlib_root()
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: the standard library's directory does not exist")
    return sorted(
        p for p in root.rglob("*.py") if not SKIP_PARTS.intersection(p.relative_to(root).parts[:-1])
    )


def _prose(paragraph: str) -> bool:
    """A paragraph of prose: mostly words, not code, tables or option lists."""
    text = paragraph.strip()
    if len(text) < 20 or text.startswith((">>>", "...", "$", "%", "#")):
        return False
    letters = sum(len(w) for w in _WORD.findall(text))
    return letters >= 0.6 * len(text.replace(" ", "")) and text.count("(") <= 4 and "::" not in text


def docstring_paragraphs(source: str) -> list[str]:
    """Prose paragraphs (lines joined) of the module, class and function docstrings of ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not doc:
            continue
        for para in re.split(r"\n\s*\n", doc):
            lines = [ln.strip() for ln in para.splitlines()]
            if any(ln.startswith((">>>", "...")) for ln in lines):
                continue
            joined = " ".join(ln for ln in lines if ln)
            if _prose(joined):
                out.append(joined)
    return out


def stdlib_documents(
    root: str | os.PathLike | None = None, max_chars: int | None = None
) -> Iterator[list[str]]:
    """One document (a list of sentences) per stdlib module with prose docstrings, in path order; stops once
    ``max_chars`` characters have been yielded."""
    total = 0
    for path in stdlib_sources(root):
        paragraphs = docstring_paragraphs(path.read_text(encoding="utf-8", errors="replace"))
        sentences = [s for para in paragraphs for s in split_sentences(para)]
        if not sentences:
            continue
        yield sentences
        total += sum(len(s) for s in sentences)
        if max_chars is not None and total >= max_chars:
            return


def write_corpus(path: str | os.PathLike, max_chars: int | None = None) -> tuple[int, int]:
    """Write the corpus in BERT's format (one sentence per line, a blank line between documents) to
    ``path``; returns (documents, characters)."""
    docs = chars = 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:  # an error below (no documents) leaves no file behind
        for doc in stdlib_documents(max_chars=max_chars):
            f.write("\n".join(doc) + "\n\n")
            docs += 1
            chars += sum(len(s) for s in doc)
        if docs == 0:
            raise FileNotFoundError(
                f"{stdlib_root()}: no standard-library sources with docstrings (this Python ships only "
                "compiled modules?); give a corpus with --corpus"
            )
    return docs, chars
