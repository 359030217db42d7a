"""``generate(model, input_ids, ...)``: continue prompts with a decoder-only model (GPT).

Shapes: B prompts, P padded prompt length (left padding: ``attention_mask`` 0 on the left), V vocabulary.

Greedy and sampling run `attnlab.generation.search.search`; beam search runs the one
`attnlab.generation.beam.beam_search` that translation uses too. The model is any module called as
``model(ids, attention_mask=..., cache=...)`` returning ``.logits`` with ``new_cache()`` and a ``config``
holding ``max_positions`` and ``eos_token_id`` (`attnlab.models.gpt.GPT`), or a Transformer-XL
(`attnlab.models.transfo_xl.TransfoXL`: relative positions, no context limit, its memory instead of a
cache; `attnlab.generation.state.MemoryState`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.generation.beam import beam_search
from attnlab.generation.config import GenerationConfig
from attnlab.generation.processors import build_processors
from attnlab.generation.search import StepCallback, StopCheck, search
from attnlab.generation.state import CausalLMState, DecodeState, MemoryState
from attnlab.limits import check_range, check_top_k
from attnlab.models.transfo_xl import TransfoXL


@dataclass
class GenerationOutput:
    """``sequences``: per prompt, the generated ids (EOS included when the row ended with it)."""

    sequences: list[list[int]]
    finished: list[bool]  # ended with EOS (or a stop string)
    scores: list[float] | None = None  # beam search: the normalised score of the returned hypothesis


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int) -> tuple[Tensor, Tensor]:
    """Id lists -> ``(input_ids (B, P), attention_mask (B, P))`` padded on the left."""
    if not prompts:
        raise ValueError("no prompts given")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i + 1} is empty: give at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def fit_context(
    input_ids: Tensor, attention_mask: Tensor, max_new_tokens: int, context: int, truncate: bool
) -> tuple[Tensor, Tensor, int]:
    """Check (or left-truncate, warning) prompts against the model's ``context`` positions; clamp the new
    tokens to what fits after the prompt (warning)."""
    p = input_ids.size(1)
    if p >= context:
        if not truncate:
            raise ValueError(
                f"the prompt has {p} tokens but the model's context is {context} positions (with room for "
                "at least one new token); shorten it or allow truncation (--truncate-prompt)"
            )
        keep = context - 1
        warnings.warn(f"prompt of {p} tokens truncated to its last {keep} (context {context})", stacklevel=3)
        input_ids, attention_mask, p = input_ids[:, -keep:], attention_mask[:, -keep:], keep
    if p + max_new_tokens > context:
        warnings.warn(
            f"max_new_tokens={max_new_tokens} after a {p}-token prompt exceeds the context of {context}: "
            f"generating at most {context - p}",
            stacklevel=3,
        )
        max_new_tokens = context - p
    return input_ids, attention_mask, max_new_tokens


@torch.inference_mode()  # no autograd bookkeeping at all (cheaper per op than no_grad)
def check_for_model(cfg: GenerationConfig, vocab_size: int) -> None:
    """Options a model of ``vocab_size`` tokens cannot use, refused with the valid range: more sampling
    candidates (top-k) or beams than its vocabulary holds. For a user's options (``attnlab generate``);
    `generate` itself takes at most the vocabulary, as HF's does, for callers with fixed settings."""
    if cfg.do_sample:
        check_top_k(cfg.top_k, vocab_size, "top_k", "tokens in its vocabulary")
    check_range("num_beams", cfg.num_beams, 1, vocab_size, f"the model has {vocab_size} tokens")


