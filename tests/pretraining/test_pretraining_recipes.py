"""Pre-training recipes: the papers' numbers, derivations, and every recipe end to end on a tiny model.

The tiny corpus is written by the test: documents of sentences drawn from a small English-like grammar, so
that WordPiece, byte-level BPE and Unigram vocabularies train in well under a second.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
import torch

from attnlab.data import MaskingConfig
from attnlab.io import load
from attnlab.models import EncoderForPreTraining, ReplacedTokenDetection
from attnlab.nn.embeddings import Embeddings
from attnlab.pretraining import RECIPES, LengthStage, get_recipe
from attnlab.pretraining.corpus import corpus_documents, files_key, prepare_corpus, split_rule
from attnlab.pretraining.run import pretrain
from attnlab.pretraining.tokenizer import train_or_load_tokenizer
from attnlab.tokenizers.trainers import train_tokenizer

TINY_MODEL = {
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "intermediate_size": 64,
    "embedding_size": 16,
}
SUBJECTS = ["the function", "a module", "this class", "the parser", "each thread", "the server", "a list"]
VERBS = ["returns", "reads", "writes", "raises", "opens", "closes", "sorts", "stores", "checks"]
OBJECTS = ["a string", "the file", "an error", "the value", "a socket", "the buffer", "a number", "the key"]
TAILS = ["quickly", "in order", "when asked", "again", "for the caller", "without a lock", "at once"]


def write_tiny_corpus(path, n_docs: int = 12, sentences: int = 30, seed: int = 0) -> None:
    """BERT's format: one sentence per line, a blank line between documents."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_docs):
        for _ in range(sentences):
            s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."
            lines.append(s[0].upper() + s[1:])
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    write_tiny_corpus(path)
    return path


def _tiny(recipe, **extra):
    """A few steps of a small batch at length 32."""
    r = recipe.scaled_down(max_steps=extra.pop("max_steps", 3), batch_size=4, max_length=32, **extra)
    return r


def _prepared(recipe, corpus_file, tmp_path):
    source = corpus_documents([corpus_file])
    tok = train_or_load_tokenizer(recipe, source, tmp_path / "tokenizer", vocab_size=300, log=lambda m: None)
    train, heldout = prepare_corpus(
        source, tok, tmp_path / "data", source_key=files_key([corpus_file], "sentences"), workers=1,
        heldout_every=4, log=lambda m: None,
    )  # fmt: skip
    return tok, train, heldout


TRAINER = {"progress_bar": False, "tensorboard": False, "plot": False, "log_every": 1, "save_every": 0}


# -- the papers' numbers --------------------------------------------------------------------------
def test_recipes_carry_the_papers_numbers():
    bert, roberta, albert = RECIPES["bert"], RECIPES["roberta"], RECIPES["albert"]
    spanbert, electra = RECIPES["spanbert"], RECIPES["electra"]
    assert (bert.lr, bert.betas, bert.eps, bert.weight_decay, bert.warmup) == (
        1e-4,
        (0.9, 0.999),
        1e-6,
        0.01,
        10_000,
    )
    assert bert.instance_format == "segment_pair" and bert.has_pair_head and bert.static_masking
    assert bert.dupe_factor == 10 and bert.dropout == 0.1 and bert.schedule == "linear"
    assert (bert.masking.mask_prob, bert.masking.random_prob, bert.masking.rate) == (0.8, 0.1, 0.15)
    assert [(s.max_length, s.fraction) for s in bert.stages] == [(128, 0.9), (512, 0.1)]
    assert bert.stage_steps() == [900_000, 100_000]
    assert roberta.instance_format == "full_sentences" and not roberta.has_pair_head
    assert (
        not roberta.static_masking and roberta.tokenizer == "byte_level_bpe" and roberta.template == "roberta"
    )
    assert (roberta.betas, roberta.eps, roberta.lr, roberta.warmup) == ((0.9, 0.98), 1e-6, 6e-4, 24_000)
    assert albert.instance_format == "sop" and albert.has_pair_head and albert.masking.strategy == "ngram"
    assert (albert.optimizer, albert.lr, albert.tokenizer) == ("lamb", 0.00176, "unigram")
    assert spanbert.objective == "sbo" and spanbert.masking.strategy == "span" and not spanbert.has_pair_head
    assert spanbert.instance_format == "doc_sentences"
    assert (electra.objective, electra.lr, electra.rtd_weight, electra.generator_fraction) == (
        "electra",
        5e-4,
        50.0,
        0.25,
    )
    assert not electra.has_pair_head


