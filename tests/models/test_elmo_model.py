"""ELMo's parts: character ids (AllenNLP's conventions), char CNN, highway, LSTM with projection, clipping
and residual, the two directions, scalar mix, statelessness, parameter counts of the released sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnlab.models.elmo import ElmoBiLM, batch_char_ids, count_parameters, get_preset, word_char_ids
from attnlab.models.elmo.lstm import BiLSTMStack, ProjectedLSTM, reverse_padded
from attnlab.nn.highway import Highway
from attnlab.nn.scalar_mix import ScalarMix

TINY = get_preset("elmo-tiny")


def test_char_ids_follow_allennlp():
    # ELMoCharacterMapper: bow 258, bytes, eow 259, padding 260; +1 so that 0 is a padded token
    assert word_char_ids("hello")[:8] == [259, 105, 102, 109, 109, 112, 260, 261]
    assert word_char_ids("hello")[8:] == [261] * 42
    assert word_char_ids("<S>")[:4] == [259, 257, 260, 261]
    assert word_char_ids("</S>")[:4] == [259, 258, 260, 261]
    assert word_char_ids("é")[:4] == [259, 0xC3 + 1, 0xA9 + 1, 260]
    long = word_char_ids("x" * 60)  # truncated to 48 bytes between the markers, as the original
    assert len(long) == 50 and long[48] == ord("x") + 1 and long[49] == 260


def test_batch_char_ids_and_empty_sentence():
    ids, mask = batch_char_ids([["a", "b"], ["c"]])
    assert ids.shape == (2, 4, 50) and mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert ids[1, 3].eq(0).all() and ids[0, 0, 1] == 257
    with pytest.raises(ValueError, match="sentence 1 is empty"):
        batch_char_ids([["a"], []])


def test_highway_is_the_equation():
    torch.manual_seed(0)
    hw = Highway(6, 2)
    x = torch.randn(3, 6)
    y = x
    for layer in hw.layers:
        t = torch.sigmoid(y @ layer.gate.weight.T + layer.gate.bias)
        y = t * torch.relu(y @ layer.transform.weight.T + layer.transform.bias) + (1 - t) * y
    torch.testing.assert_close(hw(x), y)


def test_char_cnn_shapes_and_max_pool():
    torch.manual_seed(0)
    model = ElmoBiLM(TINY)
    ids, mask = batch_char_ids([["The", "bank"], ["x"]])
    x = model.token_encoder(ids)
    assert x.shape == (2, 4, TINY.projection_dim)
    # one token's vector does not depend on its neighbours (context-independent)
    torch.testing.assert_close(x[0, 1], model.token_encoder(batch_char_ids([["The"]])[0])[0, 1])


def test_projected_lstm_loop_equals_fused_kernel():
    torch.manual_seed(0)
    layer = ProjectedLSTM(5, 12, 4)
    x, mask = torch.randn(3, 7, 5), torch.ones(3, 7, dtype=torch.bool)
    fused, _ = layer(x, mask)
    looped, _ = layer.loop(x, mask)
    torch.testing.assert_close(fused, looped, atol=1e-6, rtol=1e-5)


def test_clipping_bounds_cell_and_output():
    torch.manual_seed(0)
    layer = ProjectedLSTM(5, 12, 4, cell_clip=0.5, proj_clip=0.1)
    with torch.no_grad():
        for p in layer.parameters():
            p.mul_(10)
    out, (h, c) = layer(torch.randn(2, 9, 5) * 5, torch.ones(2, 9, dtype=torch.bool))
    assert out.abs().max() <= 0.1 + 1e-6 and c.abs().max() <= 0.5 + 1e-6
    assert out.abs().max() > 0.09  # the clip was reached, not trivially satisfied


def test_backward_direction_and_residual():
    torch.manual_seed(0)
    stack = BiLSTMStack(4, 10, 4, num_layers=2, residual=True)
    x = torch.randn(1, 6, 4)
    mask = torch.ones(1, 6, dtype=torch.bool)
    layers = stack(x, mask)
    f1, _ = stack.forward_layers[0](x, mask)
    f2, _ = stack.forward_layers[1](f1, mask)
    b1, _ = stack.backward_layers[0](x.flip(1), mask)
    b2, _ = stack.backward_layers[1](b1, mask)
    torch.testing.assert_close(layers[0], torch.cat([f1, b1.flip(1)], -1))
    torch.testing.assert_close(layers[1], torch.cat([f2 + f1, (b2 + b1).flip(1)], -1))


def test_padding_does_not_change_a_sentence():
    torch.manual_seed(0)
    model = ElmoBiLM(TINY).eval()
    alone = model(*batch_char_ids([["a", "river", "bank"]])).layers
    batched = model(
        *batch_char_ids([["a", "river", "bank"], ["a", "much", "longer", "sentence", "here", "."]])
    )
    for a, b in zip(alone, batched.layers):
        torch.testing.assert_close(a[0], b[0, :5], atol=1e-6, rtol=1e-5)


def test_reverse_padded_is_its_own_inverse():
    x = torch.arange(12.0).view(2, 6, 1)
    lengths = torch.tensor([4, 6])
    r = reverse_padded(x, lengths)
    assert r[0, :, 0].tolist() == [3, 2, 1, 0, 4, 5] and r[1, :, 0].tolist() == [11, 10, 9, 8, 7, 6]
    torch.testing.assert_close(reverse_padded(r, lengths), x)


def test_stateless_by_default_and_stateful_flag():
    torch.manual_seed(0)
    model = ElmoBiLM(TINY).eval()
    sentence = batch_char_ids([["The", "bank", "closed", "."]])
    other = batch_char_ids([["Rivers", "flood", "their", "banks", "every", "spring", "."]])
    first = model(*sentence).layers
    model(*other)
    again = model(*sentence).layers
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    model.set_stateful(True)
    model(*other)
    carried = model(*sentence).layers
    assert not torch.allclose(carried[1], first[1])  # the state of the previous batch was used
    model.set_stateful(False)


def test_stateful_continues_a_long_document():
    torch.manual_seed(0)
    stack = BiLSTMStack(4, 10, 4, num_layers=2).eval()
    x = torch.randn(2, 9, 4)
    full_mask = torch.ones(2, 9, dtype=torch.bool)
    whole = stack(x, full_mask)
    stack.stateful = True
    stack.reset_states()
    stack(x[:, :5], full_mask[:, :5])
    second = stack(x[:, 5:], full_mask[:, 5:])
    for w, s in zip(whole, second):  # the forward half continues exactly where the first piece stopped
        torch.testing.assert_close(s[..., :4], w[:, 5:, :4], atol=1e-6, rtol=1e-5)


def test_scalar_mix():
    torch.manual_seed(0)
    mix = ScalarMix(3)
    layers = [torch.randn(2, 5, 8) for _ in range(3)]
    torch.testing.assert_close(mix(layers), sum(layers) / 3)
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([0.0, 1.0, 2.0]))
        mix.gamma.fill_(2.0)
    w = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    torch.testing.assert_close(mix(layers), 2.0 * sum(wi * h for wi, h in zip(w, layers)))
    normed = ScalarMix(3, layer_norm=True)
    expected = sum(torch.nn.functional.layer_norm(h, (8,), eps=1e-12) for h in layers) / 3
    torch.testing.assert_close(normed(layers), expected)
    # per token: one sentence's vector does not depend on the batch
    torch.testing.assert_close(normed([h[:1] for h in layers]), expected[:1])


@pytest.mark.parametrize(
    "name, count",
    [("elmo-small", 13_593_296), ("elmo-medium", 28_027_728), ("elmo", 93_600_848)],
)
def test_parameter_counts_match_allennlp_table(name, count):
    # AllenNLP's ELMo page: Small 13.6M, Medium 28.0M, Original 93.6M (exact counts of the released files)
    with torch.device("meta"):
        model = ElmoBiLM(get_preset(name))
    assert count_parameters(model) == count
    assert round(count / 1e6, 1) == {"elmo-small": 13.6, "elmo-medium": 28.0, "elmo": 93.6}[name]


@pytest.mark.parametrize("cutoffs", [(), (5, 20)])
def test_lm_loss_both_directions(cutoffs):
    torch.manual_seed(0)
    config = dataclasses.replace(TINY, vocab_size=40, adaptive_cutoffs=cutoffs)
    model = ElmoBiLM(config)
    ids, mask = batch_char_ids([["a", "b", "c"], ["d", "e"]])
    word_ids = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 9, 2, -100]])
    out = model(ids, mask, word_ids)
    assert out.num_predictions == 7  # 4 + 3 words each direction
    assert torch.isclose(out.loss, 0.5 * (out.nll_forward + out.nll_backward) / 7)
    # the forward LM at position t must not see word t+1: changing the last word leaves earlier forward states
    ids2 = ids.clone()
    ids2[0, 3] = batch_char_ids([["zzz"]])[0][0, 1]
    model.eval()
    a, b = model(ids, mask).layers[-1], model(ids2, mask).layers[-1]
    P = config.projection_dim
    torch.testing.assert_close(a[0, :3, :P], b[0, :3, :P])
    assert not torch.allclose(a[0, :3, P:], b[0, :3, P:])  # the backward LM does see it
    out.loss.backward()
    # every parameter below the softmax learns (an adaptive softmax's unused tail clusters get no gradient)
    assert all(
        p.grad is not None for n, p in model.named_parameters() if p.requires_grad and "softmax" not in n
    )
