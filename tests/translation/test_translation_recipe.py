"""The paper's recipe: label-smoothed loss (by hand), Adam settings, the learning-rate formula at known
steps, checkpoint averaging, model directories."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.io import load, save
from attnlab.manifest import IntegrityError, write_manifest
from attnlab.tokenizers import Tokenizer, load_tokenizer
from attnlab.train import build_optimizer, build_schedule, save_model
from attnlab.translation import build_model, label_smoothed_cross_entropy
from attnlab.translation.config import transformer_tiny
from attnlab.translation.data import encode_text, train_joint_bpe
from attnlab.translation.recipe import (
    average_checkpoints,
    average_state_dicts,
    heldout_perplexity,
    last_checkpoints,
    load_averaged,
    paper_trainer_config,
    translate_texts,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# ----------------------------------------------------------------------------------------------- loss


def test_label_smoothed_loss_by_hand() -> None:
    """V = 3, eps = 0.1; token 1 logits (1, 2, 3) label 2; token 2 padding; token 3 logits (5, 1, 1) label 0.

    q = 0.9 * onehot + 0.1 / 3; loss_t = -sum_k q_k log p_k. Token 1: lse = 3 + log(1 + e^-1 + e^-2) =
    3.40760596, -log p = (2.40760596, 1.40760596, 0.40760596), loss = 0.9 * 0.40760596 + 0.1 * 1.40760596
    = 0.50760596. Token 3: lse = 5 + log(1 + 2 e^-4) = 5.03597630, -log p = (0.03597630, 4.03597630,
    4.03597630), loss = 0.9 * 0.03597630 + 0.1 * 2.70264297 = 0.30264297. Mean over the 2 real tokens:
    0.40512447. The plain NLL mean is (0.40760596 + 0.03597630) / 2 = 0.22179113.
    """
    logits = torch.tensor([[[1.0, 2.0, 3.0], [9.0, -9.0, 0.0], [5.0, 1.0, 1.0]]])
    labels = torch.tensor([[2, -100, 0]])
    loss, nll, tokens = label_smoothed_cross_entropy(logits, labels, 0.1)
    assert int(tokens) == 2
    assert float(loss) == pytest.approx(0.40512447, abs=1e-7)
    assert float(nll) == pytest.approx(0.22179113, abs=1e-7)
    # the same definition as PyTorch's uniform label smoothing
    ref = F.cross_entropy(logits.view(-1, 3), labels.view(-1), ignore_index=-100, label_smoothing=0.1)
    assert float(loss) == pytest.approx(float(ref), abs=1e-6)


def test_loss_ignores_padding_values() -> None:
    logits = torch.randn(2, 4, 7)
    labels = torch.tensor([[1, 2, -100, -100], [3, 4, 5, -100]])
    changed = logits.clone()
    changed[0, 2:] = 100.0
    changed[1, 3] = -50.0
    a = label_smoothed_cross_entropy(logits, labels, 0.1)[0]
    b = label_smoothed_cross_entropy(changed, labels, 0.1)[0]
    assert float(a) == pytest.approx(float(b))


def test_loss_without_smoothing_is_nll() -> None:
    logits = torch.randn(2, 3, 5)
    labels = torch.randint(0, 5, (2, 3))
    loss, nll, _ = label_smoothed_cross_entropy(logits, labels, 0.0)
    assert float(loss) == pytest.approx(float(F.cross_entropy(logits.view(-1, 5), labels.view(-1))), abs=1e-6)
    assert float(loss) == pytest.approx(float(nll))


def test_model_loss_uses_config_smoothing() -> None:
    model = build_model(transformer_tiny(vocab_size=30, dropout=0.0, label_smoothing=0.2))
    ids = torch.randint(4, 30, (2, 5))
    labels = torch.randint(4, 30, (2, 4))
    out = model(ids, torch.ones_like(ids), labels=labels)
    expected = label_smoothed_cross_entropy(out.logits, labels, 0.2)[0]
    assert float(out.loss.detach()) == pytest.approx(float(expected.detach()))
    assert float(out.metrics["target_tokens"]) == 8


# ----------------------------------------------------------------------------------------------- optimiser


def test_paper_optimizer_and_schedule(tmp_path) -> None:
    model = build_model(transformer_tiny(vocab_size=30))
    cfg = paper_trainer_config(d_model=512, max_steps=20_000, output_dir=tmp_path)
    opt = build_optimizer(model, cfg)
    assert isinstance(opt, torch.optim.AdamW)
    for group in opt.param_groups:
        assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9 and group["weight_decay"] == 0.0
    sched = build_schedule(opt, cfg, cfg.max_steps)
    lrs = {}
    for step in range(1, 16_001):
        if step in (1, 100, 4000, 4001, 16_000):
            lrs[step] = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
    # lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), by hand for d_model = 512, warmup = 4000
    assert lrs[1] == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-9)  # 1.7469e-7
    assert lrs[100] == pytest.approx(100 * 512**-0.5 * 4000**-1.5, rel=1e-9)
    assert lrs[4000] == pytest.approx(6.987712429686844e-4, rel=1e-9)  # the peak, (512 * 4000)^-0.5
    assert lrs[4001] == pytest.approx(512**-0.5 / math.sqrt(4001), rel=1e-9)
    assert lrs[16_000] == pytest.approx(6.987712429686844e-4 / 2, rel=1e-9)  # sqrt(4000 / 16000) = 1/2


# ----------------------------------------------------------------------------------------------- averaging


def _filled(value: float, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(transformer_tiny(vocab_size=30))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return model


def test_average_state_dicts() -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor([3])}
    b = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor([3])}
    out = average_state_dicts([a, b])
    assert out["w"].tolist() == [2.0, 4.0] and out["n"].tolist() == [3]
    with pytest.raises(ValueError, match="different keys"):
        average_state_dicts([a, {"w": a["w"]}])


def test_checkpoint_averaging_takes_only_the_current_runs_checkpoints(tmp_path) -> None:
    """An earlier run that went further (step 500) left checkpoints in the same directory: averaging the
    new run's last 3 must not mix them in (it did, before run ids in the manifests)."""
    run = tmp_path / "run" / "checkpoints"
    for step, value, run_id in ((100, 9.0, "new"), (200, 1.0, "new"), (300, 2.0, "new"), (400, 6.0, "new"),
                                (500, 50.0, "old")):  # fmt: skip
        d = run / f"step-{step:06d}"
        d.mkdir(parents=True)
        save_model(_filled(value), d / "model.safetensors")
        (d / "trainer_state.json").write_text("{}")
        write_manifest(d, run_id=run_id)
    assert [p.name for p in last_checkpoints(tmp_path / "run", 3)][-1] == "step-000500"  # no run id: stale
    chosen = last_checkpoints(tmp_path / "run", 3, run_id="new")
    assert [p.name for p in chosen] == ["step-000200", "step-000300", "step-000400"]
    averaged = average_checkpoints(chosen)
    assert "generator.weight" in averaged and "src_embed.word.weight" in averaged
    model = _filled(0.0)
    load_averaged(model, chosen)
    for p in model.parameters():
        assert torch.all(p == 3.0)
    assert model.generator.weight is model.src_embed.word.weight  # the tie survives
    with pytest.raises(FileNotFoundError, match="belongs to run other"):
        last_checkpoints(tmp_path / "run", 3, run_id="other")
    damage = run / "step-000300" / "model.safetensors"
    damage.write_bytes(damage.read_bytes()[:-100])
    with pytest.raises(IntegrityError, match=r"step-000300[/\\]model\.safetensors: truncated"):
        average_checkpoints(chosen)
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        last_checkpoints(tmp_path / "empty", 5)


