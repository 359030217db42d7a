"""Masking statistics and invariants: rate, Table 8 replacement splits, whole words, n-grams, spans,
special tokens, static vs dynamic, determinism; and the collator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_data_tokenizer import TinyTokenizer

from attnlab.data.collate import PretrainingCollator
from attnlab.data.instances import PretrainingInstances
from attnlab.data.masking import (
    MaskedDataset,
    Masker,
    MaskingConfig,
    span_boundary_targets,
)
from attnlab.data.protocol import SpecialIds
from attnlab.data.shards import ShardedCorpus, prepare_shards

V = 30000
SPECIAL = SpecialIds(cls=2, sep=3, mask=4, pad=0)


def sequence(rng, t=128, pad=0, word_len=(1, 4)):
    """A [CLS] A [SEP] B [SEP] [PAD]* sequence with words of 1..4 tokens. Token ids >= 5 and distinct from
    [MASK]; returns ids, word_starts, special mask."""
    body = t - 3 - pad
    ids = rng.integers(5, V, size=t)
    ws = np.zeros(t, dtype=bool)
    p = 0
    while p < t:
        ws[p] = True
        p += int(rng.integers(word_len[0], word_len[1] + 1))
    a = body // 2
    special = np.zeros(t, dtype=bool)
    special[[0, 1 + a, body + 2]] = True
    special[body + 3 :] = True
    ids[0], ids[1 + a], ids[body + 2] = SPECIAL.cls, SPECIAL.sep, SPECIAL.sep
    ids[body + 3 :] = SPECIAL.pad
    ws[special] = True
    ws[[1, 2 + a]] = True
    return ids, ws, special


def masker(**kw):
    return Masker(MaskingConfig(**kw), SPECIAL.mask, V, SPECIAL.all)


def words_of(ws, special):
    """List of (start, end) of maskable words."""
    out, t = [], len(ws)
    for s in np.flatnonzero(ws & ~special):
        e = s + 1
        while e < t and not ws[e] and not special[e]:
            e += 1
        out.append((int(s), int(e)))
    return out


@pytest.mark.parametrize("strategy", ["token", "whole_word", "ngram", "span"])
def test_rate_specials_and_labels(strategy):
    m = masker(strategy=strategy)
    rng = np.random.default_rng(0)
    rates = []
    for k in range(300):
        ids, ws, special = sequence(rng, t=int(rng.integers(20, 200)), pad=int(rng.integers(0, 10)))
        res = m(ids, ws, special, np.random.default_rng(k))
        predicted = res.labels != -100
        assert not predicted[special].any()  # no special token or padding is ever predicted...
        assert (res.input_ids[special] == ids[special]).all()  # ...or altered
        assert (res.labels[predicted] == ids[predicted]).all()
        assert (res.input_ids[~predicted] == ids[~predicted]).all()
        n = int((~special).sum())
        budget = max(1, round(0.15 * n))
        assert predicted.sum() <= budget
        if strategy == "token":
            assert predicted.sum() == budget  # BERT's exact count
        rates.append(predicted.sum() / n)
    assert abs(np.mean(rates) - 0.15) < 0.01


@pytest.mark.parametrize(
    "mask_prob, same_prob, random_prob",
    [(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.0, 0.2), (0.8, 0.2, 0.0), (0.0, 0.2, 0.8), (0.0, 0.0, 1.0)],
)
def test_table8_replacement_split(mask_prob, same_prob, random_prob):
    """BERT Table 8's MASK/SAME/RND rows, measured over ~40k predicted tokens."""
    m = masker(mask_prob=mask_prob, random_prob=random_prob)
    assert m.config.keep_prob == pytest.approx(same_prob)
    counts = np.zeros(3)
    rng = np.random.default_rng(1)
    for k in range(500):
        ids, ws, special = sequence(rng, t=512)
        res = m(ids, ws, special, np.random.default_rng([7, k]))
        pos = res.labels != -100
        out = res.input_ids[pos]
        counts += [
            (out == SPECIAL.mask).sum(),
            (out == ids[pos]).sum(),
            ((out != SPECIAL.mask) & (out != ids[pos])).sum(),
        ]
        assert not np.isin(
            out, [SPECIAL.cls, SPECIAL.sep, SPECIAL.pad]
        ).any()  # random ids are never specials
    frac = counts / counts.sum()
    assert counts.sum() > 30000
    # same-by-chance random draws are 1/V: negligible; 0.01 is > 5 standard deviations here
    np.testing.assert_allclose(frac, [mask_prob, same_prob, random_prob], atol=0.01)


def test_whole_word_masks_whole_words():
    m = masker(strategy="whole_word")
    rng = np.random.default_rng(2)
    for k in range(200):
        ids, ws, special = sequence(rng, t=128, word_len=(1, 5))
        res = m(ids, ws, special, np.random.default_rng(k))
        predicted = res.labels != -100
        for s, e in words_of(ws, special):
            assert predicted[s:e].all() or not predicted[s:e].any()  # all tokens of a word or none
        assert predicted.sum() >= 0.15 * (~special).sum() - 5  # budget nearly filled with whole words


