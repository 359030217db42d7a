"""HF encoder families as data: BERT, RoBERTa, RoBERTa-PreLayerNorm, ALBERT, ELECTRA, DistilBERT.

Each family is one `Family` record: the HF class per kind of model, the config field names, and the
state-dict layout as ``{attnlab module path: HF module path}`` (``{j}`` = sub-layer index). `KeyMap`, the one
generic translator, serves all of them (`attnlab.io.hf` reads and writes with it); no family has code of its
own. ``KINDS`` maps each kind of model (base, mlm, pretraining, rtd) to its attnlab architecture.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# attnlab activation name <-> HF ``hidden_act``; several HF names compute the same function.
HF_ACTIVATIONS: dict[str, str] = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "quick_gelu": "gelu_sigmoid",
    "relu": "relu",
}
TO_HF_ACTIVATION: dict[str, str] = {
    "gelu": "gelu",
    "gelu_tanh": "gelu_new",
    "gelu_sigmoid": "quick_gelu",
    "relu": "relu",
}
# attnlab ``pooler_activation`` -> HF activation name (ELECTRA's ``summary_activation``), and back
TO_HF_POOLER_ACTIVATION: dict[str, str] = {"tanh": "tanh", **TO_HF_ACTIVATION}
HF_POOLER_ACTIVATIONS: dict[str, str] = {"tanh": "tanh", **HF_ACTIVATIONS}

# kind -> (attnlab architecture, from_config options, head groups it holds)
KINDS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "base": ("Encoder", {}, ()),
    "mlm": ("EncoderForPreTraining", {"pair_head": False}, ("mlm",)),
    "pretraining": ("EncoderForPreTraining", {"pair_head": True}, ("mlm", "pair")),
    "rtd": ("ReplacedTokenDetection", {}, ("rtd",)),
}


@dataclass(frozen=True)
class Family:
    """How one HF model family names its config and weights. Pure data, read by the generic code below."""

    model_type: str
    prefix: str  # the base model's attribute in *For* classes: "bert" -> keys "bert.embeddings..."
    classes: Mapping[str, str]  # kind -> HF class name
    layout: Mapping[str, str]  # attnlab Encoder module path -> HF base-model module path
    heads: Mapping[str, Mapping[str, str]]  # head group -> attnlab path -> HF path (absolute)
    config_fields: Mapping[str, str]  # EncoderConfig field -> HF config field
    defaults: Mapping[str, Any]  # HF config defaults for fields older files leave out
    fixed: Mapping[str, Any] = field(default_factory=dict)  # EncoderConfig values the family always has
    pooler: Mapping[str, bool] = field(default_factory=dict)  # kind -> whether the HF class holds a pooler
    hf_aliases: Mapping[str, str] = field(default_factory=dict)  # duplicate HF key -> the key it copies
    head_activation: str | None = None  # MLM-head activation HF hard-codes (None: follows hidden_act)
    position_offset_from_pad: bool = False  # RoBERTa: positions start at pad_token_id + 1
    # RoBERTa-PreLayerNorm for attnlab's pre-LN BERT: a model whose positions start at 0 (BERT's) is written
    # with pad_token_id + 1 rows in front of its table (`position_shift`), the same embedding per position
    shift_positions: bool = False
    layer_groups: bool = False  # ALBERT: sharing expressed as num_hidden_groups / inner_group_num
    sinusoidal_field: str | None = None  # DistilBERT: sinusoidal_pos_embds
    embedding_size: bool = False  # the family may factorise E != H


def _bert_layers(base: str) -> dict[str, str]:
    """The BERT layer layout, shared verbatim by RoBERTa and ELECTRA."""
    return {
        "attention.{j}.layer.query": f"{base}.{{j}}.attention.self.query",
        "attention.{j}.layer.key": f"{base}.{{j}}.attention.self.key",
        "attention.{j}.layer.value": f"{base}.{{j}}.attention.self.value",
        "attention.{j}.layer.output": f"{base}.{{j}}.attention.output.dense",
        "attention.{j}.norm": f"{base}.{{j}}.attention.output.LayerNorm",
        "feed_forward.{j}.layer.up": f"{base}.{{j}}.intermediate.dense",
        "feed_forward.{j}.layer.down": f"{base}.{{j}}.output.dense",
        "feed_forward.{j}.norm": f"{base}.{{j}}.output.LayerNorm",
    }


def _pre_ln_layers(base: str) -> dict[str, str]:
    """RoBERTa-PreLayerNorm's layers: BERT's names, each sub-layer's LayerNorm moved in front of it."""
    return {
        **_bert_layers(base),
        "attention.{j}.norm": f"{base}.{{j}}.attention.LayerNorm",
        "feed_forward.{j}.norm": f"{base}.{{j}}.intermediate.LayerNorm",
    }