# ----------------------------------------------------------------------------------------------- directories


def test_save_and_load_translates_the_same(tmp_path) -> None:
    texts = ["ein hund läuft", "a dog runs", "zwei katzen", "two cats", "ein mann", "a man"]
    tokenizer = train_joint_bpe(texts, vocab_size=300)
    torch.manual_seed(0)
    model = build_model(transformer_tiny(vocab_size=tokenizer.vocab_size, dropout=0.0))
    save(model, tmp_path / "m", tokenizer=tokenizer)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "config.json",
        "generation_config.json",  # HF MarianMT's layout too (attnlab.translation.hf_layout)
        "manifest.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    loaded, tok2 = load(tmp_path / "m"), load_tokenizer(tmp_path / "m")
    assert isinstance(tok2, Tokenizer)
    inputs = ["a dog", "", "zwei 猫"]
    a = translate_texts(model.eval(), tokenizer, inputs, beam_size=2, max_length_offset=3)
    b = translate_texts(loaded, tok2, inputs, beam_size=2, max_length_offset=3)
    assert a == b and a[1] == ""


def test_heldout_perplexity_is_the_plain_nll_per_target_token_over_all_batches() -> None:
    sources = ["a dog runs", "two cats sleep", "a man", " ", "the dog and the man run"]
    targets = ["ein hund läuft", "zwei katzen schlafen", "ein mann", "leer", "der hund und der mann laufen"]
    tokenizer = train_joint_bpe(sources + targets, vocab_size=300)
    torch.manual_seed(0)
    model = build_model(transformer_tiny(vocab_size=tokenizer.vocab_size, dropout=0.0, label_smoothing=0.2))
    nll, tokens = 0.0, 0
    for s, t in [
        (s, t) for s, t in zip(sources, targets) if s.strip()
    ]:  # the pair with an empty side is left out
        (src,), (tgt,) = encode_text(tokenizer, [s]), encode_text(tokenizer, [t])  # EOS appended
        decoder_input = [model.config.start_token_id, *tgt[:-1]]
        with torch.no_grad():
            logits = model(torch.tensor([src]), decoder_input_ids=torch.tensor([decoder_input])).logits[0]
        nll += float(F.cross_entropy(logits, torch.tensor(tgt), reduction="sum"))
        tokens += len(tgt)
    # 16 tokens a batch: several batches, each weighted by its target tokens; no label smoothing
    assert heldout_perplexity(model, tokenizer, sources, targets, max_tokens=16) == pytest.approx(
        math.exp(nll / tokens), rel=1e-5
    )
    assert model.training  # left as it was found
    with pytest.raises(ValueError, match="5 source sentences but 4 targets"):
        heldout_perplexity(model, tokenizer, sources, targets[:4])


