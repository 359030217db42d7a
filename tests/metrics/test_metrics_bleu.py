"""Corpus BLEU through sacrebleu, checked by hand."""

import math

import pytest

from attnlab.metrics.bleu import corpus_bleu


def test_bleu_by_hand():
    r = corpus_bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    # clipped n-gram precisions 5/6, 3/5, 2/4, 1/3; equal lengths → BP = 1
    assert r.precisions == pytest.approx((500 / 6, 60.0, 50.0, 100 / 3))
    assert r.bp == 1.0 and r.sys_len == r.ref_len == 6
    expected = 100 * math.exp((math.log(5 / 6) + math.log(3 / 5) + math.log(1 / 2) + math.log(1 / 3)) / 4)
    assert r.score == pytest.approx(expected)
    assert r.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert str(r).startswith("BLEU = 53.73")


def test_multiple_references_and_perfect_match():
    hyps = ["the cat sat on the mat", "a dog barks"]
    refs = [["the cat sat on the mat", "a dog barked"], ["a cat sat on the mat", "a dog barks"]]
    r = corpus_bleu(hyps, refs)
    assert r.score == pytest.approx(100.0) and "nrefs:2" in r.signature
    with pytest.raises(ValueError, match="reference stream 0 has 1 segments"):
        corpus_bleu(hyps, [["only one"]])
