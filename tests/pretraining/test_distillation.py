"""DistilBERT: the losses against hand computations, the student's initialisation from every other
teacher layer, the triple loss, `attnlab distill` end to end with an exact resume, the export to HF's
DistilBertForMaskedLM, and the vocabulary-mismatch error."""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.io import save
from attnlab.models import EncoderConfig, EncoderForPreTraining
from attnlab.nn.distillation import cosine_alignment_loss, regression_distillation_loss, soft_target_loss
from attnlab.pretraining.distillation import (
    DistillationConfig,
    DistillationPreTrainer,
    build_student,
    init_student_from_teacher,
    student_config,
    teacher_layers,
)
from attnlab.tokenizers.trainers import train_tokenizer
from attnlab.tokenizers.vocab_diff import check_same_vocabulary
from attnlab.train.checkpoint import read_checkpoint

WORDS = "the a function module returns reads list string file error value class of for is and".split()


def _config(**overrides) -> EncoderConfig:
    base = dict(
        vocab_size=40, hidden_size=16, num_layers=4, num_heads=2, intermediate_size=32,
        max_position_embeddings=64, add_pooler=False, hidden_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    return EncoderConfig(**{**base, **overrides})


def _teacher(seed: int = 0, **overrides) -> EncoderForPreTraining:
    torch.manual_seed(seed)
    teacher = EncoderForPreTraining.from_config(_config(**overrides)).eval()
    with torch.no_grad():  # a trained-looking teacher: larger layer weights than BERT's 0.02 init
        for p in teacher.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return teacher


# ---------------------------------------------------------------------------------------------- losses


def test_soft_target_loss_is_the_hand_computed_t2_scaled_cross_entropy_minus_the_teachers_entropy():
    s = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]
    t = [[2.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    temperature = 2.0

    def softmax(row):
        e = [math.exp(x / temperature) for x in row]
        return [x / sum(e) for x in e]

    rows = []
    for srow, trow in zip(s, t):
        ps, pt = softmax(srow), softmax(trow)
        cross_entropy = -sum(b * math.log(a) for a, b in zip(ps, pt))
        entropy = -sum(b * math.log(b) for b in pt)
        rows.append(cross_entropy - entropy)
    expected = temperature**2 * sum(rows) / len(rows)
    student = torch.tensor(s, requires_grad=True)
    got = soft_target_loss(student, torch.tensor(t), temperature)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    # Hinton et al. 2015, section 2.1: dC/dz_i = (q_i - p_i) / T for the cross-entropy; times T^2, / rows
    got.backward()
    q = torch.softmax(student.detach() / temperature, -1)
    p = torch.softmax(torch.tensor(t) / temperature, -1)
    torch.testing.assert_close(student.grad, temperature * (q - p) / 2)
    assert soft_target_loss(torch.tensor(t), torch.tensor(t), 3.0).item() == pytest.approx(0.0, abs=1e-7)
    empty = torch.zeros(0, 3, requires_grad=True)
    assert soft_target_loss(empty, torch.zeros(0, 3)).item() == 0.0
    with pytest.raises(ValueError, match="differ in shape"):
        soft_target_loss(torch.zeros(2, 3), torch.zeros(2, 4))


def test_cosine_alignment_loss_by_hand_and_masked_positions_ignored():
    s = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [5.0, 5.0]]])  # (1, 3, 2)
    t = torch.tensor([[[0.0, 2.0], [2.0, 2.0], [-1.0, -1.0]]])
    # orthogonal: 1 - 0; parallel: 1 - 1; opposite: 1 + 1
    assert cosine_alignment_loss(s, t).item() == pytest.approx((1 + 0 + 2) / 3)
    assert cosine_alignment_loss(s, t, torch.tensor([[1, 1, 0]])).item() == pytest.approx(0.5)
    reference = torch.nn.CosineEmbeddingLoss()(s[0], t[0], torch.ones(3))
    assert cosine_alignment_loss(s, t).item() == pytest.approx(reference.item())
    with pytest.raises(ValueError, match="hidden size"):
        cosine_alignment_loss(torch.zeros(1, 2, 4), torch.zeros(1, 2, 8))
    assert regression_distillation_loss(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 1.0])).item() == 2.5


