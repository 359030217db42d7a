"""A byte-level BPE masked LM (RoBERTa's ``<mask>``, ``Ġ`` pieces) as a new user meets it: the server reads
``[MASK]`` as the model's mask token and says which it is, and token lists and attention labels show each
token's text (``decode`` of that token alone), not the vocabulary's byte-level pieces."""

from __future__ import annotations

import pytest
import torch

from attnlab.models import EncoderForPreTraining, get_preset
from attnlab.tasks.attention import SPACE_MARK, attention_weights, token_labels, token_text
from attnlab.tasks.finetune import save_model_dir
from attnlab.tokenizers import train_tokenizer

TEXTS = ["The capital of France is Paris, a city on the Seine.", "Zoë reads a café menu in Paris."] * 30


@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory):
    tok = train_tokenizer("byte_level_bpe", iter(TEXTS), vocab_size=300, show_progress=False)
    assert tok.token_to_id("<mask>") is not None and tok.token_to_id("[MASK]") is None
    torch.manual_seed(0)
    cfg = get_preset("bert-tiny", vocab_size=tok.get_vocab_size(), max_position_embeddings=40)
    return save_model_dir(EncoderForPreTraining.from_config(cfg), tok, tmp_path_factory.mktemp("rb") / "m")


def test_token_text_is_what_decode_gives_and_labels_show_the_space(roberta_dir) -> None:
    from attnlab.tokenizers import load_tokenizer

    tok = load_tokenizer(roberta_dir)
    enc = tok.encode("Zoë reads")
    assert any(piece.startswith("Ġ") for piece in enc.tokens)  # the vocabulary's pieces carry markers
    texts = [token_text(tok, i) for i in enc.ids]
    assert texts == [tok.decode([i], skip_special_tokens=False) for i in enc.ids]
    assert "".join(texts[1:-1]) == "Zoë reads" and not any("Ġ" in t or "Ã" in t for t in texts)
    labels = token_labels(tok, enc.ids)
    assert labels[0] == "<s>" and any(label.startswith(SPACE_MARK) for label in labels)
    assert [label.replace(SPACE_MARK, " ") for label in labels] == texts


def test_attention_labels_are_token_texts(roberta_dir, tmp_path) -> None:
    from attnlab.tasks.attention import load_attention_model
    from attnlab.viz.attention_html import attention_page

    model, tok = load_attention_model(roberta_dir)
    data = attention_weights(model, tok, "Zoë reads a café menu")
    assert data["pieces"] == tok.encode("Zoë reads a café menu").tokens
    assert not any("Ġ" in t for t in data["tokens"]) and f"{SPACE_MARK}a" in data["tokens"]
    assert "Ġ" not in attention_page(data, title="t")


def test_server_reads_either_mask_spelling_and_says_which_is_the_models(roberta_dir) -> None:
    pytest.importorskip("fastapi")
    from attnlab.serving import schemas
    from attnlab.serving.service import RequestError, load_service

    service = load_service(roberta_dir)
    info = service.info()
    assert info["mask_token"] == "<mask>" and info["mask_token_aliases"] == ["[MASK]"]
    answers = []
    for text in ("The capital of France is [MASK].", "The capital of France is <mask>."):
        prepared = service.prepare("fill-mask", schemas.FillMaskRequest(text=text, top_k=3))
        (result,) = service.run_batch(prepared.key, [prepared])
        answers.append(service.finish(prepared, result)["predictions"])
    assert answers[0] == answers[1] and len(answers[0]) == 3
    for candidate in answers[0]:
        assert candidate["token_str"] == token_text(service.counter, candidate["token_id"])
        assert "Ġ" not in candidate["token_str"]
    with pytest.raises(RequestError, match="this model's mask token is <mask>"):
        service.prepare("fill-mask", schemas.FillMaskRequest(text="no mask here"))
    attention = service.attention("Zoë reads")
    assert not any("Ġ" in t for t in attention["tokens"])
