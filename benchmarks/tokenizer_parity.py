"""Differences between attnlab's tokenizers and HF tokenizers on the same tokenizer.json.

    .venv/bin/python benchmarks/tokenizer_parity.py               # 2,000 strings per input kind, 9,000 lines
    .venv/bin/python benchmarks/tokenizer_parity.py --n 300 --per-source 200     # quick look
    .venv/bin/python benchmarks/tokenizer_parity.py --only envit5 --show 3        # one tokenizer, examples

For each tokenizer (the real released files of ../shared/data/tokenizers, plus BPE tokenizers with an
unknown token trained by HF here), each input set is encoded by both libraries; the table counts the texts
whose ids, tokens, offsets or word ids differ, and (``ids_only``) those whose ids-only encoding differs from
attnlab's full encoding. Inputs: ``adversarial`` (seeded, every Unicode category), ``hypothesis``
(derandomised
``st.text()`` over all of Unicode but surrogates), ``real`` (1,500 lines from each of books, wikitext, SQuAD,
CoNLL, Multi30k and the K-BERT Chinese sets). The generators and the comparison are the ones of
``tests/tokenizers/test_tokenizers_fuzz_parity.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, Python puts benchmarks/ first on sys.path, where the sibling tokenizers.py would shadow
# the HF `tokenizers` package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import test_tokenizers_fuzz_parity as fz  # noqa: E402

COLUMNS = ("texts", "ids", "tokens", "offsets", "word_ids", "ids_only")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="adversarial and hypothesis strings per tokenizer")
    ap.add_argument("--per-source", type=int, default=1500, help="real lines per source (6 sources)")
    ap.add_argument("--only", default="", help="only tokenizers whose name contains this")
    ap.add_argument("--show", type=int, default=0, help="print this many differing texts per field")
    args = ap.parse_args()
    if not fz.REAL.is_dir():
        sys.exit(f"needs {fz.REAL}")
    inputs = {
        "adversarial": fz.adversarial_texts(args.n),
        "hypothesis": fz.hypothesis_texts(args.n),
        "real": fz.real_lines(args.per_source),
    }
    print(f"{'tokenizer':38s} {'input':12s} " + " ".join(f"{c:>8s}" for c in COLUMNS) + "  seconds")
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in fz.REAL_FILES.items():
            if args.only not in name:
                continue
            ours, ref = fz._pair_from_json(make(Path(tmp)))
            for kind, texts in inputs.items():
                t0 = time.perf_counter()
                examples: dict[str, list[str]] = {}
                counts = fz.compare(ours, ref, texts, examples)
                row = " ".join(f"{counts.get(c, 0):8d}" for c in COLUMNS)
                print(f"{name:38s} {kind:12s} {row}  {time.perf_counter() - t0:7.1f}", flush=True)
                for field, texts_ in examples.items():
                    for t in texts_[: args.show]:
                        a, b = ours.encode(t), ref.encode(t)
                        print(f"    {field}: {ascii(t)[:200]}")
                        print(f"      ours {getattr(a, field if field != 'ids_only' else 'ids')[:40]}")
                        print(f"      hf   {getattr(b, field if field != 'ids_only' else 'ids')[:40]}")


if __name__ == "__main__":
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    main()
