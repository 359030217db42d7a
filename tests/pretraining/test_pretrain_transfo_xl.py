"""``attnlab pretrain --recipe transfo-xl``: segment recurrence on the pre-training machinery, end to end.

The streams' segment order (row i of batch k + 1 continues row i of batch k, on every rank; a wrap starts
again at segment 0), the training module's loss against a hand-written loop with explicit memory, the memory
kept out of the weights and carried through a checkpoint (a run killed then resumed ends bit-identical to an
uninterrupted one), the saved model's round trip, state-reuse perplexity, the recipe and budget, the CLI's
errors, and two processes under torchrun against one process with their streams.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from test_pretrain_gpt import write_corpus
from test_resume_kill import assert_same_checkpoint, interrupt, run_here

from attnlab.data import prepare_shards
from attnlab.data.blocks import TokenStream
from attnlab.data.shards import ShardedCorpus
from attnlab.data.streams import SegmentCollator, StreamSegments
from attnlab.generation.perplexity import state_reuse_perplexity
from attnlab.io.families.transfo_xl import load_transfo_xl, save_transfo_xl
from attnlab.models.transfo_xl import TransfoXLConfig, build_transfo_xl
from attnlab.pretraining import get_recipe
from attnlab.pretraining.budget import budget_for, for_budget
from attnlab.pretraining.transfo_xl import SegmentRecurrence
from attnlab.tokenizers.char import EOS, train_char_tokenizer
from attnlab.train import ResumableLoader
from attnlab.train.checkpoint import read_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**overrides) -> TransfoXLConfig:
    base = dict(vocab_size=13, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=24)
    return TransfoXLConfig(**{**base, "segment_length": 4, "mem_len": 6, **overrides})


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """A two-shard corpus of 21 documents and its token stream (documents joined by end-of-text)."""
    tmp = tmp_path_factory.mktemp("streams")
    docs = [["ab\n", "c\n"], ["defg\n"], ["h\n", "ij\n", "k\n"]] * 7
    tok = train_char_tokenizer("".join(line for d in docs for line in d))
    eos = tok.token_to_id(EOS)
    prepare_shards(iter(docs), tok, tmp / "s", workers=1, chunk_chars=10, shard_tokens=20)
    corpus = ShardedCorpus(tmp / "s", tok)
    assert len(corpus.shards) > 1
    tokens: list[int] = []
    for d in docs:
        tokens += tok.encode("".join(d), add_special_tokens=False).ids + [eos]
    return corpus, eos, tokens


# ----------------------------------------------------------------------------------------- data


def test_segments_are_the_streams_read_in_order(stream):
    corpus, eos, tokens = stream
    data = StreamSegments(corpus, 6, 5, eos)
    assert TokenStream(corpus, eos).read(0, len(tokens)).tolist() == tokens
    p = (len(tokens) - 1) // 6
    assert data.stream_length == p and data.segments_per_stream == (p - 1) // 5
    assert len(data) == 6 * data.segments_per_stream
    for i in (0, 7, len(data) - 1):
        s, k = i % 6, i // 6
        item = data[i]
        start = s * p + 5 * k
        assert item["input_ids"].tolist() == tokens[start : start + 5]
        assert item["targets"].tolist() == tokens[start + 1 : start + 6]  # the next token of every position
        assert item["segment_index"] == k
    with pytest.raises(ValueError, match="give no segment"):
        StreamSegments(corpus, len(tokens) // 3, 5, eos)


@pytest.mark.parametrize("world_size", [1, 2])
def test_each_row_continues_its_stream_on_every_rank_and_wraps_at_the_epoch(stream, world_size):
    corpus, eos, tokens = stream
    per_rank = 6 // world_size
    data = StreamSegments(corpus, 6, 5, eos)
    loaders = [
        ResumableLoader(data, per_rank, SegmentCollator(), shuffle=False, drop_last=True, rank=r,
                        world_size=world_size)
        for r in range(world_size)
    ]  # fmt: skip
    rows_of_rank = []
    for loader in loaders:
        assert len(loader) == data.segments_per_stream
        batches = [b for _, b in zip(range(len(loader) + 2), _forever(loader))]  # one epoch and 2 more
        first = batches[0]
        rows_of_rank.append(first["input_ids"][:, 0].tolist())
        for k in range(len(loader) - 1):
            a, b = batches[k], batches[k + 1]
            assert a["segment_index"].tolist() == [k] * per_rank
            assert torch.equal(a["targets"][:, :-1], a["input_ids"][:, 1:])
            assert torch.equal(a["targets"][:, -1], b["input_ids"][:, 0])  # row i goes on in row i
        wrapped = batches[len(loader)]
        assert wrapped["segment_index"].tolist() == [0] * per_rank  # the streams wrap: segment 0 again
        assert torch.equal(wrapped["input_ids"], first["input_ids"])
    # the ranks read distinct streams: rank r's row j is stream r + j W, so together they are all 6
    firsts = [tokens[s * data.stream_length] for s in range(6)]
    for r, rows in enumerate(rows_of_rank):
        assert rows == [firsts[r + j * world_size] for j in range(per_rank)]


def _forever(loader):
    while True:
        yield from loader


# ----------------------------------------------------------------------------------------- the module


def _segments(n: int, batch: int = 3, t: int = 4, vocab: int = 13, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(vocab, (batch, n * t + 1), generator=g)  # (B, n T + 1): B streams
    return [(text[:, k * t : (k + 1) * t], text[:, k * t + 1 : (k + 1) * t + 1]) for k in range(n)]


def test_training_module_loss_equals_a_loop_with_explicit_memory():
    torch.manual_seed(0)
    xl = build_transfo_xl(tiny())
    module = SegmentRecurrence(xl).train()
    segments = _segments(5)
    memory = None
    for k, (x, y) in enumerate(segments[:4]):
        expected = xl(x, targets=y, memory=memory)
        memory = expected.memory
        got = module(x, y, torch.full((3,), k))
        assert torch.equal(got.loss, expected.loss), k
        if k == 1:  # an evaluation pass in between uses a memory of its own
            module.eval()
            module(x, y, torch.zeros(3, dtype=torch.long))
            module(x, y, torch.ones(3, dtype=torch.long))
            module.train()
    assert memory[0].shape == (3, 6, 16)  # mem_len 6 of the last inputs
    # the memory is state, not weights: the state dict is the model's, prefixed
    assert set(module.state_dict()) == {f"model.{k}" for k in xl.state_dict()}
    carried = module.carried_state()
    assert carried["next_segment"] == 4 and all(torch.equal(a, b) for a, b in zip(carried["memory"], memory))

    x, y = segments[4]
    expected = xl(x, targets=y, memory=memory).loss
    resumed = SegmentRecurrence(xl).train()  # what a resumed process builds
    without = resumed(x, y, torch.full((3,), 4)).loss  # no memory: not the uninterrupted run's step
    assert not torch.equal(without, expected)
    resumed = SegmentRecurrence(xl).train()
    resumed.load_carried_state(carried)
    assert torch.equal(resumed(x, y, torch.full((3,), 4)).loss, expected)
    # a wrap (segment 0) starts without memory
    assert torch.equal(module(x, y, torch.zeros(3, dtype=torch.long)).loss, xl(x, targets=y).loss)
    with pytest.raises(ValueError, match="same segment"):
        module(x, y, torch.tensor([1, 1, 2]))


def test_saved_model_reloads_with_equal_logits_and_memories(tmp_path):
    torch.manual_seed(1)
    xl = build_transfo_xl(tiny(norm_first=True, activation="gelu_tanh")).eval()
    save_transfo_xl(xl, tmp_path)
    back = load_transfo_xl(tmp_path)
    assert back.config == xl.config and back.lm_head.weight is back.embed.weight
    (x1, _), (x2, _) = _segments(2)
    a1, b1 = xl(x1), back(x1)
    assert torch.equal(a1.logits, b1.logits)
    assert torch.equal(xl(x2, memory=a1.memory).logits, back(x2, memory=b1.memory).logits)


def test_state_reuse_perplexity_with_the_whole_past_as_memory_equals_one_pass():
    """Memory as long as the text: every segment sees all tokens before it, as one causal pass does."""
    torch.manual_seed(2)
    xl = build_transfo_xl(tiny()).eval()
    ids = torch.randint(13, (23,))
    full = state_reuse_perplexity(xl, ids, segment_length=22, mem_len=0)  # one segment, no memory
    segmented = state_reuse_perplexity(xl, ids, segment_length=5, mem_len=64)
    assert segmented.tokens == full.tokens == 22 and segmented.windows == 5 and full.windows == 1
    assert segmented.nll == pytest.approx(full.nll, abs=1e-5)
    short = state_reuse_perplexity(xl, ids, segment_length=5, mem_len=0)  # no context across segments
    assert short.nll != pytest.approx(full.nll, abs=1e-5)


# ----------------------------------------------------------------------------------------- recipe


def test_recipe_and_budget():
    xl = get_recipe("transfo-xl")
    assert xl.objective == "clm" and xl.segment_recurrence and xl.preset == "transfo-xl-enwik8-12l"
    assert (xl.lr, xl.weight_decay, xl.schedule, xl.clip_norm, xl.warmup) == (2.5e-4, 0.0, "cosine", 0.25, 0)
    assert xl.stages[0].max_length == 512 and xl.tokenizer == "byte_level_bpe"
    budget = budget_for(3, "clm", recurrent=True)
    assert budget.preset == "transfo-xl-char-tiny" and budget_for(3, "clm").preset == "gpt-char-tiny"
    small = for_budget(xl, budget)
    assert small.stages[0].max_length == 64 and small.batch_size == 16 and small.lr == 1e-3
    assert small.clip_norm == 1.0 and small.schedule == "cosine" and small.segment_recurrence
    with pytest.raises(ValueError, match="segment_recurrence"):
        dataclasses.replace(get_recipe("mlm"), segment_recurrence=True)


# ----------------------------------------------------------------------------------------- the command


def xl_argv(corpus, out, steps: int = 6, mem_len: int | None = 8) -> list[str]:
    return [
        "pretrain", "--recipe", "transfo-xl", "--corpus", str(corpus), "--tokenizer-kind", "char",
        "--max-steps", str(steps), "--batch-size", "4", "--max-length", "16",
        *([] if mem_len is None else ["--mem-len", str(mem_len)]), "--output", str(out), "--no-progress",
        "--eval-examples", "8", "--heldout-every", "6",
        "--set", "model.num_layers=1", "--set", "model.hidden_size=32", "--set", "model.num_heads=2",
        "--set", "model.intermediate_size=64", "--set", "trainer.save_every=2",
        "--set", "trainer.tensorboard=false", "--set", "trainer.plot=false",
    ]  # fmt: skip


def test_pretrain_killed_resumed_is_bit_identical_then_scores_a_file(tmp_path, capsys, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.txt")
    reference, out = tmp_path / "reference", tmp_path / "killed"
    interrupt("crash", 5, xl_argv(corpus, out), monkeypatch)  # after step 5; the last checkpoint is step 4
    assert not (out / "model").exists()
    capsys.readouterr()
    assert run_here(xl_argv(corpus, out) + ["--resume"]) == 0
    printed = capsys.readouterr().out
    assert "held-out loss" in printed and "samples" in printed and "segments of parallel streams" in printed
    assert run_here(xl_argv(corpus, reference)) == 0
    step6 = reference / "train" / "checkpoints" / "step-000006"
    assert_same_checkpoint(step6, out / "train" / "checkpoints" / "step-000006")  # memory included
    (carried,) = read_checkpoint(step6).state["carried"]  # one process: one memory, (B, M, H) per layer
    assert carried["next_segment"] == 6 and [m.shape for m in carried["memory"]] == [(4, 8, 32)]

    run = json.loads((out / "run.json").read_text())
    assert run["steps"] == 6 and run["model_config"]["mem_len"] == 8
    assert run["eval"]["eval_lm_tokens"] == 8 * 16  # 8 held-out segments, every position scored
    assert run["eval"]["eval_lm_loss"] < run["eval"]["eval_unigram_perplexity"]
    # the saved model: the checkpoint's weights, no memory
    model = load_transfo_xl(out / "model")
    weights = {k.removeprefix("model."): v for k, v in read_checkpoint(step6).tensors.items()}
    assert model.state_dict().keys() == weights.keys()
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert (model.config.segment_length, model.config.mem_len, model.config.num_layers) == (16, 8, 1)

    capsys.readouterr()
    argv = ["perplexity", str(out / "model"), "--file", str(corpus), "--max-tokens", "200", "--json"]
    assert run_here(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokens"] == 199 and result["segment_length"] == 16 and result["mem_len"] == 8
    assert run_here(argv + ["--mem-len", "32"]) == 0
    assert json.loads(capsys.readouterr().out)["mem_len"] == 32
    assert (
        run_here(["generate", str(out / "model"), "--prompt", "The", "--max-new-tokens", "5", "--json"]) == 0
    )
    (row,) = json.loads(capsys.readouterr().out)
    assert row["prompt"] == "The" and 1 <= len(row["tokens"]) <= 5
    assert run_here(["generate", str(out / "model"), "--prompt", "The", "--no-cache"]) == 2
    assert "always decodes with its memory" in capsys.readouterr().err


def test_generate_with_memory_equals_a_manual_loop() -> None:
    """Greedy `generate` on a Transformer-XL = feeding the prompt, then each new token, with the memory."""
    from attnlab.generation import generate

    torch.manual_seed(0)
    cfg = TransfoXLConfig(vocab_size=30, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                          segment_length=8, mem_len=6, eos_token_id=None)  # fmt: skip
    model = build_transfo_xl(cfg).eval()
    prompt = torch.randint(0, 30, (2, 5))
    out = generate(model, prompt, max_new_tokens=12)
    with torch.no_grad():
        step = model(prompt)
        memory, rows = step.memory, [[] for _ in range(2)]
        for _ in range(12):
            nxt = step.logits[:, -1].argmax(-1)  # (B,)
            for r, t in zip(rows, nxt.tolist()):
                r.append(t)
            step = model(nxt[:, None], memory=memory)
            memory = step.memory
    assert out.sequences == rows
    beams = generate(model, prompt, max_new_tokens=6, num_beams=3)  # rows reorder the memory
    assert all(len(s) == 6 for s in beams.sequences)
    with pytest.raises(ValueError, match="no padding mask"):
        generate(model, prompt, torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]]), max_new_tokens=2)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--set", "model.mem_len=-1"], "mem_len: expected an int >= 0"),
        (["--preset", "gpt-char-tiny"], "not a Transformer-XL preset"),
        (["--set", "model.attention=local"], "unknown TransfoXLConfig field(s) attention"),
    ],
)
def test_pretrain_refuses_bad_values(tmp_path, capsys, extra, message):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=6)
    assert run_here(xl_argv(corpus, tmp_path / "run", mem_len=None) + extra) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "tokenizer").exists()  # checked before anything is written


def test_mem_len_flag_is_transfo_xl_only(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=6)
    argv = xl_argv(corpus, tmp_path / "run")
    argv[argv.index("transfo-xl")] = "gpt"
    assert run_here(argv) == 2
    assert "--mem-len is Transformer-XL's memory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_here(xl_argv(corpus, tmp_path / "run", mem_len=-1))
    assert "--mem-len: " in capsys.readouterr().err


def test_two_processes_read_their_own_streams_as_one_process_with_both(tmp_path):
    """Under torchrun each rank keeps its own memory (DDP does not broadcast it): 2 ranks x 2 streams train
    as 1 process x 4 streams, the layout putting rank r's rows at global rows r, r + 2 (14 s here)."""
    from torchrun import run_cli_under_torchrun, trainer_state

    corpus = write_corpus(tmp_path / "corpus.txt")
    argv = xl_argv(corpus, tmp_path / "ddp", steps=3)
    argv[argv.index("--batch-size") + 1] = "2"
    stdout = run_cli_under_torchrun(tmp_path, [*argv, "--workers", "1"])
    assert stdout.count("held-out loss") == 1
    state = trainer_state(tmp_path / "ddp", 3)
    assert state["world_size"] == 2 and state["examples_seen"] == 3 * 2 * 2
    assert run_here([*xl_argv(corpus, tmp_path / "one", steps=3), "--set", "trainer.device=cpu"]) == 0
    ddp = read_checkpoint(tmp_path / "ddp" / "train" / "checkpoints" / "step-000003")
    one = read_checkpoint(tmp_path / "one" / "train" / "checkpoints" / "step-000003")
    for key, value in one.tensors.items():
        torch.testing.assert_close(ddp.tensors[key], value, atol=2e-6, rtol=1e-5)
    rank0, rank1 = ddp.state["carried"]
    (single,) = one.state["carried"]
    for layer in range(len(single["memory"])):
        for rank, carried in enumerate((rank0, rank1)):
            expected = single["memory"][layer][rank::2]  # global rows rank, rank + 2
            torch.testing.assert_close(carried["memory"][layer], expected, atol=1e-5, rtol=1e-4)