def test_ngram_lengths_follow_one_over_n():
    m = masker(strategy="ngram", max_ngram=3)
    np.testing.assert_allclose(m.config.ngram_probs(), [6 / 11, 3 / 11, 2 / 11])
    rng = np.random.default_rng(3)
    hist = np.zeros(4)
    for k in range(400):
        ids, ws, special = sequence(rng, t=512, word_len=(1, 1))  # one token per word: n = span length
        res = m(ids, ws, special, np.random.default_rng(k))
        for s, e in res.spans:
            hist[e - s] += 1
            assert not special[s:e].any()
        assert ((res.labels != -100).sum()) == round(0.15 * (~special).sum())
    p = hist[1:] / hist.sum()
    # n-grams shortened to fit the budget or at a segment end shift a little mass to shorter ones
    np.testing.assert_allclose(p, [6 / 11, 3 / 11, 2 / 11], atol=0.03)


def span_word_lengths(res, ws, special):
    """Words per masked span, checking that every span starts and ends on word boundaries."""
    word_list = words_of(ws, special)
    starts = np.array([s for s, _ in word_list])
    ends = {e for _, e in word_list}
    out = []
    for s, e in res.spans:
        assert s in set(starts.tolist()) and e in ends  # spans are runs of whole words
        out.append(int(np.searchsorted(starts, e) - np.searchsorted(starts, s)))
    return out


def test_span_length_distribution():
    cfg = MaskingConfig(strategy="span")
    probs = cfg.span_length_probs()
    expected_mean = float((np.arange(1, 11) * probs).sum())
    assert expected_mean == pytest.approx(3.797, abs=1e-3)  # SpanBERT: "mean(l) = 3.8"
    assert probs[0] == pytest.approx(0.2 / (1 - 0.8**10))
    m = Masker(cfg, SPECIAL.mask, V, SPECIAL.all)
    rng = np.random.default_rng(4)
    # Long sequences: the 15% budget rarely cuts a span, so realised lengths follow the drawn ones
    # (~1300 spans, standard error of the mean ~0.07).
    long_lengths = []
    for k in range(20):
        ids, ws, special = sequence(rng, t=4096)
        long_lengths += span_word_lengths(m(ids, ws, special, np.random.default_rng(k)), ws, special)
    assert abs(np.mean(long_lengths) - expected_mean) < 0.2
    assert max(long_lengths) == 10
    # At T=512 spans that would overshoot the budget are shortened: the realised mean is a bit lower.
    lengths = []
    for k in range(100):
        ids, ws, special = sequence(rng, t=512)
        res = m(ids, ws, special, np.random.default_rng(k))
        lengths += span_word_lengths(res, ws, special)
        # SBO inputs: the tokens just outside each span, and the offset inside it
        predicted = res.labels != -100
        sbo = span_boundary_targets(res.spans, len(ids))
        assert ((sbo["span_left"] >= 0) == predicted).all()
        for s, e in res.spans:
            assert (sbo["span_left"][s:e] == s - 1).all() and (sbo["span_right"][s:e] == e).all()
            assert sbo["span_position"][s:e].tolist() == list(range(e - s))
            assert not special[s:e].any()
    assert 3.2 < np.mean(lengths) < expected_mean


def test_span_sampler_matches_geometric_clipped():
    probs = MaskingConfig(strategy="span").span_length_probs()
    draws = np.random.default_rng(0).choice(10, size=200_000, p=probs) + 1
    assert abs(draws.mean() - 3.797) < 0.03


def test_span_replacement_is_decided_per_span():
    m = masker(strategy="span")
    rng = np.random.default_rng(5)
    for k in range(200):
        ids, ws, special = sequence(rng, t=256)
        res = m(ids, ws, special, np.random.default_rng(k))
        for s, e in res.spans:
            is_mask = res.input_ids[s:e] == SPECIAL.mask
            assert is_mask.all() or not is_mask.any()


def test_max_predictions_and_degenerate_inputs():
    m = masker(max_predictions=20)
    ids, ws, special = sequence(np.random.default_rng(0), t=512)
    assert (m(ids, ws, special, np.random.default_rng(0)).labels != -100).sum() == 20
    only_special = np.ones(5, dtype=bool)
    res = m(np.array([2, 3, 0, 0, 0]), None, only_special, np.random.default_rng(0))
    assert (res.labels == -100).all()
    res = masker(strategy="whole_word")(
        np.array([2, 9, 3]), None, np.array([1, 0, 1], bool), np.random.default_rng(0)
    )
    assert res.labels.tolist() == [-100, 9, -100]  # at least one prediction
    with pytest.raises(ValueError, match="differ in shape"):
        m(np.array([1, 2]), None, np.array([False]), np.random.default_rng(0))


