"""attnlab model directories that HF transformers loads as they are (`attnlab.io.hf_layout`): for each family
and kind of model HF has (base, masked LM, pre-training heads, ELECTRA's discriminator, GPT-2), the directory
written by ``save_pretrained`` / ``save_causal_lm`` loads with ``transformers.AutoModel*.from_pretrained``
with nothing missing, gives attnlab's outputs within 1e-5, and reads back into attnlab bit for bit; a model
with no exact HF form keeps attnlab's names. The fine-tuned task models are checked with HF's ``pipeline``
in tests/io/test_hf_export_tasks.py (the model directory beside its ``hf/`` export)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

transformers = pytest.importorskip("transformers")

from attnlab.io import CheckpointError, load, save  # noqa: E402
from attnlab.io.families.gpt2 import load_causal_lm, save_causal_lm  # noqa: E402
from attnlab.models import ARCHITECTURES, EncoderConfig  # noqa: E402
from attnlab.models.gpt import GPTConfig, build_gpt  # noqa: E402

ATOL = 1e-5
TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_heads=4,
    intermediate_size=37,
    num_layers=2,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    max_position_embeddings=64,
)
ELECTRA = EncoderConfig(**TINY, embedding_size=16, add_pooler=False)
# name -> (attnlab architecture, options, config, HF Auto class, HF class written in config.json)
CASES = {
    "bert-base": ("Encoder", {}, EncoderConfig(**TINY), "AutoModel", "BertModel"),
    "bert-mlm": (
        "EncoderForPreTraining",
        {},
        EncoderConfig(**TINY),
        "AutoModelForMaskedLM",
        "BertForMaskedLM",
    ),
    "bert-mlm-nsp": (
        "EncoderForPreTraining",
        {"pair_head": True},
        EncoderConfig(**TINY),
        "AutoModelForPreTraining",
        "BertForPreTraining",
    ),
    "roberta-mlm": (
        "EncoderForPreTraining",
        {},
        EncoderConfig(
            **{**TINY, "max_position_embeddings": 66},
            type_vocab_size=1,
            pad_token_id=1,
            position_offset=2,
            layer_norm_eps=1e-5,
        ),
        "AutoModelForMaskedLM",
        "RobertaForMaskedLM",
    ),  # fmt: skip
    "albert-sop": (
        "EncoderForPreTraining",
        {"pair_head": True},
        EncoderConfig(**TINY, embedding_size=16, sharing="all", activation="gelu_tanh"),
        "AutoModelForPreTraining",
        "AlbertForPreTraining",
    ),
    "electra-generator": ("EncoderForPreTraining", {}, ELECTRA, "AutoModelForMaskedLM", "ElectraForMaskedLM"),
    "electra-discriminator": (
        "ReplacedTokenDetection",
        {},
        ELECTRA,
        "AutoModelForPreTraining",
        "ElectraForPreTraining",
    ),
    "distilbert-mlm": (
        "EncoderForPreTraining",
        {},
        EncoderConfig(**TINY, type_vocab_size=0, add_pooler=False),
        "AutoModelForMaskedLM",
        "DistilBertForMaskedLM",
    ),
    "distilbert-sinusoidal": (
        "Encoder",
        {},
        EncoderConfig(**TINY, type_vocab_size=0, add_pooler=False, position_embedding="sinusoidal"),
        "AutoModel",
        "DistilBertModel",
    ),
    # attnlab's pre-LN encoder (the budget recipes') as RoBERTa-PreLayerNorm: BERT's positions (from 0) are
    # shifted behind pad_token_id + 1 rows; a RoBERTa-style one (offset 2, pad 1) maps as it is
    "pre-ln-mlm": (
        "EncoderForPreTraining",
        {},
        EncoderConfig(**TINY, norm_first=True),
        "AutoModelForMaskedLM",
        "RobertaPreLayerNormForMaskedLM",
    ),
    "pre-ln-base": (
        "Encoder",
        {},
        EncoderConfig(**TINY, norm_first=True),
        "AutoModel",
        "RobertaPreLayerNormModel",
    ),
    "pre-ln-roberta-offset": (
        "EncoderForPreTraining",
        {},
        EncoderConfig(
            **{**TINY, "max_position_embeddings": 66},
            norm_first=True,
            type_vocab_size=1,
            pad_token_id=1,
            position_offset=2,
        ),
        "AutoModelForMaskedLM",
        "RobertaPreLayerNormForMaskedLM",
    ),  # fmt: skip
    "bert-mlm-untied": (
        "EncoderForPreTraining",
        {"tie_weights": False},
        EncoderConfig(**TINY),
        "AutoModelForMaskedLM",
        "BertForMaskedLM",
    ),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _build(name: str) -> torch.nn.Module:
    architecture, options, config, _, _ = CASES[name]
    torch.manual_seed(0)
    model = ARCHITECTURES[architecture].from_config(config, **options).eval()
    with torch.no_grad():  # move every parameter off its initial value (LayerNorm 1/0, biases 0)
        for key, p in model.named_parameters():
            if "position" not in key or config.position_embedding != "sinusoidal":
                p.add_(torch.randn_like(p) * 0.05)
    return model


def _batch(config: EncoderConfig) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 99, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    ids[1, 6:] = config.pad_token_id
    batch = {"input_ids": ids, "attention_mask": mask}
    if config.type_vocab_size > 1:
        batch["token_type_ids"] = (torch.arange(9) >= 5).long().expand(2, 9)
    return batch


def _ours(model, batch) -> list[torch.Tensor]:
    """The outputs HF's class also gives, in HF's order: logits first, pair logits, then hidden states."""
    with torch.inference_mode():
        out = model(**batch, output_hidden_states=True)
        hidden = list(out.hidden_states)
    first = [
        getattr(out, n) for n in ("mlm_logits", "pair_logits", "logits") if getattr(out, n, None) is not None
    ]
    if not first:
        first = [out.last_hidden_state] + ([out.pooled_output] if out.pooled_output is not None else [])
    return first + hidden


def _theirs(model, batch) -> list[torch.Tensor]:
    with torch.inference_mode():
        out = model(**batch, output_hidden_states=True)
        hidden = list(out.hidden_states)
    first = [
        getattr(out, n)
        for n in ("prediction_logits", "logits", "seq_relationship_logits", "sop_logits")
        if getattr(out, n, None) is not None
    ]
    if not first:
        first = [out.last_hidden_state] + (
            [out.pooler_output] if getattr(out, "pooler_output", None) is not None else []
        )
    return first + hidden


@pytest.mark.parametrize("name", list(CASES))
def test_automodel_loads_the_attnlab_directory(name: str, tmp_path: Path) -> None:
    model = _build(name)
    save(model, tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    _, _, config, auto, hf_class = CASES[name]
    assert raw["format"] == "attnlab" and raw["architecture"] == type(model).__name__  # attnlab's own fields
    assert raw["architectures"] == [hf_class] and raw["hf_family"] == raw["model_type"]  # and HF's
    hf, info = getattr(transformers, auto).from_pretrained(tmp_path, output_loading_info=True)
    assert type(hf).__name__ == hf_class
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    # a pooler HF's masked-LM class has no place for stays in the file under the family's name, unused here
    assert all(".pooler." in k for k in info["unexpected_keys"]), info
    batch = _batch(config)
    ours, theirs = _ours(model, batch), _theirs(hf.eval(), batch)
    assert len(ours) == len(theirs)
    real = batch["attention_mask"].bool()  # padding positions: RoBERTa-style classes give pads a position
    for a, b in zip(ours, theirs):  # of their own, so only the real tokens' outputs are the same model's
        if a.dim() > 2:
            a, b = a[real], b[real]
        torch.testing.assert_close(a, b, rtol=0, atol=ATOL)
    back = load(tmp_path)
    expected, got = model.state_dict(), back.state_dict()
    assert set(expected) == set(got) and all(torch.equal(expected[k], got[k]) for k in expected)


def _edit_weights(directory: Path, edit) -> None:
    """``edit`` the tensors of ``directory``'s model.safetensors in place, as by hand (no manifest)."""
    from safetensors.torch import save_file

    (directory / "manifest.json").unlink(missing_ok=True)
    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors")


