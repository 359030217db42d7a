"""attnlab.generation on GPT: the key/value cache changes no token (greedy and beam, 100 prompts), sampling
is reproducible with a seed, stop checks and streaming, and bad options are clear errors."""

from __future__ import annotations

import pytest
import torch

from attnlab.generation import GenerationConfig, generate, left_pad
from attnlab.models.gpt import GPTConfig, build_gpt

V, EOS = 50, 1


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=V, max_positions=48, hidden_size=32, num_layers=2, num_heads=4, dropout=0.0,
        embedding_dropout=0.0, attention_dropout=0.0, initializer_range=0.3, bos_token_id=EOS,
        eos_token_id=EOS,
    )  # fmt: skip
    return build_gpt(cfg).eval()


def hundred_prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [
        torch.randint(2, V, (int(n),), generator=g).tolist()
        for n in torch.randint(1, 10, (100,), generator=g)
    ]


@pytest.mark.parametrize("beams", [1, 3])
def test_cache_changes_no_token_on_100_prompts(model, beams: int) -> None:
    prompts = hundred_prompts()
    ended = 0
    for start in range(0, 100, 25):  # batches of 25 left-padded prompts of different lengths
        ids, mask = left_pad(prompts[start : start + 25], EOS)
        cached = generate(model, ids, mask, max_new_tokens=10, num_beams=beams, use_cache=True)
        uncached = generate(model, ids, mask, max_new_tokens=10, num_beams=beams, use_cache=False)
        assert cached.sequences == uncached.sequences
        ended += sum(s[-1] == EOS for s in cached.sequences)
    assert ended >= 5  # EOS happens: rows end at different steps


def test_batched_greedy_equals_one_prompt_at_a_time(model) -> None:
    prompts = hundred_prompts()[:8]
    ids, mask = left_pad(prompts, EOS)
    batched = generate(model, ids, mask, max_new_tokens=8).sequences
    alone = [generate(model, torch.tensor([p]), max_new_tokens=8).sequences[0] for p in prompts]
    assert batched == alone


def test_sampling_is_reproducible_with_a_seed(model) -> None:
    ids, mask = left_pad(hundred_prompts()[:4], EOS)
    opts = dict(max_new_tokens=12, do_sample=True, temperature=1.3, top_k=20, top_p=0.95)
    a = generate(model, ids, mask, seed=5, **opts).sequences
    b = generate(model, ids, mask, seed=5, **opts).sequences
    c = generate(model, ids, mask, seed=6, **opts).sequences
    assert a == b and a != c
    assert generate(model, ids, mask, seed=5, use_cache=False, **opts).sequences == a


def test_top_k_one_sampling_is_greedy(model) -> None:
    ids, mask = left_pad(hundred_prompts()[:4], EOS)
    greedy = generate(model, ids, mask, max_new_tokens=8).sequences
    assert generate(model, ids, mask, max_new_tokens=8, do_sample=True, top_k=1, seed=1).sequences == greedy


def test_beam_width_one_is_greedy(model) -> None:
    ids, mask = left_pad(hundred_prompts()[:6], EOS)
    greedy = generate(model, ids, mask, max_new_tokens=8).sequences
    beam = generate(model, ids, mask, max_new_tokens=8, num_beams=1, early_stopping=True).sequences
    assert beam == greedy


def test_stop_check_ends_a_row_and_steps_stream(model) -> None:
    ids = torch.tensor([[5, 6, 7]])
    full = generate(model, ids, max_new_tokens=10, eos_token_id=None).sequences[0]
    streamed: list[int] = []
    out = generate(
        model, ids, max_new_tokens=10, eos_token_id=None,
        stop=lambda row, toks: len(toks) >= 4, on_step=lambda t, done, _: streamed.append(int(t[0])),
    )  # fmt: skip
    assert out.sequences[0] == full[:4] == streamed and out.finished == [True]


def test_prompt_longer_than_context(model) -> None:
    ids = torch.randint(2, V, (1, 60))
    with pytest.raises(ValueError, match="prompt has 60 tokens but the model's context is 48"):
        generate(model, ids, max_new_tokens=3)
    with (
        pytest.warns(UserWarning, match="truncated to its last 47"),
        pytest.warns(UserWarning, match="at most 1"),
    ):
        out = generate(model, ids, max_new_tokens=3, truncate_prompt=True)
    assert len(out.sequences[0]) == 1  # one position was left
    assert out.sequences == generate(model, ids[:, -47:], max_new_tokens=1).sequences


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(top_p=0.0), "top_p must be in \\(0, 1\\]"),
        (dict(top_p=1.5), "top_p must be in \\(0, 1\\]"),
        (dict(top_k=0), "top_k must be a positive integer"),
        (dict(temperature=0.0), "temperature must be > 0"),
        (dict(temperature=-1.0), "temperature must be > 0"),
        (dict(num_beams=0), "beam size must be an integer >= 1"),
        (dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
        (dict(early_stopping="sometimes"), "early_stopping must be True, False or 'never'"),
        (dict(repetition_penalty=0.0), "repetition_penalty must be > 0"),
        (dict(num_beams=2, do_sample=True), "sampling with beams"),
    ],
)
def test_bad_options_are_clear_errors(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GenerationConfig(**options)


def test_empty_prompts_are_errors(model) -> None:
    with pytest.raises(ValueError, match="prompt 2 is empty"):
        left_pad([[3, 4], []], EOS)
    with pytest.raises(ValueError, match="prompt length >= 1"):
        generate(model, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="a prompt is empty"):
        generate(model, torch.tensor([[3, 4]]), torch.tensor([[0, 0]]))
