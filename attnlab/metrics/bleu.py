"""Corpus BLEU (Papineni et al., 2002) through sacrebleu, with the signature the field reports next to it.

sacrebleu detokenised BLEU is what "Attention Is All You Need" style results should be compared with
(Post, 2018): the signature (``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...``) says how the
number was computed, so it is returned with the score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BleuResult:
    """``score`` in [0, 100]; ``precisions`` the 1..4-gram precisions (%), ``bp`` the brevity penalty."""

    score: float
    signature: str
    precisions: tuple[float, ...]
    bp: float
    sys_len: int
    ref_len: int

    def __str__(self) -> str:
        return f"BLEU = {self.score:.2f} ({self.signature})"


def corpus_bleu(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    tokenize: str = "13a",
    lowercase: bool = False,
    smooth_method: str = "exp",
) -> BleuResult:
    """Corpus BLEU of detokenised hypotheses against one or more reference streams.

    Args:
        hypotheses: one detokenised string per segment.
        references: one string per segment (a single reference), or a list of reference *streams*,
            each with one string per segment (sacrebleu's layout for multiple references).
        tokenize: sacrebleu tokenizer (``"13a"`` default, ``"intl"``, ``"zh"``, ``"none"``, ...).
    """
    from sacrebleu.metrics import BLEU

    hypotheses = list(hypotheses)
    if references and isinstance(references[0], str):
        streams = [list(references)]
    else:
        streams = [list(s) for s in references]
    for i, stream in enumerate(streams):
        if len(stream) != len(hypotheses):
            raise ValueError(f"reference stream {i} has {len(stream)} segments, hypotheses {len(hypotheses)}")
    metric = BLEU(tokenize=tokenize, lowercase=lowercase, smooth_method=smooth_method)
    result = metric.corpus_score(hypotheses, streams)
    return BleuResult(
        score=float(result.score),
        signature=str(metric.get_signature()),
        precisions=tuple(float(p) for p in result.precisions),
        bp=float(result.bp),
        sys_len=int(result.sys_len),
        ref_len=int(result.ref_len),
    )
