"""Named configurations of the papers' released models, as small functions deriving from each other.

Sources of the numbers:
- BERT base/large: Devlin et al. 2019 section 3 (L/H/A = 12/768/12 and 24/1024/16, FFN 4H);
  vocabularies of the released checkpoints (uncased 30522, cased 28996 WordPieces).
- BERT tiny/mini/small/medium: Turc et al. 2019 ("Well-Read Students Learn Better"), L/H = 2/128,
  4/256, 4/512, 8/512 with H/64 heads and FFN 4H (the released google/bert_uncased_L-*_H-* models).
- RoBERTa: Liu et al. 2019 (BERT's shapes) and the released fairseq/HF configs: byte-level BPE
  vocabulary 50265, <pad> = 1, positions offset by pad + 1 = 2 (so 514 rows for 512 tokens), a single
  segment embedding, LayerNorm eps 1e-5.
- ALBERT: Lan et al. 2020 Table 1 (E = 128, all-shared; base 12/768, large 24/1024, xlarge 24/2048,
  xxlarge 12/4096 with FFN 16384 and 64 heads), SentencePiece vocabulary 30000, released v2 configs:
  heads H/64 except xlarge (16 heads, as released), tanh GELU ("gelu_new"), no dropout (section 4.9).
- ELECTRA: Clark et al. 2020 Table 6 (small: E 128, H 256, 4 heads, FFN 1024; base and large as BERT)
  and the released google/electra-*-{discriminator,generator} configs for the generators: small
  generator H 256 (the released one is not the paper's 1/4 size), base generator H 256 E 768, large
  generator H 256 E 1024, all with 4 heads and FFN 1024. No pooler (ELECTRA has no NSP).
- DistilBERT: Sanh et al. 2019: BERT-base with 6 layers, no segment embeddings, no pooler; learned
  positions as released (the sinusoidal option is off).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from attnlab.models.config import EncoderConfig

replace = dataclasses.replace


# -- BERT ------------------------------------------------------------------------------------------
def bert_base_uncased() -> EncoderConfig:
    return EncoderConfig()  # the defaults are BERT-base


def bert_base_cased() -> EncoderConfig:
    return replace(bert_base_uncased(), vocab_size=28996)


def bert_large_uncased() -> EncoderConfig:
    return replace(bert_base_uncased(), hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096)


def bert_large_cased() -> EncoderConfig:
    return replace(bert_large_uncased(), vocab_size=28996)


def _turc(layers: int, hidden: int) -> EncoderConfig:
    return replace(
        bert_base_uncased(),
        num_layers=layers,
        hidden_size=hidden,
        num_heads=hidden // 64,
        intermediate_size=4 * hidden,
    )


def bert_tiny() -> EncoderConfig:
    return _turc(2, 128)


def bert_mini() -> EncoderConfig:
    return _turc(4, 256)


def bert_small() -> EncoderConfig:
    return _turc(4, 512)


def bert_medium() -> EncoderConfig:
    return _turc(8, 512)


# -- RoBERTa: BERT's shapes, a new vocabulary, offset positions ------------------------------------
def roberta_base() -> EncoderConfig:
    return replace(
        bert_base_uncased(),
        vocab_size=50265,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=1,
        position_offset=2,
        layer_norm_eps=1e-5,
    )


def roberta_large() -> EncoderConfig:
    return replace(roberta_base(), hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096)


# -- ALBERT: factorised embeddings + all-shared layers ---------------------------------------------
def albert_base() -> EncoderConfig:
    return replace(
        bert_base_uncased(),
        vocab_size=30000,
        embedding_size=128,
        sharing="all",
        activation="gelu_tanh",
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )


def albert_large() -> EncoderConfig:
    return replace(albert_base(), hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096)


def albert_xlarge() -> EncoderConfig:
    return replace(albert_large(), hidden_size=2048, intermediate_size=8192)  # 16 heads as released


def albert_xxlarge() -> EncoderConfig:
    return replace(albert_base(), hidden_size=4096, num_heads=64, intermediate_size=16384)


# -- ELECTRA ---------------------------------------------------------------------------------------
def electra_base() -> EncoderConfig:
    return replace(bert_base_uncased(), add_pooler=False)


def electra_large() -> EncoderConfig:
    return replace(bert_large_uncased(), add_pooler=False)


def electra_small() -> EncoderConfig:
    return replace(electra_base(), embedding_size=128, hidden_size=256, num_heads=4, intermediate_size=1024)


def _generator(discriminator: EncoderConfig) -> EncoderConfig:
    # Released generators keep the discriminator's embedding size E (their embeddings are tied to it).
    return replace(
        discriminator,
        embedding_size=discriminator.embedding_dim,
        hidden_size=256,
        num_heads=4,
        intermediate_size=1024,
    )


def electra_small_generator() -> EncoderConfig:
    return _generator(electra_small())


def electra_base_generator() -> EncoderConfig:
    return _generator(electra_base())


def electra_large_generator() -> EncoderConfig:
    return _generator(electra_large())


# -- DistilBERT: half of BERT-base, no segments, no pooler -----------------------------------------
def distilbert_base() -> EncoderConfig:
    return replace(bert_base_uncased(), num_layers=6, type_vocab_size=0, add_pooler=False)


# -- Local attention: bert-mini reading 4,096 tokens through a sliding window ------------------------------
def bert_mini_local() -> EncoderConfig:
    """bert-mini with local attention: 128 keys on each side, [CLS] global (Longformer's pattern, Beltagy et
    al. 2020), 4,096 learned positions; the only new parameters are the longer position table."""
    return replace(
        bert_mini(), attention="local", attention_window=128, global_tokens=1, max_position_embeddings=4096
    )


PRESETS: dict[str, Callable[[], EncoderConfig]] = {
    "bert-tiny": bert_tiny,
    "bert-mini": bert_mini,
    "bert-small": bert_small,
    "bert-medium": bert_medium,
    "bert-mini-local": bert_mini_local,
    "bert-base-uncased": bert_base_uncased,
    "bert-base-cased": bert_base_cased,
    "bert-large-uncased": bert_large_uncased,
    "bert-large-cased": bert_large_cased,
    "roberta-base": roberta_base,
    "roberta-large": roberta_large,
    "albert-base": albert_base,
    "albert-large": albert_large,
    "albert-xlarge": albert_xlarge,
    "albert-xxlarge": albert_xxlarge,
    "electra-small": electra_small,
    "electra-base": electra_base,
    "electra-large": electra_large,
    "electra-small-generator": electra_small_generator,
    "electra-base-generator": electra_base_generator,
    "electra-large-generator": electra_large_generator,
    "distilbert-base": distilbert_base,
}


def get_preset(name: str, **overrides: object) -> EncoderConfig:
    """The named preset, with optional field overrides (``get_preset("bert-mini", vocab_size=99)``)."""
    try:
        config = PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}") from None
    if overrides:
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(EncoderConfig)})
        if unknown:
            raise ValueError(f"get_preset({name!r}): unknown field(s) {', '.join(unknown)}")
        config = replace(config, **overrides)
    return config