_BERT_EMBEDDINGS = {
    "embeddings.word": "embeddings.word_embeddings",
    "embeddings.position": "embeddings.position_embeddings",
    "embeddings.token_type": "embeddings.token_type_embeddings",
    "embeddings.norm": "embeddings.LayerNorm",
}

_BERT_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "pad_token_id": "pad_token_id",
    "activation": "hidden_act",
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
}

_BERT_DEFAULTS = {
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "pad_token_id": 0,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "layer_norm_eps": 1e-12,
    "initializer_range": 0.02,
}

# The MLM head in BERT's layout (module path prefixes; ".weight"/".bias" follow).
_BERT_LIKE_MLM = {
    "bert": {
        "mlm_head.dense": "cls.predictions.transform.dense",
        "mlm_head.norm": "cls.predictions.transform.LayerNorm",
        "mlm_head.decoder": "cls.predictions.decoder",
        "mlm_head.bias": "cls.predictions.bias",
    },
    "roberta": {
        "mlm_head.dense": "lm_head.dense",
        "mlm_head.norm": "lm_head.layer_norm",
        "mlm_head.decoder": "lm_head.decoder",
        "mlm_head.bias": "lm_head.bias",
    },
}

_ROBERTA = Family(
    model_type="roberta",
    prefix="roberta",
    classes={"base": "RobertaModel", "mlm": "RobertaForMaskedLM"},
    layout={**_BERT_EMBEDDINGS, **_bert_layers("encoder.layer"), "pooler.dense": "pooler.dense"},
    heads={"mlm": _BERT_LIKE_MLM["roberta"]},
    config_fields=_BERT_FIELDS,
    defaults={**_BERT_DEFAULTS, "pad_token_id": 1},
    pooler={"base": True, "mlm": False},
    hf_aliases={"lm_head.decoder.bias": "lm_head.bias"},
    head_activation="gelu",  # RobertaLMHead calls gelu whatever hidden_act says
    position_offset_from_pad=True,
)

