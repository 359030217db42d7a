"""Training parity with HF transformers on identical weights and batches.

The models, batches, optimizer and loop are those of ``benchmarks/training_parity.py`` (imported from its
file), on tiny configurations (H=32, 2 layers, V=99):

- one forward + backward: every parameter's gradient equals HF's for the mapped parameter within
  1e-5 abs + 1e-4 rel, for masked LM (`EncoderForPreTraining`, plain and through `MaskedLMPreTrainer`, vs
  ``BertForMaskedLM``), sequence classification (vs ``BertForSequenceClassification``) and translation
  (`Seq2Seq` vs ``MarianMTModel``, with and without label smoothing, gelu and relu); the decay split agrees
  parameter by parameter on both sides;
- Marian's one known difference (its embedding's padding index) is pinned: only the pad row differs;
- the comparison catches a setting that differs between the sides (a different clip norm, a missing decay
  exclusion), through the parameters' updates over the first 20 steps;
- ``slow``: 200 steps of AdamW + linear warm-up/decay + clipping on each task, the first 20 steps' losses
  within 1e-4 relative, every parameter's change over them within 1e-3 of HF's, and the mean loss over the
  last 20 steps within 2%.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
# transformers imports its model classes lazily, at first use (seconds on a loaded machine): resolve them at
# collection rather than inside whichever test comes first.
_HF_CLASSES = (
    transformers.BertForMaskedLM,
    transformers.BertForSequenceClassification,
    transformers.MarianMTModel,
)

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "training_parity.py"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("attnlab_benchmark_training_parity", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


tp = _load_benchmark()


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _gradient_failures(pair, sizes=tp.TINY) -> list[str]:
    batch = pair.batches(1, sizes, 1)[0]
    failures = []
    for variant, rows in tp.gradient_differences(pair, batch).items():
        assert len(rows) == len(pair.names)
        failures += [
            f"{variant} {name}: max|grad - HF grad| {diff:.3g} > allowed {allowed:.3g}"
            for name, diff, allowed in rows
            if not diff <= allowed
        ]
    return failures


RELU = dataclasses.replace(tp.TINY, mt_activation="relu")  # the paper's FFN (the benchmark trains with gelu)
CASES = {  # name -> (task, sizes, build options)
    "mlm": ("mlm", tp.TINY, {}),
    "cls": ("cls", tp.TINY, {}),
    "mt-smoothed": ("mt", tp.TINY, {"label_smoothing": 0.1}),  # HF side: torch's smoothed CE on HF's logits
    "mt-hf-loss": ("mt", tp.TINY, {"label_smoothing": 0.0}),  # HF side: MarianMTModel's own loss
    "mt-relu": ("mt", RELU, {"label_smoothing": 0.1}),
}


@pytest.mark.parametrize("case", CASES)
def test_one_step_gradients_match_hf(case: str) -> None:
    task, sizes, options = CASES[case]
    pair = tp.build(task, sizes, seed=3, perturb=True, **options)
    failures = _gradient_failures(pair, sizes)
    assert not failures, "\n".join(failures)
    # Every trainable HF parameter has its attnlab counterpart, and the decay split is the same.
    first, _ = next(iter(pair.ours.values()))
    _, hf_groups, disagreements = tp.aligned_param_groups(first, pair.hf, pair.names)
    assert not disagreements, f"decayed on one side only: {disagreements}"
    hf_trainable = {id(p) for p in pair.hf.parameters() if p.requires_grad}
    assert {id(p) for g in hf_groups for p in g["params"]} == hf_trainable


def test_marian_padding_index_is_the_only_difference() -> None:
    """HF's Marian embedding has padding_idx = pad = its decoder start token, so the start token's
    input-side gradient is dropped there and kept in attnlab: the shared embedding's pad row differs, nothing
    else."""
    pair = tp.build("mt", tp.TINY, seed=3, perturb=True, hf_padding_idx=True)
    failures = _gradient_failures(pair)
    assert failures == [failures[0]] and failures[0].startswith("attnlab src_embed.word.weight:"), failures
    ours = pair.ours["attnlab"][0].src_embed.word.weight.grad
    theirs = pair.hf.get_parameter(pair.names["src_embed.word.weight"]).grad
    rows = (ours - theirs).abs().amax(dim=1) > 1e-5 + 1e-4 * theirs.abs().amax(dim=1)
    assert rows.nonzero().flatten().tolist() == [tp.MT_PAD]


def _all_decayed_on_hf(ours, hf, names):
    """The project's split on attnlab's side, everything decayed on HF's (biases and LayerNorm included),
    with the disagreement hidden: only the training comparison can tell."""
    ours_groups, hf_groups, _ = tp.aligned_param_groups(ours, hf, names)
    everything = [p for g in hf_groups for p in g["params"]]
    return ours_groups, [{"params": everything, "weight_decay": tp.WEIGHT_DECAY}], []


@pytest.mark.parametrize("bug", ["none", "clip 0.5 on HF", "no decay exclusions on HF"])
def test_training_comparison_catches_a_setting_that_differs(bug: str) -> None:
    """20 steps: with identical settings every criterion passes; a different clip norm or a missing decay
    exclusion on one side moves the parameters apart by far more than 1e-3 of their updates (the losses
    alone would not show it: Adam is nearly invariant to the gradient's scale)."""
    options = {"none": {}, "clip 0.5 on HF": {"hf_clip": 0.5}}.get(bug, {"groups_fn": _all_decayed_on_hf})
    c = tp.run_task("cls", tp.TINY, steps=20, seed=1, **options).comparisons["attnlab"]
    if bug == "none":
        assert c.ok, c
    else:
        assert c.update_rel > 10 * tp.UPDATE_RTOL and not c.ok, c


@pytest.mark.slow
@pytest.mark.parametrize("task", ["mlm", "cls", "mt"])
def test_training_curves_match_hf(task: str) -> None:
    steps = 200
    result = tp.run_task(task, tp.TINY, steps=steps, seed=0, lr=1e-3)  # tiny models learn at 1e-3
    assert not result.decay_disagreements
    hf = result.losses["HF"]
    tail = steps // 10
    assert sum(hf[-tail:]) / tail < 0.95 * sum(hf[:tail]) / tail, (
        "HF did not learn: the comparison is vacuous"
    )
    for variant, c in result.comparisons.items():
        ours = result.losses[variant]
        assert len(ours) == steps
        assert c.early_ok, (
            f"{variant}: first {tp.EARLY_STEPS} steps differ by {c.early_rel:.2e} relative: "
            f"{ours[: tp.EARLY_STEPS]} vs {hf[: tp.EARLY_STEPS]}"
        )
        assert c.tail_ok, f"{variant}: last {tail} steps' mean {c.tail_ours:.5f} vs HF {c.tail_hf:.5f}"
        assert c.update_ok, f"{variant}: {c.update_param} moved differently, rel {c.update_rel:.2e}"
