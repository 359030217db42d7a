"""Pre-training instances: templates, NSP/SOP semantics and balance, packing, determinism, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from shared_data import DATA, require
from test_data_tokenizer import TinyTokenizer

from attnlab.data.instances import PretrainingInstances, two_phase_schedule
from attnlab.data.protocol import SpecialIds
from attnlab.data.shards import ShardedCorpus, prepare_shards

SPECIAL = SpecialIds(cls=2, sep=3, mask=4, pad=0)
# One token per word (piece longer than any word) and a 2**32 vocabulary: every word below gets its own
# id (hash collisions are ~1e-3 likely over the whole corpus), so each token locates its source position.
UNIQUE = TinyTokenizer(vocab_size=2**32, piece=100)


def build(tmp_path, doc_lengths, sent_len=(3, 9), seed=0, shard_tokens=10**9, name="c") -> ShardedCorpus:
    rng = np.random.default_rng(seed)
    docs, k = [], 0
    for n in doc_lengths:
        doc = []
        for _ in range(n):
            m = int(rng.integers(sent_len[0], sent_len[1] + 1))
            doc.append(" ".join(f"w{k + j}" for j in range(m)))
            k += m
        docs.append(doc)
    prepare_shards(
        docs, UNIQUE, tmp_path / name, workers=1, shard_tokens=shard_tokens, max_sentence_tokens=None
    )
    return ShardedCorpus(tmp_path / name)


class Locator:
    """Global position and document of every (unique) token id in the corpus."""

    def __init__(self, corpus: ShardedCorpus):
        self.pos, self.doc = {}, {}
        base, d = 0, 0
        for shard in corpus.shards:
            ids = np.asarray(shard.ids).tolist()
            so, do = np.asarray(shard.sent_offsets), np.asarray(shard.doc_offsets)
            for k in range(shard.n_documents):
                for p in range(int(so[do[k]]), int(so[do[k + 1]])):
                    self.pos[ids[p]] = base + p
                    self.doc[ids[p]] = d
                d += 1
            base += len(ids)

    def contiguous(self, ids) -> bool:
        p = [self.pos[i] for i in ids]
        return p == list(range(p[0], p[0] + len(p)))


def segments(inst, template="bert"):
    ids = inst["input_ids"].tolist()
    assert ids[0] == SPECIAL.cls and ids[-1] == SPECIAL.sep
    a_end = ids.index(SPECIAL.sep)
    b_start = a_end + (2 if template == "roberta" else 1)
    return ids[1:a_end], ids[b_start:-1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    # 80 documents of 2..20 sentences, in several shards; plus documents of one sentence (too short)
    lengths = list(np.random.default_rng(0).integers(2, 21, size=80)) + [1, 1, 1]
    return build(tmp_path_factory.mktemp("inst"), lengths, shard_tokens=3000)


@pytest.fixture(scope="module")
def locator(corpus):
    return Locator(corpus)


def check_layout(inst, max_length, pair=True):
    ids, tt, sp, ws = (
        inst["input_ids"],
        inst["token_type_ids"],
        inst["special_tokens_mask"],
        inst["word_starts"],
    )
    assert len(ids) <= max_length
    assert len(ids) == len(tt) == len(sp) == len(ws)
    assert (sp == np.isin(ids, [SPECIAL.cls, SPECIAL.sep])).all()
    assert ws[sp].all()
    if pair:
        a, b = segments(inst)
        assert tt.tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    else:
        assert (tt == 0).all()


@pytest.mark.parametrize("max_length", [128, 512])
def test_segment_pair_nsp(corpus, locator, max_length):
    ds = PretrainingInstances(corpus, SPECIAL, "segment_pair", max_length=max_length, seed=1)
    assert ds.stats.documents_too_short == 3
    labels = []
    for i in range(len(ds)):
        inst = ds[i]
        check_layout(inst, max_length)
        a, b = segments(inst)
        assert a and b
        assert locator.contiguous(a) and locator.contiguous(b)
        if inst["pair_labels"] == 0:  # IsNext: B continues A in the same document
            assert locator.pos[b[0]] == locator.pos[a[-1]] + 1 or len(a) + len(b) == max_length - 3
            assert locator.doc[a[0]] == locator.doc[b[0]]
        else:  # NotNext: B from another document
            assert locator.doc[a[0]] != locator.doc[b[0]]
        labels.append(inst["pair_labels"])
    assert len(labels) > 40
    # the is-random draw is a fair coin: 50% within 4 standard deviations
    assert abs(np.mean(labels) - 0.5) < 4 * 0.5 / np.sqrt(len(labels))


def test_nsp_and_sop_balance_over_many_epochs(corpus):
    for fmt in ("segment_pair", "sop", "sentence_pair"):
        ds = PretrainingInstances(corpus, SPECIAL, fmt, seed=3)
        labels = []
        for epoch in range(6):
            ds.set_epoch(epoch)
            labels += [ds[i]["pair_labels"] for i in range(0, len(ds), 3)]
        assert abs(np.mean(labels) - 0.5) < 4 * 0.5 / np.sqrt(len(labels)), fmt


def test_sop_swaps_consecutive_segments(corpus, locator):
    ds = PretrainingInstances(corpus, SPECIAL, "sop", max_length=512, short_seq_prob=0.0, seed=2)
    seen = set()
    for i in range(len(ds)):
        inst = ds[i]
        check_layout(inst, 512)
        a, b = segments(inst)
        assert locator.doc[a[0]] == locator.doc[b[0]]
        first, second = (a, b) if inst["pair_labels"] == 0 else (b, a)
        assert locator.pos[second[0]] == locator.pos[first[-1]] + 1  # consecutive in the document
        seen.add(inst["pair_labels"])
    assert seen == {0, 1}


def test_sentence_pair_uses_single_natural_sentences(corpus, locator):
    ds = PretrainingInstances(corpus, SPECIAL, "sentence_pair", max_length=128, seed=0)
    n_pairs = sum(s.n_sentences - s.n_documents for s in corpus.shards) - 0
    assert len(ds) == n_pairs  # one instance per sentence that has a successor (1-sentence documents: none)
    sentence_starts = {int(s.ids[o]) for s in corpus.shards for o in np.asarray(s.sent_offsets[:-1])}
    for i in range(0, len(ds), 7):
        a, b = segments(ds[i])
        assert a[0] in sentence_starts and b[0] in sentence_starts
        assert 3 <= len(a) <= 9 and 3 <= len(b) <= 9


@pytest.mark.parametrize("fmt", ["full_sentences", "doc_sentences"])
@pytest.mark.parametrize("max_length", [32, 128])
def test_full_and_doc_sentences_cover_the_corpus_once(corpus, locator, fmt, max_length):
    ds = PretrainingInstances(corpus, SPECIAL, fmt, max_length=max_length)
    assert ds.short_seq_prob == 0.0 and "pair_labels" not in ds[0]
    text = []
    for i in range(len(ds)):
        inst = ds[i]
        check_layout(inst, max_length, pair=False)
        ids = inst["input_ids"].tolist()[1:-1]
        inner_seps = [j for j, t in enumerate(ids) if t == SPECIAL.sep]
        body = [t for t in ids if t != SPECIAL.sep]
        docs = [locator.doc[t] for t in body]
        if fmt == "doc_sentences":
            assert not inner_seps and len(set(docs)) == 1
        else:  # exactly one extra separator at each document change
            changes = [j for j in range(1, len(body)) if docs[j] != docs[j - 1]]
            assert len(inner_seps) == len(changes)
            assert all(ids[s + 1 - 0] == body[c] for s, c in zip(inner_seps, changes))
        text += body
    flat = [locator.pos[t] for t in text]
    assert flat == sorted(locator.pos.values())  # every token exactly once, in order


def test_full_sentences_are_packed_close_to_the_maximum(corpus):
    ds = PretrainingInstances(corpus, SPECIAL, "full_sentences", max_length=128)
    lengths = np.array([len(ds[i]["input_ids"]) for i in range(len(ds))])
    assert np.mean(lengths[:-1]) > 128 - 10  # sentences are 3..9 tokens: a block wastes fewer than 9 + 1


def test_short_seq_probability(corpus):
    ds = PretrainingInstances(corpus, SPECIAL, "segment_pair", max_length=512, seed=0)
    short = ds.blocks[:, 3] < 512 - 3
    assert 0.03 < short.mean() < 0.2  # 0.1 of the targets, on ~300 blocks
    ds_all = PretrainingInstances(corpus, SPECIAL, "segment_pair", max_length=512, short_seq_prob=1.0)
    assert (ds_all.blocks[:, 3] <= 509).all() and (ds_all.blocks[:, 3] >= 2).all()
    assert len(set(ds_all.blocks[:, 3].tolist())) > 20


def test_determinism_given_seed_epoch_index(corpus):
    a = PretrainingInstances(corpus, SPECIAL, "segment_pair", seed=5)
    b = PretrainingInstances(corpus, SPECIAL, "segment_pair", seed=5)
    for epoch in (0, 3):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        for i in (0, 7, len(a) - 1, 7):  # any order, repeated access
            x, y = a[i], b[i]
            assert all(np.array_equal(x[k], y[k]) for k in x)
    a.set_epoch(0)
    e0 = [a[i]["input_ids"].tolist() for i in range(len(a))]
    a.set_epoch(1)
    e1 = [a[i]["input_ids"].tolist() for i in range(len(a))]
    assert e0 != e1  # fresh NSP draws each epoch
    c = PretrainingInstances(corpus, SPECIAL, "segment_pair", seed=6)
    assert [c[i]["input_ids"].tolist() for i in range(len(c))] != e0


def test_static_instances_and_dupe_factor(corpus):
    ds = PretrainingInstances(corpus, SPECIAL, "segment_pair", seed=5, static=True, dupe_factor=3)
    n = len(ds.blocks)
    assert len(ds) == 3 * n
    ds.set_epoch(0)
    e0 = [ds[i]["input_ids"].tolist() for i in range(len(ds))]
    ds.set_epoch(4)
    assert [ds[i]["input_ids"].tolist() for i in range(len(ds))] == e0
    assert e0[:n] != e0[n : 2 * n]  # the copies differ in their draws
    assert ds[-1]["input_ids"].tolist() == e0[-1]
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_roberta_template(corpus):
    ds = PretrainingInstances(corpus, SPECIAL, "segment_pair", max_length=64, template="roberta", seed=0)
    for i in range(0, len(ds), 5):
        inst = ds[i]
        ids = inst["input_ids"].tolist()
        a, b = segments(inst, "roberta")
        assert ids == [SPECIAL.cls, *a, SPECIAL.sep, SPECIAL.sep, *b, SPECIAL.sep]
        assert len(ids) <= 64 and (inst["token_type_ids"] == 0).all()


def test_long_sentences_are_truncated_and_counted(tmp_path):
    corpus = build(tmp_path, [3, 4, 2], sent_len=(150, 200))
    for fmt in ("segment_pair", "sop", "full_sentences", "doc_sentences", "sentence_pair"):
        ds = PretrainingInstances(corpus, SPECIAL, fmt, max_length=128, short_seq_prob=0.0)
        if fmt in ("full_sentences", "doc_sentences"):  # one over-long sentence per block
            assert ds.stats.blocks_truncated == len(ds.blocks) == 9
        elif fmt != "sentence_pair":  # a trailing sentence joins the previous block of its document
            assert ds.stats.blocks_truncated == ds.stats.single_sentence_blocks == len(ds.blocks) - 3 == 3
        for i in range(len(ds)):
            inst = ds[i]
            assert len(inst["input_ids"]) == 128
            if fmt in ("segment_pair", "sop"):
                a, b = segments(inst)
                assert a and b


def test_too_short_corpora(tmp_path):
    one_sentence_docs = build(tmp_path, [1, 1, 1], name="ones")
    with pytest.raises(
        ValueError, match=r"no 'segment_pair' instance can be built from 3 documents \(3 too short"
    ):
        PretrainingInstances(one_sentence_docs, SPECIAL, "segment_pair")
    assert len(PretrainingInstances(one_sentence_docs, SPECIAL, "full_sentences")) == 1
    single_doc = build(tmp_path, [5], name="single")
    with pytest.raises(ValueError, match="NSP needs at least 2 documents"):
        PretrainingInstances(single_doc, SPECIAL, "segment_pair")
    assert len(PretrainingInstances(single_doc, SPECIAL, "sop")) >= 1  # SOP needs no other document
    prepare_shards([], UNIQUE, tmp_path / "empty", workers=1)
    with pytest.raises(ValueError, match="from 0 documents"):
        PretrainingInstances(ShardedCorpus(tmp_path / "empty"), SPECIAL, "full_sentences")


def test_argument_validation(corpus):
    with pytest.raises(ValueError, match="unknown instance format 'pairs'; expected one of segment_pair"):
        PretrainingInstances(corpus, SPECIAL, "pairs")
    with pytest.raises(ValueError, match="unknown template"):
        PretrainingInstances(corpus, SPECIAL, template="gpt")
    with pytest.raises(ValueError, match="max_length=4 leaves no room"):
        PretrainingInstances(corpus, SPECIAL, max_length=4)
    with pytest.raises(ValueError, match="short_seq_prob must be in"):
        PretrainingInstances(corpus, SPECIAL, short_seq_prob=1.5)


def test_two_phase_schedule():
    s = two_phase_schedule(1000)
    assert [(p.start_step, p.end_step, p.max_length) for p in s.phases] == [(0, 900, 128), (900, 1000, 512)]
    assert s.max_length_at(0) == s.max_length_at(899) == 128
    assert s.max_length_at(900) == s.max_length_at(5000) == 512
    assert s.phase_at(950) == 1
    assert [p.max_length for p in two_phase_schedule(10, short_fraction=1.0).phases] == [128]
    with pytest.raises(ValueError):
        two_phase_schedule(0)


@pytest.mark.data
def test_instances_over_real_books(tmp_path):
    from attnlab.data.corpus import read_documents

    root = DATA / "books" / "en"
    require(root)
    tok = TinyTokenizer()
    prepare_shards(read_documents(sorted(root.iterdir())[:3], "text", split=False), tok, tmp_path, workers=2)
    corpus = ShardedCorpus(tmp_path, tokenizer=tok)
    for fmt in ("segment_pair", "sop", "full_sentences", "doc_sentences", "sentence_pair"):
        for max_length in (128, 512):
            ds = PretrainingInstances(corpus, SPECIAL, fmt, max_length=max_length, seed=0)
            lengths = [len(ds[i]["input_ids"]) for i in range(0, len(ds), max(1, len(ds) // 200))]
            assert max(lengths) <= max_length
            if fmt in ("full_sentences", "sop"):
                assert np.median(lengths) > 0.8 * max_length  # packed close to the target