FAMILIES: dict[str, Family] = {
    "bert": Family(
        model_type="bert",
        prefix="bert",
        classes={"base": "BertModel", "mlm": "BertForMaskedLM", "pretraining": "BertForPreTraining"},
        layout={**_BERT_EMBEDDINGS, **_bert_layers("encoder.layer"), "pooler.dense": "pooler.dense"},
        heads={"mlm": _BERT_LIKE_MLM["bert"], "pair": {"pair_head.classifier": "cls.seq_relationship"}},
        config_fields=_BERT_FIELDS,
        defaults=_BERT_DEFAULTS,
        pooler={"base": True, "mlm": False, "pretraining": True},
        hf_aliases={"cls.predictions.decoder.bias": "cls.predictions.bias"},
    ),
    "roberta": _ROBERTA,
    # Pre-LN (Xiong et al. 2020): LayerNorm before each sub-layer and once after the last layer, the
    # encoder of attnlab's budget recipes. HF holds it as RoBERTa-PreLayerNorm: RoBERTa's record with the
    # norms moved, a final LayerNorm, and BERT-style positions (from 0) shifted behind pad_token_id + 1 rows.
    "roberta-prelayernorm": dataclasses.replace(
        _ROBERTA,
        model_type="roberta-prelayernorm",
        prefix="roberta_prelayernorm",
        classes={"base": "RobertaPreLayerNormModel", "mlm": "RobertaPreLayerNormForMaskedLM"},
        layout={
            **_BERT_EMBEDDINGS,
            **_pre_ln_layers("encoder.layer"),
            "final_norm": "LayerNorm",
            "pooler.dense": "pooler.dense",
        },
        fixed={"norm_first": True},
        shift_positions=True,
    ),
    "albert": Family(
        model_type="albert",
        prefix="albert",
        classes={"base": "AlbertModel", "mlm": "AlbertForMaskedLM", "pretraining": "AlbertForPreTraining"},
        layout={
            **_BERT_EMBEDDINGS,
            "embeddings.project": "encoder.embedding_hidden_mapping_in",
            # {j} is the layer group; attnlab's unique sub-layer j (one group when all-shared).
            "attention.{j}.layer.query": "encoder.albert_layer_groups.{j}.albert_layers.0.attention.query",
            "attention.{j}.layer.key": "encoder.albert_layer_groups.{j}.albert_layers.0.attention.key",
            "attention.{j}.layer.value": "encoder.albert_layer_groups.{j}.albert_layers.0.attention.value",
            "attention.{j}.layer.output": "encoder.albert_layer_groups.{j}.albert_layers.0.attention.dense",
            "attention.{j}.norm": "encoder.albert_layer_groups.{j}.albert_layers.0.attention.LayerNorm",
            "feed_forward.{j}.layer.up": "encoder.albert_layer_groups.{j}.albert_layers.0.ffn",
            "feed_forward.{j}.layer.down": "encoder.albert_layer_groups.{j}.albert_layers.0.ffn_output",
            "feed_forward.{j}.norm": "encoder.albert_layer_groups.{j}.albert_layers.0.full_layer_layer_norm",
            "pooler.dense": "pooler",
        },
        heads={
            "mlm": {
                "mlm_head.dense": "predictions.dense",
                "mlm_head.norm": "predictions.LayerNorm",
                "mlm_head.decoder": "predictions.decoder",
                "mlm_head.bias": "predictions.bias",
            },
            "pair": {"pair_head.classifier": "sop_classifier.classifier"},
        },
        config_fields={**_BERT_FIELDS, "embedding_size": "embedding_size"},
        defaults={
            **_BERT_DEFAULTS,
            "hidden_act": "gelu_new",
            "embedding_size": 128,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "num_hidden_groups": 1,
            "inner_group_num": 1,
        },
        pooler={"base": True, "mlm": False, "pretraining": True},
        hf_aliases={"predictions.decoder.bias": "predictions.bias"},
        layer_groups=True,
        embedding_size=True,
    ),
    "electra": Family(
        model_type="electra",
        prefix="electra",
        classes={"base": "ElectraModel", "mlm": "ElectraForMaskedLM", "rtd": "ElectraForPreTraining"},
        layout={
            **_BERT_EMBEDDINGS,
            "embeddings.project": "embeddings_project",
            **_bert_layers("encoder.layer"),
        },
        heads={
            "mlm": {  # the generator
                "mlm_head.dense": "generator_predictions.dense",
                "mlm_head.norm": "generator_predictions.LayerNorm",
                "mlm_head.decoder.weight": "generator_lm_head.weight",
                "mlm_head.bias": "generator_lm_head.bias",
            },
            "rtd": {  # the discriminator
                "rtd_head.dense": "discriminator_predictions.dense",
                "rtd_head.classifier": "discriminator_predictions.dense_prediction",
            },
        },
        config_fields={**_BERT_FIELDS, "embedding_size": "embedding_size"},
        defaults={**_BERT_DEFAULTS, "embedding_size": 128},
        pooler={"base": False, "mlm": False, "rtd": False},
        head_activation="gelu",  # ElectraGeneratorPredictions calls gelu whatever hidden_act says
        embedding_size=True,
    ),
    "distilbert": Family(
        model_type="distilbert",
        prefix="distilbert",
        classes={"base": "DistilBertModel", "mlm": "DistilBertForMaskedLM"},
        layout={
            "embeddings.word": "embeddings.word_embeddings",
            "embeddings.position": "embeddings.position_embeddings",
            "embeddings.norm": "embeddings.LayerNorm",
            "attention.{j}.layer.query": "transformer.layer.{j}.attention.q_lin",
            "attention.{j}.layer.key": "transformer.layer.{j}.attention.k_lin",
            "attention.{j}.layer.value": "transformer.layer.{j}.attention.v_lin",
            "attention.{j}.layer.output": "transformer.layer.{j}.attention.out_lin",
            "attention.{j}.norm": "transformer.layer.{j}.sa_layer_norm",
            "feed_forward.{j}.layer.up": "transformer.layer.{j}.ffn.lin1",
            "feed_forward.{j}.layer.down": "transformer.layer.{j}.ffn.lin2",
            "feed_forward.{j}.norm": "transformer.layer.{j}.output_layer_norm",
        },
        heads={
            "mlm": {
                "mlm_head.dense": "vocab_transform",
                "mlm_head.norm": "vocab_layer_norm",
                "mlm_head.decoder.weight": "vocab_projector.weight",
                "mlm_head.bias": "vocab_projector.bias",
            }
        },
        config_fields={
            "vocab_size": "vocab_size",
            "hidden_size": "dim",
            "num_layers": "n_layers",
            "num_heads": "n_heads",
            "intermediate_size": "hidden_dim",
            "max_position_embeddings": "max_position_embeddings",
            "pad_token_id": "pad_token_id",
            "activation": "activation",
            "hidden_dropout": "dropout",
            "attention_dropout": "attention_dropout",
            "initializer_range": "initializer_range",
        },
        defaults={
            "max_position_embeddings": 512,
            "pad_token_id": 0,
            "activation": "gelu",
            "dropout": 0.1,
            "attention_dropout": 0.1,
            "initializer_range": 0.02,
            "sinusoidal_pos_embds": False,
        },
        # DistilBERT has no segment embeddings and hard-codes LayerNorm eps = 1e-12.
        fixed={"type_vocab_size": 0, "layer_norm_eps": 1e-12},
        pooler={"base": False, "mlm": False},
        sinusoidal_field="sinusoidal_pos_embds",
    ),
}

