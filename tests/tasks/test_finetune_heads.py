"""Task heads: losses against hand computations, shapes, save/load round trips, encoder transfer, and
parity with HF transformers' task classes on identical weights."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from attnlab.io import CheckpointError, load, save
from attnlab.io import load as load_model
from attnlab.io.hf_encoders import save_hf
from attnlab.models import (
    ARCHITECTURES,
    EncoderConfig,
    EncoderForMultipleChoice,
    EncoderForPreTraining,
    EncoderForQuestionAnswering,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
)
from attnlab.tasks.task_model import load_task_model

V, H = 99, 32
TINY = EncoderConfig(
    vocab_size=V, hidden_size=H, num_layers=2, num_heads=4, intermediate_size=37, max_position_embeddings=64,
    hidden_dropout=0.0, attention_dropout=0.0,
)  # fmt: skip


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _inputs(B: int = 3, T: int = 7, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[0, -2:] = 0
    ids[0, -2:] = 0
    types = torch.zeros(B, T, dtype=torch.long)
    types[:, T // 2 :] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def _perturb(model: torch.nn.Module, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


def test_sequence_classification_loss_is_cross_entropy_of_pooled_logits():
    torch.manual_seed(0)
    m = EncoderForSequenceClassification.from_config(TINY, num_labels=3).eval()
    x = _inputs()
    labels = torch.tensor([0, 2, 1])
    out = m(**x, labels=labels)
    assert out.logits.shape == (3, 3)
    pooled = m.encoder(**x).pooled_output
    expected = F.cross_entropy(m.classifier(pooled), labels)
    torch.testing.assert_close(out.loss, expected)
    with pytest.raises(TypeError, match="integer class ids"):
        m(**x, labels=labels.float())
    with pytest.raises(ValueError, match="expected shape"):
        m(**x, labels=torch.tensor([0, 1]))


def test_regression_head_uses_mse():
    torch.manual_seed(0)
    m = EncoderForSequenceClassification.from_config(TINY, num_labels=1).eval()
    x = _inputs()
    y = torch.tensor([0.5, 4.0, 2.25])
    out = m(**x, labels=y)
    assert out.logits.shape == (3, 1)
    torch.testing.assert_close(out.loss, ((out.logits.squeeze(-1) - y) ** 2).mean())


def test_token_classification_ignores_minus_100():
    torch.manual_seed(0)
    m = EncoderForTokenClassification.from_config(TINY, num_labels=5).eval()
    x = _inputs()
    labels = torch.full((3, 7), -100)
    labels[1, 2], labels[2, 4], labels[2, 5] = 3, 0, 4
    out = m(**x, labels=labels)
    assert out.logits.shape == (3, 7, 5)
    picked = torch.stack([out.logits[1, 2], out.logits[2, 4], out.logits[2, 5]])
    torch.testing.assert_close(out.loss, F.cross_entropy(picked, torch.tensor([3, 0, 4])))
    # changing logits at ignored positions cannot change the loss: only labelled positions count
    all_ignored = m(**x, labels=torch.full((3, 7), -100)).loss
    assert all_ignored.item() == 0.0 and all_ignored.requires_grad


def test_qa_loss_is_mean_of_start_and_end_cross_entropy_and_null_at_cls():
    torch.manual_seed(0)
    m = EncoderForQuestionAnswering.from_config(TINY).eval()
    x = _inputs()
    s, e = torch.tensor([2, 0, 4]), torch.tensor([3, 0, 6])  # example 1: SQuAD 2.0 null answer at [CLS]
    out = m(**x, start_positions=s, end_positions=e)
    assert out.start_logits.shape == out.end_logits.shape == (3, 7)
    expected = (F.cross_entropy(out.start_logits, s) + F.cross_entropy(out.end_logits, e)) / 2
    torch.testing.assert_close(out.loss, expected)
    logits = m.qa_outputs(m.encoder(**x).last_hidden_state)
    torch.testing.assert_close(out.start_logits, logits[..., 0])
    # positions outside the window are ignored, not an index error
    far = m(**x, start_positions=torch.tensor([2, 99, 4]), end_positions=torch.tensor([3, 99, 6])).loss
    keep = torch.tensor([0, 2])
    expected = (
        F.cross_entropy(out.start_logits[keep], s[keep]) + F.cross_entropy(out.end_logits[keep], e[keep])
    ) / 2
    torch.testing.assert_close(far, expected)
    with pytest.raises(ValueError, match="both"):
        m(**x, start_positions=s)


def test_multiple_choice_scores_each_pair_and_reshapes():
    torch.manual_seed(0)
    m = EncoderForMultipleChoice.from_config(TINY).eval()
    B, K, T = 2, 4, 6
    ids = torch.randint(5, V, (B, K, T))
    mask = torch.ones(B, K, T, dtype=torch.long)
    labels = torch.tensor([3, 1])
    out = m(ids, attention_mask=mask, labels=labels)
    assert out.logits.shape == (B, K)
    # each choice is scored independently: choice k of example b equals a single-pair forward
    single = m.classifier(m.encoder(ids[1, 2:3], attention_mask=mask[1, 2:3]).pooled_output)
    torch.testing.assert_close(out.logits[1, 2], single[0, 0])
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))
    with pytest.raises(ValueError, match=r"\(B, K, T\)"):
        m(ids[0])


def test_classification_heads_add_a_pooler_to_configs_without_one():
    cfg = dataclasses.replace(TINY, add_pooler=False)
    assert EncoderForSequenceClassification.from_config(cfg).encoder.pooler is not None
    assert EncoderForMultipleChoice.from_config(cfg).encoder.pooler is not None
    assert EncoderForTokenClassification.from_config(cfg).encoder.pooler is None


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="num_labels"):
        EncoderForSequenceClassification.from_config(TINY, num_labels=0)
    with pytest.raises(ValueError, match="2 label names"):
        EncoderForSequenceClassification.from_config(TINY, num_labels=3, labels=["a", "b"])
    with pytest.raises(ValueError, match="classifier_dropout"):
        EncoderForTokenClassification.from_config(TINY, classifier_dropout=1.5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: EncoderForSequenceClassification.from_config(
            TINY, num_labels=3, labels=["neg", "neu", "pos"]
        ),
        lambda: EncoderForSequenceClassification.from_config(TINY, num_labels=1),
        lambda: EncoderForTokenClassification.from_config(TINY, num_labels=4, classifier_dropout=0.2),
        lambda: EncoderForQuestionAnswering.from_config(TINY),
        lambda: EncoderForMultipleChoice.from_config(TINY),
    ],
)
def test_task_models_round_trip_through_save_and_load(tmp_path, make):
    torch.manual_seed(0)
    model = make().eval()
    _perturb(model)
    save(model, tmp_path)
    loaded = load(tmp_path)
    assert type(loaded) is type(model) and loaded.options == model.options
    assert type(model).__name__ in ARCHITECTURES
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    x = _inputs()
    if isinstance(model, EncoderForMultipleChoice):
        x = {k: v.unsqueeze(1).expand(-1, 2, -1) for k, v in x.items()}
    a, b = model(**x), loaded(**x)
    for name in ("logits", "start_logits"):
        if hasattr(a, name):
            torch.testing.assert_close(getattr(a, name), getattr(b, name))
    # the pipeline-level loader gives the same model
    assert type(load_model(tmp_path)) is type(model)


def test_pretrained_encoder_into_task_model_fresh_head_is_named(tmp_path):
    torch.manual_seed(0)
    pre = EncoderForPreTraining.from_config(dataclasses.replace(TINY, add_pooler=False))
    _perturb(pre)
    save(pre, tmp_path)
    with pytest.warns(
        UserWarning, match=r"newly initialised.*encoder\.pooler\.dense\.weight.*classifier\.weight"
    ):
        model = load_task_model(tmp_path, "EncoderForSequenceClassification", num_labels=2)
    for k, v in pre.encoder.state_dict().items():
        assert torch.equal(model.encoder.state_dict()[k], v), k
    assert model.training
    # BERT initialisation of the fresh head: small weights, zero bias
    with torch.no_grad():
        assert float(model.classifier.weight.std()) < 0.05 and float(model.classifier.bias.abs().sum()) == 0.0


def test_same_task_checkpoint_loads_whole_and_new_labels_reinitialise(tmp_path):
    torch.manual_seed(0)
    model = EncoderForTokenClassification.from_config(TINY, num_labels=3, labels=["O", "B-X", "I-X"])
    _perturb(model)
    save(model, tmp_path)
    again = load_task_model(tmp_path, EncoderForTokenClassification, num_labels=3, classifier_dropout=0.3)
    assert torch.equal(again.classifier.weight, model.classifier.weight)  # dropout holds no weights
    assert again.dropout.p == 0.3 and again.options["classifier_dropout"] == 0.3
    with pytest.warns(UserWarning, match="classifier.weight"):
        other = load_task_model(tmp_path, EncoderForTokenClassification, num_labels=5)
    assert other.classifier.weight.shape == (5, H)
    assert torch.equal(other.encoder.embeddings.word.weight, model.encoder.embeddings.word.weight)


def test_shape_mismatch_and_unknown_architecture_are_reported(tmp_path):
    save(EncoderForPreTraining.from_config(TINY), tmp_path)
    with pytest.raises(ValueError, match="unknown task architecture"):
        load_task_model(tmp_path, "EncoderForRegression")
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        load_task_model(tmp_path / "nope", "EncoderForQuestionAnswering")


# ------------------------------------------------------------------------------------------------
# HF transformers: encoder checkpoints in, task checkpoints read with their heads

transformers = pytest.importorskip("transformers")


def _hf_config(name: str = "BertConfig", **kw):
    if name == "DistilBertConfig":  # its own field names
        return transformers.DistilBertConfig(
            vocab_size=V, dim=H, n_layers=2, n_heads=4, hidden_dim=37, dropout=0.0, attention_dropout=0.0,
            max_position_embeddings=64, **kw,
        )  # fmt: skip
    base = dict(
        vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=64,
    )  # fmt: skip
    base.update(kw)
    return getattr(transformers, name)(**base)


HF_TASKS = [
    ("BertConfig", "BertForSequenceClassification", {"num_labels": 3}, "logits"),
    ("BertConfig", "BertForTokenClassification", {"num_labels": 4}, "logits"),
    ("BertConfig", "BertForQuestionAnswering", {}, "start_logits"),
    ("BertConfig", "BertForMultipleChoice", {}, "logits"),
    ("RobertaConfig", "RobertaForSequenceClassification", {"num_labels": 2, "pad_token_id": 1}, "logits"),
    ("RobertaConfig", "RobertaForQuestionAnswering", {"pad_token_id": 1}, "end_logits"),
    ("ElectraConfig", "ElectraForTokenClassification", {"num_labels": 3, "embedding_size": 16}, "logits"),
    ("AlbertConfig", "AlbertForSequenceClassification", {"num_labels": 2, "embedding_size": 16}, "logits"),
    # ELECTRA's head is dense -> gelu -> out_proj, DistilBERT's pre_classifier -> ReLU -> classifier: loaded
    # with EncoderConfig.pooler_activation gelu / relu; ELECTRA's multiple choice with HF's default
    # summary_activation (gelu)
    ("ElectraConfig", "ElectraForSequenceClassification", {"num_labels": 3, "embedding_size": 16}, "logits"),
    ("ElectraConfig", "ElectraForSequenceClassification", {"num_labels": 1}, "logits"),
    ("ElectraConfig", "ElectraForMultipleChoice", {"embedding_size": 16}, "logits"),
    ("DistilBertConfig", "DistilBertForSequenceClassification", {"num_labels": 3}, "logits"),
    ("DistilBertConfig", "DistilBertForSequenceClassification", {"num_labels": 1}, "logits"),
    ("DistilBertConfig", "DistilBertForMultipleChoice", {}, "logits"),
]
HEAD_ACTIVATION = {"ElectraForSequenceClassification": "gelu", "ElectraForMultipleChoice": "gelu"}


@pytest.mark.parametrize("config_name,cls_name,kw,field", HF_TASKS)
def test_hf_task_checkpoints_load_with_identical_outputs(tmp_path, config_name, cls_name, kw, field):
    torch.manual_seed(0)
    hf = getattr(transformers, cls_name)(_hf_config(config_name, **kw)).eval()
    _perturb(hf)
    hf.save_pretrained(tmp_path)
    ours = load_model(tmp_path)
    assert type(ours).__name__ == "EncoderFor" + cls_name.split("For")[1]
    x = _inputs()
    if "Roberta" in cls_name:
        x.pop("token_type_ids")
        x["input_ids"][0, -2:] = 1  # RoBERTa's <pad>
    if "DistilBert" in cls_name:
        x.pop("token_type_ids")  # no segment embeddings
    if ours.encoder.pooler is not None:
        want = "relu" if "DistilBert" in cls_name else HEAD_ACTIVATION.get(cls_name, "tanh")
        assert ours.config.pooler_activation == want
    if "MultipleChoice" in cls_name:
        x = {k: v.unsqueeze(1).expand(-1, 3, -1).contiguous() for k, v in x.items()}
    with torch.no_grad():
        theirs = getattr(hf(**x), field)
        mine = getattr(ours(**x), field)
    torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_hf_id2label_becomes_label_names(tmp_path):
    cfg = _hf_config(
        num_labels=2, id2label={0: "NEGATIVE", 1: "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1}
    )
    transformers.BertForSequenceClassification(cfg).save_pretrained(tmp_path)
    assert load_model(tmp_path).options["labels"] == ["NEGATIVE", "POSITIVE"]


def test_hf_heads_without_exact_counterpart_are_refused(tmp_path):
    """ELECTRA's SequenceSummary with no activation (summary_activation "" or None: the identity) has no
    attnlab pooler to match; the ELECTRA heads with one load exactly (HF_TASKS above)."""
    transformers.ElectraForMultipleChoice(
        _hf_config("ElectraConfig", embedding_size=16, summary_activation="")
    ).save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="summary_activation='' has no exact attnlab"):
        load_model(tmp_path)
    # but its encoder fine-tunes with a fresh head
    with pytest.warns(UserWarning, match="newly initialised"):
        m = load_task_model(tmp_path, "EncoderForMultipleChoice")
    assert m.encoder.pooler is not None


def test_hf_masked_lm_encoder_transfers_into_qa(tmp_path):
    torch.manual_seed(0)
    hf = transformers.BertForMaskedLM(_hf_config()).eval()
    _perturb(hf)
    hf.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="qa_outputs.weight"):
        model = load_task_model(tmp_path, "EncoderForQuestionAnswering").eval()
    x = _inputs()
    with torch.no_grad():
        theirs = hf.bert(**x).last_hidden_state
        mine = model.encoder(**x).last_hidden_state
    torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_attnlab_export_of_encoder_then_task_model(tmp_path):
    torch.manual_seed(0)
    pre = EncoderForPreTraining.from_config(TINY, pair_head=True)
    save_hf(pre, tmp_path)
    with pytest.warns(UserWarning):
        model = load_task_model(tmp_path, "EncoderForMultipleChoice")
    assert torch.equal(model.encoder.pooler.dense.weight, pre.encoder.pooler.dense.weight)


def test_mean_pooling_classifier_reads_the_mean_of_real_tokens_and_has_no_pooler():
    torch.manual_seed(0)
    m = EncoderForSequenceClassification.from_config(TINY, num_labels=3, pooling="mean").eval()
    assert m.encoder.pooler is None and m.pooling == "mean" and m.options["pooling"] == "mean"
    x = _inputs()
    labels = torch.tensor([0, 2, 1])
    out = m(**x, labels=labels)
    hidden = m.encoder(**x).last_hidden_state  # (B, T, H)
    # row 0 has two padding positions: its mean is over its first T - 2 tokens only
    sentence = torch.stack([hidden[0, :-2].mean(0), hidden[1].mean(0), hidden[2].mean(0)])
    torch.testing.assert_close(out.logits, m.classifier(sentence))
    torch.testing.assert_close(out.loss, F.cross_entropy(m.classifier(sentence), labels))
    # padding positions do not move the logits: change the ids under the mask
    y = dict(x, input_ids=x["input_ids"].clone())
    y["input_ids"][0, -2:] = 7
    torch.testing.assert_close(m(**y).logits[0], out.logits[0])
    # the default is BERT's pooled [CLS], and the option is not written for it (old checkpoints unchanged)
    assert "pooling" not in EncoderForSequenceClassification.from_config(TINY).options
    with pytest.raises(ValueError, match="pooling must be one of"):
        EncoderForSequenceClassification.from_config(TINY, pooling="max")


def test_mean_pooling_round_trips_transfers_without_a_pooler_and_is_not_exported_to_hf(tmp_path):
    torch.manual_seed(0)
    model = EncoderForSequenceClassification.from_config(TINY, num_labels=2, pooling="mean")
    _perturb(model)
    save(model, tmp_path / "mean")
    again = load(tmp_path / "mean").eval()
    x = _inputs()
    assert again.pooling == "mean"
    torch.testing.assert_close(again(**x).logits, model.eval()(**x).logits)
    # as a task model it loads whole only with the same pooling; asking for [CLS] builds a fresh head
    whole = load_task_model(tmp_path / "mean", EncoderForSequenceClassification, num_labels=2, pooling="mean")
    assert torch.equal(whole.classifier.weight, model.classifier.weight)
    with pytest.warns(UserWarning, match=r"newly initialised.*encoder\.pooler\.dense\.weight"):
        cls_head = load_task_model(tmp_path / "mean", EncoderForSequenceClassification, num_labels=2)
    assert cls_head.pooling == "cls" and cls_head.encoder.pooler is not None
    # an encoder pre-trained with a pooler (NSP) transfers without it: nothing unused to train
    pre = EncoderForPreTraining.from_config(TINY)
    save(pre, tmp_path / "pre")
    with pytest.warns(UserWarning, match="newly initialised") as caught:
        fresh = load_task_model(
            tmp_path / "pre", EncoderForSequenceClassification, num_labels=2, pooling="mean"
        )
    assert "pooler" not in str(caught[0].message) and fresh.encoder.pooler is None
    assert not any(k.startswith("encoder.pooler") for k in fresh.state_dict())
    with pytest.raises(CheckpointError, match="pooling='mean'.*\\[CLS\\]"):
        save_hf(model, tmp_path / "hf")
