"""Generation parity with HF transformers (test-only reference) on the same random GPT-2 weights and prompts:
greedy and beam outputs identical to ``GPT2LMHeadModel.generate``; the logit processors keep exactly the token
sets HF's keep on 1,000 random rows (ties included)."""

from __future__ import annotations

import pytest
import torch

from attnlab.generation import generate, left_pad
from attnlab.generation.processors import build_processors
from attnlab.io.hf_gpt2 import config_from_gpt2, state_dict_from_gpt2
from attnlab.models.gpt import build_gpt

transformers = pytest.importorskip("transformers")
from transformers.generation import logits_process as hf_lp  # noqa: E402

V, EOS = 61, 2
MAX_NEW = 12


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def pair(seed: int):
    """(attnlab GPT, HF GPT2LMHeadModel) with the same weights; a wide init makes the distributions peaky so
    that beams disagree with greedy, and EOS is made likely enough to end some hypotheses."""
    torch.manual_seed(seed)
    hc = transformers.GPT2Config(
        vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS, initializer_range=0.3,
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(hc).eval()
    with torch.no_grad():
        hf.transformer.wte.weight[EOS] *= 1.5
    cfg = config_from_gpt2(hc.to_dict())
    ours = build_gpt(cfg).eval()
    ours.load_state_dict(state_dict_from_gpt2(hf.state_dict(), cfg))
    return ours, hf


def prompts(seed: int, n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + seed)
    lengths = torch.randint(1, 8, (n,), generator=g).tolist()
    return left_pad([torch.randint(3, V, (k,), generator=g).tolist() for k in lengths], EOS)


def hf_rows(sequences: torch.Tensor, prompt_len: int) -> list[list[int]]:
    """HF output rows -> generated ids up to and including the first EOS."""
    out = []
    for row in sequences[:, prompt_len:].tolist():
        out.append(row[: row.index(EOS) + 1] if EOS in row else row)
    return out


def hf_generate(hf, ids, mask, **kw):
    with torch.no_grad():
        return hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False, **kw)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_identical(seed: int) -> None:
    ours, hf = pair(seed)
    ids, mask = prompts(seed)
    mine = generate(ours, ids, mask, max_new_tokens=MAX_NEW)
    assert mine.sequences == hf_rows(hf_generate(hf, ids, mask, num_beams=1), ids.size(1))


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_with_repetition_penalty_identical(seed: int) -> None:
    ours, hf = pair(seed)
    ids, mask = prompts(seed)
    mine = generate(ours, ids, mask, max_new_tokens=MAX_NEW, repetition_penalty=1.3)
    ref = hf_generate(hf, ids, mask, num_beams=1, repetition_penalty=1.3)
    assert mine.sequences == hf_rows(ref, ids.size(1))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("beams", "alpha", "early"), [(2, 1.0, False), (3, 1.0, "never"), (4, 0.0, False), (3, 2.0, True)]
)
def test_beam_identical(seed: int, beams: int, alpha: float, early) -> None:
    ours, hf = pair(seed)
    ids, mask = prompts(seed)
    mine = generate(
        ours, ids, mask, max_new_tokens=MAX_NEW, num_beams=beams, length_penalty=alpha, early_stopping=early
    )
    ref = hf_generate(
        hf, ids, mask, num_beams=beams, length_penalty=alpha, early_stopping=early,
        return_dict_in_generate=True, output_scores=True,
    )  # fmt: skip
    assert mine.sequences == hf_rows(ref.sequences, ids.size(1))
    torch.testing.assert_close(torch.tensor(mine.scores), ref.sequences_scores.float(), rtol=1e-4, atol=1e-4)


def test_setup_is_not_trivial() -> None:
    """Over the seeds above: outputs that end with EOS, outputs cut at the limit, beams unlike greedy."""
    eos_ended, cut, differs = 0, 0, 0
    for seed in range(3):
        ours, _ = pair(seed)
        ids, mask = prompts(seed)
        greedy = generate(ours, ids, mask, max_new_tokens=MAX_NEW)
        beam = generate(ours, ids, mask, max_new_tokens=MAX_NEW, num_beams=3)
        eos_ended += sum(s[-1] == EOS for s in greedy.sequences + beam.sequences)
        cut += sum(len(s) == MAX_NEW and s[-1] != EOS for s in greedy.sequences + beam.sequences)
        differs += sum(g != b for g, b in zip(greedy.sequences, beam.sequences))
    assert eos_ended >= 3 and cut >= 3 and differs >= 3