def test_scaled_down_keeps_warmup_as_the_papers_fraction():
    assert RECIPES["bert"].scaled_down(max_steps=2000).warmup == pytest.approx(0.01)
    assert RECIPES["roberta"].scaled_down(max_steps=100).warmup == pytest.approx(24_000 / 500_000)
    r = RECIPES["bert"].scaled_down(max_steps=100, batch_size=8, max_length=64)
    assert (r.max_steps, r.batch_size, [s.max_length for s in r.stages]) == (100, 8, [64])
    assert r.stages[0].max_predictions == 10  # 80 per 512 tokens, scaled to 64
    two = RECIPES["bert"].scaled_down(max_steps=10, max_length=64, keep_stages=True)
    assert [s.max_length for s in two.stages] == [16, 64] and two.stage_steps() == [9, 1]
    assert r.trainer_config(output_dir="x").warmup == pytest.approx(0.01)


def test_stage_ends_split_any_step_count():
    bert = get_recipe("bert")  # 90% at 128 tokens, 10% at 512
    assert bert.stage_ends() == [900_000, 1_000_000] and bert.stage_ends(10) == [9, 10]
    assert bert.stage_ends(3) == [2, 3] and bert.stage_ends(2) == [1, 2]  # the last stage keeps a step
    assert bert.stage_steps() == [900_000, 100_000]
    three = bert.override(stages=[{"max_length": 16, "fraction": 0.05}, {"max_length": 32, "fraction": 0.05},
                                  {"max_length": 64, "fraction": 0.9}])  # fmt: skip
    assert three.stage_ends(100) == [5, 10, 100] and three.stage_ends(4) == [1, 2, 4]
    assert three.stage_ends(3) == [1, 2, 3]
    with pytest.raises(ValueError, match="max_steps=2 < 3 stages"):
        three.stage_ends(2)


def test_overrides_and_their_errors():
    r = get_recipe("bert", lr=3e-4, masking={"rate": 0.2}, stages=[64])
    assert r.lr == 3e-4 and r.masking.rate == 0.2 and r.stages == (LengthStage(64, 1.0),)
    with pytest.raises(ValueError, match="unknown field.*lrr"):
        get_recipe("bert", lrr=1)
    with pytest.raises(ValueError, match="masking: unknown field.*rat"):
        get_recipe("bert", masking={"rat": 0.2})
    with pytest.raises(ValueError, match="unknown recipe 'bart'.*bert"):
        get_recipe("bart")
    with pytest.raises(ValueError, match="strategy='span'"):
        dataclasses.replace(RECIPES["spanbert"], masking=MaskingConfig())
    with pytest.raises(ValueError, match="single-segment"):
        dataclasses.replace(RECIPES["electra"], instance_format="segment_pair")
    with pytest.raises(ValueError, match="TrainerConfig.optimizer"):
        get_recipe("bert", optimizer="sgd")
    with pytest.raises(ValueError, match="fractions sum to 1"):
        get_recipe("bert", stages=[{"max_length": 64, "fraction": 0.5}])


def test_split_rule_holds_out_enough_documents():
    assert split_rule(1000, 20) == 20
    assert split_rule(6, 20) == 3  # documents 2 and 5
    with pytest.raises(ValueError, match="3 documents"):
        split_rule(3, 20)


# -- end to end -----------------------------------------------------------------------------------
# the masked LMs (the causal LM, recipe gpt: tests/pretraining/test_pretrain_gpt.py)
MASKED_LM_RECIPES = sorted(n for n, r in RECIPES.items() if r.objective != "clm")