def test_distillation_config_checks_its_fields():
    assert DistillationConfig() == DistillationConfig(2.0, 5.0, 2.0, 1.0)  # the paper's / released defaults
    with pytest.raises(ValueError, match="temperature"):
        DistillationConfig(temperature=0)
    with pytest.raises(ValueError, match="alpha_cos"):
        DistillationConfig(alpha_cos=-1)
    with pytest.raises(ValueError, match="nothing to learn"):
        DistillationConfig(alpha_ce=0, alpha_mlm=0, alpha_cos=0)


# ---------------------------------------------------------------------------------------------- student


def test_teacher_layers_take_one_out_of_two():
    assert teacher_layers(12, 6) == [0, 2, 4, 6, 8, 10]
    assert teacher_layers(4, 2) == [0, 2]
    assert teacher_layers(6, 6) == list(range(6))
    with pytest.raises(ValueError, match="student layers"):
        teacher_layers(4, 5)


def test_student_config_is_distilbert_shaped():
    c = student_config(_config(num_layers=12))
    assert (c.num_layers, c.type_vocab_size, c.add_pooler, c.pooler_activation) == (6, 0, False, "relu")
    assert c.hidden_size == 16 and c.vocab_size == 40
    from attnlab.models import get_preset

    base = get_preset("bert-base-uncased")
    d = student_config(base, preset="distilbert")
    assert d == get_preset("distilbert-base", pooler_activation="relu")


@pytest.mark.parametrize("norm_first", [False, True])
def test_student_starts_as_the_teacher_with_every_other_layer(norm_first):
    teacher = _teacher(norm_first=norm_first)
    student, layers = build_student(teacher, student_config(teacher.config))
    assert layers == [0, 2]
    for k, i in enumerate(layers):
        for mine, theirs in ((student.encoder.attention[k], teacher.encoder.attention[i]),
                             (student.encoder.feed_forward[k], teacher.encoder.feed_forward[i])):  # fmt: skip
            for (name, a), (_, b) in zip(mine.state_dict().items(), theirs.state_dict().items()):
                assert torch.equal(a, b), name
    assert student.encoder.embeddings.token_type is None
    assert student.encoder.pooler is None
    assert student.mlm_head.decoder.weight is student.encoder.embeddings.word.weight  # still tied
    # the whole student equals the teacher run over layers 0 and 2 only (segment A folded into positions)
    skipping = copy.deepcopy(teacher)
    skipping.encoder.layer_plan = ((0, 0), (2, 2))
    ids = torch.randint(0, 40, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        torch.testing.assert_close(
            student(ids, attention_mask=mask).mlm_logits, skipping(ids, attention_mask=mask).mlm_logits
        )


def test_student_of_another_width_is_refused_and_random_init_differs():
    teacher = _teacher()
    narrow = student_config(teacher.config)
    narrow.hidden_size, narrow.intermediate_size = 8, 16
    with pytest.raises(ValueError, match="hidden_size is 8 and the teacher's 16"):
        build_student(teacher, narrow)
    with pytest.raises(ValueError, match="layers: expected 2 teacher layers"):
        init_student_from_teacher(
            EncoderForPreTraining.from_config(student_config(teacher.config)), teacher, [0]
        )
    torch.manual_seed(1)
    student, layers = build_student(teacher, student_config(teacher.config), random_init=True)
    assert layers == []
    assert not torch.equal(student.encoder.embeddings.word.weight, teacher.encoder.embeddings.word.weight)


# ---------------------------------------------------------------------------------------------- loss


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 40, (2, 8), generator=g)
    labels = torch.full_like(ids, -100)
    labels[0, 1], labels[0, 4], labels[1, 6] = ids[0, 1], ids[0, 4], ids[1, 6]
    ids = ids.masked_fill(labels != -100, 4)  # [MASK]
    mask = torch.ones_like(ids)
    mask[1, 7] = 0
    return ids, labels, mask


