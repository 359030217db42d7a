"""Universal Transformer (attnlab.models.universal) and adaptive computation time (attnlab.nn.act)."""

from __future__ import annotations

import pytest
import torch

from attnlab.models.universal import TaggingModel, UniversalStack, VanillaStack, make_layer
from attnlab.nn.act import AdaptiveComputationTime, HaltingState, halting_step
from attnlab.nn.local_attention import LocalSelfAttention
from attnlab.nn.masks import causal_mask


def test_halting_by_hand():
    # three positions with fixed halting probabilities per step, threshold 0.99:
    #   a: 0.3, 0.5, 0.4 -> runs on at 0.3, 0.8; would pass 0.99 at step 3: R = 0.2, N = 3, rho = 3.2
    #   b: 0.995         -> halts at step 1 with R = 1, N = 1, rho = 2
    #   c: 0.1 x 3       -> never passes; forced to halt at the last step (3): R = 0.8, N = 3, rho = 3.8
    h = torch.tensor([[0.3, 0.995, 0.1], [0.5, 0.9, 0.1], [0.4, 0.9, 0.1]])  # (S, T)
    state = HaltingState.start(h[0][None])
    weights = []
    for n in range(3):
        w, state = halting_step(h[n][None], state, threshold=0.99, last=n == 2)
        weights.append(w[0])
    w = torch.stack(weights)
    expected = torch.tensor([[0.3, 1.0, 0.1], [0.5, 0.0, 0.1], [0.2, 0.0, 0.8]])
    assert torch.allclose(w, expected, atol=1e-6)
    assert torch.allclose(state.remainder[0], torch.tensor([0.2, 1.0, 0.8]), atol=1e-6)
    assert state.steps[0].tolist() == [3.0, 1.0, 3.0]
    assert torch.allclose(state.ponder_cost[0], torch.tensor([3.2, 2.0, 3.8]), atol=1e-6)
    assert not state.running.any()


def test_act_weights_sum_to_one_and_output_is_their_mix():
    torch.manual_seed(0)
    act = AdaptiveComputationTime(8, max_steps=5, bias_init=-1.0)  # low halting: some positions use all steps
    x = torch.randn(2, 7, 8)
    states = []

    def step(h, n):
        h = torch.tanh(h * 1.3 + n)
        states.append(h)
        return h

    out = act(x, step)
    s = out.weights.size(0)
    assert torch.allclose(out.weights.sum(0), torch.ones(2, 7), atol=1e-6)
    assert (out.weights >= 0).all()
    mix = sum(out.weights[n].unsqueeze(-1) * states[n] for n in range(s))
    assert torch.allclose(out.output, mix, atol=1e-6)
    # a position's steps = the number of steps with a non-zero weight, remainder = its last weight
    assert torch.equal(out.steps, (out.weights > 0).sum(0).float())
    last = out.weights.gather(0, (out.steps.long() - 1)[None])[0]
    assert torch.allclose(out.ponder_cost, out.steps + last, atol=1e-6)
    assert out.steps.min() >= 1 and out.steps.max() <= 5


def test_copy_halted_keeps_a_halted_positions_state():
    # the paper's text: once a position halts its state is copied to the later steps. The step function
    # records what it is given; a position that halted at step N must be handed the same state at every
    # later step, while the default (tensor2tensor's) keeps transforming it
    torch.manual_seed(5)
    x = torch.randn(2, 6, 8)
    for copy in (True, False):
        act = AdaptiveComputationTime(8, max_steps=5, bias_init=-0.5, copy_halted=copy)
        seen: list[torch.Tensor] = []

        def step(h, n, seen=seen):
            seen.append(h)
            return torch.tanh(h * 1.7 + 0.3 * n)

        out = act(x, step)
        assert torch.allclose(out.weights.sum(0), torch.ones(2, 6), atol=1e-6)
        halted_early = out.steps < len(seen)  # positions that halted while others ran on
        assert halted_early.any() and (~halted_early).any()
        for n in range(1, len(seen)):
            # halted after N < n steps: step n is handed the state of step N - 1, as step n - 1 was
            done = out.steps < n
            changed = (seen[n] - seen[n - 1]).abs().amax(-1) > 0  # (B, T)
            if copy:
                assert not changed[done].any()
            elif done.any():
                assert changed[done].all()
            assert changed[~done].all()  # running positions are transformed


