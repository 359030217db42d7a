"""Task-specific distillation: ``attnlab finetune --teacher``, `TaskDistiller`'s loss, and a
fine-tuned DistilBERT student exported as HF's DistilBertForSequenceClassification (logits within 1e-5)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.io import save
from attnlab.io.hf_encoders import save_hf
from attnlab.models import (
    EncoderForPreTraining,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
)
from attnlab.models.config import EncoderConfig
from attnlab.nn.distillation import soft_target_loss
from attnlab.pretraining.distillation import student_config
from attnlab.tasks.distillation import TaskDistiller, soft_loss

WORDS = "the a film plot was is very quite story actor scene it".split()


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A pair task (CSV: sentence, other, label), its tokenizer, a fine-tuned BERT teacher with segment
    embeddings, and a DistilBERT-shaped student checkpoint."""
    from attnlab.tokenizers import bert_wordpiece

    root = tmp_path_factory.mktemp("taskdistill")
    data = root / "table"
    data.mkdir()
    rng = random.Random(0)
    for split, n in (("train", 64), ("dev", 16)):
        rows = ["sentence,other,label"]
        for _ in range(n):
            good = rng.random() < 0.5
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
            words.insert(rng.randint(0, len(words)), "good" if good else "bad")
            rows.append(f"{' '.join(words)},{' '.join(rng.choice(WORDS) for _ in range(3))},{int(good)}")
        _write(data / f"{split}.csv", rows)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", *WORDS]
    tok = bert_wordpiece({t: i for i, t in enumerate(vocab)})
    tok.save(root / "tok")
    other = bert_wordpiece({t: i for i, t in enumerate([*vocab[:5], "bad", "good", *WORDS])})
    other.save(root / "other-tok")
    common = ["--task", "generic", "--data-dir", str(data), "--text-b", "other", "--batch-size", "16",
              "--lr", "1e-3", "--max-length", "24", "--no-progress", "--device", "cpu"]  # fmt: skip
    assert main(["finetune", "--model", "bert-tiny", "--tokenizer", str(root / "tok"), "--epochs", "3",
                 "--output-dir", str(root / "teacher"), *common]) == 0  # fmt: skip
    teacher_config = EncoderConfig(
        vocab_size=len(vocab), hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512,
        add_pooler=False,
    )  # fmt: skip
    torch.manual_seed(0)
    student = EncoderForPreTraining.from_config(student_config(teacher_config, 1))
    save(student, root / "student")
    tok.save(root / "student")
    save(student, root / "student-other-tok")  # the same student saved with another vocabulary
    other.save(root / "student-other-tok")
    return root, common


