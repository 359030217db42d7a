"""Knowledge graphs of (subject, predicate, object) triples and their loaders (K-BERT, Liu et al. 2020).

- `load_spo`: K-BERT's tab-separated ``.spo`` files, one ``subject<TAB>predicate<TAB>object`` per line
  (``Medical.spo``, ``HowNet.spo``, ``CnDbpedia.spo``). A line with fewer than three fields is an error
  naming the file and the line (never skipped silently); blank lines are counted and skipped. Fields past
  the third are an error too (a tab inside an object would be silently cut otherwise).
- `load_wordnet`: WordNet 3.0 for English from the database files the Debian ``wordnet-base`` package
  installs (``/usr/share/wordnet/data.{noun,verb,adj,adv}``), read here without any NLTK/WordNet
  library: every lemma of a synset gets ``synonym`` triples to the synset's other lemmas and ``hypernym``
  triples to the lemmas of its hypernym synsets (``@`` and instance ``@i`` pointers).
- `load_graph`: either, by the path (a ``.spo`` file or a WordNet directory / the word ``wordnet``).

A `KnowledgeGraph` maps each subject to its (predicate, object) pairs in file order; duplicates are kept
once. ``joiner`` is how the subject's words are written: ``""`` for Chinese graphs (characters run
together), ``" "`` when subjects hold spaces (English multi-word names such as "Tim Cook").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from attnlab.tasks.examples import DataFormatError

WORDNET_DIRS = ("/usr/share/wordnet", "/usr/local/share/wordnet")
WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2FA1F or 0xF900 <= cp <= 0xFAFF
    )


@dataclass
class KnowledgeGraph:
    """Triples indexed by subject: ``triples[subject] = [(predicate, object), ...]`` in load order."""

    triples: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    name: str = ""
    lowercase: bool = False  # subjects were lowercased (WordNet): look up lowercased text
    blank_lines: int = 0  # counted while loading
    duplicates: int = 0  # triples seen twice, kept once

    def add(self, subject: str, predicate: str, obj: str) -> None:
        pairs = self.triples.setdefault(subject, [])
        if (predicate, obj) in pairs:
            self.duplicates += 1
        else:
            pairs.append((predicate, obj))

    @property
    def joiner(self) -> str:
        """How a subject's words are written together: "" when most subjects hold a CJK ideograph
        (Chinese runs characters together), else " " (English "Tim Cook")."""
        if not self.triples:
            return " "
        cjk = sum(1 for s in self.triples if any(_is_cjk(ch) for ch in s))
        return "" if cjk * 2 > len(self.triples) else " "

    def __len__(self) -> int:
        return sum(len(v) for v in self.triples.values())

    def __contains__(self, subject: str) -> bool:
        return subject in self.triples

    def get(self, subject: str) -> list[tuple[str, str]]:
        return self.triples.get(subject, [])

    @classmethod
    def from_triples(cls, triples: Iterable[tuple[str, str, str]], name: str = "") -> KnowledgeGraph:
        kg = cls(name=name)
        for s, p, o in triples:
            kg.add(s, p, o)
        return kg

    def summary(self) -> str:
        return (
            f"{self.name or 'graph'}: {len(self)} triples about {len(self.triples)} subjects"
            f" ({self.duplicates} duplicates kept once, {self.blank_lines} blank lines)"
        )


def load_spo(path: str | os.PathLike, graph: KnowledgeGraph | None = None) -> KnowledgeGraph:
    """Read a K-BERT ``.spo`` file (UTF-8, ``subject\\tpredicate\\tobject`` per line) into ``graph``."""
    path = Path(path)
    kg = graph if graph is not None else KnowledgeGraph(name=path.name)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise FileNotFoundError(f"{path}: cannot read the knowledge graph ({e.strerror or e})") from e
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataFormatError(str(path), line, f"not UTF-8 (byte {raw[e.start]:#04x})") from e
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            kg.blank_lines += 1
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise DataFormatError(
                str(path),
                number,
                f"expected 3 non-empty tab-separated fields (subject, predicate, object), got {len(fields)}: "
                f"{line[:80]!r}",
            )
        kg.add(*(f.strip() for f in fields))
    return kg


def find_wordnet(directory: str | os.PathLike | None = None) -> Path:
    """The directory holding WordNet 3.0's ``data.*`` files (Debian's ``wordnet-base``), or a clear error."""
    candidates = [Path(directory)] if directory is not None else [Path(d) for d in WORDNET_DIRS]
    env = os.environ.get("WNSEARCHDIR") or os.environ.get("WNHOME")
    if directory is None and env:
        candidates.insert(0, Path(env) / "dict" if (Path(env) / "dict").is_dir() else Path(env))
    for d in candidates:
        if all((d / name).is_file() for name in WORDNET_FILES):
            return d
    looked = ", ".join(str(d) for d in candidates)
    raise FileNotFoundError(
        f"WordNet 3.0 not found (looked in {looked} for {', '.join(WORDNET_FILES)}); install it with "
        "`make wordnet` (Debian package wordnet-base) or set WNSEARCHDIR"
    )


def _parse_synset(path: Path, number: int, line: str) -> tuple[str, list[str], list[str]]:
    """(offset+pos key, lemmas, hypernym keys) of one ``data.*`` line (WordNet's wndb(5) format)."""
    parts = line.split(" ")
    try:
        offset, pos = parts[0], parts[2]
        w_cnt = int(parts[3], 16)
        lemmas = [parts[4 + 2 * i] for i in range(w_cnt)]
        i = 4 + 2 * w_cnt
        p_cnt = int(parts[i])
        hypernyms = []
        for k in range(p_cnt):
            symbol, target, target_pos = parts[i + 1 + 4 * k : i + 4 + 4 * k]
            if symbol in ("@", "@i"):
                hypernyms.append(f"{target}{'n' if target_pos == 'n' else target_pos}")
    except (IndexError, ValueError) as e:
        raise DataFormatError(str(path), number, f"not a WordNet data line ({e})") from e
    pos = "a" if pos == "s" else pos
    return f"{offset}{pos}", lemmas, hypernyms


def _lemma_text(lemma: str) -> str:
    # adjective markers such as "(a)" / "(p)" / "(ip)" follow the lemma; "_" joins multi-word lemmas
    if lemma.endswith(")") and "(" in lemma:
        lemma = lemma[: lemma.index("(")]
    return lemma.replace("_", " ").lower()


def load_wordnet(
    directory: str | os.PathLike | None = None,
    relations: tuple[str, ...] = ("synonym", "hypernym"),
    max_lemmas: int = 3,
) -> KnowledgeGraph:
    """WordNet 3.0 as triples ``(lemma, synonym, other lemma)`` and ``(lemma, hypernym, lemma of a
    hypernym synset)``, lowercased, multi-word lemmas with spaces. ``max_lemmas``: how many lemmas of a
    related synset become objects (WordNet lists the most frequent first)."""
    valid = ("synonym", "hypernym")
    bad = [r for r in relations if r not in valid]
    if bad or not relations:
        raise ValueError(f"load_wordnet: relations must be among {valid}, got {relations}")
    root = find_wordnet(directory)
    synsets: dict[str, tuple[list[str], list[str]]] = {}
    for name in WORDNET_FILES:
        path = root / name
        with open(path, encoding="utf-8", errors="strict") as f:
            for number, line in enumerate(f, start=1):
                if line.startswith("  "):  # the licence header
                    continue
                key, lemmas, hypernyms = _parse_synset(path, number, line.rstrip("\n"))
                synsets[key] = ([_lemma_text(x) for x in lemmas], hypernyms)
    kg = KnowledgeGraph(name="WordNet-3.0", lowercase=True)
    for lemmas, hypernyms in synsets.values():
        for lemma in lemmas:
            if "synonym" in relations:
                for other in [x for x in lemmas if x != lemma][:max_lemmas]:
                    kg.add(lemma, "synonym", other)
            if "hypernym" in relations:
                for h in hypernyms:
                    for other in synsets.get(h, ([], []))[0][:max_lemmas]:
                        kg.add(lemma, "hypernym", other)
    return kg


def load_graph(spec: str | os.PathLike) -> KnowledgeGraph:
    """A graph by path: ``X.spo`` (several joined with ``,``), a WordNet directory, or ``wordnet``."""
    text = str(spec)
    if text.lower() == "wordnet":
        return load_wordnet()
    paths = [Path(p) for p in text.split(",") if p]
    if len(paths) == 1 and paths[0].is_dir():
        return load_wordnet(paths[0])
    kg = KnowledgeGraph(name="+".join(p.name for p in paths))
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such knowledge graph file (expected a .spo file or `wordnet`)")
        load_spo(p, kg)
    if not kg.triples:
        raise ValueError(f"{text}: the knowledge graph holds no triples")
    return kg


__all__ = ["KnowledgeGraph", "find_wordnet", "load_graph", "load_spo", "load_wordnet"]
