"""Greedy and beam search for `Seq2Seq`, batched over sentences, with a key/value cache.

Shapes: B sentences, K beam size, S source length, V vocabulary.

The encoder runs once. Each step feeds one token per hypothesis to the decoder: self-attention keys/values
are appended to the cache, encoder-decoder keys/values are computed from the memory on the first step and
reused (attnlab.nn.MultiHeadAttention's cache), so a step does not recompute the prefix.
``use_cache=False`` recomputes the whole prefix each step (the reference for the tests).

Maximum length: sentence b may generate at most ``src_len_b + max_length_offset`` tokens, EOS included
(the paper decodes up to input length + 50, section 6.1), capped by ``max_length`` and the position table.

Beam search (as in GNMT, Wu et al. 2016, section 7, and the field's implementations):

- every step takes the best 2K continuations of the K live hypotheses by summed log-probability; those
  among the best K that end (EOS, or the length limit) join the sentence's finished list, scored
  ``sum log p / lp(length)`` with length = generated tokens including EOS; the best K that do not end
  stay live;
- ``lp(L) = ((5 + L) / 6) ** alpha`` (``length_penalty_style="gnmt"``, the paper uses alpha = 0.6,
  section 6.1) or ``L ** alpha`` (``"power"``, the normalisation of fairseq and HF transformers);
- a sentence is done when it has K finished hypotheses and its best live score, normalised with the
  largest length it could still reach, cannot beat the worst of them (exact for alpha >= 0 since log
  probabilities only decrease), or when it reaches its length limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .model import Cache, Seq2Seq

LENGTH_PENALTY_STYLES = ("gnmt", "power")
_NEG = -1.0e9  # score of impossible / excluded candidates (finite, as HF transformers', so ties order alike)


@dataclass
class Hypothesis:
    """``tokens``: generated ids without the start token and without EOS; ``score``: normalised log-prob."""

    tokens: list[int]
    score: float
    finished: bool  # ended with EOS (False: cut at the length limit)


def length_limits(
    model: Seq2Seq, attention_mask: Tensor, max_length_offset: int, max_length: int | None
) -> Tensor:
    """(B,) the most tokens each sentence may generate (EOS included)."""
    limits = attention_mask.sum(dim=1).long() + max_length_offset
    cap = model.config.max_positions - 1  # the start token takes position 0
    if max_length is not None:
        cap = min(cap, max_length)
    limits = limits.clamp(min=1, max=cap)
    return limits


def length_penalty(length: int | float, alpha: float, style: str = "gnmt") -> float:
    """``((5 + L) / 6) ** alpha`` (GNMT) or ``L ** alpha`` (power)."""
    if style == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if style == "power":
        return float(length) ** alpha
    raise ValueError(f"length_penalty_style {style!r} is not one of {', '.join(LENGTH_PENALTY_STYLES)}")


def _step_logprobs(
    model: Seq2Seq, tokens: Tensor, memory: Tensor, mask: Tensor, cache: Cache | None
) -> Tensor:
    """Log-probabilities (rows, V) of the next token after ``tokens`` (rows, t)."""
    t = tokens.size(1)
    if cache is not None:
        hidden = model.decode(tokens[:, -1:], memory, mask, cache=cache, offset=t - 1)
    else:
        hidden = model.decode(tokens, memory, mask)
    return torch.log_softmax(model.generator(hidden[:, -1]).float(), dim=-1)


@torch.no_grad()
def greedy_search(
    model: Seq2Seq,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    max_length_offset: int = 50,
    max_length: int | None = None,
    use_cache: bool = True,
) -> list[Hypothesis]:
    """Pick the most probable token at each step, for a batch (B, S) of padded sources."""
    cfg = model.config
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    was_training = model.training
    model.eval()
    try:
        b = input_ids.size(0)
        limits = length_limits(model, attention_mask, max_length_offset, max_length)  # (B,)
        memory = model.encode(input_ids, attention_mask)  # (B, S, H)
        cache = model.new_cache() if use_cache else None
        tokens = input_ids.new_full((b, 1), cfg.start_token_id)  # (B, t)
        scores = torch.zeros(b, dtype=torch.float32, device=input_ids.device)
        done = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
        ended = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
        for step in range(1, int(limits.max()) + 1):
            lprobs = _step_logprobs(model, tokens, memory, attention_mask, cache)  # (B, V)
            best, nxt = lprobs.max(dim=-1)
            nxt = nxt.masked_fill(done, cfg.pad_token_id)
            scores = scores + best.masked_fill(done, 0.0)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            is_eos = nxt.eq(cfg.eos_token_id) & ~done
            ended |= is_eos
            done |= is_eos | limits.le(step)
            if bool(done.all()):
                break
        out = []
        for i in range(b):
            seq = tokens[i, 1:].tolist()
            if cfg.eos_token_id in seq:
                seq = seq[: seq.index(cfg.eos_token_id)]
            seq = seq[: int(limits[i])]
            out.append(Hypothesis(seq, float(scores[i]), bool(ended[i])))
        return out
    finally:
        model.train(was_training)


def _reorder_cache(cache: Cache, origin: Tensor) -> None:
    """Keep the self-attention keys/values of the hypotheses each new beam continues (origin: flat rows).

    Encoder-decoder keys/values need no reordering: the K beams of a sentence share its memory.
    """
    for layer in cache:
        self_cache = layer["self"]
        if "key" in self_cache:
            self_cache["key"] = self_cache["key"].index_select(0, origin)
            self_cache["value"] = self_cache["value"].index_select(0, origin)


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    beam_size: int = 4,
    alpha: float = 0.6,
    length_penalty_style: str = "gnmt",
    max_length_offset: int = 50,
    max_length: int | None = None,
    use_cache: bool = True,
) -> list[Hypothesis]:
    """Beam search over a batch (B, S) of padded sources; returns the best hypothesis per sentence.

    Defaults are the paper's (section 6.1): beam size 4, length penalty alpha = 0.6, input length + 50.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if alpha < 0:
        raise ValueError(f"length penalty alpha must be >= 0, got {alpha}")
    length_penalty(1, alpha, length_penalty_style)  # validates the style
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    was_training = model.training
    model.eval()
    try:
        return _beam_search(
            model, input_ids, attention_mask, beam_size, alpha, length_penalty_style,
            max_length_offset, max_length, use_cache,
        )  # fmt: skip
    finally:
        model.train(was_training)