def test_triple_loss_is_the_weighted_sum_and_only_the_student_learns():
    teacher = _teacher()
    student, _ = build_student(teacher, student_config(teacher.config))
    with torch.no_grad():
        for p in student.parameters():
            p.add_(0.05 * torch.randn_like(p))  # a student that differs from its initialisation
    model = DistillationPreTrainer(student, teacher, DistillationConfig(temperature=2.0))
    ids, labels, mask = _batch()
    out = model(ids, labels, attention_mask=mask)
    keep = labels != -100
    s_h = student.encoder(ids, mask).last_hidden_state
    t_h = teacher.encoder(ids, mask).last_hidden_state
    s_logits, t_logits = student.mlm_head(s_h[keep]), teacher.mlm_head(t_h[keep])
    ce = soft_target_loss(s_logits, t_logits, 2.0)
    mlm = torch.nn.functional.cross_entropy(s_logits, labels[keep])
    cos = cosine_alignment_loss(s_h, t_h, mask)
    torch.testing.assert_close(out.loss, 5.0 * ce + 2.0 * mlm + 1.0 * cos)
    assert set(out.metrics) == {"mlm_loss", "soft_target_loss", "cosine_loss"}
    out.loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert all(p.grad is not None for p in student.parameters())
    assert not any(k.startswith("_teacher") for k in model.state_dict())
    assert model.state_dict().keys() == {f"model.{k}" for k in student.state_dict()}
    model.train()
    assert model.training and not teacher.training  # the teacher never drops out
    only_mlm = DistillationPreTrainer(student, teacher, DistillationConfig(alpha_ce=0, alpha_cos=0))
    torch.testing.assert_close(only_mlm(ids, labels, attention_mask=mask).loss, 2.0 * mlm)


def test_vocabulary_mismatch_is_a_clear_error():
    teacher = _teacher()
    other = EncoderForPreTraining.from_config(student_config(_config(vocab_size=41)))
    with pytest.raises(ValueError, match="teacher's vocabulary has 40 entries and the student's 41"):
        DistillationPreTrainer(other, teacher)
    a = train_tokenizer("wordpiece", iter(["the cat sat on the mat"] * 20), 40, show_progress=False)
    b = train_tokenizer("wordpiece", iter(["a dog ran in the park"] * 20), 40, show_progress=False)
    with pytest.raises(ValueError, match=r"differs from the student's .*id \d+ is"):
        check_same_vocabulary(a, b, "teacher-dir", "tok-dir")
    check_same_vocabulary(a, a, "x", "y")


# ---------------------------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def corpus_and_teacher(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(12)) + "." for _ in range(300)]
    tok = train_tokenizer("wordpiece", iter(texts), 60, show_progress=False)
    torch.manual_seed(0)
    config = _config(vocab_size=tok.get_vocab_size(), hidden_dropout=0.1, attention_dropout=0.1)
    teacher = EncoderForPreTraining.from_config(config).eval()
    save(teacher, root / "teacher")
    tok.save(root / "teacher")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(texts[i : i + 5]) for i in range(0, 300, 5)), encoding="utf-8")
    other = train_tokenizer("wordpiece", iter(t.upper() + " zebra" for t in texts), 70, show_progress=False)
    other.save(root / "other-tokenizer")
    return root, corpus, tok


def _argv(root: Path, corpus: Path, out: Path) -> list[str]:
    return ["distill", "--teacher", str(root / "teacher"), "--corpus", str(corpus), "--output", str(out),
            "--max-steps", "8", "--batch-size", "4", "--max-length", "32", "--no-progress",
            "--set", "trainer.save_every=2", "--set", "trainer.log_every=2"]  # fmt: skip


class Crash(BaseException):
    pass


