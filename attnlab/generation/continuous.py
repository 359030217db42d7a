"""Continuous batching: sequences join and leave one batched decoding loop between any two steps.

Shapes: B rows in the batch, L cached positions (the longest row's; shorter rows are padded on the left),
N heads, D head size, V vocabulary.

`generate` decodes a fixed batch until its last row ends. A server generating for clients that arrive at any
time instead keeps one batch running (TGI's and vLLM's continuous batching, Yu et al. 2022, Orca's
iteration-level scheduling):

- `ContinuousDecoder.add` prefills a new prompt alone (the same forward pass `generate` makes for it, so its
  first token comes at once), then adds its key/value cache to the batch's as one more row: the shorter of
  the two is padded on the left and the padding is masked (``attention_mask`` 0; positions count real
  tokens only, as for a left-padded batch);
- `ContinuousDecoder.step` feeds every row's last token in one forward pass and chooses each row's next
  token with the row's own settings (greedy, or sampling with its temperature, top-k, top-p and seeded
  generator, as `attnlab.generation.search.search` chooses them for one prompt);
- a row that ends (EOS, its ``max_new_tokens``, a stop check) or is removed (`remove`: its client left) is
  taken out of the cache at once, and the left columns that only padding fills are dropped.

A join or a leave copies the batch's keys and values once, into buffers with room to grow in the layout
`attnlab.nn.buffered_attention.BufferedSelfAttention` appends to, so the steps between copy nothing.

A row's tokens are those `generate` gives for its prompt alone: the same prefill, processors and random
draws; the batched steps differ from a lone row's only in the floating-point order of the padded products.
The model is any `attnlab.models.gpt.GPT`-like module called as ``model(ids, attention_mask=..., cache=...)``
with ``new_cache()``; it knows nothing of the batch's comings and goings.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attnlab.generation.api import fit_context
from attnlab.generation.config import GenerationConfig
from attnlab.generation.processors import Processor, apply_processors, build_processors

TokenCallback = Callable[[int, bool], None]  # (the new token, whether the row is done): streaming
StopCheck = Callable[[list[int]], bool]  # the row's generated ids -> True ends it (stop strings)
_ids = itertools.count()


@dataclass(eq=False)
class Row:
    """One sequence in the batch: its prompt, what it generated, its settings and its state."""

    prompt: list[int]
    limit: int  # new tokens at most (clamped to the context, as `generate` clamps them)
    processors: list[Processor]
    do_sample: bool
    generator: torch.Generator | None
    eos: int | None
    on_token: TokenCallback | None = None
    stop: StopCheck | None = None
    generated: list[int] = field(default_factory=list)
    done: bool = False
    ended_with_eos: bool = False
    warnings: list[str] = field(default_factory=list)
    error: BaseException | None = None  # what ``on_token`` raised (the row was taken out)
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def finished(self) -> bool:
        """Ended with EOS or a stop check (not cut by its limit): `GenerationOutput.finished`."""
        return self.ended_with_eos or len(self.generated) < self.limit


class ContinuousDecoder:
    """The running batch: `add` a prompt (prefilled at once), `step` every row, `remove` a row."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model.eval()
        self.rows: list[Row] = []
        self.cache = None  # the batch's key/value cache, (B, N, L, D) per layer; None when empty
        self.valid: list[int] = []  # per row: its real positions, the last `valid[i]` of the L

    # ------------------------------------------------------------------------------------------- rows

    @torch.inference_mode()
    def add(
        self,
        prompt: list[int],
        config: GenerationConfig,
        on_token: TokenCallback | None = None,
        stop: StopCheck | None = None,
    ) -> Row:
        """Prefill ``prompt`` (its first new token chosen and reported) and add it to the batch unless it
        ended already. ``config``: greedy or sampling settings, ``max_new_tokens``, ``seed``,
        ``truncate_prompt``; beams are `generate`'s."""
        if config.num_beams != 1:
            raise ValueError("continuous batching decodes greedily or by sampling (num_beams 1)")
        model_cfg = self.model.config
        ids = torch.tensor([prompt], dtype=torch.long, device=self._device())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ids, _, limit = fit_context(
                ids,
                torch.ones_like(ids),
                config.max_new_tokens,
                model_cfg.max_positions,
                config.truncate_prompt,
            )
        generator = None
        if config.do_sample:
            generator = torch.Generator(device=ids.device)
            seed = config.seed if config.seed is not None else int(torch.randint(0, 2**62, ()).item())
            generator.manual_seed(seed)
        eos = config.eos_token_id if config.eos_token_id is not None else model_cfg.eos_token_id
        row = Row(
            ids[0].tolist(), limit, build_processors(config.do_sample, config.temperature, config.top_k,
                                                     config.top_p, config.repetition_penalty),
            config.do_sample, generator, None if config.ignore_eos else eos, on_token, stop,
            warnings=[str(w.message) for w in caught],
        )  # fmt: skip
        cache = self.model.new_cache()
        logits = self.model(ids, cache=cache).logits[:, -1].float()  # (1, V): `generate`'s first step
        self._advance(row, self._choose(row, logits[0]))
        if not row.done:
            self._join(row, cache)
        return row

    def remove(self, row: Row) -> None:
        """Take ``row`` out of the batch (its client left); it ends where it is."""
        if row in self.rows:
            self._leave([row])
        row.done = True

    @torch.inference_mode()
    def step(self) -> list[Row]:
        """One token for every row in one forward pass; returns the rows that ended (and left) with it."""
        if not self.rows:
            return []
        last = torch.tensor([[r.generated[-1]] for r in self.rows], device=self._device())  # (B, 1)
        width = self.length() + 1
        mask = None  # no padding: `generate`'s own unmasked step
        if any(v + 1 != width for v in self.valid):
            cols = torch.arange(width, device=last.device)
            starts = torch.tensor([width - 1 - v for v in self.valid], device=last.device)
            mask = (cols[None, :] >= starts[:, None]).long()  # (B, L + 1): 0 on the left padding
        logits = self.model(last, attention_mask=mask, cache=self.cache).logits[:, -1].float()  # (B, V)
        self.valid = [v + 1 for v in self.valid]
        greedy = logits.argmax(dim=-1).tolist()  # rows without processors take theirs from here
        ended = []
        for i, row in enumerate(list(self.rows)):
            token = greedy[i] if not row.do_sample and not row.processors else self._choose(row, logits[i])
            self._advance(row, token)
            if row.done:
                ended.append(row)
        if ended:
            self._leave(ended)
        return ended

    # ---------------------------------------------------------------------------------------- choices

    def _choose(self, row: Row, logits: Tensor) -> int:
        """The row's next token from its logits (V,), as `search` chooses for one prompt."""
        scores = logits[None]
        if row.processors:
            tokens = torch.tensor([row.prompt + row.generated], device=logits.device)
            scores = apply_processors(row.processors, tokens, scores)
        if row.do_sample:
            return int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=row.generator)[0, 0])
        return int(scores.argmax(dim=-1)[0])

    def _advance(self, row: Row, token: int) -> None:
        """Append ``token``; end the row at EOS, its limit or its stop check; report the token."""
        row.generated.append(token)
        if row.eos is not None and token == row.eos:
            row.ended_with_eos = row.done = True
        elif len(row.generated) >= row.limit or (row.stop is not None and row.stop(row.generated)):
            row.done = True
        if row.on_token is not None:
            try:
                row.on_token(token, row.done)
            except Exception as error:  # noqa: BLE001 - e.g. the client went away: the row ends here
                row.error, row.done = error, True

    # ------------------------------------------------------------------------------------------ cache

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def length(self) -> int:
        return int(self.cache[0]["self"]["key"].size(2)) if self.cache else 0

    def _kv(self, cache: list) -> list[tuple[Tensor, Tensor]]:
        return [(layer["self"]["key"], layer["self"]["value"]) for layer in cache]

    def _buffers(self, layers: int, rows: int, width: int, like: Tensor) -> list[dict]:
        """Per layer, empty key/value buffers (rows, N, capacity, D) holding ``width`` positions, in the
        layout `attnlab.nn.buffered_attention.BufferedSelfAttention` appends to in place (``key`` a view of
        ``key_buffer``; room for as many positions again, so the next steps copy nothing)."""
        _, n, _, d = like.shape
        capacity = min(max(64, 2 * width), max(self.model.config.max_positions, width))
        out = []
        for _ in range(layers):
            kb, vb = like.new_zeros(rows, n, capacity, d), like.new_zeros(rows, n, capacity, d)
            out.append({"key_buffer": kb, "value_buffer": vb, "key": kb[:, :, :width],
                        "value": vb[:, :, :width]})  # fmt: skip
        return out

    def _store(self, parts: list[dict]) -> None:
        if self.cache is None:
            self.cache = self.model.new_cache()
        for layer, part in zip(self.cache, parts):
            layer["self"] = part

    def _join(self, row: Row, cache: list) -> None:
        """Add ``row``'s prefilled cache (1, N, P, D) to the batch's, the shorter padded on the left (zeros,
        masked): one copy of each key and value into new buffers."""
        length, p = self.length(), len(row.prompt)
        width = max(length, p)
        new = self._kv(cache)
        parts = self._buffers(len(new), len(self.rows) + 1, width, new[0][0])
        old = self._kv(self.cache) if self.rows else [None] * len(new)
        for part, (kn, vn), kv in zip(parts, new, old):
            if kv is not None:
                part["key"][:-1, :, width - length :] = kv[0]
                part["value"][:-1, :, width - length :] = kv[1]
            part["key"][-1:, :, width - p :] = kn
            part["value"][-1:, :, width - p :] = vn
        self._store(parts)
        self.rows.append(row)
        self.valid.append(p)

    def _leave(self, rows: list[Row]) -> None:
        """Take ``rows`` out of the cache; drop the left columns only padding fills now."""
        keep = [i for i, r in enumerate(self.rows) if r not in rows]
        self.rows = [self.rows[i] for i in keep]
        self.valid = [self.valid[i] for i in keep]
        if not self.rows:
            self.cache = None
            return
        width = max(self.valid)
        old = self._kv(self.cache)
        parts = self._buffers(len(old), len(keep), width, old[0][0])
        for part, (k, v) in zip(parts, old):
            for j, i in enumerate(keep):
                part["key"][j] = k[i, :, -width:]
                part["value"][j] = v[i, :, -width:]
        self._store(parts)
