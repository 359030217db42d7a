"""``attnlab generate`` / ``attnlab perplexity`` and the causal-LM directories they read: sliding-window
perplexity checked against HF transformers' GPT-2 on the same weights and text, streaming equals the final
text, and user errors (wrong model kind, bad options, empty or too long prompts) are messages, not
tracebacks."""

from __future__ import annotations

import io
import json
import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.cli import main
from attnlab.generation import generate
from attnlab.generation.perplexity import sliding_window_perplexity
from attnlab.io.families.gpt2 import load_causal_lm, save_causal_lm
from attnlab.models.gpt import build_gpt
from attnlab.models.gpt_presets import get_gpt_preset
from attnlab.tokenizers.files import save_tokenizer_json, tokenizer_from_json

transformers = pytest.importorskip("transformers")

CHARS = "\n !',.:;?abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n"
) * 3


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def char_tokenizer():
    vocab = {c: i for i, c in enumerate(CHARS)}
    return tokenizer_from_json(
        {
            "version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": {"type": "Fuse"}, "truncation": None, "padding": None,
            "model": {"type": "BPE", "vocab": vocab, "merges": [], "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": False,
                      "byte_fallback": False, "ignore_merges": False},
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A HF GPT-2 directory (random weights, 32 positions) with a character tokenizer.json."""
    d = tmp_path_factory.mktemp("hf-gpt2")
    torch.manual_seed(0)
    hc = transformers.GPT2Config(
        vocab_size=len(CHARS), n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0,
        initializer_range=0.1,
    )  # fmt: skip
    transformers.GPT2LMHeadModel(hc).save_pretrained(d)
    save_tokenizer_json(char_tokenizer(), d / "tokenizer.json")
    return d


def run_cli(argv: list[str], capsys, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- perplexity


def hf_sliding_window_nll(hf, ids: torch.Tensor, max_length: int, stride: int) -> tuple[float, int]:
    """HF's documented loop, on HF's model: windows every `stride`, -100 on the context tokens; the window's
    mean loss times its scored tokens (exact count) summed."""
    nll_sum, n_tokens, prev_end = 0.0, 0, 0
    n = ids.size(1)
    for begin in range(0, n, stride):
        end = min(begin + max_length, n)
        trg_len = end - prev_end
        input_ids = ids[:, begin:end]
        target = input_ids.clone()
        target[:, :-trg_len] = -100
        with torch.no_grad():
            loss = hf(input_ids, labels=target).loss
        scored = int((target[:, 1:] != -100).sum())
        nll_sum += float(loss) * scored
        n_tokens += scored
        prev_end = end
        if end == n:
            break
    return nll_sum, n_tokens


@pytest.mark.parametrize(("max_length", "stride"), [(32, 32), (32, 8), (16, 5), (32, 1)])
def test_sliding_window_perplexity_equals_hf(hf_dir, max_length: int, stride: int) -> None:
    hf = transformers.GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    ours = load_causal_lm(hf_dir)
    ids = torch.tensor([char_tokenizer().encode(TEXT[:150], add_special_tokens=False).ids])
    mine = sliding_window_perplexity(ours, ids[0], max_length, stride)
    nll_sum, n_tokens = hf_sliding_window_nll(hf, ids, max_length, stride)
    # every token after the first is scored, except window starts when windows do not overlap
    assert mine.tokens == n_tokens == (149 if stride < max_length else 149 - 4)
    assert mine.perplexity == pytest.approx(math.exp(nll_sum / n_tokens), rel=1e-5)


def test_more_context_lowers_nothing_for_a_one_token_window_equivalent(hf_dir) -> None:
    """Stride = window scores each token with the context inside its window only: a direct check on the
    first window against the full-sequence cross-entropy."""
    ours = load_causal_lm(hf_dir)
    ids = torch.tensor(char_tokenizer().encode(TEXT[:32], add_special_tokens=False).ids)
    with torch.no_grad():
        logits = ours(ids[None]).logits[0]
    expected = F.cross_entropy(logits[:-1], ids[1:]).item()
    assert sliding_window_perplexity(ours, ids, 32, 32).nll == pytest.approx(expected, rel=1e-6)


def test_perplexity_cli(hf_dir, tmp_path, capsys) -> None:
    text_file = tmp_path / "t.txt"
    text_file.write_text(TEXT[:150], encoding="utf-8")
    code, out, err = run_cli(
        ["perplexity", str(hf_dir), "--file", str(text_file), "--stride", "8", "--json"], capsys
    )
    assert code == 0, err
    result = json.loads(out)
    ours = load_causal_lm(hf_dir)
    ids = char_tokenizer().encode(TEXT[:150], add_special_tokens=False).ids
    assert result["perplexity"] == pytest.approx(sliding_window_perplexity(ours, ids, None, 8).perplexity)
    code, _, err = run_cli(["perplexity", str(hf_dir), "--file", str(tmp_path / "none.txt")], capsys)
    assert code == 2 and "no such file" in err and "Traceback" not in err
    code, _, err = run_cli(["perplexity", str(hf_dir), "--file", str(text_file), "--stride", "40"], capsys)
    assert code == 2 and "stride must be in [1, window length 32]" in err


def test_default_stride_follows_the_window_of_a_small_model(hf_dir) -> None:
    """No stride given: half the window (the model's context of 32 here), never a fixed 512."""
    from attnlab.generation.perplexity import window_and_stride

    ours = load_causal_lm(hf_dir)
    ids = torch.tensor(char_tokenizer().encode(TEXT[:150], add_special_tokens=False).ids)
    assert window_and_stride(32) == (32, 16) and window_and_stride(32, 8) == (8, 4)
    expected = sliding_window_perplexity(ours, ids, 32, 16)
    assert sliding_window_perplexity(ours, ids) == expected and expected.windows > 1


def test_window_and_stride_errors_name_the_options() -> None:
    from attnlab.generation.perplexity import window_and_stride

    with pytest.raises(ValueError, match=r"--max-length 40: window length must be in \[2, 32\]"):
        window_and_stride(32, 40)
    with pytest.raises(ValueError, match=r"--stride 20: stride must be in \[1, window length 16\]"):
        window_and_stride(32, 16, 20)


def test_perplexity_cli_defaults_fit_a_small_model_and_a_folder_is_named(hf_dir, tmp_path, capsys) -> None:
    text_file = tmp_path / "t.txt"
    text_file.write_text(TEXT[:150], encoding="utf-8")
    code, out, err = run_cli(["perplexity", str(hf_dir), "--file", str(text_file), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["stride"] == 16  # half the model's context of 32
    code, _, err = run_cli(["perplexity", str(hf_dir), "--file", str(tmp_path)], capsys)
    assert code == 2 and f"--file {tmp_path}: is a directory" in err
    argv = ["perplexity", str(hf_dir), "--file", str(text_file), "--max-length", "40"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "--max-length 40: window length must be in [2, 32]" in err


# --------------------------------------------------------------------------- generate


def test_generate_streams_what_the_api_returns(hf_dir, capsys) -> None:
    code, out, err = run_cli(["generate", str(hf_dir), "--prompt", "First", "--max-new-tokens", "12"], capsys)
    assert code == 0, err
    model, tok = load_causal_lm(hf_dir), char_tokenizer()
    ids = torch.tensor([tok.encode("First", add_special_tokens=False).ids])
    seq = generate(model, ids, max_new_tokens=12).sequences[0]
    assert out == "First" + tok.decode([t for t in seq if t != 0]) + "\n"


def test_generate_batch_json_and_stdin(hf_dir, capsys, monkeypatch) -> None:
    code, out, err = run_cli(
        ["generate", str(hf_dir), "--lines", "--json", "--max-new-tokens", "5", "--beams", "3"],
        capsys, stdin="First Citizen\nAll:\n", monkeypatch=monkeypatch,
    )  # fmt: skip
    assert code == 0, err
    rows = json.loads(out)
    assert [r["prompt"] for r in rows] == ["First Citizen", "All:"]
    model, tok = load_causal_lm(hf_dir), char_tokenizer()
    prompt = torch.tensor([tok.encode("All:", add_special_tokens=False).ids])
    alone = generate(model, prompt, max_new_tokens=5, num_beams=3)
    assert rows[1]["tokens"] == alone.sequences[0]


def test_generate_sampling_seed_and_stop_string(hf_dir, capsys) -> None:
    argv = ["generate", str(hf_dir), "--prompt", "A", "--sample", "--top-k", "10", "--seed", "3",
            "--max-new-tokens", "20", "--ignore-eos"]  # fmt: skip
    first = run_cli(argv, capsys)[1]
    assert run_cli(argv, capsys)[1] == first and len(first) == 1 + 20 + 1
    stop = first[5]  # a character the continuation contains
    code, out, _ = run_cli([*argv, "--stop", stop], capsys)
    assert code == 0 and out == first[: first.index(stop, 1)] + "\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--top-p", "1.5"], "argument --top-p: expected a number in (0, 1], got '1.5'"),
        (["--top-p", "0"], "argument --top-p: expected a number in (0, 1], got '0'"),
        (["--top-p", "nan"], "argument --top-p: expected a number in (0, 1], got 'nan'"),
        (["--top-k", "0"], "argument --top-k: expected a positive integer, got '0'"),
        (["--top-k", "-3"], "argument --top-k: expected a positive integer, got '-3'"),
        (["--temperature", "0"], "argument --temperature: expected a positive number, got '0'"),
        (["--temperature", "-1"], "argument --temperature: expected a positive number, got '-1'"),
        (["--max-new-tokens", "0"], "argument --max-new-tokens: expected a positive integer, got '0'"),
        (["--max-new-tokens", "x"], "argument --max-new-tokens: expected a positive integer, got 'x'"),
        (["--beams", "0"], "argument --beams: expected a positive integer, got '0'"),
        (["--repetition-penalty", "0"], "argument --repetition-penalty: expected a positive number"),
        (["--seed", "-1"], "argument --seed: expected an integer >= 0, got '-1'"),
        (["--length-penalty", "inf"], "argument --length-penalty: expected a finite number, got 'inf'"),
        (["--beams", "2", "--sample"], "sampling with beams is not supported"),
        (["--prompt", ""], "prompt 2 is empty"),
        (["--prompt", "x" * 40], "the prompt has 40 tokens but the model's context is 32 positions"),
        (["--prompt", "x" * 32], "the prompt has 32 tokens but the model's context is 32 positions"),
        (["--stop", ""], "--stop: expected a non-empty string, got ''"),
    ],
)
def test_generate_bad_input_is_a_message(hf_dir, capsys, extra: list[str], message: str) -> None:
    """Each bad value is one line naming the option and the range, exit 2 (argparse's or the command's)."""
    try:
        code, out, err = run_cli(["generate", str(hf_dir), "--prompt", "First", *extra], capsys)
    except SystemExit as e:  # rejected while parsing
        code, (out, err) = e.code, capsys.readouterr()
    assert code == 2 and message in err and "Traceback" not in err and out == ""


def test_generate_and_perplexity_errors_go_through_the_command_handler(hf_dir, tmp_path) -> None:
    """Their errors reach `attnlab.cli.main` (no local handler): ``--debug`` shows the traceback."""
    with pytest.raises(ValueError, match="--stop: expected a non-empty string"):
        main(["generate", str(hf_dir), "--prompt", "First", "--stop", "", "--debug"])
    with pytest.raises(FileNotFoundError, match="no such file"):
        main(["perplexity", str(hf_dir), "--file", str(tmp_path / "none.txt"), "--debug"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--stride", "0"], "argument --stride: expected a positive integer, got '0'"),
        (["--max-length", "-5"], "argument --max-length: expected a positive integer, got '-5'"),
        (["--max-tokens", "0"], "argument --max-tokens: expected a positive integer, got '0'"),
    ],
)
def test_perplexity_bad_options_are_a_message(hf_dir, tmp_path, capsys, extra, message) -> None:
    (tmp_path / "t.txt").write_text(TEXT, encoding="utf-8")
    with pytest.raises(SystemExit) as e:
        main(["perplexity", str(hf_dir), "--file", str(tmp_path / "t.txt"), *extra])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err


def test_truncate_prompt_warns(hf_dir, capsys) -> None:
    code, out, err = run_cli(
        ["generate", str(hf_dir), "--prompt", "x" * 40, "--truncate-prompt", "--max-new-tokens", "2"], capsys
    )
    assert code == 0 and "truncated to its last 31" in err and out.startswith("x" * 40)


def test_encoder_and_translation_directories_name_the_right_command(tmp_path, capsys) -> None:
    from attnlab.io import save
    from attnlab.models import Encoder, get_preset
    from attnlab.translation.config import transformer_tiny

    enc = tmp_path / "enc"
    save(Encoder.from_config(get_preset("bert-tiny")), enc)
    code, _, err = run_cli(["generate", str(enc), "--prompt", "hi"], capsys)
    assert code == 2 and "holds an encoder" in err and "attnlab fill-mask" in err
    (tmp_path / "mt").mkdir()
    transformer_tiny().save(tmp_path / "mt" / "config.json")
    code, _, err = run_cli(["perplexity", str(tmp_path / "mt"), "--file", str(enc / "config.json")], capsys)
    assert code == 2 and "attnlab translate" in err
    code, _, err = run_cli(["generate", str(tmp_path / "missing"), "--prompt", "hi"], capsys)
    assert code == 2 and "no such checkpoint directory" in err


def test_attnlab_gpt_directory_round_trip(tmp_path, capsys) -> None:
    torch.manual_seed(1)
    model = build_gpt(get_gpt_preset("gpt-char-tiny", vocab_size=len(CHARS))).eval()
    save_causal_lm(model, tmp_path / "m")
    save_tokenizer_json(char_tokenizer(), tmp_path / "m" / "tokenizer.json")
    back = load_causal_lm(tmp_path / "m")
    assert back.lm_head.weight is not back.embed.word.weight  # the preset's untied output projection
    for (name, a), (_, b) in zip(model.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name
    code, out, err = run_cli(
        ["generate", str(tmp_path / "m"), "--prompt", "ROMEO:", "--max-new-tokens", "8"], capsys
    )
    assert code == 0 and out.startswith("ROMEO:") and len(out) == len("ROMEO:") + 8 + 1, err


def test_generate_reads_one_prompt_from_stdin(hf_dir, capsys, monkeypatch) -> None:
    code, out, err = run_cli(
        ["generate", str(hf_dir), "--max-new-tokens", "6"], capsys, stdin="First\n", monkeypatch=monkeypatch
    )
    assert code == 0, err
    assert out == run_cli(["generate", str(hf_dir), "--prompt", "First", "--max-new-tokens", "6"], capsys)[1]
    code, _, err = run_cli(["generate", str(hf_dir)], capsys, stdin="", monkeypatch=monkeypatch)
    assert code == 2 and "prompt 1 is empty" in err


def test_generate_prompt_on_stdin_that_is_not_utf8_is_named(hf_dir, capsys, monkeypatch) -> None:
    """A Latin-1 prompt is an error naming standard input, the line and the byte, not a prompt with U+FFFD
    (the real stdin: Python decodes it with surrogateescape under a C.UTF-8 locale, so read its bytes)."""
    stdin = io.TextIOWrapper(io.BytesIO("First\ncaf\u00e9\n".encode("latin-1")), errors="surrogateescape")
    monkeypatch.setattr("sys.stdin", stdin)
    code, out, err = run_cli(["generate", str(hf_dir), "--max-new-tokens", "2"], capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    assert "standard input: not valid UTF-8 at line 2 (byte 9: invalid continuation byte)" in err


def test_gpt_dirs_load_generically_and_encoder_commands_name_generate(tmp_path, hf_dir, capsys) -> None:
    from attnlab.io import load
    from attnlab.io.checkpoint import read_checkpoint_config

    torch.manual_seed(2)
    model = build_gpt(get_gpt_preset("gpt-char-tiny", vocab_size=len(CHARS), num_layers=1)).eval()
    d = tmp_path / "gpt"
    save_causal_lm(model, d)
    save_tokenizer_json(char_tokenizer(), d / "tokenizer.json")
    arch, _, config, _ = read_checkpoint_config(d, allow_causal_lm=True)
    assert arch == "GPT" and config == model.config  # the config class follows the architecture
    back = load(d)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(back(ids).logits, model(ids).logits)
    for argv in (
        ["fill-mask", str(d), "a [MASK] b"],
        ["predict", "classify", str(d), "--text", "hi"],
        ["predict", "embed", str(d), "--text", "hi"],
        ["finetune", "--task", "sst2", "--data-dir", str(tmp_path), "--model", str(d)],
        ["fill-mask", str(hf_dir), "a [MASK] b"],  # HF GPT-2
    ):
        code, out, err = run_cli(argv, capsys)
        assert code == 2 and "causal language model" in err and "attnlab generate" in err, (argv, err)
        assert "Traceback" not in err
