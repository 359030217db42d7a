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
  taken out of the cache at once, and the left columns that only padding fills leave the window.

The keys and values live in one slab per layer, (rows, N, columns, D), made once (doubled when more rows
join): the batch is its first B rows, the window of L columns ending at ``end``, which the cache's views
show in the layout `attnlab.nn.buffered_attention.BufferedSelfAttention` appends to in place. A join
copies only the new row's keys and values into row B; a leave moves the last row into the freed one; the
window slides right by a column a step and is copied back to the left once every ``columns - P`` steps.
(Copying the whole batch into new buffers at every join and leave cost a 16-row batch of gpt-bpe-small
about as much as the prefill of the arrival.)

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
    logprobs: list[float] | None = None  # each new token's log-probability, where asked for
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
        self.valid: list[int] = []  # per row: its real positions, the last `valid[i]` of the L
        self._cache = self.model.new_cache()  # per layer, views of the slab (`_views`)
        self._slab: list[tuple[Tensor, Tensor]] = []  # per layer, keys and values (rows, N, columns, D)
        self._end = 0  # the window of the L cached positions is the slab's columns [end - L, end)

    # ------------------------------------------------------------------------------------------- rows

    @torch.inference_mode()
    def add(
        self,
        prompt: list[int],
        config: GenerationConfig,
        on_token: TokenCallback | None = None,
        stop: StopCheck | None = None,
        logprobs: list[float] | None = None,
    ) -> Row:
        """Prefill ``prompt`` (its first new token chosen and reported) and add it to the batch unless it
        ended already. ``config``: greedy or sampling settings, ``max_new_tokens``, ``seed``,
        ``truncate_prompt``; beams are `generate`'s. ``logprobs``: a list that gets each new token's
        log-probability under the model (its logits' log-softmax, before any processor), as it comes."""
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
        row.logprobs = logprobs
        self._advance(row, self._choose(row, logits[0]), logits[0])
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
        self._room()
        logits = self.model(last, attention_mask=mask, cache=self._cache).logits[:, -1].float()  # (B, V)
        self._end += 1  # the step's keys and values were written in place at the window's end
        self.valid = [v + 1 for v in self.valid]
        greedy = logits.argmax(dim=-1).tolist()  # rows without processors take theirs from here
        ended = []
        for i, row in enumerate(list(self.rows)):
            token = greedy[i] if not row.do_sample and not row.processors else self._choose(row, logits[i])
            self._advance(row, token, logits[i])
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

    def _advance(self, row: Row, token: int, logits: Tensor) -> None:
        """Append ``token`` (and its log-probability under ``logits`` (V,) where the row keeps them); end the
        row at EOS, its limit or its stop check; report the token."""
        row.generated.append(token)
        if row.logprobs is not None:
            row.logprobs.append(float(logits[token] - torch.logsumexp(logits, dim=-1)))
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

    @property
    def cache(self) -> list | None:
        """The batch's key/value cache, (B, N, L, D) views of the slab per layer; None when empty."""
        return self._cache if self.rows else None

    def length(self) -> int:
        """L: the cached positions of the longest row (the others padded on the left to it)."""
        return max(self.valid, default=0)

    def _room(self) -> None:
        """Make room for one more column after the window: at the slab's right edge, copy the window back
        so that it ends at column P (once every ``columns - P`` steps)."""
        context, width, b = self.model.config.max_positions, self.length(), len(self.rows)
        if self._end < self._slab[0][0].size(2):
            return
        for pair in self._slab:
            for slab in pair:
                window = slab[:b, :, self._end - width : self._end].clone()
                slab[:b, :, context - width : context] = window
        self._end = context
        self._views()

    def _views(self) -> None:
        """Point every layer's cache at its slab's B rows and window (`BufferedSelfAttention`'s layout: keys
        ``key_buffer[:, :, :L]``, the next step written at column L of ``key_buffer``, in place)."""
        b, start = len(self.rows), self._end - self.length()
        for layer, (keys, values) in zip(self._cache, self._slab):
            kb, vb = keys[:b, :, start:], values[:b, :, start:]
            width = self._end - start
            layer["self"] = {"key_buffer": kb, "value_buffer": vb, "key": kb[:, :, :width],
                             "value": vb[:, :, :width]}  # fmt: skip

    def _rows_for(self, rows: int, like: Tensor) -> None:
        """A slab with room for ``rows`` rows: the first made, or the present one doubled (zeros: the
        padding is masked, but must be finite)."""
        have = self._slab[0][0].size(0) if self._slab else 0
        if rows <= have:
            return
        _, n, _, d = like.shape
        context = self.model.config.max_positions
        columns = context + max(64, context // 2)  # the window ends at column P or after it
        size = max(rows, 2 * have, 4)
        old, self._slab = self._slab, []
        for i in range(len(self._cache)):
            pair = (like.new_zeros(size, n, columns, d), like.new_zeros(size, n, columns, d))
            if old:
                for new, was in zip(pair, old[i]):
                    new[:have] = was
            self._slab.append(pair)

    def _join(self, row: Row, cache: list) -> None:
        """Add ``row``'s prefilled cache (1, N, P_row, D) as row B of the slab, ending at the window's end
        (the window widens to the left when the prompt is longer than it): one copy of its keys/values."""
        p = len(row.prompt)
        layers = [(layer["self"]["key"], layer["self"]["value"]) for layer in cache]
        if not self.rows:
            self._end = self.model.config.max_positions  # every row fits left of it
        b = len(self.rows)
        self._rows_for(b + 1, layers[0][0])
        for (keys, values), (kn, vn) in zip(self._slab, layers):
            keys[b, :, self._end - p : self._end] = kn[0]
            values[b, :, self._end - p : self._end] = vn[0]
        self.rows.append(row)
        self.valid.append(p)
        self._views()

    def _leave(self, rows: list[Row]) -> None:
        """Take ``rows`` out: the batch's last row moves into each freed slab row (one copy of its
        positions); the window narrows to the longest row left."""
        for i in sorted((self.rows.index(r) for r in rows), reverse=True):
            last = len(self.rows) - 1
            if i != last:
                v = self.valid[last]
                for pair in self._slab:
                    for slab in pair:
                        slab[i, :, self._end - v : self._end] = slab[last, :, self._end - v : self._end]
                self.rows[i], self.valid[i] = self.rows[last], self.valid[last]
            self.rows.pop()
            self.valid.pop()
        if self.rows:
            self._views()
