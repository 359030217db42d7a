"""Distilled students (no segment embeddings) in HF transformers, on identical weights.

A student of `attnlab distill` has ``type_vocab_size=0``. Post-LN with LayerNorm eps 1e-12 it is HF's
DistilBERT; otherwise (the budget's pre-LN teacher, a RoBERTa teacher's eps 1e-5) it exports to the family
its shape has, whose HF class always adds ``token_type_embeddings``: the export writes one zero row, which
changes nothing. Both the ``hf=True`` export and the attnlab directory in HF's layout (`attnlab.io.save`)
must load with ``transformers.AutoModel*.from_pretrained`` (no missing or unexpected keys) and give
attnlab's outputs within 1e-5; the attnlab directory must load back into attnlab unchanged.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.io import infer_family, load, save  # noqa: E402
from attnlab.models import ARCHITECTURES, EncoderConfig  # noqa: E402
from attnlab.pretraining.distillation import student_config  # noqa: E402

ATOL = 1e-5
TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_heads=4,
    intermediate_size=37,
    num_layers=4,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    max_position_embeddings=64,
)
# teacher config -> the HF family its student exports to
TEACHERS = {
    "pre-ln": (EncoderConfig(**TINY, norm_first=True, layer_norm_eps=1e-5), "roberta-prelayernorm"),
    "post-ln-bert": (EncoderConfig(**TINY), "distilbert"),
    "post-ln-roberta": (
        EncoderConfig(**TINY, type_vocab_size=1, pad_token_id=1, position_offset=2, layer_norm_eps=1e-5),
        "roberta",
    ),
    "post-ln-eps-1e-5": (EncoderConfig(**TINY, layer_norm_eps=1e-5), "bert"),
}
HF_MLM = {
    "roberta-prelayernorm": "RobertaPreLayerNormForMaskedLM",
    "distilbert": "DistilBertForMaskedLM",
    "roberta": "RobertaForMaskedLM",
    "bert": "BertForMaskedLM",
}


def _student(teacher: EncoderConfig, architecture: str = "EncoderForPreTraining") -> torch.nn.Module:
    torch.manual_seed(0)
    model = ARCHITECTURES[architecture].from_config(student_config(teacher)).eval()
    with torch.no_grad():  # non-trivial LayerNorm scales and biases
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    assert model.config.type_vocab_size == 0
    return model


def _batch(pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    ids[1, 8:], mask[1, 8:] = pad_token_id, 0
    return ids, mask


def _outputs(model, ids, mask) -> torch.Tensor:
    """MLM logits of a masked LM, the last hidden states of an encoder (attnlab's or HF's)."""
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
    for name in ("mlm_logits", "logits", "last_hidden_state"):
        if getattr(out, name, None) is not None:
            return getattr(out, name)
    raise AssertionError(f"no logits or hidden states in {type(out).__name__}")


def _assert_hf_matches(model, directory: Path, hf_class: str, **hf_options) -> None:
    hf, info = getattr(transformers, hf_class).from_pretrained(
        directory, output_loading_info=True, **hf_options
    )
    problems = {k: v for k, v in info.items() if v}
    assert not problems, f"HF loading reported {problems}"
    ids, mask = _batch(model.config.pad_token_id)
    ours, theirs = _outputs(model, ids, mask), _outputs(hf.eval(), ids, mask)
    keep = mask.bool() if ours.dim() == 3 else slice(None)  # padded places differ; logits (B, C) do not
    diff = (ours[keep] - theirs[keep]).abs().max().item()
    assert diff <= ATOL, f"{hf_class}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("teacher", list(TEACHERS))
def test_student_masked_lm_exports_and_matches_hf(teacher: str, tmp_path: Path) -> None:
    config, family = TEACHERS[teacher]
    model = _student(config)
    assert infer_family(model.config, "mlm") == family
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save(model, tmp_path / "hf", hf=True)
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == [HF_MLM[family]]
    if family != "distilbert":
        assert hf_config["type_vocab_size"] == 1
    _assert_hf_matches(model, tmp_path / "hf", "AutoModelForMaskedLM")


@pytest.mark.parametrize("teacher", ["pre-ln", "post-ln-roberta"])
def test_student_encoder_exports_and_matches_hf(teacher: str, tmp_path: Path) -> None:
    model = _student(TEACHERS[teacher][0], "Encoder")
    with pytest.warns(UserWarning, match="holds a pooler but this model has none"):
        save(model, tmp_path / "hf", hf=True)
    # the student has no pooler (DistilBERT's has none either): HF's base class is asked for none
    _assert_hf_matches(model, tmp_path / "hf", "AutoModel", add_pooling_layer=False)


@pytest.mark.parametrize("teacher", ["pre-ln", "post-ln-roberta"])
def test_student_directory_loads_in_hf_and_back(teacher: str, tmp_path: Path) -> None:
    """The attnlab directory itself (HF's layout) loads in transformers, and in attnlab with
    ``type_vocab_size=0`` and every tensor unchanged (the zero row is HF's alone)."""
    model = _student(TEACHERS[teacher][0])
    save(model, tmp_path / "model")
    assert "hf_family" in json.loads((tmp_path / "model" / "config.json").read_text())
    _assert_hf_matches(model, tmp_path / "model", "AutoModelForMaskedLM")
    back = load(tmp_path / "model")
    assert back.config == model.config
    expected = model.state_dict()
    assert set(back.state_dict()) == set(expected)
    for key, value in back.state_dict().items():
        assert torch.equal(value, expected[key]), key


@pytest.mark.parametrize("teacher", list(TEACHERS))
def test_fine_tuned_student_classifier_exports_and_matches_hf(teacher: str, tmp_path: Path) -> None:
    """A student fine-tuned as a classifier gets the head of the family it exports as (DistilBERT's ReLU
    ``pre_classifier``, else the family's tanh head), so ``attnlab convert --to hf`` holds it exactly."""
    config, family = TEACHERS[teacher]
    torch.manual_seed(0)
    cls = ARCHITECTURES["EncoderForSequenceClassification"]
    model = cls.from_config(student_config(config), num_labels=3).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    assert model.config.pooler_activation == ("relu" if family == "distilbert" else "tanh")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save(model, tmp_path / "hf", hf=True)
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["model_type"].replace("_", "-") == family.replace("_", "-")
    _assert_hf_matches(model, tmp_path / "hf", "AutoModelForSequenceClassification")