@pytest.mark.parametrize("name", MASKED_LM_RECIPES)
def test_every_recipe_trains_end_to_end(name, corpus_file, tmp_path):
    recipe = _tiny(RECIPES[name])
    tok, train, heldout = _prepared(recipe, corpus_file, tmp_path)
    result = pretrain(
        recipe, tok, train, heldout, tmp_path / "run", preset="bert-mini", model_overrides=TINY_MODEL,
        trainer_overrides=TRAINER, eval_examples=8, log=lambda m: None,
    )  # fmt: skip
    assert result.steps == 3
    records = [
        json.loads(line) for line in (tmp_path / "run" / "train" / "log.jsonl").read_text().splitlines()
    ]
    losses = [r["loss"] for r in records if r.get("kind", "train") == "train" and "loss" in r]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    m = result.eval_metrics
    assert (
        0.0 <= m["eval_mlm_accuracy"] <= 1.0 and m["eval_mlm_perplexity"] > 1.0 and m["eval_mlm_tokens"] > 0
    )
    saved = load(result.model_dir)
    expected = ReplacedTokenDetection if name == "electra" else EncoderForPreTraining
    assert type(saved) is expected
    if name in ("bert", "albert"):
        assert saved.pair_head is not None  # NSP / SOP
    elif name != "electra":
        assert saved.pair_head is None
    assert (result.model_dir / "tokenizer.json").is_file()
    if name == "electra":
        assert isinstance(load(tmp_path / "run" / "generator"), EncoderForPreTraining)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["steps"] == 3 and run["recipe"]["name"] == name


def test_two_length_stages_share_one_schedule(corpus_file, tmp_path):
    recipe = RECIPES["bert"].scaled_down(max_steps=4, batch_size=4, max_length=32, keep_stages=True)
    recipe = recipe.override(
        stages=[{"max_length": 16, "fraction": 0.5}, {"max_length": 32, "fraction": 0.5}]
    )
    tok, train, heldout = _prepared(recipe, corpus_file, tmp_path)
    lrs = []
    result = pretrain(
        recipe, tok, train, heldout, tmp_path / "run", preset="bert-mini", model_overrides=TINY_MODEL,
        trainer_overrides={**TRAINER, "warmup": 0}, eval_examples=8, log=lambda m: None,
    )  # fmt: skip
    assert result.steps == 4
    for k in (1, 2):
        log = (tmp_path / "run" / "train" / f"stage-{k}" / "log.jsonl").read_text().splitlines()
        lrs += [json.loads(line)["lr"] for line in log if '"lr"' in line]
    # one linear decay across both stages (attnlab's schedule reaches 0 one step after the last update);
    # a schedule restarted at the stage boundary would climb back at step 3
    assert lrs == pytest.approx([recipe.lr * f for f in (0.8, 0.6, 0.4, 0.2)])
    assert (tmp_path / "run" / "train" / "stage-2" / "checkpoints" / "step-000004").is_dir()


def test_a_longer_stage_can_start_from_copied_positions(corpus_file, tmp_path, monkeypatch):
    """stage_positions="copy": the positions a longer stage adds start as the earlier stage's (Longformer's
    start), once, when that stage starts; a run resumed before it copies at the same point, and ends equal."""
    from attnlab.pretraining import stages as run_module

    recipe = RECIPES["bert"].scaled_down(max_steps=4, batch_size=4, max_length=32, keep_stages=True)
    recipe = recipe.override(
        stages=[{"max_length": 16, "fraction": 0.5}, {"max_length": 32, "fraction": 0.5}],
        stage_positions="copy",
    )
    tok, train, heldout = _prepared(recipe, corpus_file, tmp_path)
    seen = []

    def spy(model, recipe, k, log):
        run_module_start(model, recipe, k, log)
        table = next(m for m in model.modules() if isinstance(m, Embeddings)).position.weight
        seen.append(torch.equal(table[16:32], table[:16]))

    run_module_start = run_module.start_stage_positions
    monkeypatch.setattr(run_module, "start_stage_positions", spy)
    common = dict(preset="bert-mini", model_overrides=TINY_MODEL, eval_examples=8, log=lambda m: None)
    full = pretrain(recipe, tok, train, heldout, tmp_path / "full", trainer_overrides=TRAINER, **common)
    assert seen == [True]  # called once, before stage 2, and the rows were copies then
    cut = pretrain(
        recipe, tok, train, heldout, tmp_path / "cut", trainer_overrides=TRAINER, minutes=0, **common
    )
    assert cut.steps == 1 and seen == [True]
    resumed = pretrain(
        recipe, tok, train, heldout, tmp_path / "cut", trainer_overrides=TRAINER, resume=True, **common
    )
    assert resumed.steps == 4 and seen == [True, True]
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    keep = pretrain(
        recipe.override(stage_positions="keep"), tok, train, heldout, tmp_path / "keep",
        trainer_overrides=TRAINER, **common,
    )  # fmt: skip

    def positions(model):
        return next(m for m in model.modules() if isinstance(m, Embeddings)).position.weight

    assert seen == [True, True, False]  # "keep": the rows stay as initialised
    assert not torch.equal(positions(keep.model)[16:32], positions(full.model)[16:32])
    with pytest.raises(ValueError, match="stage_positions: expected 'keep' or 'copy'"):
        recipe.override(stage_positions="tile")