def generate(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    config: GenerationConfig | None = None,
    on_step: StepCallback | None = None,
    stop: StopCheck | None = None,
    **options: object,
) -> GenerationOutput:
    """Continue each prompt of ``input_ids`` (B, P).

    ``config`` or keyword ``options`` (the fields of `GenerationConfig`: ``max_new_tokens``, ``num_beams``,
    ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``repetition_penalty``, ``length_penalty``,
    ``early_stopping``, ``seed``, ``use_cache``, ...). ``on_step(tokens (B,), done (B,), logprobs (B,))``
    is called after every greedy/sampling step (streaming); ``stop(row, ids)`` ends a row early (stop
    strings).
    """
    cfg = (
        dataclasses.replace(config or GenerationConfig(), **options)
        if options
        else config or GenerationConfig()
    )
    if input_ids.dim() != 2 or input_ids.size(1) == 0:
        raise ValueError(f"input_ids must be (batch, prompt length >= 1), got shape {tuple(input_ids.shape)}")
    device = next(model.parameters()).device  # prompts made on the CPU decode on the model's device
    input_ids = input_ids.to(device)
    attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.to(device)
    if bool((attention_mask.sum(dim=1) == 0).any()):
        raise ValueError("a prompt is empty (its attention_mask is all 0): give at least one token")
    model_cfg = model.config
    eos = cfg.eos_token_id if cfg.eos_token_id is not None else model_cfg.eos_token_id
    eos = None if cfg.ignore_eos else eos
    pad = next(
        (x for x in (cfg.pad_token_id, getattr(model_cfg, "pad_token_id", None), eos) if x is not None), 0
    )
    recurrent = isinstance(model, TransfoXL)  # relative positions: no context to fit
    if recurrent and not cfg.use_cache:
        raise ValueError("use_cache=False: a Transformer-XL always decodes with its memory (state reuse)")
    max_new = cfg.max_new_tokens
    if not recurrent:
        input_ids, attention_mask, max_new = fit_context(
            input_ids, attention_mask, max_new, model_cfg.max_positions, cfg.truncate_prompt
        )
    processors = build_processors(
        cfg.do_sample, cfg.temperature, cfg.top_k, cfg.top_p, cfg.repetition_penalty
    )
    was_training = model.training
    model.eval()
    try:
        state: DecodeState = (
            MemoryState(model, attention_mask)
            if recurrent
            else CausalLMState(model, attention_mask, use_cache=cfg.use_cache)
        )
        b = input_ids.size(0)
        if cfg.num_beams > 1:
            hyps = beam_search(
                state, input_ids, [max_new] * b, eos, cfg.num_beams, cfg.length_penalty, "power",
                cfg.early_stopping, processors, attention_mask,
            )  # fmt: skip
            seqs = [h.tokens + ([eos] if h.finished and eos is not None else []) for h in hyps]
            return GenerationOutput(seqs, [h.finished for h in hyps], [h.score for h in hyps])
        generator = None
        if cfg.do_sample:
            generator = torch.Generator(device=input_ids.device)
            generator.manual_seed(
                cfg.seed if cfg.seed is not None else int(torch.randint(0, 2**62, ()).item())
            )
        limits = torch.full((b,), max_new, dtype=torch.long, device=input_ids.device)
        result = search(
            state, input_ids, limits, eos, pad, processors, cfg.do_sample, generator,
            on_step=on_step, stop=stop, prefix_mask=attention_mask,
        )  # fmt: skip
        seqs = [result.row(i) for i in range(b)]
        finished = [bool(result.ended_with_eos[i]) or len(seqs[i]) < max_new for i in range(b)]
        return GenerationOutput(seqs, finished)
    finally:
        model.train(was_training)


def generate_text(
    model: nn.Module,
    encode: Callable[[str], list[int]],
    prompts: Sequence[str],
    config: GenerationConfig | None = None,
    **options: object,
) -> GenerationOutput:
    """`generate` on text prompts, encoded with ``encode`` and left-padded."""
    cfg = config or GenerationConfig()
    ids = [encode(p) for p in prompts]
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else (model.config.eos_token_id or 0)
    input_ids, mask = left_pad(ids, pad)
    return generate(model, input_ids, mask, cfg, **options)