# HF buffers some versions saved with the weights; they carry no learned values.
_IGNORED_HF_KEYS = re.compile(r"(^|\.)(position_ids|token_type_ids)$")


# ---------------------------------------------------------------------------------------------------
# the generic key translator


class KeyMap:
    """Translate state-dict keys between attnlab and HF names with a ``{ours: theirs}`` path table.

    A table entry maps a module path (or a full parameter name); ``{j}`` matches a layer index. A key
    matches an entry when it equals the path or continues it with ``.`` + parameter name.
    """

    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = dict(table)
        self._forward = [(self._compile(a), b) for a, b in table.items()]
        self._backward = [(self._compile(b), a) for a, b in table.items()]

    @staticmethod
    def _compile(path: str) -> re.Pattern[str]:
        pattern = re.escape(path).replace(re.escape("{j}"), r"(?P<j>\d+)")
        return re.compile(rf"^{pattern}(?P<rest>\..+)?$")

    @staticmethod
    def _apply(rules: list[tuple[re.Pattern[str], str]], key: str) -> str | None:
        for pattern, target in rules:
            m = pattern.match(key)
            if m:
                groups = m.groupdict()
                return target.replace("{j}", groups.get("j") or "") + (groups["rest"] or "")
        return None

    def to_hf(self, key: str) -> str | None:
        return self._apply(self._forward, key)

    def from_hf(self, key: str) -> str | None:
        return self._apply(self._backward, key)


def key_map(family: Family, kind: str) -> KeyMap:
    """The full attnlab <-> HF table for one family and kind (encoder layout + that kind's heads)."""
    _, _, groups = KINDS[kind]
    if kind == "base":
        table = dict(family.layout)
    else:
        table = {f"encoder.{ours}": f"{family.prefix}.{theirs}" for ours, theirs in family.layout.items()}
    for group in groups:
        table.update(family.heads[group])
    return KeyMap(table)
