"""Parity with HF transformers on identical weights, both directions, for every supported family.

HF -> attnlab: build a tiny HF model in-process, ``save_pretrained`` it, read it with `load_hf`, and
compare every layer's hidden states and every head's logits. attnlab -> HF: build an attnlab model,
`save_hf` it, load it with ``transformers.AutoModel*.from_pretrained`` (no missing or unexpected keys
allowed) and compare the same outputs. Tolerance: max abs difference <= 1e-5 in float32.

Weights are the model's initialisation plus noise on every parameter, so LayerNorm scales, biases
and the output bias are all non-trivial. Inputs have padding and (where the family has them) two
segments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.accel import optimize  # noqa: E402
from attnlab.io import CheckpointError  # noqa: E402
from attnlab.io.format import read_safetensors  # noqa: E402
from attnlab.io.hf_encoders import load_hf, save_hf  # noqa: E402
from attnlab.models import ARCHITECTURES, EncoderConfig  # noqa: E402

ATOL = 1e-5
VOCAB, HIDDEN, HEADS, INTER, EMB = 99, 32, 4, 37, 16


def _bert_like(cls_name: str, **kw):
    cls = getattr(transformers, cls_name)
    base = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=3,
        num_attention_heads=HEADS,
        intermediate_size=INTER,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=64,
    )
    base.update(kw)
    return cls(**base)


def _distil(**kw):
    base = dict(
        vocab_size=VOCAB,
        dim=HIDDEN,
        n_layers=3,
        n_heads=HEADS,
        hidden_dim=INTER,
        dropout=0.0,
        attention_dropout=0.0,
        max_position_embeddings=64,
    )
    base.update(kw)
    return transformers.DistilBertConfig(**base)


# name -> (HF config factory, HF classes to test, attnlab EncoderConfig of the same shape)
TINY = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    num_heads=HEADS,
    intermediate_size=INTER,
    num_layers=3,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    max_position_embeddings=64,
)
CASES = {
    "bert": (
        lambda: _bert_like("BertConfig"),
        ["BertModel", "BertForMaskedLM", "BertForPreTraining"],
        EncoderConfig(**TINY),
    ),
    "roberta": (
        lambda: _bert_like("RobertaConfig", type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5),
        ["RobertaModel", "RobertaForMaskedLM"],
        EncoderConfig(**TINY, type_vocab_size=1, pad_token_id=1, position_offset=2, layer_norm_eps=1e-5),
    ),
    "roberta-prelayernorm": (  # pre-LN, attnlab's budget encoder, as HF's RoBERTa-PreLayerNorm
        lambda: _bert_like(
            "RobertaPreLayerNormConfig", type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5
        ),
        ["RobertaPreLayerNormModel", "RobertaPreLayerNormForMaskedLM"],
        EncoderConfig(
            **TINY, type_vocab_size=1, pad_token_id=1, position_offset=2, layer_norm_eps=1e-5, norm_first=True
        ),
    ),
    "albert": (  # all-shared, ALBERT's default (num_hidden_groups = 1)
        lambda: _bert_like("AlbertConfig", embedding_size=EMB, hidden_act="gelu_new"),
        ["AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining"],
        EncoderConfig(**TINY, embedding_size=EMB, sharing="all", activation="gelu_tanh"),
    ),
    "albert-not-shared": (  # one group per layer = ALBERT Table 4's not-shared
        lambda: _bert_like("AlbertConfig", embedding_size=EMB, num_hidden_groups=3, hidden_act="gelu_new"),
        ["AlbertForPreTraining"],
        EncoderConfig(**TINY, embedding_size=EMB, activation="gelu_tanh"),
    ),
    "electra": (
        lambda: _bert_like("ElectraConfig", embedding_size=EMB),
        ["ElectraModel", "ElectraForMaskedLM", "ElectraForPreTraining"],
        EncoderConfig(**TINY, embedding_size=EMB, add_pooler=False),
    ),
    "electra-same-width": (  # the discriminator of ELECTRA-base: E = H, no embeddings_project
        lambda: _bert_like("ElectraConfig", embedding_size=HIDDEN),
        ["ElectraForPreTraining"],
        EncoderConfig(**TINY, add_pooler=False),
    ),
    "distilbert": (
        _distil,
        ["DistilBertModel", "DistilBertForMaskedLM"],
        EncoderConfig(**TINY, type_vocab_size=0, add_pooler=False),
    ),
    "distilbert-sinusoidal": (
        lambda: _distil(sinusoidal_pos_embds=True),
        ["DistilBertModel", "DistilBertForMaskedLM"],
        EncoderConfig(**TINY, type_vocab_size=0, add_pooler=False, position_embedding="sinusoidal"),
    ),
}

# HF class -> (attnlab architecture, options)
HF_TO_OURS = {
    "Model": ("Encoder", {}),
    "ForMaskedLM": ("EncoderForPreTraining", {"pair_head": False}),
    "BertForPreTraining": ("EncoderForPreTraining", {"pair_head": True}),
    "AlbertForPreTraining": ("EncoderForPreTraining", {"pair_head": True}),
    "ElectraForPreTraining": ("ReplacedTokenDetection", {}),
}


def _ours_for(hf_class: str) -> tuple[str, dict]:
    if hf_class in HF_TO_OURS:
        return HF_TO_OURS[hf_class]
    return HF_TO_OURS["Model" if hf_class.endswith("Model") else "ForMaskedLM"]


PAIRS = [(name, hf_class) for name, (_, classes, _) in CASES.items() for hf_class in classes]


def _perturb(model: torch.nn.Module, seed: int, keep: str | None = None) -> None:
    """Add noise to every trainable parameter (once per tied tensor) so nothing is trivially 0 or 1;
    parameters whose name contains ``keep`` are left as they are."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # yields each tied tensor once
            if p.requires_grad and not (keep and keep in name):
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def _inputs(name: str) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (3, 13), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    pad = 1 if name.startswith("roberta") else 0
    ids = ids.masked_fill(mask == 0, pad)  # padding ids where padded: RoBERTa's positions depend on them
    batch = {"input_ids": ids, "attention_mask": mask}
    if not name.startswith(("distilbert", "roberta")):
        segments = torch.zeros_like(ids)
        segments[:, 6:] = 1
        batch["token_type_ids"] = segments
    return batch


