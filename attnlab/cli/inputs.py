"""Checks on the text files a command is given, made before any work starts: each exists, is a file (not
a directory) and is UTF-8 throughout. Bytes that are not UTF-8 are an error naming the file and line,
never replaced silently (a trainer reading with ``errors="replace"`` would learn U+FFFD as a symbol)."""

from __future__ import annotations

import codecs
import io
import os
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20  # bytes per read: memory stays bounded on a corpus of any size


def check_text_file(path: str | os.PathLike, option: str = "") -> Path:
    """``path`` if it is a readable UTF-8 file; else FileNotFoundError / IsADirectoryError / ValueError
    naming it (with ``option``, e.g. ``--files``) and, for bad bytes, the line."""
    p = Path(path)
    name = f"{option} {p}" if option else str(p)
    if not p.exists():
        raise FileNotFoundError(f"{name}: no such file")
    if p.is_dir():
        raise IsADirectoryError(f"{name}: is a directory, expected a text file")
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, offset = 1, 0
    with open(p, "rb") as f:
        while chunk := f.read(CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                at = line + chunk[: max(0, e.start)].count(b"\n")
                raise ValueError(
                    f"{name}:{at}: not valid UTF-8 (byte {offset + max(0, e.start)}: {e.reason}); "
                    "convert the file to UTF-8"
                ) from None
            line += chunk.count(b"\n")
            offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as e:
            raise ValueError(f"{name}:{line}: not valid UTF-8 at its end ({e.reason})") from None
    return p


def _stdin_bytes() -> Iterator[bytes]:
    """Standard input's lines as bytes. The text stream is not used: under a C or C.UTF-8 locale Python
    decodes it with ``surrogateescape``, so bad bytes would pass as lone surrogates instead of failing."""
    import sys

    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        yield from buffer
        return
    for text in sys.stdin:  # a text stream without bytes under it (io.StringIO, an embedding program)
        yield text.encode("utf-8", "surrogateescape")  # escaped bytes come back as they were read


def stdin_lines() -> Iterator[str]:
    """Standard input line by line (each ending in LF, CRLF and lone CR included, as in Python's text mode);
    bytes that are not UTF-8 are a ValueError naming standard input, the line and the byte offset."""
    offset = 0
    for line, raw in enumerate(_stdin_bytes(), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"standard input: not valid UTF-8 at line {line} (byte {offset + e.start}: {e.reason}); "
                "convert the input to UTF-8"
            ) from None
        offset += len(raw)
        yield from io.StringIO(text, newline=None)  # a lone CR ends a line too, as in Python's text mode


def read_stdin() -> str:
    """Standard input as text; bytes that are not UTF-8 are an error naming it and the line (not a
    traceback)."""
    return "".join(stdin_lines())
