"""Attention weights for pictures (attnlab.tasks.attention) against HF transformers' ``output_attentions`` on
identical weights (BERT with a sentence pair, GPT-2's causal attention), and ``attnlab attention``'s files:
the PNG grid, the standalone HTML page (data and script inlined, no external script) and the JSON; bad input
is one error line, exit 2."""

from __future__ import annotations

import json
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.cli import main  # noqa: E402
from attnlab.models import Encoder, EncoderForSequenceClassification, get_preset  # noqa: E402
from attnlab.tasks.attention import attention_weights, load_attention_model  # noqa: E402
from attnlab.tasks.finetune import save_model_dir  # noqa: E402
from attnlab.tokenizers import bert_wordpiece  # noqa: E402

WORDS = "the cat sat on mat it was tired a dog ran home < / script > & today".split()
VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _noisy(model: torch.nn.Module) -> None:
    """Initial weights plus noise everywhere: biases and LayerNorms become non-trivial, attention peaked."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=24, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation="eager",
    )  # fmt: skip
    hf = transformers.BertModel(config).eval()
    _noisy(hf)
    d = tmp_path_factory.mktemp("attn") / "hf-bert"
    hf.save_pretrained(d)
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return d, hf


def test_encoder_weights_equal_hf_output_attentions(bert_dir):
    d, hf = bert_dir
    model, tokenizer = load_attention_model(d)
    data = attention_weights(model, tokenizer, "the cat sat on the mat", text_pair="it was tired")
    enc = tokenizer.encode("the cat sat on the mat", "it was tired")
    assert data["tokens"] == enc.tokens and data["tokens"][0] == "[CLS]" and enc.type_ids[-1] == 1
    with torch.no_grad():
        ref = hf(
            torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids]), output_attentions=True
        ).attentions
    ours = torch.tensor(data["attentions"])  # (L, N, T, T)
    assert (data["layers"], data["heads"]) == (2, 4) and ours.shape == (2, 4, len(enc.ids), len(enc.ids))
    diff = (ours - torch.stack([a[0] for a in ref])).abs().max().item()
    assert diff <= ATOL, diff
    assert torch.allclose(ours.sum(-1), torch.ones(2, 4, len(enc.ids)), atol=1e-5)
    assert ours.max() > 0.3  # noisy weights: peaked rows, so the comparison is not of near-uniform values


def test_gpt2_weights_equal_hf_and_are_causal(tmp_path):
    from attnlab.io.hf_gpt2 import load_gpt2

    torch.manual_seed(1)
    config = transformers.GPT2Config(
        vocab_size=len(VOCAB), n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=2, eos_token_id=3, attn_implementation="eager",
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(config).eval()
    _noisy(hf)
    hf.save_pretrained(tmp_path)
    model = load_gpt2(tmp_path)
    tokenizer = bert_wordpiece(VOCAB)  # only its ids matter here
    data = attention_weights(model, tokenizer, "a dog ran home today")
    ids = tokenizer.encode("a dog ran home today").ids
    with torch.no_grad():
        ref = hf(torch.tensor([ids]), output_attentions=True).attentions
    ours = torch.tensor(data["attentions"])
    assert (ours - torch.stack([a[0] for a in ref])).abs().max().item() <= ATOL
    assert torch.all(ours.triu(diagonal=1) == 0)  # nothing attends to a later token
    with pytest.raises(ValueError, match="text_pair needs an encoder"):
        attention_weights(model, tokenizer, "a dog", text_pair="ran home")


def test_bad_inputs_are_clear_errors(bert_dir):
    d, _ = bert_dir
    model, tokenizer = load_attention_model(d)
    with pytest.raises(ValueError, match="text is empty"):
        attention_weights(model, tokenizer, "   ")
    with pytest.raises(ValueError, match="at most 24"):
        attention_weights(model, tokenizer, "the cat " * 20)
    with pytest.raises(ValueError, match="not an encoder"):
        attention_weights(torch.nn.Linear(2, 2), tokenizer, "the cat")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(2)
    cfg = get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=32)
    model = EncoderForSequenceClassification.from_config(cfg, 2, ["neg", "pos"])
    return save_model_dir(model, bert_wordpiece(VOCAB), tmp_path_factory.mktemp("attn") / "cls")


def test_cli_writes_png_html_json(model_dir, tmp_path, capsys):
    png, page, js = tmp_path / "a.png", tmp_path / "a.html", tmp_path / "a.json"
    text = "the cat sat < / script > & today"
    rc = main(["attention", str(model_dir), "--text", text, "--text-pair", "a dog",
               "--png", str(png), "--html", str(page), "--json", str(js)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    data = json.loads(js.read_text())
    model, tokenizer = load_attention_model(model_dir)
    expected = attention_weights(model, tokenizer, text, "a dog")
    assert data["tokens"] == expected["tokens"] and "<" in data["tokens"]
    assert torch.allclose(torch.tensor(data["attentions"]), torch.tensor(expected["attentions"]), atol=1e-5)

    html = page.read_text(encoding="utf-8")
    assert "window.AttnView" in html and "renderModelView" in html  # the script is inlined
    assert not re.search(r"<script[^>]*\bsrc=", html) and "<link" not in html  # nothing to fetch
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html)  # only the SVG namespace name
    # the data is in the page, and a token "<" / "/" "script" cannot end the data's <script> element
    blob = re.search(r'<script type="application/json" id="attn-data">(.*?)</script>', html, re.S).group(1)
    assert json.loads(blob)["tokens"] == data["tokens"]
    assert len(re.findall(r"</script>", html, re.I)) == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--text", "the cat"], "nothing to write"),
        (["--text", "  ", "--png", "{tmp}/a.png"], "--text is empty"),
        (["--text", "the cat " * 40, "--png", "{tmp}/a.png"], "at most 32"),
        (["--text", "the cat " * 10, "--png", "{tmp}/a.png", "--max-tokens", "8"], "over --max-tokens 8"),
        (["--text", "the cat", "--png", "{tmp}/no/such/dir/a.png"], "does not exist"),
    ],
)
def test_cli_bad_input(model_dir, tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["attention", str(model_dir), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab attention: error:") and message in err, err
    assert "Traceback" not in err


def test_cli_refuses_a_model_dir_that_is_not_an_encoder(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}), encoding="utf-8")
    assert main(["attention", str(tmp_path), "--text", "the cat", "--png", str(tmp_path / "a.png")]) == 2
    err = capsys.readouterr().err
    assert "attnlab attention: error:" in err and "config.json" in err, err
    missing = str(tmp_path / "missing")
    assert main(["attention", missing, "--text", "x", "--png", str(tmp_path / "a.png")]) == 2
    assert "expected a model directory" in capsys.readouterr().err


def test_encoder_base_model_works_too():
    torch.manual_seed(3)
    enc = Encoder(get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=32))
    data = attention_weights(enc, bert_wordpiece(VOCAB), "the cat")
    assert data["tokens"] == ["[CLS]", "the", "cat", "[SEP]"] and data["layers"] == 2
