"""attnlab.generation: greedy, beam search and sampling for any decoder, with logit processors and caches.

Files: `processors` (repetition penalty, temperature, top-k, top-p, in HF's order and semantics), `state`
(what the loops need of a model: `DecodeState`; `CausalLMState` for GPT), `search` (greedy and sampling),
`beam` (the one beam search, used by GPT and translation), `config` (`GenerationConfig`), `api`
(`generate` for decoder-only models), `perplexity` (sliding-window perplexity), `stopping` (stop strings).
"""

from attnlab.generation.api import GenerationOutput, generate, generate_text, left_pad
from attnlab.generation.beam import Hypothesis, beam_search, length_penalty
from attnlab.generation.config import GenerationConfig
from attnlab.generation.processors import build_processors
from attnlab.generation.search import SearchResult, search
from attnlab.generation.state import CausalLMState, DecodeState

__all__ = [
    "CausalLMState",
    "DecodeState",
    "GenerationConfig",
    "GenerationOutput",
    "Hypothesis",
    "SearchResult",
    "beam_search",
    "build_processors",
    "generate",
    "generate_text",
    "left_pad",
    "length_penalty",
    "search",
]