# --------------------------------------------------------------------------- processors on 1,000 rows


def random_rows(n: int = 1000, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    """Logit rows; a third are rounded to 0.5 so that ties (also at the top-k / top-p boundary) are common."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(n, vocab, generator=g) * torch.rand(n, 1, generator=g).mul(4)
    rows[: n // 3] = (rows[: n // 3] * 2).round() / 2
    return rows


def kept(scores: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(scores)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, 5, None), (1.0, None, 0.9), (0.7, None, 0.5), (1.5, 10, 0.8), (0.5, 1, None), (1.0, None, 1e-6),
     (2.0, 3, 0.999), (1.0, 60, 0.3)],
)  # fmt: skip
def test_processors_keep_hf_token_sets(temperature: float, top_k: int | None, top_p: float | None) -> None:
    rows = random_rows(seed=int(temperature * 10) + (top_k or 0))
    tokens = torch.randint(0, rows.size(1), (rows.size(0), 5), generator=torch.Generator().manual_seed(3))
    hf_list = [hf_lp.TemperatureLogitsWarper(temperature)]
    if top_k is not None:
        hf_list.append(hf_lp.TopKLogitsWarper(top_k))
    if top_p is not None:
        hf_list.append(hf_lp.TopPLogitsWarper(top_p))
    ref = rows.clone()
    for w in hf_list:
        ref = w(tokens, ref)
    mine = rows.clone()
    for p in build_processors(True, temperature, top_k, top_p):
        mine = p(tokens, mine)
    assert torch.equal(kept(mine), kept(ref))
    torch.testing.assert_close(mine[kept(mine)], ref[kept(ref)], rtol=0, atol=0)
    # not trivial: some rows keep fewer than all tokens, and (unless only one may stay) some keep several
    n_kept = kept(mine).sum(dim=1)
    assert bool((n_kept < rows.size(1)).any())
    assert bool((n_kept > 1).any()) or top_k == 1 or (top_p or 1.0) < 0.01


def test_nucleus_includes_the_token_that_crosses_p() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    (top_p,) = build_processors(True, 1.0, None, 0.6)
    assert kept(top_p(torch.zeros(1, 1, dtype=torch.long), probs.log())).tolist() == [
        [True, True, False, False]
    ]


def test_temperature_applies_before_top_p() -> None:
    """A sharper distribution (T < 1) needs fewer tokens to reach p than the raw one."""
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.5]])
    tokens = torch.zeros(1, 1, dtype=torch.long)
    raw = build_processors(True, 1.0, None, 0.8)
    sharp = build_processors(True, 0.25, None, 0.8)
    out_raw, out_sharp = logits, logits
    for p in raw:
        out_raw = p(tokens, out_raw)
    for p in sharp:
        out_sharp = p(tokens, out_sharp)
    assert kept(out_sharp).sum() < kept(out_raw).sum()


def test_repetition_penalty_skips_left_padding() -> None:
    scores = torch.tensor([[1.0, -1.0, 2.0]])
    tokens = torch.tensor([[-1, -1, 0, 1]])  # two padding positions, then ids 0 and 1
    (mine,) = build_processors(False, repetition_penalty_value=2.0)
    assert mine(tokens, scores).tolist() == [[0.5, -2.0, 2.0]]


def test_repetition_penalty_equals_hf() -> None:
    rows = random_rows(seed=5)
    tokens = torch.randint(0, rows.size(1), (rows.size(0), 7), generator=torch.Generator().manual_seed(6))
    (mine,) = build_processors(False, repetition_penalty_value=1.7)
    ref = hf_lp.RepetitionPenaltyLogitsProcessor(1.7)(tokens, rows.clone())
    torch.testing.assert_close(mine(tokens, rows.clone()), ref, rtol=0, atol=0)
