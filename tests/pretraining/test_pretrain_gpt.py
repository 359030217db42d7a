"""``attnlab pretrain --recipe gpt``: the causal-LM recipe on the pre-training machinery, end to end.

The token stream and its blocks against the documents they come from, the character tokenizer, a kill at a
fixed step then --resume ending bit-identical to an uninterrupted run, and `attnlab generate` on the result.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from test_resume_kill import HOW, assert_same_checkpoint, interrupt, run_here

from attnlab.data import prepare_shards
from attnlab.data.blocks import BlockCollator, TokenBlocks
from attnlab.data.shards import ShardedCorpus
from attnlab.io.families.gpt2 import load_causal_lm
from attnlab.pretraining import get_recipe
from attnlab.pretraining.budget import budget_for, for_budget
from attnlab.pretraining.causal_lm import causal_documents
from attnlab.tokenizers.char import EOS, char_tokenizer, train_char_tokenizer
from attnlab.tokenizers.files import load_tokenizer

WORDS = "the king and queen of a land far away where people sing songs about rivers hills old stories".split()


def write_corpus(path, n_docs: int = 24, lines: int = 8, seed: int = 0):
    """BERT's format (a sentence per line, a blank line between documents)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_docs):
        for _ in range(lines):
            out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))).capitalize() + ".")
        out.append("")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def test_blocks_are_the_documents_joined_by_end_of_text(tmp_path):
    docs = [["ab\n", "c\n"], ["defg\n"], ["h\n", "ij\n", "k\n"]] * 7
    tok = train_char_tokenizer("".join(line for d in docs for line in d))
    eos = tok.token_to_id(EOS)
    prepare_shards(iter(docs), tok, tmp_path / "s", workers=1, chunk_chars=10, shard_tokens=20)  # 2+ shards
    corpus = ShardedCorpus(tmp_path / "s", tok)
    assert len(corpus.shards) > 1
    stream = []
    for d in docs:
        stream += tok.encode("".join(d), add_special_tokens=False).ids + [eos]
    blocks = TokenBlocks(corpus, 5, eos, seed=3)
    assert blocks.stream_length == len(stream)
    assert blocks.stream(0, len(stream)).tolist() == stream
    assert len(blocks) == (len(stream) - 4) // 5
    offsets = set()
    for epoch in range(6):
        blocks.set_epoch(epoch)
        offsets.add(blocks.offset)
        for i in (0, len(blocks) - 1):
            o = blocks.offset + 5 * i
            assert blocks[i]["input_ids"].tolist() == stream[o : o + 5]
    assert len(offsets) > 1  # the cut moves between epochs
    blocks.set_epoch(2)
    again = TokenBlocks(corpus, 5, eos, seed=3)
    again.set_epoch(2)
    assert again.offset == blocks.offset  # a function of (seed, epoch): exact resume
    batch = BlockCollator()([blocks[0], blocks[1]])
    assert batch["input_ids"].shape == (2, 5) and torch.equal(batch["labels"], batch["input_ids"])


def test_char_tokenizer_round_trips_and_loads_in_hf(tmp_path):
    text = "ROMEO:\nBut soft, what light\tthrough yonder window breaks?\n"
    tok = char_tokenizer(text)
    ids = tok.encode(text, add_special_tokens=False).ids
    assert len(ids) == len(text) and tok.decode(ids) == text
    assert [tok.id_to_token(i) for i in range(3)] == sorted(set(text))[:3]  # nanoGPT's stoi order
    assert tok.encode("Z", add_special_tokens=False).tokens == ["<unk>"]  # unseen: <unk>
    tok.save(tmp_path)
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert hf.encode(text).ids == ids


def test_causal_documents_keep_the_text_as_written(tmp_path):
    path = tmp_path / "play.txt"
    path.write_text("First Citizen:\nBefore we proceed,\n\nhear me speak.\n", encoding="utf-8")
    (doc,) = list(causal_documents([path], "text")())
    assert "".join(doc) == path.read_text()  # line breaks and the blank line kept
    docs = list(causal_documents([path], "text", piece_chars=10)())  # a book cut at blank lines
    assert ["".join(d) for d in docs] == ["First Citizen:\nBefore we proceed,\n\n", "hear me speak.\n"]


def test_budget_picks_gpt_sizes():
    gpt = get_recipe("gpt")
    assert gpt.objective == "clm" and gpt.tokenizer == "byte_level_bpe"
    short, long = budget_for(10, "clm"), budget_for(60, "clm")
    assert (short.preset, long.preset) == ("gpt-char-tiny", "gpt-bpe-small")
    r = for_budget(gpt, short)
    assert r.stages[0].max_length == 64 and r.batch_size == 12 and r.lr == 1e-3 and r.dropout == 0.0
    with pytest.raises(ValueError, match="'byte_level_bpe' or 'char'"):
        gpt.override(tokenizer="wordpiece")


