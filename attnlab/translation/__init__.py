"""attnlab.translation: the encoder-decoder of "Attention Is All You Need", beam search, the paper's recipe.

See docs/architecture.md. Files: `config` (Seq2SeqConfig, presets), `model` (Seq2Seq from attnlab.nn parts),
`loss` (label smoothing), `decoding` (greedy, beam search), `data` (parallel text, joint BPE, token-count
batches), `recipe` (trainer settings, checkpoint averaging, training entry), `family` (model directories, for
`attnlab.io.load` / `attnlab.io.save`), `marian`
(HF MarianMT weight layout).
"""

from .config import PRESETS, Seq2SeqConfig, count_parameters, preset, transformer_base, transformer_big
from .decoding import Hypothesis, beam_search, greedy_search, translate_ids
from .family import FAMILY as MODEL_FAMILY  # attnlab.io.load / save take translation models
from .loss import label_smoothed_cross_entropy
from .model import Seq2Seq, Seq2SeqOutput, build_model

__all__ = [
    "MODEL_FAMILY",
    "PRESETS",
    "Hypothesis",
    "Seq2Seq",
    "Seq2SeqConfig",
    "Seq2SeqOutput",
    "beam_search",
    "build_model",
    "count_parameters",
    "greedy_search",
    "label_smoothed_cross_entropy",
    "preset",
    "transformer_base",
    "transformer_big",
    "translate_ids",
]
