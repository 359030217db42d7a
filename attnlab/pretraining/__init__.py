"""attnlab.pretraining: the papers' pre-training objectives and recipes, wired into runs.

- `ElectraPreTrainer` (electra.py): generator + discriminator with shared embeddings (Clark et al. 2020).
- `MaskedLMPreTrainer` (masked_lm.py): BERT/RoBERTa/ALBERT's step, MLM logits only where predicted.
- `SpanBoundaryHead`, `SpanBertForPreTraining` (span_boundary.py): SpanBERT's SBO (Joshi et al. 2020).
- `Recipe`, `RECIPES` (recipes.py): bert, roberta, albert, spanbert, electra, gpt, transfo-xl as presets.
- `SegmentRecurrence` (transfo_xl.py): Transformer-XL's memory carried between steps (Dai et al. 2019).
- `pretrain` (run.py): a run as named steps, model.py -> inputs.py -> plan.py -> stages.py -> report.py;
  the corpus and tokenizer before it (corpus.py: `prepare_corpus`; tokenizer.py: `train_or_load_tokenizer`).
- `fill_mask` (fill_mask.py), and the built-in stdlib-docstring corpus (builtin_corpus.py).
"""

from attnlab.pretraining.electra import ElectraOutput, ElectraPreTrainer, generator_config
from attnlab.pretraining.fill_mask import Prediction, fill_mask, load_masked_lm
from attnlab.pretraining.masked_lm import MaskedLMOutput, MaskedLMPreTrainer
from attnlab.pretraining.recipes import RECIPES, LengthStage, Recipe, get_recipe
from attnlab.pretraining.span_boundary import SpanBertForPreTraining, SpanBertOutput, SpanBoundaryHead

__all__ = [
    "RECIPES",
    "ElectraOutput",
    "ElectraPreTrainer",
    "LengthStage",
    "MaskedLMOutput",
    "MaskedLMPreTrainer",
    "Prediction",
    "Recipe",
    "SpanBertForPreTraining",
    "SpanBertOutput",
    "SpanBoundaryHead",
    "fill_mask",
    "generator_config",
    "get_recipe",
    "load_masked_lm",
]
