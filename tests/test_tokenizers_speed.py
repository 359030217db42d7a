"""Encoding speed on real text (slow, needs ../shared/data): single-process MB/s of the BERT pipeline with a
bert-base-uncased-like 30,522-token vocabulary, against HF transformers' slow Python BertTokenizer and HF
tokenizers' Rust batch encoder measured on the same lines in the same process.

Run: ``.venv/bin/python -m pytest tests/test_tokenizers_speed.py -m slow -s``
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

BOOKS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "books" / "en"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.data,
    pytest.mark.skipif(not BOOKS.is_dir(), reason="needs ../shared/data/books"),
]


def _lines(n_bytes: int) -> list[str]:
    text = ""
    for f in sorted(BOOKS.glob("*.txt"))[40:]:
        text += f.read_text(encoding="utf-8", errors="replace")
        if len(text.encode()) > n_bytes:
            break
    text = text.encode()[:n_bytes].decode("utf-8", errors="ignore")
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    d = tmp_path_factory.mktemp("bert_base_like")
    hf = tokenizers.BertWordPieceTokenizer(lowercase=True)
    hf.train([str(p) for p in sorted(BOOKS.glob("*.txt"))[:20]], vocab_size=30522, show_progress=False)
    hf.save_model(str(d))
    return d


def _mb_per_s(fn, lines: list[str]) -> float:
    n = sum(len(ln.encode()) for ln in lines)
    t = time.perf_counter()
    fn(lines)
    return n / (time.perf_counter() - t) / 1e6


def test_single_process_speed(vocab_dir):
    from attnlab.tokenizers import load_tokenizer

    lines = _lines(2_000_000)
    ours = load_tokenizer(vocab_dir)
    ours_mbs = _mb_per_s(ours.encode_batch, lines)

    from tokenizers import BertWordPieceTokenizer

    hf_fast = BertWordPieceTokenizer(str(vocab_dir / "vocab.txt"), lowercase=True)
    fast_mbs = _mb_per_s(hf_fast.encode_batch, lines)

    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as SlowBert
    except ImportError:  # transformers < 5
        from transformers import BertTokenizer as SlowBert
    import os

    from attnlab.tokenizers.parallel import encode_texts

    cores = os.cpu_count() or 1
    fresh = load_tokenizer(vocab_dir)  # cold caches, as a worker pool starts
    all_cores_mbs = _mb_per_s(lambda xs: encode_texts(fresh, xs, num_workers=cores, chunk_size=2000), lines)

    slow = SlowBert(str(vocab_dir / "vocab.txt"), do_lower_case=True)
    sub = lines[: len(lines) // 4]
    slow_mbs = _mb_per_s(lambda xs: [slow(x) for x in xs], sub)
    ours_sub = _mb_per_s(ours.encode_batch, sub)
    size = sum(len(x.encode()) for x in lines) / 1e6
    print(
        f"\nattnlab single process: {ours_mbs:.2f} MB/s on {size:.1f} MB; "
        f"HF tokenizers (Rust) batch: {fast_mbs:.2f} MB/s; HF slow Python BertTokenizer: {slow_mbs:.2f} MB/s "
        f"(ours on the same quarter: {ours_sub:.2f} MB/s); "
        f"ours on all {cores} cores: {all_cores_mbs:.2f} MB/s"
    )
    assert ours_sub >= 2.0 * slow_mbs