def test_config_validation():
    with pytest.raises(ValueError, match="strategy: 'wwm'; expected one of token, whole_word, ngram, span"):
        MaskingConfig(strategy="wwm")
    with pytest.raises(ValueError, match="sum to at most 1"):
        MaskingConfig(mask_prob=0.9, random_prob=0.2)
    with pytest.raises(ValueError, match="rate must be in"):
        MaskingConfig(rate=0.0)
    with pytest.raises(ValueError, match="mask_id 40000 outside"):
        Masker(MaskingConfig(), 40000, V)


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    rng = np.random.default_rng(0)
    words = [f"word{i}" for i in range(300)]
    docs = [
        [
            " ".join(rng.choice(words, size=int(rng.integers(4, 15)))) + "."
            for _ in range(int(rng.integers(2, 12)))
        ]
        for _ in range(40)
    ]
    tok = TinyTokenizer(vocab_size=V, piece=3)
    out = tmp_path_factory.mktemp("mask") / "shards"
    prepare_shards(docs, tok, out, workers=1)
    return PretrainingInstances(ShardedCorpus(out, tokenizer=tok), SPECIAL, "segment_pair", seed=0)


def test_static_masks_are_identical_across_epochs_dynamic_are_not(instances):
    m = masker(strategy="whole_word")
    with pytest.raises(ValueError, match="static masking over instances that change each epoch"):
        MaskedDataset(instances, m, seed=1, static=True)
    instances.static = True
    try:
        static = MaskedDataset(instances, m, seed=1, static=True)
        static.set_epoch(0)
        e0 = [static[i]["input_ids"].tolist() for i in range(len(static))]
        static.set_epoch(1)
        assert [static[i]["input_ids"].tolist() for i in range(len(static))] == e0
    finally:
        instances.static = False
    dynamic = MaskedDataset(instances, m, seed=1)
    dynamic.set_epoch(0)
    d0 = [dynamic[i] for i in range(len(dynamic))]
    dynamic.set_epoch(1)
    d1 = [dynamic[i] for i in range(len(dynamic))]
    dynamic.set_epoch(0)
    again = [dynamic[i] for i in range(len(dynamic))]
    for x, y in zip(d0, again):  # determinism given (seed, epoch, index)
        assert all(np.array_equal(x[k], y[k]) for k in x)
    # a new mask each epoch: the predicted positions differ for (almost) every instance
    differ = [not np.array_equal(x["labels"] != -100, y["labels"] != -100) for x, y in zip(d0, d1)]
    assert np.mean(differ) > 0.9


def test_masked_whole_words_on_real_tokenizer_word_ids(instances):
    ds = MaskedDataset(instances, masker(strategy="whole_word"), seed=0)
    for i in range(len(ds)):
        item = ds[i]
        predicted = item["labels"] != -100
        for s, e in words_of(item["word_starts"], item["special_tokens_mask"]):
            assert predicted[s:e].all() or not predicted[s:e].any()


def test_collator_pads_and_masks(instances):
    ds = MaskedDataset(instances, masker(strategy="span"), seed=0)
    items = [ds[i] for i in range(6)]
    batch = PretrainingCollator(pad_id=SPECIAL.pad, pad_to_multiple_of=8)(items)
    lengths = [len(it["input_ids"]) for it in items]
    b, t = batch["input_ids"].shape
    assert b == 6 and t % 8 == 0 and t >= max(lengths)
    assert set(batch) == {
        "input_ids",
        "token_type_ids",
        "labels",
        "pair_labels",
        "attention_mask",
        "span_left",
        "span_right",
        "span_position",
    }
    for i, n in enumerate(lengths):
        assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (t - n)
        assert (batch["input_ids"][i, n:] == SPECIAL.pad).all()
        assert (batch["labels"][i, n:] == -100).all()
        assert (batch["span_left"][i, n:] == -1).all()
        assert batch["input_ids"][i, :n].tolist() == items[i]["input_ids"].tolist()
    assert batch["pair_labels"].tolist() == [it["pair_labels"] for it in items]
    assert all(v.dtype == torch.int64 for v in batch.values())
    aux = PretrainingCollator(pad_id=0, keep_aux=True)(items)
    assert aux["special_tokens_mask"][0, lengths[0] :].eq(1).all()
    with pytest.raises(ValueError, match="empty batch"):
        PretrainingCollator(pad_id=0)([])
    with pytest.raises(ValueError, match="no padding value for per-token field 'foo'"):
        PretrainingCollator(pad_id=0)([{"input_ids": np.array([1, 2]), "foo": np.array([1, 2])}])


def test_span_masking_without_the_boundary_objective_has_no_boundary_targets(instances):
    """SpanBERT's "Span Masking (1seq)" row: the same spans, a plain masked LM, no SBO inputs."""
    with_sbo = MaskedDataset(instances, masker(strategy="span"), seed=0)
    plain = MaskedDataset(instances, masker(strategy="span"), seed=0, boundary_targets=False)
    for i in range(4):
        a, b = with_sbo[i], plain[i]
        assert "span_left" in a and not any(k.startswith("span_") for k in b)
        assert a["labels"].tolist() == b["labels"].tolist()  # the same masks