def gpt_argv(corpus, out, steps: int = 6) -> list[str]:
    return [
        "pretrain", "--recipe", "gpt", "--corpus", str(corpus), "--tokenizer-kind", "char",
        "--max-steps", str(steps), "--batch-size", "4", "--max-length", "32", "--output", str(out),
        "--no-progress", "--eval-examples", "8", "--heldout-every", "6",
        "--set", "model.num_layers=1", "--set", "model.hidden_size=32", "--set", "model.num_heads=2",
        "--set", "trainer.save_every=2", "--set", "trainer.tensorboard=false", "--set", "trainer.plot=false",
    ]  # fmt: skip


@pytest.mark.parametrize("how", HOW)
def test_gpt_pretrain_killed_resumed_then_generates(tmp_path, capsys, monkeypatch, how):
    corpus = write_corpus(tmp_path / "corpus.txt")
    reference, out = tmp_path / "reference", tmp_path / "killed"
    interrupt(how, 5, gpt_argv(corpus, out), monkeypatch)
    assert not (out / "model").exists()
    capsys.readouterr()
    assert run_here(gpt_argv(corpus, out) + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert "held-out loss" in printed and "samples" in printed
    assert run_here(gpt_argv(corpus, reference)) == 0
    assert_same_checkpoint(
        reference / "train" / "checkpoints" / "step-000006", out / "train" / "checkpoints" / "step-000006"
    )
    run = json.loads((out / "run.json").read_text())
    assert run["steps"] == 6 and run["eval"]["eval_lm_loss"] < run["eval"]["eval_unigram_perplexity"]
    assert np.isfinite(run["eval"]["eval_lm_perplexity"])

    model = load_causal_lm(out / "model")
    assert model.config.max_positions == 32 and model.config.num_layers == 1
    tok = load_tokenizer(out / "model")
    assert model.config.eos_token_id == tok.token_to_id(EOS)
    capsys.readouterr()
    argv = ["generate", str(out / "model"), "--prompt", "The king", "--max-new-tokens", "10", "--json"]
    assert run_here(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["prompt"] == "The king" and 1 <= len(row["tokens"]) <= 10


def test_gpt_pretrain_byte_level_bpe_by_default(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    argv = gpt_argv(corpus, tmp_path / "run", steps=2)
    i = argv.index("--tokenizer-kind")
    del argv[i : i + 2]
    assert run_here(argv + ["--vocab-size", "300"]) == 0
    tok = load_tokenizer(tmp_path / "run" / "model")
    assert tok.token_to_id(EOS) == 0 and tok.get_vocab_size() <= 300
    text = "The king and queen sing."
    assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text
    assert (tmp_path / "run" / "hf" / "config.json").is_file()  # HF GPT-2 layout too
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "run" / "hf")
    ids = torch.tensor([tok.encode(text, add_special_tokens=False).ids])
    ours = load_causal_lm(tmp_path / "run" / "model")
    torch.testing.assert_close(hf(ids).logits, ours(ids).logits, atol=1e-5, rtol=1e-5)
    # the model directory itself is a GPT-2 directory for HF (attnlab.io.hf_layout): greedy text-generation
    # through HF's pipeline continues the prompt as attnlab's greedy generate does
    generator = transformers.pipeline("text-generation", model=str(tmp_path / "run" / "model"), device="cpu")
    theirs = generator("The king", max_new_tokens=8, do_sample=False, return_full_text=False)[0][
        "generated_text"
    ]
    capsys.readouterr()
    argv = [
        "generate",
        str(tmp_path / "run" / "model"),
        "--prompt",
        "The king",
        "--max-new-tokens",
        "8",
        "--json",
    ]
    assert run_here(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert theirs == row["text"] and len(row["tokens"]) == 8
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "run" / "model"))
    assert type(hf_tok).__name__.startswith("GPT2Tokenizer") and hf_tok.eos_token == EOS
    for sample in (text, " The  king\nsings, naïve café! <|endoftext|>"):
        assert hf_tok(sample)["input_ids"] == tok.encode(sample).ids  # GPT-2's: no <s> ... </s> template


@pytest.mark.slow
def test_gpt_pretrain_under_torchrun_two_processes(tmp_path):
    """The DDP path of the other recipes (tests/pretraining/test_pretraining_ddp.py): rank 0 prepares and
    prints, both train on their shard of the blocks."""
    from torchrun import run_cli_under_torchrun, trainer_state

    corpus = write_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "run"
    stdout = run_cli_under_torchrun(tmp_path, [*gpt_argv(corpus, out, steps=3), "--workers", "1"])
    assert stdout.count("held-out loss") == 1  # printed by rank 0 only
    state = trainer_state(out, 3)
    assert state["world_size"] == 2 and state["examples_seen"] == 3 * 4 * 2
    assert load_causal_lm(out / "model").config.num_layers == 1
