"""ELMo (Peters et al. 2018): a character CNN token encoder, a two-direction LSTM language model with
projections and residual connections, and a scalar mix of its layers (`attnlab.nn.ScalarMix`).

Files: `config` (ElmoConfig, presets), `chars` (words to character ids, AllenNLP's conventions),
`char_cnn` (CharCNN), `lstm` (ProjectedLSTM, BiLSTMStack), `bilm` (ElmoBiLM, the shared softmax),
`embed` (sentences to per-layer vectors). Weights: `attnlab.io.families.elmo`.
"""

from attnlab.models.elmo.bilm import ElmoBiLM, ElmoOutput, WordSoftmax, count_parameters
from attnlab.models.elmo.chars import BOS_TOKEN, EOS_TOKEN, MAX_CHARS, batch_char_ids, word_char_ids
from attnlab.models.elmo.config import PRESETS, ElmoConfig, get_preset
from attnlab.models.elmo.embed import embed_sentences

__all__ = [
    "BOS_TOKEN",
    "EOS_TOKEN",
    "MAX_CHARS",
    "PRESETS",
    "ElmoBiLM",
    "ElmoConfig",
    "ElmoOutput",
    "WordSoftmax",
    "batch_char_ids",
    "count_parameters",
    "embed_sentences",
    "get_preset",
    "word_char_ids",
]
