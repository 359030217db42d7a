"""What `translate-train` takes for the options a user leaves out:
on a CPU the model and warm-up that experiments/translate_multi30k.py measured (test2016 BLEU 36.51 in 55
minutes on 2 cores), on a GPU the paper's base model; a given option always wins."""

from __future__ import annotations

import pytest

from attnlab.translation.config import count_parameters, preset
from attnlab.translation.plan import CPU_SIZES, GPU_SIZES, PAPER_WARMUP, planned_warmup, sizes_for


def test_cpu_preset_is_the_measured_model() -> None:
    config = preset("transformer-cpu", vocab_size=8000)
    assert (config.num_layers, config.d_model, config.d_ff, config.num_heads) == (3, 256, 1024, 4)
    assert config.head_dim == 64 and config.dropout == 0.1 and config.label_smoothing == 0.1
    assert not config.norm_first  # the paper's post-LN, as measured
    assert count_parameters(config) == 7_577_600  # "7.6M parameters with an 8k vocabulary"


@pytest.mark.parametrize(
    ("device", "sizes"), [("cpu", CPU_SIZES), ("cuda", GPU_SIZES), ("cuda:1", GPU_SIZES), ("mps", GPU_SIZES)]
)
def test_sizes_follow_the_device(device: str, sizes) -> None:
    assert sizes_for(device) is sizes


def test_default_sizes() -> None:
    assert (CPU_SIZES.preset, CPU_SIZES.warmup, CPU_SIZES.max_tokens) == ("transformer-cpu", 800, 2500)
    assert (GPU_SIZES.preset, GPU_SIZES.warmup) == ("transformer-base", PAPER_WARMUP)
    for sizes in (CPU_SIZES, GPU_SIZES):
        preset(sizes.preset)  # a valid name


def test_bad_device_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'gpu0'.*cpu, cuda"):
        sizes_for("gpu0")


@pytest.mark.parametrize(
    ("planned", "expected"),
    [(3420, 800), (3200, 800), (900, 225), (100, 25), (2, 1)],  # the measured hour keeps its 800
)
def test_default_warmup_is_at_most_a_quarter_of_the_plan(planned: int, expected: int) -> None:
    assert planned_warmup(800, planned, lambda m: None, share=0.25) == expected


def test_cli_default_preset_follows_the_device(tmp_path, monkeypatch) -> None:
    """`--preset` given always wins; left out, it is the device's (checked before anything is trained)."""
    from attnlab.cli import main

    seen = {}

    def fake_train(*args, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt  # stop before training

    monkeypatch.setattr("attnlab.translation.recipe.train_translation", fake_train)
    for name, text in (("train.en", "a dog\n"), ("train.de", "ein hund\n")):
        (tmp_path / name).write_text(text, encoding="utf-8")
    base = [
        "translate-train",
        "--data-dir",
        str(tmp_path),
        "--output-dir",
        str(tmp_path / "o"),
        "--device",
        "cpu",
    ]
    assert main([*base, "--minutes", "60"]) == 130
    assert seen["preset_name"] == "transformer-cpu" and seen["warmup"] == 800 and seen["max_tokens"] == 2500
    assert seen["auto_steps"] and seen["warmup_share"] == 0.25 and seen["save_every"] == 50
    seen.clear()
    assert main([*base, "--preset", "transformer-base", "--warmup", "4000", "--max-steps", "10"]) == 130
    assert seen["preset_name"] == "transformer-base" and seen["warmup"] == 4000 and seen["max_steps"] == 10
    assert not seen["auto_steps"] and seen["warmup_share"] is None
    seen.clear()
    assert main(base) == 130  # neither --minutes nor --max-steps: the paper's 100,000 steps
    assert seen["max_steps"] == 100_000 and not seen["auto_steps"]
