"""The Trainer: exact resume, accumulation, NaN stop, evaluation, logs, precision, config checks."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest
import torch
from test_train_tiny import (
    RegressionDataset,
    TinyLM,
    TinyMLP,
    TokenDataset,
    lm_config,
    lm_trainer,
)
from torch import nn

from attnlab.train import NonFiniteLossError, ResumableLoader, Trainer, TrainerConfig, set_seed
from attnlab.train.checkpoint import read_model_file

# Bit-exact comparisons need the same reduction order in every run: one intra-op thread (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def _assert_same_weights(a: nn.Module, b: nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), f"{name} differs (max abs diff {(x - y).abs().max().item():.3g})"


def _send_at(step: int, signum: int):
    def callback(trainer, record):
        if record["step"] == step:
            os.kill(os.getpid(), signum)  # a real signal, delivered to this process's handler

    return callback


@pytest.mark.parametrize(
    "precision,optimizer",
    [("fp32", "adamw"), ("fp16", "lamb"), ("bf16", "adamw")],
    ids=["fp32", "fp16", "bf16"],
)
def test_interrupted_and_resumed_run_equals_uninterrupted_bit_for_bit(tmp_path, precision, optimizer) -> None:
    # 64 examples / batch 4 = 16 batches per epoch = 8 steps with grad_accum_steps=2: 10 steps cross an epoch.
    kw = dict(precision=precision, optimizer=optimizer)
    full = lm_trainer(tmp_path / "full", 10, **kw)
    full.train()

    cut = lm_trainer(tmp_path / "cut", 10, **kw)
    cut.callbacks.append(_send_at(5, signal.SIGTERM))
    result = cut.train()
    assert result.interrupted and result.step == 5
    assert result.last_checkpoint.name == "step-000005"  # saved at the step boundary after the signal
    state = json.loads((result.last_checkpoint / "trainer_state.json").read_text())
    assert state["interrupted_by"] == "SIGTERM" and state["step"] == 5

    resumed = lm_trainer(tmp_path / "cut", 10, **kw)
    assert resumed.resume("latest").name == "step-000005"
    assert resumed.train().step == 10
    _assert_same_weights(full.model, resumed.model)
    assert resumed.model.head.weight is resumed.model.embed.weight  # the tie survives a resume

    # From a regular checkpoint at the end of the first epoch (loader state: position == batches per epoch).
    from_eight = lm_trainer(tmp_path / "full", 10, **kw)
    from_eight.resume(tmp_path / "full" / "checkpoints" / "step-000008")
    from_eight.train()
    _assert_same_weights(full.model, from_eight.model)


def test_resume_without_restoring_rng_would_differ(tmp_path) -> None:
    # The control for the test above: dropout makes a run depend on the RNG stream.
    a = lm_trainer(tmp_path / "a", 4)
    a.train()
    b = lm_trainer(tmp_path / "b", 4, seed=2)
    b.train()
    assert any(not torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))


def test_plain_list_of_batches_resumes_exactly(tmp_path) -> None:
    data = TokenDataset(24)
    batches = [torch.utils.data.default_collate([data[i] for i in range(j, j + 4)]) for j in range(0, 24, 4)]

    def make(out):
        set_seed(0)
        cfg = lm_config(out, 10, grad_accum_steps=1, save_every=3)
        return Trainer(TinyLM(), cfg, batches)

    full = make(tmp_path / "full")
    full.train()
    cut = make(tmp_path / "cut")
    cut.callbacks.append(_send_at(7, signal.SIGINT))
    assert cut.train().step == 7
    resumed = make(tmp_path / "cut")
    resumed.resume()
    assert (resumed._plain_epoch, resumed._plain_position) == (1, 1)
    resumed.train()
    _assert_same_weights(full.model, resumed.model)


def test_gradient_accumulation_equals_the_large_batch(tmp_path) -> None:
    def run(batch_size, accum, out):
        set_seed(0)
        model = TinyMLP()
        loader = ResumableLoader(RegressionDataset(), batch_size, seed=5, drop_last=True)
        cfg = TrainerConfig(
            max_steps=6, grad_accum_steps=accum, lr=1e-2, clip_norm=0.5, output_dir=out,
            log_every=0, tensorboard=False, progress_bar=False, plot=False, weight_decay=0.1,
        )  # fmt: skip
        Trainer(model, cfg, loader).train()
        return model

    big = run(8, 1, tmp_path / "big")
    small = run(4, 2, tmp_path / "small")  # micro-batches 2k, 2k+1 of size 4 are batch k of size 8
    for x, y in zip(big.parameters(), small.parameters()):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6)
    moved = run(8, 1, tmp_path / "again")
    _assert_same_weights(big, moved)


class NaNAt(TinyMLP):
    def __init__(self, call: int) -> None:
        super().__init__()
        self.calls, self.nan_call = 0, call

    def forward(self, x, y):
        self.calls += 1
        out = super().forward(x, y)
        if self.calls == self.nan_call:
            out["loss"] = out["loss"] * float("nan")
        return out


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path) -> None:
    set_seed(0)
    model = NaNAt(call=5)  # grad_accum_steps=2: the 5th forward belongs to step 3
    cfg = TrainerConfig(
        max_steps=10, grad_accum_steps=2, batch_size=4, save_every=2, output_dir=tmp_path,
        log_every=1, tensorboard=False, progress_bar=False, plot=False,
    )  # fmt: skip
    trainer = Trainer(model, cfg, RegressionDataset())
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at step 3 .*step-000002"):
        trainer.train()
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert checkpoints == ["step-000002"]
    saved = TinyMLP()
    saved.load_state_dict(read_model_file(tmp_path / "checkpoints" / "step-000002" / "model.safetensors"))
    _assert_same_weights(saved, _strip(model))  # the NaN step updated nothing after step 2
    assert all(torch.isfinite(p).all() for p in model.parameters())


def _strip(model: NaNAt) -> TinyMLP:
    plain = TinyMLP()
    plain.load_state_dict(model.state_dict())
    return plain


class MeanAbsLogit:
    """A streaming metric: update(output, batch) / compute()."""

    def reset(self):
        self.total, self.n = 0.0, 0

    def update(self, output, batch):
        self.total += output["logits"].abs().sum().item()
        self.n += output["logits"].numel()

    def compute(self):
        return {"mean_abs_logit": self.total / self.n}


def test_evaluation_averages_by_examples_and_runs_metric_functions(tmp_path) -> None:
    set_seed(0)
    model = TinyLM(dropout=0.0)
    eval_loader = ResumableLoader(TokenDataset(10, seed=9), 4, shuffle=False)  # batches of 4, 4, 2
    batches = list(eval_loader.iter_epoch(0))
    with torch.no_grad():
        losses = [model(**b)["loss"].item() for b in batches]
    expected = (4 * losses[0] + 4 * losses[1] + 2 * losses[2]) / 10

    def accuracy(outputs, batches):
        hits = sum(((o["logits"].argmax(-1) == b["labels"]).sum().item()) for o, b in zip(outputs, batches))
        return {"accuracy": hits / sum((b["labels"] != -100).sum().item() for b in batches)}

    cfg = lm_config(tmp_path, 4, lm_perplexity=True)
    for metric in (accuracy, MeanAbsLogit()):
        trainer = Trainer(model, cfg, TokenDataset(), eval_data=eval_loader, metric_fn=metric)
        before = torch.get_rng_state()
        results = trainer.evaluate()
        assert torch.equal(torch.get_rng_state(), before)  # evaluation leaves the RNG stream alone
        assert results["eval_loss"] == pytest.approx(expected, rel=1e-6)
        # every example predicts 11 tokens, so the token-weighted mean is the example-weighted one
        assert results["eval_perplexity"] == pytest.approx(math.exp(expected), rel=1e-6)
        assert ("eval_accuracy" in results) != ("eval_mean_abs_logit" in results)
    assert model.training


def test_logs_tensorboard_and_loss_curve(tmp_path) -> None:
    eval_data = ResumableLoader(TokenDataset(8, seed=4), 4, shuffle=False)
    trainer = lm_trainer(tmp_path, 4, tensorboard=True, plot=True, log_every=2, eval_every=2)
    trainer.eval_data = eval_data
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in train] == [2, 4] and [r["step"] for r in evals] == [2, 4]
    for r in train:
        assert {"loss", "lr", "tokens_per_s", "examples_per_s", "grad_norm", "accuracy", "epoch"} <= set(r)
        assert math.isfinite(r["loss"]) and r["tokens_per_s"] > 0
    assert train[-1]["tokens_seen"] == 4 * 2 * 4 * 12  # steps * accumulation * batch * attention_mask ones
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tensorboard").iterdir())
    assert (tmp_path / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_epochs_set_the_number_of_steps(tmp_path) -> None:
    set_seed(0)
    cfg = lm_config(tmp_path, None, epochs=1.5, batch_size=4, grad_accum_steps=2, warmup=0.1)
    trainer = Trainer(TinyLM(), cfg, TokenDataset(64), collate_fn=None)
    assert len(trainer.train_loader) == 16 and trainer.total_steps == 12  # ceil(1.5 * 16 / 2)
    assert trainer.train().step == 12
    assert trainer.train_loader.state_dict()["epoch"] == 1


def test_bad_batches_and_outputs_are_reported(tmp_path) -> None:
    cfg = lm_config(tmp_path, 2, grad_accum_steps=1)
    with pytest.raises(TypeError, match="mapping"):
        Trainer(TinyLM(), cfg, [(torch.zeros(1),)]).train()

    class NoLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return {"logits": x * self.w}

    with pytest.raises(ValueError, match="without a loss"):
        Trainer(NoLoss(), cfg, [{"x": torch.ones(2)}]).train()
    with pytest.raises(TypeError, match="re-iterable"):
        Trainer(TinyLM(), cfg, iter([{"x": 1}]))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        Trainer(TinyLM(), lm_config(tmp_path / "empty", 2), TokenDataset()).resume("latest")
    grouped = TrainerConfig(max_steps=2, output_dir=tmp_path / "grouped", group_by_length=True)
    with pytest.raises(ValueError, match="group_by_length needs the lengths.*TokenDataset has no `lengths`"):
        Trainer(TinyLM(), grouped, TokenDataset())
    with pytest.raises(ValueError, match="group_by_length needs a Dataset with `lengths`.*list"):
        Trainer(TinyLM(), grouped, [{"x": torch.ones(2)}])


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("precision", "fp8", "precision"),
        ("schedule", "polynomial", "schedule"),
        ("optimizer", "sgd", "optimizer"),
        ("grad_accum_steps", 0, "grad_accum_steps"),
        ("warmup", -3, "warmup"),
        ("betas", (0.9, 1.5), "betas"),
        ("keep_last", 0, "keep_last"),
        ("clip_norm", 0.0, "clip_norm"),
    ],
)
def test_config_errors_name_the_field(field, value, match) -> None:
    with pytest.raises(ValueError, match=match):
        TrainerConfig(max_steps=10, **{field: value})


def test_config_needs_exactly_one_length() -> None:
    with pytest.raises(ValueError, match="exactly one of max_steps and epochs"):
        TrainerConfig()
    with pytest.raises(ValueError, match="exactly one"):
        TrainerConfig(max_steps=3, epochs=1)
    assert json.dumps(TrainerConfig(max_steps=3).to_dict())  # serialisable for trainer_state.json


@pytest.mark.slow
def test_compiled_model_trains_and_saves_the_plain_names(tmp_path) -> None:
    from safetensors import safe_open

    trainer = lm_trainer(tmp_path, 2, compile=True)
    trainer.train()
    with safe_open(str(trainer.last_checkpoint / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert keys and not any("_orig_mod" in k for k in keys)
    assert keys | {"head.weight"} == set(TinyLM().state_dict())


def test_train_again_after_an_interruption_continues_in_the_same_process(tmp_path) -> None:
    def make(out):
        set_seed(0)
        cfg = TrainerConfig(
            max_steps=6, batch_size=4, grad_accum_steps=2, output_dir=out, log_every=0,
            tensorboard=False, progress_bar=False, plot=False,
        )  # fmt: skip
        return Trainer(TinyMLP(), cfg, RegressionDataset(40))

    full = make(tmp_path / "full")
    full.train()
    cut = make(tmp_path / "cut")
    cut.callbacks.append(_send_at(3, signal.SIGINT))
    assert cut.train().interrupted
    cut.callbacks.clear()
    assert cut.train().step == 6  # the stop flag is cleared; the loader continues where it stopped
    _assert_same_weights(full.model, cut.model)
    assert (tmp_path / "cut" / "log.jsonl").read_text() == ""  # log_every=0 writes no training records


def test_request_stop_saves_and_returns_like_a_signal(tmp_path) -> None:
    trainer = lm_trainer(tmp_path, 10)
    trainer.callbacks.append(lambda t, r: t.request_stop("time limit") if r["step"] == 3 else None)
    result = trainer.train()
    assert result.interrupted and result.step == 3 and result.last_checkpoint.name == "step-000003"
    assert (
        json.loads((result.last_checkpoint / "trainer_state.json").read_text())["interrupted_by"]
        == "time limit"
    )


def test_time_budget_ends_the_run_normally_at_a_step_boundary(tmp_path) -> None:
    """max_minutes ends like total_steps does (not interrupted, final checkpoint at that step)."""
    trainer = lm_trainer(tmp_path, 10_000, sleep=0.05, max_minutes=0.2 / 60)  # 0.2 s, ~0.1 s per step
    result = trainer.train()
    assert not result.interrupted
    assert 1 <= result.step < 20
    assert result.last_checkpoint.name == f"step-{result.step:06d}"
    state = json.loads((result.last_checkpoint / "trainer_state.json").read_text())
    assert state.get("interrupted_by") is None


def test_time_budget_must_be_positive(tmp_path) -> None:
    with pytest.raises(ValueError, match="max_minutes"):
        lm_config(tmp_path, 5, max_minutes=0)


def test_evaluation_keeps_no_weight_copies(tmp_path) -> None:
    """No-grad products of a model optimized for inference keep copies of weights (attnlab.accel.derived: the
    kernel's panels), which would be stale at the next optimizer step; the trainer's model is plain, so its
    evaluation makes none (and the trainer imports nothing from attnlab.accel to drop them)."""
    from attnlab.accel import derived

    set_seed(0)
    model = TinyLM(dropout=0.0)
    eval_loader = ResumableLoader(TokenDataset(10, seed=9), 4, shuffle=False)
    Trainer(model, lm_config(tmp_path, 4), TokenDataset(), eval_data=eval_loader).evaluate()
    assert not any(m in derived._CACHE for m in model.modules())
