"""The frozen-feature probes' classifiers: each learns what it can see. A label that depends on the
next state is out of reach of a per-token linear readout and within reach of the BiLSTM; a sequence's
label is read from its mean or its first state; the BiLSTM is the same for the same seed."""

import pytest
import torch

from attnlab.ablation.classifiers import BiLSTMReadout, classify_sequences, classify_tokens, linear_probe


def _sequences(n: int, seed: int, width: int = 8) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(int(torch.randint(3, 9, (1,), generator=g)), width, generator=g) for _ in range(n)]


def _next_sign(states: torch.Tensor) -> torch.Tensor:
    """Each token's label: whether the next token's first feature is positive (the last token: 0)."""
    following = torch.cat([states[1:, 0] > 0, torch.tensor([False])])
    return following.long()


def _token_accuracy(predicted: list[torch.Tensor], gold: list[torch.Tensor]) -> float:
    return float((torch.cat(predicted) == torch.cat(gold)).float().mean())


def test_the_bilstm_reads_the_next_token_and_the_linear_readout_cannot():
    train, test = _sequences(1500, 0), _sequences(100, 1)
    train_y, test_y = [_next_sign(s) for s in train], [_next_sign(s) for s in test]
    linear = classify_tokens("linear", train, train_y, test, 2, seed=0)
    bilstm = classify_tokens("bilstm", train, train_y, test, 2, seed=0)
    assert [len(p) for p in bilstm] == [len(s) for s in test] == [len(p) for p in linear]
    assert _token_accuracy(linear, test_y) < 0.75  # the label is independent of the token's own features
    assert _token_accuracy(bilstm, test_y) > 0.9


@pytest.mark.parametrize("readout", ["linear", "bilstm"])
@pytest.mark.parametrize("pool", ["mean", "first"])
def test_a_sequence_label_is_read_from_its_pool(readout, pool):
    train, test = _sequences(1000, 2), _sequences(100, 3)

    def label(s: torch.Tensor) -> int:
        return int((s.mean(0)[1] if pool == "mean" else s[0, 1]) > 0)

    predicted = classify_sequences(readout, train, torch.tensor([label(s) for s in train]), test, 2, 0, pool)
    gold = torch.tensor([label(s) for s in test])
    assert predicted.shape == gold.shape and float((predicted == gold).float().mean()) > 0.85


def test_the_bilstm_is_deterministic_and_an_empty_sentence_gets_no_tags():
    train, test = _sequences(50, 4), [*_sequences(5, 5), torch.zeros(0, 8)]
    train_y = [_next_sign(s) for s in train]
    empty_x, empty_y = torch.zeros(0, 8), torch.zeros(0, dtype=torch.long)
    first = classify_tokens("bilstm", [*train, empty_x], [*train_y, empty_y], test, 2, seed=3)
    second = classify_tokens("bilstm", train, train_y, test, 2, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(first, second)) and len(first[-1]) == 0


def test_an_unknown_readout_or_pool_is_named():
    seqs = _sequences(4, 6)
    with pytest.raises(ValueError, match="readout: expected one of linear, bilstm, got 'svm'"):
        classify_sequences("svm", seqs, torch.tensor([0, 1, 0, 1]), seqs, 2, 0)
    with pytest.raises(ValueError, match="pool: expected one of mean, first, got 'max'"):
        classify_sequences("linear", seqs, torch.tensor([0, 1, 0, 1]), seqs, 2, 0, pool="max")


@pytest.mark.parametrize("pool", [None, "mean", "first"])
def test_the_bilstm_reads_each_sequence_alone_whatever_its_batch_and_padding(pool):
    torch.manual_seed(0)
    model = BiLSTMReadout(8, 3, pool).eval()
    short, long = torch.randn(1, 4, 8), torch.randn(1, 7, 8)
    alone = model(short, torch.tensor([4]))
    padded = torch.cat([torch.cat([short, 100 * torch.randn(1, 3, 8)], 1), long])  # junk in the padding
    batched = model(padded, torch.tensor([4, 7]))
    if pool is None:
        assert torch.allclose(batched[0, :4], alone[0], atol=1e-5)
    else:
        assert torch.allclose(batched[0], alone[0], atol=1e-5)
    states = model.lstm(short)[0]  # (1, 4, 2H): the BiLSTM's outputs, unpadded
    expected = {None: states[0], "mean": states[0].mean(0), "first": states[0, 0]}[pool]
    assert torch.allclose(alone[0], model.linear(expected), atol=1e-5)


def test_the_linear_readout_is_softmax_regression_on_the_pooled_or_token_states():
    train, test = _sequences(60, 7), [*_sequences(9, 8), torch.zeros(0, 8)]
    token_y = [_next_sign(s) for s in train]
    predicted = classify_tokens("linear", train, token_y, test, 2, seed=1)
    expected = linear_probe(torch.cat(train), torch.cat(token_y), torch.cat(test), 2, seed=1)
    assert [len(p) for p in predicted] == [len(s) for s in test]
    assert torch.equal(torch.cat(predicted), expected)
    y = torch.tensor([i % 2 for i in range(60)])
    for pool, read in (("mean", lambda s: s.mean(0)), ("first", lambda s: s[0])):
        pooled = classify_sequences("linear", train, y, test[:-1], 2, 1, pool)
        by_hand = linear_probe(torch.stack([read(s) for s in train]), y,
                               torch.stack([read(s) for s in test[:-1]]), 2, 1)  # fmt: skip
        assert torch.equal(pooled, by_hand)


def test_empty_inputs_are_named():
    seqs, empty = _sequences(4, 9), torch.zeros(0, 8)
    with pytest.raises(ValueError, match="every one of the 2 training sequences is empty"):
        classify_tokens("bilstm", [empty, empty], [empty[:, 0].long()] * 2, seqs, 2, 0)
    with pytest.raises(ValueError, match=r"test sequence\(s\) \[1\] are empty"):
        classify_sequences("linear", seqs, torch.tensor([0, 1, 0, 1]), [seqs[0], empty], 2, 0)