def test_distill_command_end_to_end_resumes_exactly_and_exports_distilbert(
    corpus_and_teacher, tmp_path, capsys, monkeypatch
):
    transformers = pytest.importorskip("transformers")
    from attnlab.train import trainer as trainer_module

    root, corpus, tok = corpus_and_teacher
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reference, killed = tmp_path / "reference", tmp_path / "killed"
        assert main(_argv(root, corpus, reference)) == 0
        out = capsys.readouterr().out
        assert "distilling" in out and "teacher layers [0, 2]" in out and "T=2" in out
        original = trainer_module.Trainer.__init__

        def init(self, *a, **kw):
            original(self, *a, **kw)
            self.callbacks.append(lambda t, r: (_ for _ in ()).throw(Crash()) if t.step == 5 else None)

        with monkeypatch.context() as m:
            m.setattr(trainer_module.Trainer, "__init__", init)
            with pytest.raises(Crash):
                main(_argv(root, corpus, killed))
        assert main(_argv(root, corpus, killed)) == 2  # an earlier run: --resume or --overwrite
        assert "--resume" in capsys.readouterr().err
        assert main([*_argv(root, corpus, killed), "--resume"]) == 0
        assert "resumed from" in capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)
    a = read_checkpoint(reference / "train" / "checkpoints" / "step-000008")
    b = read_checkpoint(killed / "train" / "checkpoints" / "step-000008")
    assert a.tensors.keys() == b.tensors.keys() and all(k.startswith("model.") for k in a.tensors)
    for key, value in a.tensors.items():
        assert torch.equal(value, b.tensors[key]), key
    run = json.loads((reference / "run.json").read_text())
    settings = run["settings"]
    assert settings["distillation"] == DistillationConfig().to_dict()  # T 2, weights 5/2/1
    assert settings["teacher_layers"] == [0, 2] and run["model_config"]["type_vocab_size"] == 0

    # the saved student is a DistilBertForMaskedLM in transformers, logits within 1e-5
    from attnlab.io import load

    student = load(reference / "model").eval()
    assert student.config.num_layers == 2
    hf_config = json.loads((reference / "hf" / "config.json").read_text())
    assert hf_config["architectures"] == ["DistilBertForMaskedLM"] and hf_config["n_layers"] == 2
    hf = transformers.DistilBertForMaskedLM.from_pretrained(reference / "hf").eval()
    enc = tok.encode_batch(["the function returns a list.", "a module reads the file of errors and"])
    width = max(len(e.ids) for e in enc)
    ids = torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in enc])
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in enc])
    with torch.no_grad():
        ours = student(ids, attention_mask=mask).mlm_logits
        theirs = hf(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()
    assert (ours[keep] - theirs[keep]).abs().max().item() < 1e-5


def test_distill_command_errors(corpus_and_teacher, tmp_path, capsys):
    root, corpus, _ = corpus_and_teacher
    argv = _argv(root, corpus, tmp_path / "x")
    assert main([*argv, "--tokenizer", str(root / "other-tokenizer")]) == 2
    err = capsys.readouterr().err
    assert "attnlab distill: error:" in err and "vocabulary" in err and "differs from the student's" in err
    assert main(["distill", "--teacher", str(tmp_path / "missing"), "--corpus", str(corpus)]) == 2
    assert "--teacher expects a model directory" in capsys.readouterr().err
    assert main([*argv, "--layers", "0,x"]) == 2
    assert "--layers" in capsys.readouterr().err
    assert main([*argv, "--student-layers", "2", "--layers", "0"]) == 2
    assert "expected 2 teacher layers" in capsys.readouterr().err
    assert main([*argv, "--alpha-ce", "0", "--alpha-mlm", "0", "--alpha-cos", "0"]) == 2
    assert "nothing to learn" in capsys.readouterr().err


@pytest.mark.slow
def test_distill_under_torchrun_two_processes(corpus_and_teacher, tmp_path):
    """DDP from outside: two CPU processes (gloo) distil together; the student alone is synchronised."""
    from torchrun import run_cli_under_torchrun, trainer_state

    root, corpus, _ = corpus_and_teacher
    out = tmp_path / "ddp"
    argv = [a if a != "8" else "3" for a in _argv(root, corpus, out)]  # 3 steps
    stdout = run_cli_under_torchrun(tmp_path, [*argv, "--workers", "1", "--eval-examples", "8"])
    assert stdout.count("held-out MLM accuracy") == 1  # rank 0 only
    state = trainer_state(out, 3)
    assert state["world_size"] == 2 and state["examples_seen"] == 3 * 4 * 2
    assert json.loads((out / "model" / "config.json").read_text())["config"]["num_layers"] == 2


@pytest.mark.slow
def test_distill_with_fsdp_on_two_processes_writes_the_student_once(corpus_and_teacher, tmp_path):
    """--parallel fsdp: the student's and the teacher's layers sharded over two CPU processes (gloo); the
    sharded checkpoints hold the shards, rank 0 writes the gathered student, which `attnlab.io.load`
    reads."""
    from torchrun import run_cli_under_torchrun, trainer_state

    from attnlab.io import load

    root, corpus, _ = corpus_and_teacher
    out = tmp_path / "fsdp"
    argv = [a if a != "8" else "3" for a in _argv(root, corpus, out)]  # 3 steps
    stdout = run_cli_under_torchrun(
        tmp_path, [*argv, "--workers", "1", "--eval-examples", "8", "--parallel", "fsdp"]
    )
    assert stdout.count("held-out MLM accuracy") == 1  # rank 0 only
    state = trainer_state(out, 3)
    assert state["world_size"] == 2 and state["config"]["parallel"] == "fsdp"
    assert (out / "train" / "checkpoints" / "step-000003" / "sharded" / "__1_0.distcp").is_file()
    student = load(out / "model")
    assert student.config.num_layers == 2 and not any(p.is_meta for p in student.parameters())


def test_distill_fsdp_without_torchrun_is_refused_before_writing(corpus_and_teacher, tmp_path, capsys):
    root, corpus, _ = corpus_and_teacher
    out = tmp_path / "x"
    assert main([*_argv(root, corpus, out), "--parallel", "fsdp"]) == 2
    assert "launch with torchrun --nproc-per-node N -m attnlab distill" in capsys.readouterr().err
    assert not out.exists()


def test_distill_keeps_the_teachers_trained_positions(corpus_and_teacher, tmp_path, monkeypatch):
    """The budget's length stages copy positions a shorter stage trained (pretrain); a student starts from
    its teacher's positions, all trained, so `attnlab distill` keeps them."""
    from attnlab.pretraining import run as run_module

    root, corpus, _ = corpus_and_teacher
    seen = {}

    def capture(recipe, *a, **kw):
        seen["recipe"] = recipe
        raise Crash()

    monkeypatch.setattr(run_module, "pretrain", capture)
    stages = 'stages=[{"max_length": 16, "fraction": 0.5}, {"max_length": 32, "fraction": 0.5}]'
    argv = ["distill", "--teacher", str(root / "teacher"), "--corpus", str(corpus), "--output",
            str(tmp_path / "d"), "--max-steps", "4", "--no-progress", "--set", stages]  # fmt: skip
    with pytest.raises(Crash):
        main(argv)
    recipe = seen["recipe"]
    assert [s.max_length for s in recipe.stages] == [16, 32] and recipe.stage_positions == "keep"


def test_distill_debug_shows_the_traceback(corpus_and_teacher, tmp_path):
    """``--debug`` re-raises (the command used to turn every ValueError into one line itself, --debug or not,
    which also hid the tracebacks of bugs)."""
    root, corpus, _ = corpus_and_teacher
    with pytest.raises(ValueError, match="--layers"):
        main([*_argv(root, corpus, tmp_path / "x"), "--layers", "0,x", "--debug"])
