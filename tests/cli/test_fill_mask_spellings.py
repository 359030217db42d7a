"""``[MASK]`` and ``<mask>`` are read as the model's own mask token by `attnlab fill-mask`, the fill-mask
pipeline and the server alike (one rule, `attnlab.tokenizers.mask_token`), and a text with neither says
which token the model has. The model here is RoBERTa-style: a byte-level BPE whose mask is ``<mask>``."""

from __future__ import annotations

import json
import random

import pytest
import torch

from attnlab.cli import main
from attnlab.io import save
from attnlab.models import EncoderConfig, EncoderForPreTraining
from attnlab.tasks.pipelines import pipeline
from attnlab.tokenizers.mask_token import MASK_SPELLINGS, mask_token_of, no_mask_message, with_model_mask
from attnlab.tokenizers.trainers import train_tokenizer

WORDS = "the a function module returns reads list string file error value class of for is and".split()


@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory):
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(12)) + "." for _ in range(200)]
    tokenizer = train_tokenizer("byte_level_bpe", iter(texts), 300, show_progress=False)
    assert tokenizer.token_to_id("[MASK]") is None and tokenizer.token_to_id("<mask>") is not None
    torch.manual_seed(0)
    config = EncoderConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2,
        intermediate_size=32, max_position_embeddings=64, add_pooler=False, type_vocab_size=1,
        pad_token_id=1, position_offset=2,
    )  # fmt: skip
    d = tmp_path_factory.mktemp("roberta") / "model"
    save(EncoderForPreTraining.from_config(config).eval(), d)
    tokenizer.save(d)
    return d


def test_the_rule():
    assert with_model_mask("a [MASK] b <mask>", "<mask>") == "a <mask> b <mask>"
    assert with_model_mask("a [MASK] b <mask>", "[MASK]") == "a [MASK] b [MASK]"
    assert with_model_mask("no mask", "<mask>") == "no mask"
    assert set(MASK_SPELLINGS) == {"[MASK]", "<mask>"}
    assert "<mask>" in no_mask_message("<mask>") and "[MASK]" in no_mask_message("<mask>")


def _cli_predictions(capsys, d, text: str) -> list:
    assert main(["fill-mask", str(d), text, "--top-k", "4", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["masks"]


def test_cli_reads_bert_spelling_as_roberta_mask(roberta_dir, capsys):
    own = _cli_predictions(capsys, roberta_dir, "the function <mask> a list.")
    alias = _cli_predictions(capsys, roberta_dir, "the function [MASK] a list.")
    assert len(own) == 1 and len(own[0]) == 4
    assert alias == own


def test_pipeline_reads_bert_spelling_as_roberta_mask(roberta_dir, capsys):
    pipe = pipeline("fill-mask", roberta_dir)
    assert pipe.mask_token == "<mask>"
    own = pipe("the function <mask> a list.", top_k=4)
    alias = pipe("the function [MASK] a list.", top_k=4)
    assert [(p["token_id"], p["score"]) for p in alias] == [(p["token_id"], p["score"]) for p in own]
    # the CLI and the pipeline give the same tokens and scores for the same text
    cli = _cli_predictions(capsys, roberta_dir, "the function [MASK] a list.")[0]
    assert [p["id"] for p in cli] == [p["token_id"] for p in alias]
    assert [p["score"] for p in cli] == pytest.approx([p["score"] for p in alias], rel=1e-5)
    # several masks, mixed spellings
    two = pipe("the [MASK] reads a <mask>.", top_k=2)
    assert len(two) == 2 and all(len(options) == 2 for options in two)


def test_text_without_a_mask_says_which_token_the_model_has(roberta_dir, capsys):
    assert main(["fill-mask", str(roberta_dir), "no mask here"]) == 2
    err = capsys.readouterr().err
    assert "this model's mask token is <mask>" in err and "[MASK] and <mask> are both read as it" in err
    assert err.splitlines()[0].startswith("attnlab fill-mask: error: no <mask> in the text")
    with pytest.raises(ValueError, match="this model's mask token is <mask>"):
        pipeline("fill-mask", roberta_dir)("no mask here")


def test_mask_token_of_prefers_the_vocabularys_own(roberta_dir):
    from attnlab.tokenizers import load_tokenizer

    token, i = mask_token_of(load_tokenizer(roberta_dir))
    assert token == "<mask>" and i == load_tokenizer(roberta_dir).token_to_id("<mask>")