def _select_rows(cache: Cache, rows: Tensor) -> None:
    """Keep only cache rows ``rows`` (self- and cross-attention): sentences that finished leave the batch."""
    for layer in cache:
        for part in (layer["self"], layer["cross"]):
            if "key" in part:
                part["key"] = part["key"].index_select(0, rows)
                part["value"] = part["value"].index_select(0, rows)


def _beam_search(
    model: Seq2Seq,
    input_ids: Tensor,
    attention_mask: Tensor,
    k: int,
    alpha: float,
    style: str,
    max_length_offset: int,
    max_length: int | None,
    use_cache: bool,
) -> list[Hypothesis]:
    cfg = model.config
    device = input_ids.device
    b = input_ids.size(0)
    limit_list = length_limits(model, attention_mask, max_length_offset, max_length).tolist()  # (B,)
    # The search runs over the *active* sentences only: when a sentence is done its rows leave every tensor
    # (hypotheses, scores, memory, mask, caches), so finished sentences cost nothing in later steps.
    active = list(range(b))  # original index of each active sentence
    limits = torch.tensor(limit_list, device=device)  # (A,)
    memory = model.encode(input_ids, attention_mask).repeat_interleave(k, dim=0)  # (A*K, S, H)
    mask = attention_mask.repeat_interleave(k, dim=0)  # (A*K, S)
    cache = model.new_cache() if use_cache else None
    running = input_ids.new_full((b * k, 1), cfg.start_token_id)  # (A*K, t)
    scores = torch.zeros(b, k, dtype=torch.float32, device=device)  # (A, K)
    scores[:, 1:] = _NEG  # all beams start identical: only the first may be extended at step 1
    finished: list[list[tuple[float, list[int], bool]]] = [[] for _ in range(b)]
    for step in range(1, max(limit_list) + 1):
        a = len(active)
        lprobs = _step_logprobs(model, running, memory, mask, cache)  # (A*K, V)
        vocab = lprobs.size(-1)
        candidates = (lprobs.view(a, k, vocab) + scores[:, :, None]).view(a, k * vocab)
        top_scores, top_index = candidates.topk(2 * k, dim=1)  # (A, 2K), best first
        top_beam = top_index // vocab
        top_token = top_index % vocab
        is_eos = top_token.eq(cfg.eos_token_id)
        ends = is_eos | limits.le(step)[:, None]  # (A, 2K)

        # Finished hypotheses: only candidates ranked among the best K may end (the next K are spares).
        ends_k, eos_k = ends[:, :k].tolist(), is_eos[:, :k].tolist()
        penalty = length_penalty(step, alpha, style)
        for j in range(a):
            if not any(ends_k[j]):
                continue
            pool = finished[active[j]]
            for r in range(k):
                if ends_k[j][r]:
                    seq = running[j * k + int(top_beam[j, r]), 1:].tolist()
                    if not eos_k[j][r]:
                        seq.append(int(top_token[j, r]))
                    pool.append((float(top_scores[j, r]) / penalty, seq, eos_k[j][r]))
            pool.sort(key=lambda h: -h[0])
            del pool[k:]

        # Live hypotheses: the best K continuations that did not end.
        live_scores = top_scores + ends.float() * _NEG
        scores, pick = live_scores.topk(k, dim=1)  # (A, K)
        offsets = torch.arange(a, device=device)[:, None] * k
        origin = (top_beam.gather(1, pick) + offsets).view(-1)  # (A*K,) rows continued
        running = torch.cat([running.index_select(0, origin), top_token.gather(1, pick).view(-1, 1)], dim=1)
        if cache is not None:
            _reorder_cache(cache, origin)

        # Done: the length limit, or K finished hypotheses that no live one can beat (bound at the limit).
        best_live = scores[:, 0].tolist()
        keep = []
        for j in range(a):
            i = active[j]
            if step >= limit_list[i]:
                continue
            if (
                len(finished[i]) == k
                and not best_live[j] / length_penalty(limit_list[i], alpha, style) > (finished[i][-1][0])
            ):
                continue
            keep.append(j)
        if not keep:
            break
        if len(keep) < a:
            kept = torch.tensor(keep, device=device)
            rows = (kept[:, None] * k + torch.arange(k, device=device)).view(-1)
            active = [active[j] for j in keep]
            limits, scores = limits.index_select(0, kept), scores.index_select(0, kept)
            running, memory, mask = (
                running.index_select(0, rows),
                memory.index_select(0, rows),
                mask.index_select(0, rows),
            )
            if cache is not None:
                _select_rows(cache, rows)
    return [Hypothesis(list(f[0][1]), float(f[0][0]), bool(f[0][2])) for f in finished]


@torch.no_grad()
def translate_ids(
    model: Seq2Seq,
    sources: Sequence[Sequence[int]],
    beam_size: int = 4,
    alpha: float = 0.6,
    max_length_offset: int = 50,
    max_length: int | None = None,
    batch_size: int = 64,
) -> list[list[int]]:
    """Translate source id sequences (EOS already appended), batched by similar length; ``beam_size=1``
    is greedy. Returns target ids (no start, no EOS) in input order."""
    cfg = model.config
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        width = max(len(sources[i]) for i in chunk)
        ids = torch.full((len(chunk), width), cfg.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, i in enumerate(chunk):
            ids[row, : len(sources[i])] = torch.tensor(list(sources[i]), dtype=torch.long)
            mask[row, : len(sources[i])] = 1
        ids, mask = ids.to(device), mask.to(device)
        if beam_size == 1:
            hyps = greedy_search(model, ids, mask, max_length_offset, max_length)
        else:
            hyps = beam_search(model, ids, mask, beam_size, alpha, "gnmt", max_length_offset, max_length)
        for row, i in enumerate(chunk):
            out[i] = hyps[row].tokens
    return out
