"""attnlab pretrain --recipe elmo and attnlab embed, end to end on a tiny generated corpus; bad input."""

from __future__ import annotations

import json
import random

import pytest
import torch

from attnlab.cli import main
from attnlab.pretraining.elmo import WordVocab, split_words

WORDS = "the bank river money deposit water fish loan account flows shore cash".split()


def write_corpus(path, documents=12, seed=0):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(documents):
            for _ in range(15):
                f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + " .\n")
            f.write("\n")
    return path


def test_split_words():
    assert split_words("Don't stop-gap, 3.5 km!") == ["Don't", "stop-gap", ",", "3", ".", "5", "km", "!"]
    assert split_words("   ") == []


def test_vocab_build_order_and_specials():
    vocab = WordVocab.build([["b", "a", "b"], ["c", "b", "a"]], max_size=5)
    assert vocab.words == ["<S>", "</S>", "<UNK>", "b", "a"]
    assert vocab.ids(["a", "zzz"]) == [4, 2]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("elmo")
    corpus = write_corpus(root / "corpus.txt")
    out = root / "run"
    args = ["pretrain", "--recipe", "elmo", "--corpus", str(corpus), "--preset", "elmo-tiny",
            "--max-steps", "6", "--batch-size", "8", "--output", str(out), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    return root, out, args


def test_pretrain_writes_model_and_prints_perplexity(trained, capsys):
    _, out, _ = trained
    for name in ("model/config.json", "model/model.safetensors", "model/vocab.txt", "vocab.txt", "train"):
        assert (out / name).exists(), name
    config = json.loads((out / "model" / "config.json").read_text())
    assert (
        config["architecture"] == "ElmoBiLM" and config["config"]["vocab_size"] == 16
    )  # 13 words + 3 specials


def test_pretrain_resume_continues(trained, capsys):
    _, out, args = trained
    args = [a if a != "6" else "10" for a in args]
    assert main(args) == 2  # an earlier run is there: refused without --resume or --overwrite
    assert main([*args, "--resume"]) == 0
    assert "trained 10 steps" in capsys.readouterr().out
    words = (out / "vocab.txt").read_text()
    (out / "vocab.txt").write_text("".join(line + "\n" for line in words.splitlines()[:10]))
    try:
        assert main([*[a if a != "10" else "12" for a in args], "--resume"]) == 2
        assert "vocab.txt: 10 words, but this run's softmax has vocab_size=16" in capsys.readouterr().err
    finally:
        (out / "vocab.txt").write_text(words)


def test_embed_layers_mix_and_bad_input(trained, capsys):
    _, out, _ = trained
    model = str(out / "model")
    capsys.readouterr()
    assert main(["embed", "--model", model, "--text", "the bank river .", "--layer", "all"]) == 0
    record = json.loads(capsys.readouterr().out.splitlines()[0])
    assert record["tokens"] == ["the", "bank", "river", "."]
    assert len(record["layers"]) == 3 and len(record["layers"][2]) == 4 and len(record["layers"][2][0]) == 32
    assert main(["embed", "--model", model, "--text", "x" * 60, "--layer", "mix"]) == 0
    captured = capsys.readouterr()
    assert "truncated" in captured.err and len(json.loads(captured.out)["vectors"][0]) == 32
    two = ["embed", "--model", model, "--text", "the bank .", "--text", "the bank ."]
    assert main(two) == 0
    alone = [json.loads(line)["vectors"] for line in capsys.readouterr().out.splitlines()]
    # stateless: the same sentence, the same vectors (printed to 5 decimals; two rows of one batch may round
    # a last digit apart when the intra-op threads split the reductions differently)
    close = lambda a, b: torch.allclose(torch.tensor(a), torch.tensor(b), atol=2e-5, rtol=0)  # noqa: E731
    assert close(alone[0], alone[1])
    assert main([*two, "--stateful"]) == 0
    carried = [json.loads(line)["vectors"] for line in capsys.readouterr().out.splitlines()]
    assert close(carried[0], alone[0]) and not close(carried[1], alone[1])  # the second continues
    assert main(["embed", "--model", model, "--text", "a", "--text", " "]) == 2
    assert "--text 2: empty sentence" in capsys.readouterr().err
    assert main(["embed", "--model", model, "--text", "a", "--layer", "7"]) == 2
    assert main(["embed", "--model", model, "--text", "a", "--mix-weights", "1,2"]) == 2
    assert "expected 3 numbers" in capsys.readouterr().err


def test_pretrain_bad_input(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "c.txt", documents=2)
    base = ["pretrain", "--recipe", "elmo", "--preset", "elmo-tiny", "--max-steps", "2", "--no-progress"]
    assert main([*base, "--corpus", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "a")]) == 2
    assert "missing.txt: no such corpus file" in capsys.readouterr().err
    assert (
        main([*base, "--corpus", str(corpus), "--output", str(tmp_path / "b"), "--set", "model.bogus=1"]) == 2
    )
    assert "unknown ElmoConfig field(s) bogus" in capsys.readouterr().err
    (tmp_path / "empty.txt").write_text("\n\n")
    assert main([*base, "--corpus", str(tmp_path / "empty.txt"), "--output", str(tmp_path / "c")]) == 2


def test_vocab_that_does_not_fit_the_softmax(trained, tmp_path, capsys):
    import shutil

    _, out, _ = trained
    copy = tmp_path / "model"
    shutil.copytree(out / "model", copy)
    (
        copy / "manifest.json"
    ).unlink()  # a hand-edited directory without its manifest: the count still catches it
    (copy / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nbank\n")
    assert main(["embed", "--model", str(copy), "--text", "the bank"]) == 2
    err = capsys.readouterr().err
    assert "vocab.txt: 4 lines, but the softmax has vocab_size=16" in err
