"""`GenerationConfig`: how `attnlab.generation.generate` continues a prompt, validated where it is made."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.generation.beam import check_beam_options
from attnlab.generation.processors import check_sampling_options
from attnlab.limits import INT64_MAX, SEED_MAX, check_range


@dataclass
class GenerationConfig:
    max_new_tokens: int = 50
    # --- search: greedy (the default), beam search (num_beams > 1) or sampling (do_sample)
    do_sample: bool = False
    num_beams: int = 1
    length_penalty: float = 1.0  # beam scores are sum log p / length ** length_penalty (HF's "power" form)
    early_stopping: bool | str = False  # beam: True, False (HF's default heuristic) or "never" (exact)
    # --- processors (attnlab.generation.processors); temperature/top-k/top-p only act when sampling
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    # --- ending: EOS (None: the model config's), stop strings are given to `generate` with a tokenizer
    eos_token_id: int | None = None
    ignore_eos: bool = False  # generate max_new_tokens whatever the model says (benchmarks, --ignore-eos)
    pad_token_id: int | None = None  # None: the model's pad, else EOS, else 0 (only fills ended rows)
    seed: int | None = None  # sampling: a fixed seed gives the same tokens
    use_cache: bool = True
    truncate_prompt: bool = (
        False  # a prompt longer than the context: False = error, True = keep its end + warn
    )

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        check_range("max_new_tokens", self.max_new_tokens, 1, INT64_MAX, "token counts are 64-bit integers")
        if self.seed is not None:
            check_range("seed", self.seed, 0, SEED_MAX, "a generator's seed is an unsigned 64-bit integer")
        check_sampling_options(self.temperature, self.top_k, self.top_p, self.repetition_penalty)
        check_beam_options(self.num_beams, self.length_penalty, "power", self.early_stopping)
        if self.do_sample and self.num_beams > 1:
            raise ValueError("sampling with beams is not supported: use do_sample or num_beams > 1, not both")