def test_time_limit_then_resume_matches_an_uninterrupted_run(corpus_file, tmp_path):
    recipe = _tiny(RECIPES["roberta"], max_steps=4)
    tok, train, heldout = _prepared(recipe, corpus_file, tmp_path)
    common = dict(preset="bert-mini", model_overrides=TINY_MODEL, eval_examples=8, log=lambda m: None)
    full = pretrain(recipe, tok, train, heldout, tmp_path / "full", trainer_overrides=TRAINER, **common)
    # a budget of 0 minutes stops at the first step boundary, saves, evaluates and writes the model
    cut = pretrain(
        recipe, tok, train, heldout, tmp_path / "cut", trainer_overrides=TRAINER, minutes=0, **common
    )
    assert cut.steps == 1 and not cut.interrupted and "eval_mlm_accuracy" in cut.eval_metrics
    assert json.loads((tmp_path / "cut" / "run.json").read_text())["stopped_by_time_limit"]
    assert (tmp_path / "cut" / "train" / "checkpoints" / "step-000001").is_dir()
    resumed = pretrain(
        recipe, tok, train, heldout, tmp_path / "cut", trainer_overrides=TRAINER, resume=True, **common
    )
    assert resumed.steps == 4
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # exact resume: data order, masks, dropout, optimizer


def test_trained_wordpiece_keeps_frequent_words_whole(corpus_file, tmp_path):
    # A target the likelihood-ranked merges would fill before merging frequent words: the pair threshold
    # rises until the trainer stops below it, and "the" is one token.
    recipe = RECIPES["bert"]
    tok = train_or_load_tokenizer(
        recipe, corpus_documents([corpus_file]), tmp_path / "tok", vocab_size=110, log=lambda m: None
    )
    assert tok.get_vocab_size() < 110
    assert tok.encode("the value").tokens[1] == "the"
    plain = train_tokenizer("wordpiece", iter(corpus_file.read_text().splitlines()), 110, show_progress=False)
    assert plain.get_vocab_size() == 110 and "the" not in plain.get_vocab()  # what the threshold avoids
    again = train_or_load_tokenizer(
        recipe, corpus_documents([corpus_file]), tmp_path / "tok", log=lambda m: None
    )
    assert again.get_vocab() == tok.get_vocab()  # loaded from the directory, not trained again


def test_a_resumed_run_rebuilds_its_recorded_plan(corpus_file, tmp_path):
    """run.json holds the schedule's plan (max_steps, warm-up in steps); a resume follows it, as after a
    re-plan by replan_steps, which moves max_steps and keeps the warm-up."""
    from attnlab.train.schedules import linear_warmup_decay_factor

    recipe = _tiny(RECIPES["roberta"], max_steps=4)
    tok, train, heldout = _prepared(recipe, corpus_file, tmp_path)
    common = dict(preset="bert-mini", model_overrides=TINY_MODEL, eval_examples=8, log=lambda m: None)
    pretrain(recipe, tok, train, heldout, tmp_path / "run", trainer_overrides=TRAINER, **common)
    run_path = tmp_path / "run" / "run.json"
    run = json.loads(run_path.read_text())
    assert run["max_steps"] == 4 and isinstance(run["warmup_steps"], int) and run["steps"] == 4
    run.update(max_steps=7, warmup_steps=1)  # what a re-plan records
    run_path.write_text(json.dumps(run))
    resumed = pretrain(
        recipe, tok, train, heldout, tmp_path / "run", trainer_overrides=TRAINER, resume=True, **common
    )
    assert resumed.steps == 7 and json.loads(run_path.read_text())["max_steps"] == 7
    log = [json.loads(x) for x in (tmp_path / "run" / "train" / "log.jsonl").read_text().splitlines()]
    lrs = {r["step"]: r["lr"] for r in log if r.get("kind") == "train"}
    assert lrs[6] == pytest.approx(recipe.lr * linear_warmup_decay_factor(6, 1, 7), rel=1e-9)
