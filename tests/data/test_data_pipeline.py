"""The data pipeline end to end: shards, instances, masking, collate, the trainer's loader, a model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_data_tokenizer import TinyTokenizer

from attnlab.data import (
    MaskedDataset,
    Masker,
    MaskingConfig,
    PretrainingCollator,
    PretrainingInstances,
    ShardedCorpus,
    SpecialIds,
    prepare_shards,
)

V = 500
SPECIAL = SpecialIds(cls=2, sep=3, mask=4, pad=0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(200)]
    docs = [
        [
            " ".join(rng.choice(words, size=int(rng.integers(3, 12)))) + "."
            for _ in range(int(rng.integers(2, 9)))
        ]
        for _ in range(30)
    ]
    tok = TinyTokenizer(vocab_size=V)
    out = tmp_path_factory.mktemp("pipe") / "shards"
    prepare_shards(docs, tok, out, workers=1)
    corpus = ShardedCorpus(out, tokenizer=tok)
    instances = PretrainingInstances(corpus, SPECIAL, "segment_pair", max_length=64, seed=0)
    masker = Masker(MaskingConfig(strategy="whole_word"), SPECIAL.mask, V, SPECIAL.all)
    return MaskedDataset(instances, masker, seed=0)


def batches(loader, n):
    out = []
    for b in loader:
        out.append(b)
        if len(out) == n:
            break
    return out


def test_resumable_loader_resumes_exactly(dataset):
    import attnlab.train.data as data

    collate = PretrainingCollator(pad_id=SPECIAL.pad)
    full = data.ResumableLoader(dataset, batch_size=4, collate_fn=collate, seed=1)
    reference = batches(full, 6)
    first = data.ResumableLoader(dataset, batch_size=4, collate_fn=collate, seed=1)
    batches(first, 2)
    state = first.state_dict()
    resumed = data.ResumableLoader(dataset, batch_size=4, collate_fn=collate, seed=1)
    resumed.load_state_dict(state)
    for a, b in zip(reference[2:], batches(resumed, 4)):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_batches_feed_the_pretraining_model(dataset):
    import attnlab.models as models
    import attnlab.models.pretraining as pre

    cfg = models.EncoderConfig(
        vocab_size=V,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = pre.EncoderForPreTraining.from_config(cfg, pair_head=True)
    batch = PretrainingCollator(pad_id=SPECIAL.pad)([dataset[i] for i in range(8)])
    out = model(**batch)
    assert out.loss is not None and torch.isfinite(out.loss)
    assert out.mlm_logits.shape == (*batch["input_ids"].shape, V)