def test_bfloat16_directory_keeps_hf_layout_and_dtype(tmp_path: Path) -> None:
    model = _build("bert-mlm")
    save(model, tmp_path, dtype="bfloat16")
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["model_type"] == "bert" and raw["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(tmp_path / "model.safetensors").values()} == {torch.bfloat16}
    back = load(tmp_path)
    assert all(torch.equal(v.to(torch.bfloat16), back.state_dict()[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize(
    "change",
    [
        {"norm_first": True, "embedding_size": 16},
        {"sharing": "attention"},
        {"position_embedding": "sinusoidal"},
    ],
    ids=["pre-LN with E != H", "attention-only sharing", "sinusoidal with segments"],
)
def test_models_without_an_exact_hf_form_keep_attnlab_names(change: dict, tmp_path: Path) -> None:
    """HF's pre-LN class has E = H, ALBERT shares all or nothing, only DistilBERT (no segments) has a
    sinusoidal table."""
    config = dataclasses.replace(EncoderConfig(**TINY), **change)
    model = ARCHITECTURES["EncoderForPreTraining"].from_config(config).eval()
    save(model, tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert "model_type" not in raw and "hf_family" not in raw
    assert "encoder.embeddings.word.weight" in load_file(tmp_path / "model.safetensors")
    back = load(tmp_path)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in model.state_dict().items())


def test_hf_layout_can_be_turned_off(tmp_path: Path) -> None:
    save(_build("bert-mlm"), tmp_path, hf_layout=False)
    assert "model_type" not in json.loads((tmp_path / "config.json").read_text())


def test_unknown_hf_family_field_is_a_clear_error(tmp_path: Path) -> None:
    save(_build("bert-mlm"), tmp_path)
    (tmp_path / "manifest.json").unlink()  # edited by hand
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    raw["hf_family"] = "bart"
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"config\.json: field 'hf_family' is 'bart'; valid: bert"):
        load(tmp_path)


def test_damaged_hf_layout_weights_name_attnlab_keys(tmp_path: Path) -> None:
    """A missing tensor in a HF-layout file is named by the attnlab key the model expects."""
    save(_build("bert-mlm-nsp"), tmp_path)
    _edit_weights(tmp_path, lambda t: t.pop("cls.seq_relationship.weight"))
    with pytest.raises(CheckpointError, match="missing keys that EncoderForPreTraining expects: pair_head"):
        load(tmp_path)


def _gpt(**change) -> torch.nn.Module:
    torch.manual_seed(5)
    cfg = GPTConfig(vocab_size=99, max_positions=32, hidden_size=32, num_layers=2, num_heads=4,
                    dropout=0.0, embedding_dropout=0.0, attention_dropout=0.0, bos_token_id=1,
                    eos_token_id=2, **change)  # fmt: skip
    return build_gpt(cfg).eval()


@pytest.mark.parametrize("tied", [True, False])
def test_gpt_directory_loads_as_gpt2(tied: bool, tmp_path: Path) -> None:
    ours = _gpt(tie_word_embeddings=tied)
    save_causal_lm(ours, tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["model_type"] == "gpt2" and raw["architecture"] == "GPT" and raw["hf_family"] == "gpt2"
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    ids = torch.randint(0, 99, (2, 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(hf.eval()(ids).logits, ours(ids).logits, rtol=0, atol=ATOL)
    back = load_causal_lm(tmp_path)
    assert (back.lm_head.weight is back.embed.word.weight) == tied
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


@pytest.mark.parametrize("tied", [True, False])
def test_post_ln_gpt_directory_loads_as_openai_gpt(tied: bool, tmp_path: Path) -> None:
    """The original GPT (post-LN, no final LayerNorm, tanh GELU): HF's OpenAIGPTLMHeadModel holds it."""
    ours = _gpt(norm_first=False, tie_word_embeddings=tied)
    with torch.no_grad():  # LayerNorm gains and biases off 1 / 0, so a wrong mapping shows
        for name, p in ours.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if "norm" in name else 0.05))
    save_causal_lm(ours, tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["model_type"] == "openai-gpt" and raw["hf_family"] == "openai-gpt" and raw["afn"] == "gelu"
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(hf).__name__ == "OpenAIGPTLMHeadModel" and not any(info.values()), info
    ids = torch.randint(0, 99, (2, 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(hf.eval()(ids).logits, ours(ids).logits, rtol=0, atol=ATOL)
    back = load_causal_lm(tmp_path)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


def test_gpt_with_exact_gelu_keeps_attnlab_names(tmp_path: Path) -> None:
    """HF's OpenAI GPT computes GELU with the tanh approximation: a post-LN model with the exact GELU has
    no HF class that holds it."""
    ours = _gpt(norm_first=False, activation="gelu")
    save_causal_lm(ours, tmp_path)
    assert "model_type" not in json.loads((tmp_path / "config.json").read_text())
    back = load_causal_lm(tmp_path)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


@pytest.mark.parametrize("resave", ["same class", "new head"])
def test_a_directory_hf_saved_again_is_read_as_hf(resave: str, tmp_path: Path) -> None:
    """HF keeps attnlab's config fields when it saves the model again, but the weights (and the head) are
    HF's now: attnlab reads that directory through its HF loader, not as its own."""
    from attnlab.io import load as load_model

    model = _build("bert-mlm")
    save(model, tmp_path / "ours")
    if resave == "same class":
        hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "ours")
    else:
        hf = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "ours", num_labels=3)
    hf.save_pretrained(tmp_path / "theirs")
    raw = json.loads((tmp_path / "theirs" / "config.json").read_text())
    assert raw["format"] == "attnlab" and "transformers_version" in raw  # attnlab's fields, kept by HF
    back = load_model(tmp_path / "theirs")
    expected = "EncoderForPreTraining" if resave == "same class" else "EncoderForSequenceClassification"
    assert type(back).__name__ == expected
    batch = _batch(model.config)
    with torch.inference_mode():
        want = hf.eval()(**batch).logits
        got = back(**batch)
    torch.testing.assert_close(
        got.mlm_logits if resave == "same class" else got.logits, want, rtol=0, atol=ATOL
    )


def test_gpt2_layout_errors_name_the_weights_file(tmp_path: Path) -> None:
    save_causal_lm(_gpt(), tmp_path)
    _edit_weights(tmp_path, lambda t: t.pop("transformer.h.1.attn.c_attn.weight"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: gpt2 state dict has no 'h\.1\.attn"):
        load_causal_lm(tmp_path)


def test_a_tensor_stored_twice_is_refused(tmp_path: Path) -> None:
    """HF's name and attnlab's name for one weight in the same file: which one is meant is unknowable."""
    save(_build("bert-mlm"), tmp_path)

    def both_names(t):
        t["encoder.embeddings.norm.weight"] = t["bert.embeddings.LayerNorm.weight"].clone()

    _edit_weights(tmp_path, both_names)
    with pytest.raises(CheckpointError, match="encoder.embeddings.norm.weight is stored twice"):
        load(tmp_path)
