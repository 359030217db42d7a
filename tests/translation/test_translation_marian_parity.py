"""Parity with HF transformers' MarianMTModel (the reference, test-only) on identical tiny random weights:
identical logits, and identical greedy and beam-search outputs for the same settings."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.translation.decoding import beam_search, greedy_search  # noqa: E402
from attnlab.translation.marian import (  # noqa: E402
    config_from_marian,
    state_dict_from_marian,
    state_dict_to_marian,
)
from attnlab.translation.model import build_model  # noqa: E402

PAD, EOS, V = 0, 1, 60
MAX_NEW = 12


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_marian_config(activation: str = "relu") -> transformers.MarianConfig:
    # Marian's quirks pinned: sinusoids concatenated (its only layout), scale_embedding on (default off),
    # decoder starts from pad, relu/gelu rather than the default swish, no forced EOS at max length.
    return transformers.MarianConfig(
        vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function=activation,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=64,
        scale_embedding=True, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD,
        forced_eos_token_id=None, bos_token_id=None,
    )  # fmt: skip


def perturb(model: torch.nn.Module) -> None:
    """Biases and LayerNorm gains away from 0 and 1, so that a wrong mapping of either shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif "norm.weight" in name:
                p.normal_(1.0, 0.3)


def pair(seed: int, activation: str = "relu"):
    """(attnlab model, MarianMTModel) with the same weights: attnlab's init, perturbed so that biases and
    LayerNorm gains are not trivial and EOS is likely enough to end some hypotheses."""
    torch.manual_seed(seed)
    hc = tiny_marian_config(activation)
    cfg = config_from_marian(hc.to_dict())
    ours = build_model(cfg).eval()
    perturb(ours)
    with torch.no_grad():
        ours.src_embed.word.weight[EOS] *= 2.0
    hf = transformers.MarianMTModel(hc).eval()
    result = hf.load_state_dict(state_dict_to_marian(ours.state_dict(), cfg), strict=False)
    # Only Marian's fixed sinusoid tables are not copied: they must equal ours (checked by the logits).
    assert sorted(result.missing_keys) == [
        "model.decoder.embed_positions.weight",
        "model.encoder.embed_positions.weight",
    ]
    assert not result.unexpected_keys
    return ours, hf


def batch(seed: int):
    g = torch.Generator().manual_seed(100 + seed)
    ids = torch.randint(2, V, (4, 7), generator=g)
    mask = torch.ones_like(ids)
    ids[1, 5:], mask[1, 5:] = PAD, 0  # one padded source
    ids[3, 3:], mask[3, 3:] = PAD, 0
    return ids, mask


def hf_tokens(sequences: torch.Tensor) -> list[list[int]]:
    """HF output rows -> generated ids without the start token, cut before the first EOS."""
    out = []
    for row in sequences[:, 1:].tolist():
        out.append(row[: row.index(EOS)] if EOS in row else row)
    return out


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_logits_identical(activation: str) -> None:
    ours, hf = pair(0, activation)
    ids, mask = batch(0)
    dec = torch.randint(2, V, (4, 6), generator=torch.Generator().manual_seed(7))
    dec[:, 0] = PAD  # Marian's decoder start
    with torch.no_grad():
        a = ours(ids, mask, decoder_input_ids=dec).logits
        b = hf(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_import_from_marian_round_trip() -> None:
    ours, hf = pair(1)
    cfg = ours.config
    fresh = build_model(cfg).eval()
    fresh.load_state_dict(state_dict_from_marian(hf.state_dict(), cfg))
    assert fresh.generator.weight is fresh.src_embed.word.weight is fresh.tgt_embed.word.weight
    for name, tensor in ours.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[name], tensor, rtol=0, atol=0, msg=name)


def test_nonzero_final_logits_bias_rejected() -> None:
    ours, hf = pair(0)
    state = hf.state_dict()
    state["final_logits_bias"] = torch.ones_like(state["final_logits_bias"])
    with pytest.raises(ValueError, match="final_logits_bias"):
        state_dict_from_marian(state, ours.config)


def test_unsupported_activation_named() -> None:
    with pytest.raises(ValueError, match="activation_function"):
        config_from_marian(tiny_marian_config("swish").to_dict())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_identical(seed: int) -> None:
    ours, hf = pair(seed)
    ids, mask = batch(seed)
    mine = greedy_search(ours, ids, mask, max_length_offset=100, max_length=MAX_NEW)
    with torch.no_grad():
        ref = hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW, num_beams=1, do_sample=False
        )
    assert [h.tokens for h in mine] == hf_tokens(ref)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beam", [2, 4])