def test_load_names_missing_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json"):
        load(tmp_path)


# ----------------------------------------------------------------------------------------------- trainer


def test_trainer_resume_with_token_batches_is_exact(tmp_path) -> None:
    """4 updates straight equal 2 updates, a resume from the checkpoint, and 2 more (same weights)."""
    from attnlab.train import Trainer, set_seed
    from attnlab.translation.data import TokenBatchLoader

    examples = [([5 + i % 20] * (2 + i % 5) + [3], [6 + i % 17] * (1 + i % 4) + [3]) for i in range(40)]

    def run(out, steps: int, resume: bool = False):
        set_seed(0)
        model = build_model(transformer_tiny(vocab_size=30, d_model=32, d_ff=64, num_layers=1))
        loader = TokenBatchLoader(examples, max_tokens=30, pad_id=0, start_id=2, seed=5)
        cfg = paper_trainer_config(
            32,
            steps,
            out,
            warmup=2,
            save_every=2,
            tensorboard=False,
            plot=False,
            progress_bar=False,
            log_every=0,
        )
        trainer = Trainer(model, cfg, loader)
        if resume:
            trainer.resume(out / "checkpoints" / "step-000002")
        trainer.train()
        return model

    straight = run(tmp_path / "a", 4)
    run(tmp_path / "b", 2)
    resumed = run(tmp_path / "b", 4, resume=True)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_translate_train_logs_the_real_epoch_and_a_readable_model_line(tmp_path) -> None:
    """log.jsonl's "epoch" counts the token batches read (it was 0.0 at every step); the model is described in
    words, not as a Seq2SeqConfig(...) repr."""
    import json

    from attnlab.translation.recipe import train_translation

    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_text("".join(f"the dog {i} runs .\n" for i in range(12)), encoding="utf-8")
    tgt.write_text("".join(f"der hund {i} läuft .\n" for i in range(12)), encoding="utf-8")
    logged: list[str] = []
    train_translation(
        src, tgt, tmp_path / "out", preset_name="transformer-tiny", vocab_size=300, max_tokens=64,
        max_steps=6, warmup=1, save_every=3, config_overrides={"num_layers": 1, "d_model": 32, "d_ff": 64,
        "num_heads": 2}, trainer_overrides={"log_every": 1, "progress_bar": False, "device": "cpu"},
        log=logged.append,
    )  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()]
    epochs = [r["epoch"] for r in records if r.get("kind", "train") == "train" and "epoch" in r]
    assert epochs and epochs[-1] > 0.0 and epochs == sorted(epochs)
    model_line = next(line for line in logged if line.startswith("model:"))
    assert "Seq2SeqConfig(" not in model_line and "1+1 layers, d_model 32" in model_line
