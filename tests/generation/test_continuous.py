"""attnlab.generation.continuous: rows joining and leaving a running batch get the tokens `generate` gives
each prompt alone (greedy and seeded sampling, on the plain model and on the accelerated one), whatever
else is in the batch and whenever they join; stop checks, limits and removal end a row at once."""

from __future__ import annotations

import copy

import pytest
import torch

from attnlab.accel import optimize
from attnlab.generation import GenerationConfig, generate
from attnlab.generation.continuous import ContinuousDecoder
from attnlab.models.gpt import GPTConfig, build_gpt

V, EOS = 50, 1

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module", params=["plain", "optimized"])
def model(request):
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=V, max_positions=64, hidden_size=32, num_layers=2, num_heads=4, dropout=0.0,
        embedding_dropout=0.0, attention_dropout=0.0, initializer_range=0.3, bos_token_id=EOS,
        eos_token_id=EOS,
    )  # fmt: skip
    m = build_gpt(cfg).eval()
    return optimize(copy.deepcopy(m)) if request.param == "optimized" else m


def prompts(n: int, seed: int = 7) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(2, V, (int(k),), generator=g).tolist() for k in torch.randint(1, 20, (n,), generator=g)
    ]


def alone(model, prompt: list[int], cfg: GenerationConfig) -> tuple[list[int], bool]:
    out = generate(model, torch.tensor([prompt]), config=cfg)
    return out.sequences[0], out.finished[0]


def run_staggered(model, work: list[tuple[list[int], GenerationConfig]], every: int = 2) -> list:
    """Add one request every ``every`` steps while the batch decodes; the rows in order of ``work``."""
    decoder = ContinuousDecoder(model)
    rows, pending, steps = [], list(work), 0
    while pending or decoder.rows:
        if pending and steps % every == 0:
            prompt, cfg = pending.pop(0)
            rows.append(decoder.add(prompt, cfg))
        decoder.step()
        steps += 1
    return rows


def test_greedy_rows_equal_generate_alone_whatever_joins_and_leaves(model):
    work = [(p, GenerationConfig(max_new_tokens=3 + 5 * (i % 4))) for i, p in enumerate(prompts(12))]
    rows = run_staggered(model, work)
    ended_early = 0
    for (prompt, cfg), row in zip(work, rows):
        tokens, finished = alone(model, prompt, cfg)
        assert row.generated == tokens and row.finished == finished
        ended_early += row.ended_with_eos
    assert ended_early < len(work)  # some rows ran to their limit while others came and went


@pytest.mark.filterwarnings("ignore:max_new_tokens=.*exceeds the context:UserWarning")  # rows reach it
def test_a_batch_that_never_empties_keeps_every_row_exact(model):
    """Arrivals for longer than the slab's spare columns (the window copied back to the left) and more rows
    at once than the first slab holds (the slab doubled)."""
    work = [(p, GenerationConfig(max_new_tokens=20 + 7 * (i % 5), ignore_eos=True))
            for i, p in enumerate(prompts(40, seed=11))]  # fmt: skip
    decoder = ContinuousDecoder(model)
    rows, pending, steps, most = [], list(work), 0, 0
    while pending or decoder.rows:
        if pending and steps % 3 == 0:
            rows.append(decoder.add(*pending.pop(0)))
        assert decoder.rows or not pending  # the batch never emptied while requests came
        most = max(most, len(decoder.rows))
        decoder.step()
        steps += 1
    assert steps > 2 * model.config.max_positions and most > 4
    for (prompt, cfg), row in zip(work, rows):
        assert row.generated == alone(model, prompt, cfg)[0]


def test_sampling_rows_keep_their_own_settings_and_seeds(model):
    settings = [
        dict(do_sample=True, temperature=0.7, top_p=0.9, seed=1),
        dict(do_sample=True, top_k=5, seed=2),
        dict(do_sample=False, repetition_penalty=1.3),
        dict(do_sample=True, temperature=1.5, seed=3),
    ]
    work = [(p, GenerationConfig(max_new_tokens=10, **s)) for p, s in zip(prompts(4, seed=3), settings)]
    for every in (1, 3):
        rows = run_staggered(model, work, every)
        for (prompt, cfg), row in zip(work, rows):
            assert row.generated == alone(model, prompt, cfg)[0]


def test_stop_checks_limits_and_removal_end_a_row_at_once(model):
    decoder = ContinuousDecoder(model)
    a, b, c = prompts(3, seed=5)
    reported = []
    full, _ = alone(model, a, GenerationConfig(max_new_tokens=12, ignore_eos=True))
    ra = decoder.add(a, GenerationConfig(max_new_tokens=12, ignore_eos=True), stop=lambda ids: len(ids) == 4)
    rb = decoder.add(b, GenerationConfig(max_new_tokens=2, ignore_eos=True))
    rc = decoder.add(c, GenerationConfig(max_new_tokens=30, ignore_eos=True),
                     on_token=lambda token, done: reported.append((token, done)))  # fmt: skip
    assert len(decoder.rows) == 3 and rb.generated and reported  # prefilled: a first token each
    left = [decoder.step() for _ in range(3)]
    assert left[0] == [rb] and left[2] == [ra] and ra.generated == full[:4] and ra.finished
    assert not rb.finished and len(rb.generated) == 2
    decoder.remove(rc)
    assert decoder.rows == [] and decoder.cache is None and rc.done
    assert [t for t, _ in reported] == rc.generated and not any(d for _, d in reported)


def test_a_callback_that_raises_ends_only_its_row(model):
    decoder = ContinuousDecoder(model)
    a, b = prompts(2, seed=9)

    def gone(token: int, done: bool) -> None:
        raise ConnectionError("the client left")

    ra = decoder.add(a, GenerationConfig(max_new_tokens=5, ignore_eos=True), on_token=gone)
    rb = decoder.add(b, GenerationConfig(max_new_tokens=5, ignore_eos=True))
    assert isinstance(ra.error, ConnectionError) and decoder.rows == [rb]
    while decoder.rows:
        decoder.step()
    assert rb.generated == alone(model, b, GenerationConfig(max_new_tokens=5, ignore_eos=True))[0]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_long_prompts_are_fitted_to_the_context_as_generate_fits_them(model):
    decoder = ContinuousDecoder(model)
    long = prompts(1, seed=1)[0] * 8  # over 64 positions
    with pytest.raises(ValueError, match="context"):
        decoder.add(long, GenerationConfig(max_new_tokens=4))
    cfg = GenerationConfig(max_new_tokens=9, truncate_prompt=True, ignore_eos=True)
    row = decoder.add(long, cfg)
    while decoder.rows:
        decoder.step()
    assert row.generated == alone(model, long, cfg)[0] and len(row.generated) == 1
    assert any("truncated" in w for w in row.warnings)