def test_finetune_with_a_teacher_trains_the_student_and_exports_distilbert(setup, capsys):
    transformers = pytest.importorskip("transformers")
    from attnlab.io import load
    from attnlab.tasks.features import classification_features, collate
    from attnlab.tasks.finetune import GenericColumns, get_task, load_split
    from attnlab.tokenizers import load_tokenizer

    root, common = setup
    out = root / "student-ft"
    argv = ["finetune", "--model", str(root / "student"), "--teacher", str(root / "teacher" / "best"),
            "--epochs", "2", "--output-dir", str(out), *common]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    student = load(out / "best").eval()
    assert isinstance(student, EncoderForSequenceClassification)
    assert (
        student.config.type_vocab_size == 0 and student.config.num_layers == 1
    )  # the student, not the teacher
    save_hf(student, root / "hf", tokenizer=load_tokenizer(out / "best"))
    hf_config = json.loads((root / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["DistilBertForSequenceClassification"]
    hf = transformers.DistilBertForSequenceClassification.from_pretrained(root / "hf").eval()
    tok = load_tokenizer(out / "best")
    examples = load_split(
        get_task("generic"), root / "table", "dev", GenericColumns("sentence", "other", "label")
    )
    feats = classification_features(tok, examples, 24, {"0": 0, "1": 1}, with_token_types=False)
    batch = collate(feats, 0)
    with torch.no_grad():
        ours = student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        theirs = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert (ours - theirs).abs().max().item() < 1e-5


def test_finetune_teacher_errors(setup, capsys):
    root, common = setup
    base = ["finetune", "--model", str(root / "student"), "--epochs", "1", "--output-dir", str(root / "x")]
    assert main([*base, "--teacher", str(root / "student"), *common]) == 2  # a masked LM, not a task model
    assert "the teacher is a EncoderForPreTraining" in capsys.readouterr().err
    other = [*base[:1], "--model", str(root / "student-other-tok"), *base[3:]]
    assert main([*other, "--teacher", str(root / "teacher" / "best"), "--overwrite", *common]) == 2
    err = capsys.readouterr().err
    assert "attnlab finetune: error:" in err and "vocabulary" in err and "differs from the student's" in err
    # another tokenizer than the one saved with the student is refused before the teacher is looked at
    assert main([*base, "--tokenizer", str(root / "other-tok"), "--teacher", str(root / "teacher" / "best"),
                 "--overwrite", *common]) == 2  # fmt: skip
    assert "its vocabulary differs" in capsys.readouterr().err
    assert main([*base, "--teacher", str(root / "missing"), "--overwrite", *common]) == 2
    assert "--teacher expects a fine-tuned model directory" in capsys.readouterr().err


def _classifier(config: EncoderConfig, n: int, seed: int) -> EncoderForSequenceClassification:
    torch.manual_seed(seed)
    return EncoderForSequenceClassification.from_config(config, num_labels=n, classifier_dropout=0.0).train()


def test_task_distiller_loss_is_the_weighted_sum_of_task_and_soft_losses():
    config = EncoderConfig(vocab_size=30, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32,
                           hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
    teacher = _classifier(config, 3, 0)
    student = _classifier(student_config(config, 1), 3, 1)
    model = TaskDistiller(student, teacher, temperature=3.0, alpha=0.25).train()
    ids = torch.randint(5, 30, (4, 7))
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    labels = torch.tensor([0, 2, 1, 0])
    out = model(input_ids=ids, token_type_ids=types, labels=labels)
    s = student(input_ids=ids, labels=labels)  # the student never sees token types (it has none)
    with torch.no_grad():
        t = teacher(input_ids=ids, token_type_ids=types)  # the teacher sees them
    torch.testing.assert_close(out.loss, 0.75 * s.loss + 0.25 * soft_target_loss(s.logits, t.logits, 3.0))
    out.loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert model.state_dict().keys() == {f"model.{k}" for k in student.state_dict()}
    model.eval()
    torch.testing.assert_close(model(input_ids=ids, token_type_ids=types, labels=labels).loss, s.loss)
    with pytest.raises(ValueError, match="same task"):
        TaskDistiller(student, EncoderForTokenClassification.from_config(config, num_labels=3))


def test_soft_loss_per_head_kind():
    from attnlab.models.task_heads import SequenceClassifierOutput, TokenClassifierOutput

    s = SequenceClassifierOutput(loss=None, logits=torch.tensor([[1.0], [2.0]]))
    t = SequenceClassifierOutput(loss=None, logits=torch.tensor([[0.0], [4.0]]))
    assert soft_loss(s, t, {}, 2.0).item() == pytest.approx((1 + 4) / 2)  # regression: squared difference
    logits = torch.randn(2, 3, 4)
    teacher_logits = torch.randn(2, 3, 4)
    labels = torch.tensor([[1, -100, 2], [-100, -100, 0]])
    got = soft_loss(TokenClassifierOutput(None, logits), TokenClassifierOutput(None, teacher_logits),
                    {"labels": labels}, 2.0)  # fmt: skip
    keep = labels != -100
    torch.testing.assert_close(got, soft_target_loss(logits[keep], teacher_logits[keep], 2.0))