def test_act_padding_takes_no_steps_and_changes_no_real_position():
    # padded positions (masked as keys) start halted: steps, weights and ponder cost 0 there, and they no
    # longer keep the loop running; the real positions' outputs are what they were without the padding mask
    torch.manual_seed(6)
    layer = make_layer(16, 2, 32).eval()
    act = AdaptiveComputationTime(16, 8, bias_init=-1.0)
    stack = UniversalStack(layer, 16, 8, act=act).eval()
    x = torch.randn(2, 7, 16)
    real = torch.ones(2, 7, dtype=torch.bool)
    real[1, 4:] = False
    mask = real[:, None, None, :]
    with torch.no_grad():
        act.halting.weight.zero_()  # every position halts after the same number of steps ...
        act.halting.bias.fill_(-3.0)  # ... sigmoid(-3) = 0.047 a step: the 8-step maximum
        plain = stack(x, self_mask=mask)
        padded = stack(x, self_mask=mask, padding=real)
        assert torch.allclose(padded.hidden[real], plain.hidden[real], atol=1e-6)
        assert torch.equal(padded.steps[real], plain.steps[real])
        assert (padded.steps[~real] == 0).all() and (padded.ponder_cost[~real] == 0).all()
        assert (padded.hidden[~real] == 0).all()
    # the loop stops once the real positions halt: feature 0 decides halting (real +1: halt at once; padding
    # -1: never), the step function leaves it; without the padding mask the loop runs to its maximum
    with torch.no_grad():
        act.halting.weight.zero_()
        act.halting.weight[0, 0] = 100.0
        act.halting.bias.zero_()
    x[..., 0] = torch.where(real, 1.0, -1.0)
    for active, expected in ((None, 8), (real, 1)):
        calls: list[int] = []
        out = act(x, lambda h, n, calls=calls: calls.append(n) or h, active)
        assert len(calls) == expected
        assert (out.steps[real] == 1).all()


def test_without_act_equals_the_layer_applied_n_times():
    torch.manual_seed(1)
    layer = make_layer(16, 2, 32).eval()
    stack = UniversalStack(layer, 16, max_steps=4).eval()
    x = torch.randn(2, 9, 16)
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, 6:] = False
    mask = keep[:, None, None, :]
    got = stack(x, self_mask=mask).hidden
    h = x
    pos = stack.position_signal[:9]
    for t in range(4):
        h = layer(h + pos + stack.timestep_signal[t], mask)
    assert torch.allclose(got, h, atol=1e-6)
    # and with the signals removed it is exactly layer(layer(layer(layer(x))))
    stack.position_signal.zero_()
    stack.timestep_signal.zero_()
    h = x
    for _ in range(4):
        h = layer(h, mask)
    assert torch.allclose(stack(x, self_mask=mask).hidden, h, atol=1e-6)
    # the same parameters every step: the stack holds one layer
    assert sum(p.numel() for p in stack.parameters()) == sum(p.numel() for p in layer.parameters())


def test_per_row_steps_equal_each_row_run_at_its_own_depth():
    torch.manual_seed(2)
    layer = make_layer(16, 2, 32).eval()
    stack = UniversalStack(layer, 16, max_steps=6, inject_input=True).eval()
    x = torch.randn(3, 5, 16)
    steps = torch.tensor([1, 4, 6])
    out = stack(x, steps=steps)
    assert out.steps.tolist() == [[1.0] * 5, [4.0] * 5, [6.0] * 5]
    for i, k in enumerate(steps.tolist()):
        alone = UniversalStack(layer, 16, max_steps=k, inject_input=True).eval()
        assert torch.allclose(out.hidden[i], alone(x[i : i + 1]).hidden[0], atol=1e-6)
    # a row whose depth the others exceed keeps its state: steps 6 for all changes only rows 0 and 1
    deep = stack(x, steps=torch.tensor([6, 6, 6])).hidden
    assert torch.allclose(deep[2], out.hidden[2], atol=1e-6)
    assert not torch.allclose(deep[0], out.hidden[0], atol=1e-3)


def test_input_injection_and_no_timestep_signal():
    torch.manual_seed(3)
    layer = make_layer(16, 2, 32).eval()
    stack = UniversalStack(layer, 16, max_steps=3, inject_input=True, timestep_signal=False).eval()
    assert not stack.timestep_signal.any()
    x = torch.randn(2, 7, 16)
    pos = stack.position_signal[:7]
    h = layer(x + pos)  # step 0 reads the input once
    for _ in range(2):
        h = layer(h + pos + x)  # later steps read it again beside the position signal
    assert torch.allclose(stack(x).hidden, h, atol=1e-6)
    plain = UniversalStack(layer, 16, max_steps=3, timestep_signal=False).eval()
    assert not torch.allclose(plain(x).hidden, h, atol=1e-3)


def test_local_causal_window_moves_information_one_position_a_step():
    # a UT whose self-attention sees only the position before each (LocalSelfAttention, window 1, causal):
    # after k steps position i depends on positions i-k .. i and on nothing after it
    torch.manual_seed(4)
    layer = make_layer(16, 2, 32, self_attention=LocalSelfAttention(16, 2, 1, causal=True)).eval()
    x = torch.randn(1, 12, 16, requires_grad=True)
    for k in (1, 3, 5):
        stack = UniversalStack(layer, 16, max_steps=k).eval()
        probe = torch.randn(16)  # not .sum(): a post-LN state sums to a constant over its features
        (grad,) = torch.autograd.grad(stack(x).hidden[0, 8] @ probe, x)
        reaches = grad[0].abs().sum(-1) > 0  # (T,): which inputs position 8 depends on
        assert reaches.nonzero().flatten().tolist() == list(range(8 - k, 9))