def _hf_outputs(model, batch) -> dict[str, object]:
    with torch.inference_mode():
        out = model(**batch, output_hidden_states=True)
    result: dict[str, object] = {"hidden_states": out.hidden_states}
    for ours, theirs in (
        ("mlm_logits", "prediction_logits"),
        ("pair_logits", "seq_relationship_logits"),
        ("pair_logits", "sop_logits"),
        ("pooled_output", "pooler_output"),
    ):
        if getattr(out, theirs, None) is not None:
            result[ours] = getattr(out, theirs)
    logits = getattr(out, "logits", None)
    if logits is not None:
        result["mlm_logits" if logits.dim() == 3 else "rtd_logits"] = logits
    return result


def _our_outputs(model, batch) -> dict[str, object]:
    with torch.inference_mode():
        out = model(**batch, output_hidden_states=True)
    result: dict[str, object] = {"hidden_states": out.hidden_states}
    for name in ("mlm_logits", "pair_logits", "pooled_output"):
        if getattr(out, name, None) is not None:
            result[name] = getattr(out, name)
    if type(model).__name__ == "ReplacedTokenDetection":
        result["rtd_logits"] = out.logits
    return result


def _assert_same(ours: dict, theirs: dict, context: str, rtol: float = 0.0) -> None:
    """Equal within ``ATOL + rtol * max|HF's value|`` per output."""
    assert set(ours) == set(theirs), f"{context}: outputs {sorted(ours)} vs HF {sorted(theirs)}"
    for key in ours:
        a, b = ours[key], theirs[key]
        if key == "hidden_states":
            assert len(a) == len(b), f"{context}: {len(a)} hidden states vs HF {len(b)}"
            pairs = [(f"hidden_states[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b))]
        else:
            pairs = [(key, a, b)]
        for label, x, y in pairs:
            assert x.shape == y.shape, f"{context} {label}: shape {tuple(x.shape)} vs HF {tuple(y.shape)}"
            diff = (x.float() - y.float()).abs().max().item()
            tol = ATOL + rtol * y.float().abs().max().item()
            assert diff <= tol, f"{context} {label}: max abs diff {diff:.3g} > {tol:.3g}"


@pytest.mark.parametrize(("name", "hf_class"), PAIRS, ids=[f"{n}-{c}" for n, c in PAIRS])
def test_hf_to_attnlab(name: str, hf_class: str, tmp_path: Path) -> None:
    make_config, _, _ = CASES[name]
    torch.manual_seed(0)
    hf_model = getattr(transformers, hf_class)(make_config()).eval()
    sinusoidal = name.endswith("sinusoidal")
    # HF keeps DistilBERT's sin/cos table as a trainable weight: left untouched, it stays the formula.
    _perturb(hf_model, seed=2, keep="position_embeddings" if sinusoidal else None)
    hf_model.save_pretrained(tmp_path)

    ours = load_hf(tmp_path)
    assert ours.config.position_embedding == ("sinusoidal" if sinusoidal else "learned")
    architecture, options = _ours_for(hf_class)
    assert type(ours) is ARCHITECTURES[architecture]
    if hasattr(ours, "pair_head"):
        assert (ours.pair_head is not None) == options["pair_head"]
        assert ours.mlm_head.decoder.weight is ours.encoder.embeddings.word.weight  # re-tied
    batch = _inputs(name)
    _assert_same(_our_outputs(ours, batch), _hf_outputs(hf_model, batch), f"{name} {hf_class} -> attnlab")


@pytest.mark.parametrize(("name", "hf_class"), PAIRS, ids=[f"{n}-{c}" for n, c in PAIRS])
def test_attnlab_to_hf(name: str, hf_class: str, tmp_path: Path) -> None:
    _, _, config = CASES[name]
    architecture, options = _ours_for(hf_class)
    if architecture == "Encoder" and hf_class in ("BertModel", "RobertaModel", "AlbertModel"):
        assert config.add_pooler  # HF's base class holds a pooler; compare it too
    torch.manual_seed(0)
    ours = ARCHITECTURES[architecture].from_config(config, **options).eval()
    _perturb(ours, seed=3)
    family = name if name == "roberta-prelayernorm" else name.split("-")[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_hf(ours, tmp_path, family=family)
    pooler_dropped = [w for w in caught if "no pooler" in str(w.message)]
    # HF's *ForMaskedLM classes hold no pooler; the attnlab model built from the same config does.
    assert bool(pooler_dropped) == (config.add_pooler and hf_class.endswith("ForMaskedLM"))

    hf_config = json.loads((tmp_path / "config.json").read_text())
    assert hf_config["model_type"] == family and hf_config["architectures"] == [hf_class]
    hf_model, info = getattr(transformers, hf_class).from_pretrained(tmp_path, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    assert not problems, f"HF loading reported {problems}"
    batch = _inputs(name)
    expected = _our_outputs(ours, batch)
    if pooler_dropped:
        expected.pop("pooled_output", None)
    _assert_same(expected, _hf_outputs(hf_model.eval(), batch), f"{name} attnlab -> {hf_class}")


UNTIED = ["bert", "roberta", "albert", "electra", "distilbert"]


@pytest.mark.parametrize("name", UNTIED)
def test_untied_decoder_both_directions(name: str, tmp_path: Path) -> None:
    """tie_word_embeddings=false: HF's decoder (weight and bias) is its own; attnlab's tie_weights=False."""
    make_config, classes, config = CASES[name]
    hf_class = next(c for c in classes if c.endswith("ForMaskedLM"))
    hf_config = make_config()
    hf_config.tie_word_embeddings = False
    torch.manual_seed(0)
    hf_model = getattr(transformers, hf_class)(hf_config).eval()
    _perturb(hf_model, seed=8)
    hf_model.save_pretrained(tmp_path / "hf")
    ours = load_hf(tmp_path / "hf")
    assert ours.mlm_head.decoder.weight is not ours.encoder.embeddings.word.weight
    batch = _inputs(name)
    _assert_same(_our_outputs(ours, batch), _hf_outputs(hf_model, batch), f"untied {name} -> attnlab")

    ours = ARCHITECTURES["EncoderForPreTraining"].from_config(config, tie_weights=False).eval()
    _perturb(ours, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pooler HF's *ForMaskedLM has not
        save_hf(ours, tmp_path / "out", family=name)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["tie_word_embeddings"] is False
    back, info = getattr(transformers, hf_class).from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not {k: v for k, v in info.items() if v}, info
    expected = _our_outputs(ours, batch)
    expected.pop("pooled_output", None)
    _assert_same(expected, _hf_outputs(back.eval(), batch), f"untied attnlab -> {hf_class}")


def test_automodel_loads_the_export(tmp_path: Path) -> None:
    """``AutoModelForPreTraining`` / ``AutoModelForMaskedLM`` pick the exported class from config.json."""
    _, _, config = CASES["bert"]
    save_hf(ARCHITECTURES["EncoderForPreTraining"].from_config(config, pair_head=True), tmp_path / "pt")
    assert type(transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "pt")).__name__ == (
        "BertForPreTraining"
    )
    _, _, config = CASES["electra"]
    save_hf(ARCHITECTURES["ReplacedTokenDetection"].from_config(config), tmp_path / "d")
    assert type(transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "d")).__name__ == (
        "ElectraForPreTraining"
    )


def test_inferred_family_round_trips(tmp_path: Path) -> None:
    """Without ``family=``, each tiny config exports to the family it came from."""
    from attnlab.io import infer_family

    for name, kind_arch, family in (
        ("bert", ("EncoderForPreTraining", {"pair_head": True}), "bert"),
        ("roberta", ("EncoderForPreTraining", {}), "roberta"),
        ("albert", ("EncoderForPreTraining", {"pair_head": True}), "albert"),
        ("albert-not-shared", ("EncoderForPreTraining", {}), "albert"),  # gelu_tanh: not ELECTRA
        ("electra", ("EncoderForPreTraining", {}), "electra"),
        ("electra", ("ReplacedTokenDetection", {}), "electra"),
        ("distilbert", ("Encoder", {}), "distilbert"),
    ):
        model = ARCHITECTURES[kind_arch[0]].from_config(CASES[name][2], **kind_arch[1])
        kind = {"Encoder": "base", "ReplacedTokenDetection": "rtd"}.get(kind_arch[0], "mlm")
        assert infer_family(model.config, kind) == family, name


@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_albert_sharing_without_hf_counterpart_raises(sharing: str, tmp_path: Path) -> None:
    config = dataclasses.replace(CASES["albert"][2], sharing=sharing)
    model = ARCHITECTURES["EncoderForPreTraining"].from_config(config, pair_head=True)
    with pytest.raises(CheckpointError, match=f"sharing='{sharing}' has no HF counterpart"):
        save_hf(model, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()


@pytest.mark.parametrize(
    ("family", "change", "message"),
    [
        ("bert", {"norm_first": True}, "norm_first=True"),
        ("bert", {"embedding_size": 16}, "embedding_size=16 != hidden_size"),
        ("roberta", {"position_offset": 0}, "position_offset=0 .roberta needs 2"),
        ("bert", {"position_embedding": "sinusoidal"}, "position_embedding='sinusoidal'"),
        ("distilbert", {"layer_norm_eps": 1e-5}, "layer_norm_eps=1e-05 .distilbert fixes it to 1e-12"),
        ("roberta", {"activation": "relu"}, "MLM head hard-codes 'gelu'"),
    ],
)
def test_unexportable_configs_raise_with_the_reason(family, change, message, tmp_path: Path) -> None:
    name = family if family != "bert" else "bert"
    config = dataclasses.replace(CASES[name][2], **change)
    model = ARCHITECTURES["EncoderForPreTraining"].from_config(config)
    with pytest.raises(CheckpointError, match=message):
        save_hf(model, tmp_path, family=family)


def test_pair_head_needs_a_family_with_one(tmp_path: Path) -> None:
    config = dataclasses.replace(CASES["roberta"][2])
    model = ARCHITECTURES["EncoderForPreTraining"].from_config(config, pair_head=True)
    with pytest.raises(CheckpointError, match="roberta has no HF class for attnlab EncoderForPreTraining"):
        save_hf(model, tmp_path, family="roberta")


def _save_tiny_hf(tmp_path: Path, hf_class: str = "BertForPreTraining", **config_kw) -> torch.nn.Module:
    hf_model = getattr(transformers, hf_class)(_bert_like("BertConfig", **config_kw)).eval()
    _perturb(hf_model, seed=4)
    hf_model.save_pretrained(tmp_path)
    return hf_model


def test_trained_sinusoidal_table_loads_as_learned_positions(tmp_path: Path) -> None:
    hf_model = transformers.DistilBertModel(_distil(sinusoidal_pos_embds=True)).eval()
    _perturb(hf_model, seed=7)  # the table moved: it is a learned table now
    hf_model.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="loading it as learned positions"):
        ours = load_hf(tmp_path)
    assert ours.config.position_embedding == "learned"
    batch = _inputs("distilbert")
    _assert_same(_our_outputs(ours, batch), _hf_outputs(hf_model, batch), "trained sinusoidal")


def test_encoder_only_from_a_pretraining_checkpoint(tmp_path: Path) -> None:
    hf_model = _save_tiny_hf(tmp_path)
    encoder = load_hf(tmp_path, architecture="Encoder")
    assert type(encoder).__name__ == "Encoder"
    batch = _inputs("bert")
    with torch.inference_mode():
        ours = encoder(**batch).last_hidden_state
        theirs = hf_model.bert(**batch).last_hidden_state
    assert (ours - theirs).abs().max() <= ATOL
    with pytest.raises(CheckpointError, match="not ReplacedTokenDetection|valid: Encoder"):
        load_hf(tmp_path, architecture="ReplacedTokenDetection")


def test_legacy_pytorch_model_bin_with_tf_names(tmp_path: Path) -> None:
    """Old checkpoints: pytorch_model.bin (read with weights_only=True), LayerNorm gamma/beta, saved
    position_ids buffers and the duplicated decoder bias."""
    hf_model = _save_tiny_hf(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    state = {}
    for key, value in hf_model.state_dict().items():
        if "LayerNorm" in key:
            key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
                "LayerNorm.bias", "LayerNorm.beta"
            )
        state[key] = value.clone()
    state["bert.embeddings.position_ids"] = torch.arange(64)[None]
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"].clone()
    torch.save(state, tmp_path / "pytorch_model.bin")
    ours = load_hf(tmp_path)
    batch = _inputs("bert")
    _assert_same(_our_outputs(ours, batch), _hf_outputs(hf_model, batch), "legacy bin")


def test_head_checkpoint_without_base_prefix_and_sharded(tmp_path: Path) -> None:
    """Base keys without "bert." next to head keys, split over two safetensors shards with an index."""
    from safetensors.torch import save_file

    from attnlab.cli.models import _describe

    hf_model = _save_tiny_hf(tmp_path, "BertForMaskedLM")
    (tmp_path / "model.safetensors").unlink()
    state = {k.removeprefix("bert."): v.contiguous() for k, v in hf_model.state_dict().items()}
    state.pop("cls.predictions.decoder.weight")  # tied, as HF saves it
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, tmp_path / shard)
    index = {"metadata": {}, "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    ours = load_hf(tmp_path)
    assert type(ours).__name__ == "EncoderForPreTraining" and ours.pair_head is None
    batch = _inputs("bert")
    _assert_same(_our_outputs(ours, batch), _hf_outputs(hf_model, batch), "unprefixed, sharded")
    assert _describe(str(tmp_path))["architecture"].startswith("BertForMaskedLM")


def test_legacy_bin_with_code_is_refused(tmp_path: Path) -> None:
    _save_tiny_hf(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(
        {"weight": torch.zeros(1), "extra": argparse.Namespace(code=1)}, tmp_path / "pytorch_model.bin"
    )
    with pytest.raises(CheckpointError, match="weights_only=True"):
        load_hf(tmp_path)


def test_legacy_bin_with_non_finite_weights_is_refused(tmp_path: Path) -> None:
    """A pytorch_model.bin holding NaN is refused by tensor name, as a safetensors file is."""
    _save_tiny_hf(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = {k: v.clone() for k, v in read_safetensors(weights)[0].items()}
    weights.unlink()
    name = next(k for k, v in state.items() if v.is_floating_point() and v.dim() == 2)
    state[name][0, 0] = float("nan")
    torch.save(state, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=rf"pytorch_model\.bin.*{re.escape(name)}.*non-finite"):
        load_hf(tmp_path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
        ({"is_decoder": True}, "is_decoder=true"),
        ({"hidden_act": "swish"}, "hidden_act='swish'"),
        ({"model_type": "gpt2"}, "gpt2 causal language model, not an encoder; use `attnlab generate`"),
    ],
)
def test_unsupported_hf_configs_raise(change, message, tmp_path: Path) -> None:
    _save_tiny_hf(tmp_path, "BertModel")
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    raw.update(change)
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=message) as info:
        load_hf(tmp_path)
    assert "config.json" in str(info.value)


def test_albert_groups_without_attnlab_counterpart_raise(tmp_path: Path) -> None:
    hf_model = transformers.AlbertModel(
        _bert_like("AlbertConfig", embedding_size=EMB, num_hidden_layers=4, num_hidden_groups=2)
    )
    hf_model.save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="num_hidden_groups=2 with num_hidden_layers=4"):
        load_hf(tmp_path)


def test_unknown_head_keys_are_named(tmp_path: Path) -> None:
    hf_model = transformers.BertForSequenceClassification(_bert_like("BertConfig"))
    hf_model.save_pretrained(tmp_path)
    # a task checkpoint reads as its task model; the same weights under a config naming no task do not
    assert type(load_hf(tmp_path)).__name__ == "EncoderForSequenceClassification"
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    with pytest.raises(CheckpointError, match=r"classifier\.weight.*architecture='Encoder'"):
        load_hf(tmp_path)
    assert type(load_hf(tmp_path, architecture="Encoder")).__name__ == "Encoder"


def test_dtype_on_the_way_in_and_out(tmp_path: Path) -> None:
    hf_model = _save_tiny_hf(tmp_path / "hf")
    ours = load_hf(tmp_path / "hf", dtype="bfloat16")
    assert ours.encoder.embeddings.word.weight.dtype == torch.bfloat16
    save_hf(ours, tmp_path / "out", dtype="float16")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "float16"
    back = transformers.BertForPreTraining.from_pretrained(tmp_path / "out", dtype=torch.float16)
    expected = hf_model.bert.embeddings.word_embeddings.weight.to(torch.bfloat16).to(torch.float16)
    assert torch.equal(back.bert.embeddings.word_embeddings.weight, expected)


@pytest.mark.slow
@pytest.mark.parametrize("gemm", ["default", "onednn"])
@pytest.mark.parametrize("direction", ["hf_to_attnlab", "attnlab_to_hf"])
def test_bert_base_sized_parity(direction: str, gemm: str, tmp_path: Path) -> None:
    """bert-base shapes (12 x 768, V = 30522), MLM + NSP, both directions, T = 128 with padding.

    The model is optimized for inference (attnlab.accel.optimize), as `predict` runs it. Both sides sum in
    another order than HF: with HF's own matmul (``default``) attnlab's inference runs each layer through
    PyTorch's fused encoder-layer kernel (one stacked query/key/value product, attnlab.accel.fused_layer),
    and oneDNN (attnlab.accel.onednn_linear) blocks its products differently. 12 layers and a 30k-way
    decoder then differ by about 1e-6 of the logits' scale (on an Intel Xeon with AVX-512 the fused path's
    MLM logits were 1.1e-5 apart), hence the relative term for both.
    """
    from attnlab.accel import cpu_gemm, set_cpu_gemm

    before = cpu_gemm()
    set_cpu_gemm(gemm)
    try:
        _bert_base_sized_parity(direction, tmp_path, rtol=2e-6)
    finally:
        set_cpu_gemm(before)


def _bert_base_sized_parity(direction: str, tmp_path: Path, rtol: float) -> None:
    from attnlab.models import get_preset

    config = get_preset("bert-base-uncased", hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    if direction == "hf_to_attnlab":
        hf_model = transformers.BertForPreTraining(transformers.BertConfig()).eval()
        _perturb(hf_model, seed=5)
        hf_model.save_pretrained(tmp_path)
        ours = load_hf(tmp_path)
    else:
        ours = ARCHITECTURES["EncoderForPreTraining"].from_config(config, pair_head=True).eval()
        _perturb(ours, seed=5)
        save_hf(ours, tmp_path)
        hf_model = transformers.BertForPreTraining.from_pretrained(tmp_path).eval()
    gen = torch.Generator().manual_seed(6)
    ids = torch.randint(1000, 30522, (2, 128), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 100:] = 0
    segments = torch.zeros_like(ids)
    segments[:, 64:] = 1
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}
    optimize(ours)  # attnlab's CPU inference paths, as `predict` runs them
    _assert_same(_our_outputs(ours, batch), _hf_outputs(hf_model, batch), f"bert-base {direction}", rtol)