def test_beam_identical_without_length_penalty(seed: int, beam: int) -> None:
    # alpha = 0 (no normalisation): HF's stopping heuristic and ours are then the same exact rule.
    ours, hf = pair(seed)
    ids, mask = batch(seed)
    mine = beam_search(ours, ids, mask, beam_size=beam, alpha=0.0, max_length_offset=100, max_length=MAX_NEW)
    with torch.no_grad():
        ref = hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW, num_beams=beam, do_sample=False,
            length_penalty=0.0, early_stopping=False,
        )  # fmt: skip
    assert [h.tokens for h in mine] == hf_tokens(ref)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_identical_with_power_length_penalty(seed: int) -> None:
    # HF normalises by length ** alpha; with early_stopping="never" it bounds live hypotheses at the maximum
    # length, as we always do.
    ours, hf = pair(seed)
    ids, mask = batch(seed)
    mine = beam_search(
        ours, ids, mask, beam_size=3, alpha=1.0, length_penalty_style="power", max_length_offset=100,
        max_length=MAX_NEW,
    )  # fmt: skip
    with torch.no_grad():
        ref = hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW, num_beams=3, do_sample=False,
            length_penalty=1.0, early_stopping="never", return_dict_in_generate=True, output_scores=True,
        )  # fmt: skip
    assert [h.tokens for h in mine] == hf_tokens(ref.sequences)
    torch.testing.assert_close(
        torch.tensor([h.score for h in mine]), ref.sequences_scores.float(), rtol=1e-4, atol=1e-4
    )


def test_setup_is_not_trivial() -> None:
    """The parity cases above exercise EOS inside the limit and beams that disagree with greedy."""
    ended, differs = 0, 0
    for seed in range(3):
        ours, _ = pair(seed)
        ids, mask = batch(seed)
        greedy = greedy_search(ours, ids, mask, max_length_offset=100, max_length=MAX_NEW)
        beams = beam_search(
            ours, ids, mask, beam_size=4, alpha=0.0, max_length_offset=100, max_length=MAX_NEW
        )
        ended += sum(h.finished for h in greedy + beams)
        differs += sum(g.tokens != b.tokens for g, b in zip(greedy, beams))
    assert ended >= 2 and differs >= 2


# ------------------------------------------------------------------ attnlab directories in Marian's layout


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
def test_translation_directory_loads_in_transformers(layout: str, tmp_path) -> None:
    """What translate-train writes loads as HF's MarianMTModel and tokenizer (attnlab.translation.hf_layout):
    the paper's interleaved sinusoids through a reordering of the features; the same logits within 1e-5,
    the same source ids (``</s>`` appended), the same greedy translation, and attnlab reads it back bit for
    bit. A pre-LN model, which Marian cannot hold, keeps attnlab's layout."""
    import dataclasses
    import json

    from attnlab.io import load, save
    from attnlab.translation.config import Seq2SeqConfig
    from attnlab.translation.data import encode_text, train_joint_bpe

    texts = [
        "a man is riding a horse .",
        "ein Mann reitet ein Pferd .",
        "two dogs play .",
        "zwei Hunde .",
    ] * 20
    tok = train_joint_bpe(texts, 300)
    cfg = Seq2SeqConfig(vocab_size=tok.vocab_size, num_layers=2, d_model=32, d_ff=48, num_heads=4,
                        max_positions=64, dropout=0.0, sinusoidal_layout=layout)  # fmt: skip
    torch.manual_seed(0)
    ours = build_model(cfg).eval()
    perturb(ours)
    save(ours, tmp_path / "m", tokenizer=tok)
    raw = json.loads((tmp_path / "m" / "config.json").read_text())
    assert raw["model_type"] == "marian" and raw["architecture"] == "Seq2Seq"
    back = load(tmp_path / "m")
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())

    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "m").eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    sentences = ["a man is riding", "two dogs play ."]
    sources = encode_text(tok, sentences)  # attnlab's own encoder inputs: ids + </s>
    assert hf_tok(sentences)["input_ids"] == sources
    src = torch.tensor([sources[0]])
    dec = torch.tensor([[cfg.start_token_id, 7, 9, 11]])
    with torch.no_grad():
        want = ours(input_ids=src, decoder_input_ids=dec).logits
        torch.testing.assert_close(hf(input_ids=src, decoder_input_ids=dec).logits, want, rtol=0, atol=1e-5)
        theirs = hf.generate(src, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW)
    mine = greedy_search(ours, src, max_length_offset=100, max_length=MAX_NEW)
    assert [h.tokens for h in mine] == hf_tokens(theirs)

    # HF loads and saves it again: read as the MarianMT checkpoint it now is, the same translations
    hf.save_pretrained(tmp_path / "resaved")
    hf_tok.save_pretrained(tmp_path / "resaved")
    again = load(tmp_path / "resaved")
    assert again.config.sinusoidal_layout == "concatenated"  # Marian's own feature order
    assert [h.tokens for h in greedy_search(again, src, max_length_offset=100, max_length=MAX_NEW)] == [
        h.tokens for h in mine
    ]
    # an encoder command given a translation directory says what it holds
    from attnlab.io import CheckpointError

    with pytest.raises(CheckpointError, match="holds a translation encoder-decoder"):
        load(tmp_path / "m", expect="bert")
    assert isinstance(load(tmp_path / "m"), type(ours))  # io.load itself reads every family

    pre_ln = build_model(dataclasses.replace(cfg, norm_first=True))
    save(pre_ln, tmp_path / "pre", tokenizer=tok)
    assert "architecture" not in json.loads((tmp_path / "pre" / "config.json").read_text())