def test_per_row_steps_are_checked():
    layer = make_layer(8, 2, 16)
    stack = UniversalStack(layer, 8, max_steps=3)
    with pytest.raises(ValueError, match="steps must lie in 1..3; got 0..4"):
        stack(torch.randn(2, 4, 8), steps=torch.tensor([0, 4]))
    act = UniversalStack(layer, 8, max_steps=3, act=AdaptiveComputationTime(8, 3))
    with pytest.raises(ValueError, match="ACT chooses its own"):
        act(torch.randn(2, 4, 8), steps=torch.tensor([1, 2]))


def test_timestep_signal_is_the_papers_sinusoid():
    stack = UniversalStack(make_layer(8, 2, 16), 8, max_steps=3, max_positions=5)
    t = 2
    i = torch.arange(0, 8, 2)
    assert torch.allclose(stack.timestep_signal[t, 0::2], torch.sin(t / 10000 ** (i / 8)), atol=1e-6)
    assert torch.allclose(stack.position_signal[t], stack.timestep_signal[t])  # the same sinusoid, eq. 1


def test_decoder_with_act_is_causal():
    # a decoder stack (cross-attention, causal mask) with ACT: position t's output and halting do not depend
    # on later inputs, since halting is per position and each step is causal
    torch.manual_seed(2)
    layer = make_layer(16, 2, 32, cross=True).eval()
    stack = UniversalStack(layer, 16, 6, act=AdaptiveComputationTime(16, 6, bias_init=-2.0)).eval()
    memory = torch.randn(1, 5, 16)
    x = torch.randn(1, 8, 16)
    x2 = x.clone()
    x2[:, 5:] += 1.0
    mask = causal_mask(8)
    a, b = stack(x, None, mask, memory), stack(x2, None, mask, memory)
    assert torch.allclose(a.hidden[:, :5], b.hidden[:, :5], atol=1e-5)
    assert torch.equal(a.steps[:, :5], b.steps[:, :5])
    assert not torch.allclose(a.hidden[:, 5:], b.hidden[:, 5:])


def test_tagging_model_trains_and_ponders():
    torch.manual_seed(3)
    act = AdaptiveComputationTime(16, 4)
    ut = TaggingModel(12, 16, UniversalStack(make_layer(16, 2, 32), 16, 4, act=act), ponder_weight=0.01)
    vanilla = TaggingModel(12, 16, VanillaStack([make_layer(16, 2, 32) for _ in range(2)], 16))
    ids = torch.randint(0, 12, (4, 10))
    for model in (ut, vanilla):
        out = model(ids, labels=ids)
        out.loss.backward()
        assert out.logits.shape == (4, 10, 12) and torch.isfinite(out.loss)
        assert model.head.weight is model.embed.weight
    assert ut.stack.act.halting.weight.grad is not None  # the ponder cost reaches the halting unit
    with pytest.raises(ValueError, match="max_steps"):
        UniversalStack(make_layer(16, 2, 32), 16, 4, act=AdaptiveComputationTime(16, 3))


def test_universal_transformer_trains_with_the_projects_trainer(tmp_path):
    # the existing Trainer drives the UT (ACT, ponder cost in the loss): a few steps on a copy-like task lower
    # the loss, and a checkpoint is written
    from attnlab.train import ResumableLoader, Trainer, TrainerConfig, set_seed

    class Shifted(torch.utils.data.Dataset):
        def __init__(self) -> None:
            self.ids = torch.randint(1, 12, (64, 10), generator=torch.Generator().manual_seed(0))

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> dict:
            ids = self.ids[i]
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}

    set_seed(0)
    act = AdaptiveComputationTime(16, 4)
    model = TaggingModel(12, 16, UniversalStack(make_layer(16, 2, 32), 16, 4, act=act), ponder_weight=0.01)
    config = TrainerConfig(
        max_steps=30, batch_size=8, lr=1e-2, output_dir=tmp_path, tensorboard=False, progress_bar=False,
        plot=False, log_every=1, save_every=30,
    )  # fmt: skip
    loader = ResumableLoader(Shifted(), batch_size=8, seed=1, shuffle=True, drop_last=True)
    batch = next(iter(torch.utils.data.DataLoader(Shifted(), batch_size=64)))
    before = model(**batch).loss.item()
    Trainer(model, config, loader).train()  # on the trainer's default device (cuda:0 where there is one)
    after = model(**{k: v.to(next(model.parameters()).device) for k, v in batch.items()}).loss.item()
    assert after < before - 0.5, (before, after)
