"""Fine-tuned attnlab task models exported to HF transformers: for each task kind and each family, a tiny
model (H = 32, 2 layers) trained for 3 AdamW steps is saved both as an attnlab directory and with `save_hf`
(weights, tokenizer files, tokenizer_config.json, model card); ``transformers.pipeline(...)`` on the export
must give attnlab's pipeline's labels, with scores within 1e-4, on the same inputs (multiple choice, which
HF has no pipeline for: ``AutoModelForMultipleChoice`` logits), and the export reads back into attnlab with
identical outputs; the attnlab model directory itself passes the same HF checks (`attnlab.io.hf_layout`).
ELECTRA's and DistilBERT's pooled heads are exact through ``pooler_activation`` (gelu,
ReLU); a pooler whose activation the named family's head lacks is refused with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnlab.io import CheckpointError  # noqa: E402
from attnlab.io import load as load_model  # noqa: E402
from attnlab.io.hf_encoders import save_hf  # noqa: E402
from attnlab.io.hf_tasks import UnsupportedHeadError  # noqa: E402
from attnlab.models import (  # noqa: E402
    EncoderConfig,
    EncoderForMultipleChoice,
    EncoderForQuestionAnswering,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
)
from attnlab.tasks.finetune import save_model_dir  # noqa: E402
from attnlab.tasks.pipelines import pipeline  # noqa: E402
from attnlab.tokenizers import bert_wordpiece, train_tokenizer  # noqa: E402

SCORE_TOL = 1e-4
TEXTS = [
    "the cat sat on the mat in paris",
    "a dog ran to the river bank today",
    "john lives in london and works at the bank",
    "rain and snow fall from the cloud",
]
PAIRS = [(TEXTS[0], TEXTS[1]), (TEXTS[2], TEXTS[3])]
QUESTIONS = [("where does john live", TEXTS[2]), ("what falls from the cloud", TEXTS[3])]
SENTIMENT = ["negative", "neutral", "positive"]
TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "B-ORG"]
FAMILIES = ("bert", "roberta", "albert", "electra", "distilbert", "roberta-prelayernorm")
KINDS = ("classification", "regression", "token", "qa", "multiple_choice")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices on shared CPUs
    import transformers.pipelines  # noqa: F401  (a one-time import of several seconds, paid once here)

    yield
    torch.set_num_threads(threads)


def _corpus() -> list[str]:
    return [*TEXTS, *(q for q, _ in QUESTIONS)] * 20


@pytest.fixture(scope="module")
def tokenizers():
    """The tokenizer each family ships with: WordPiece (BERT, ELECTRA, DistilBERT), byte-level BPE
    (RoBERTa), Unigram (ALBERT)."""
    words = sorted({w for t in _corpus() for w in re.findall(r"\w+|[^\w\s]", t)})
    wordpiece = bert_wordpiece(
        {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    )
    return {
        "wordpiece": wordpiece,
        "byte_level_bpe": train_tokenizer("byte_level_bpe", iter(_corpus()), 330, show_progress=False),
        "unigram": train_tokenizer("unigram", iter(_corpus()), 90, lowercase=True, show_progress=False),
    }


def _setup(family: str, tokenizers) -> tuple[EncoderConfig, object]:
    """A tiny encoder of ``family`` and its tokenizer."""
    tok = tokenizers[{"roberta": "byte_level_bpe", "albert": "unigram"}.get(family, "wordpiece")]
    base = dict(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_layers=2,
        num_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    extra = {
        "bert": {},
        "roberta": dict(type_vocab_size=1, pad_token_id=1, position_offset=2, max_position_embeddings=66),
        "albert": dict(embedding_size=16, sharing="all", activation="gelu_tanh"),
        # HF's heads: ElectraClassificationHead hard-codes gelu (its SequenceSummary, for multiple choice,
        # writes the activation in summary_activation); DistilBERT's pre_classifier is followed by ReLU.
        "electra": dict(embedding_size=16, add_pooler=False, pooler_activation="gelu"),
        "distilbert": dict(type_vocab_size=0, add_pooler=False, pooler_activation="relu"),
        # attnlab's pre-LN BERT (the budget recipes' encoder: WordPiece, positions from 0)
        "roberta-prelayernorm": dict(norm_first=True),
    }[family]
    return EncoderConfig(**{**base, **extra}), tok


def _model(kind: str, config: EncoderConfig):
    if kind == "classification":
        return EncoderForSequenceClassification.from_config(config, 3, SENTIMENT)
    if kind == "regression":
        return EncoderForSequenceClassification.from_config(config, 1)
    if kind == "token":
        return EncoderForTokenClassification.from_config(config, len(TAGS), TAGS)
    if kind == "qa":
        return EncoderForQuestionAnswering.from_config(config)
    return EncoderForMultipleChoice.from_config(config)


def _pad(encodings, pad_id: int, with_types: bool) -> dict[str, torch.Tensor]:
    T = max(len(e.ids) for e in encodings)
    ids = torch.full((len(encodings), T), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    types = torch.zeros_like(ids)
    for i, e in enumerate(encodings):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        mask[i, : len(e.ids)] = 1
        types[i, : len(e.ids)] = torch.tensor(e.type_ids)
    batch = {"input_ids": ids, "attention_mask": mask}
    if with_types:
        batch["token_type_ids"] = types
    return batch


def _choices(tok, config: EncoderConfig) -> dict[str, torch.Tensor]:
    """(B=2, K=3, T) inputs: each context with three endings."""
    encs = [tok.encode(TEXTS[i], TEXTS[(i + k + 1) % 4]) for i in (0, 2) for k in range(3)]
    flat = _pad(encs, config.pad_token_id, config.type_vocab_size > 0)
    return {k: v.view(2, 3, -1) for k, v in flat.items()}


def _batch(kind: str, tok, config: EncoderConfig, g: torch.Generator) -> dict[str, torch.Tensor]:
    """A labelled batch for ``kind`` from the tokenizer's encodings."""
    if kind == "multiple_choice":
        return {**_choices(tok, config), "labels": torch.tensor([0, 2])}
    encs = [tok.encode(a, b) for a, b in PAIRS] + [tok.encode(t) for t in TEXTS]
    batch = _pad(encs, config.pad_token_id, config.type_vocab_size > 0)
    B, T = batch["input_ids"].shape
    if kind == "classification":
        batch["labels"] = torch.randint(0, 3, (B,), generator=g)
    elif kind == "regression":
        batch["labels"] = torch.rand(B, generator=g) * 5
    elif kind == "token":
        batch["labels"] = torch.randint(0, len(TAGS), (B, T), generator=g).masked_fill(
            batch["attention_mask"] == 0, -100
        )
    else:
        batch["start_positions"] = torch.randint(1, 6, (B,), generator=g)
        batch["end_positions"] = batch["start_positions"] + 1
    return batch


def _fine_tune(model, kind: str, tok, config: EncoderConfig, steps: int = 3):
    """A few optimizer steps (lr 3e-3, so the head moves well away from its initialisation)."""
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(**_batch(kind, tok, config, g)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def _export(family: str, kind: str, tokenizers, tmp_path: Path):
    torch.manual_seed(0)
    config, tok = _setup(family, tokenizers)
    model = _fine_tune(_model(kind, config), kind, tok, config)
    ours = save_model_dir(model, tok, tmp_path / "attnlab")
    theirs = save_hf(model, tmp_path / "hf", family=family, tokenizer=tok)
    return model, tok, config, ours, theirs


def _hf_pipeline(task: str, directory: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.pipeline(task, model=str(directory), device="cpu")


def _compare_classification(ours: Path, theirs: Path, regression: bool) -> None:
    mine = pipeline("text-classification", ours)
    hf = _hf_pipeline("text-classification", theirs)
    inputs = [*TEXTS, *({"text": a, "text_pair": b} for a, b in PAIRS)]
    hf_out = hf(inputs, top_k=None)
    my_out = mine([*TEXTS, *PAIRS])
    for got, want in zip(hf_out, my_out):
        if regression:
            assert len(got) == 1 and abs(got[0]["score"] - want["score"]) <= SCORE_TOL, (got, want)
            continue
        assert [x["label"] for x in got] == [x["label"] for x in want]
        assert set(x["label"] for x in got) == set(SENTIMENT)
        for a, b in zip(got, want):
            assert abs(a["score"] - b["score"]) <= SCORE_TOL, (got, want)


def _compare_tokens(ours: Path, theirs: Path) -> None:
    mine = pipeline("ner", ours)(TEXTS, aggregation="none")
    hf = _hf_pipeline("token-classification", theirs)(TEXTS, ignore_labels=[], aggregation_strategy="none")
    seen = set()
    for my_words, hf_tokens in zip(mine, hf):
        first = {t["start"]: t for t in hf_tokens}  # a word's first sub-token starts where the word does
        assert len(my_words) == len(TEXTS[0].split()) or my_words
        for w in my_words:
            t = first[w["start"]]
            assert t["entity"] == w["label"], (t, w)
            assert abs(float(t["score"]) - w["score"]) <= SCORE_TOL, (t, w)
            seen.add(w["label"])
    assert seen <= set(TAGS)


def _compare_qa(theirs: Path, model, tok, config) -> None:
    """HF 5 has no question-answering pipeline: AutoTokenizer + AutoModelForQuestionAnswering on the export
    give the same windows (ids, offsets) and the same start and end logits, so the same answers."""
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(theirs))
    auto = transformers.AutoModelForQuestionAnswering.from_pretrained(str(theirs)).eval()
    encs = [tok.encode(q, c) for q, c in QUESTIONS]
    hf_batch = hf_tok(
        [q for q, _ in QUESTIONS], [c for _, c in QUESTIONS], padding=True, return_offsets_mapping=True,
        return_tensors="pt",
    )  # fmt: skip
    batch = _pad(encs, config.pad_token_id, config.type_vocab_size > 0)
    offsets = hf_batch.pop("offset_mapping")
    if "token_type_ids" not in hf_batch:  # RoBERTa: one segment, its type ids all 0
        assert not batch.pop("token_type_ids", torch.zeros(1)).any()
    assert {k: v.tolist() for k, v in hf_batch.items()} == {k: v.tolist() for k, v in batch.items()}
    for e, o in zip(encs, offsets):
        for (s, t), (hs, ht), seq in zip(e.offsets, o.tolist(), e.sequence_ids):
            assert seq != 1 or (s, t) == (hs, ht)  # the passage's offsets, which answers are cut by
    with torch.no_grad():
        a, b = model(**batch), auto(**batch)
    real = batch["attention_mask"].bool()  # RoBERTa-style classes give padding a position of its own
    torch.testing.assert_close(a.start_logits[real], b.start_logits[real], atol=SCORE_TOL, rtol=0)
    torch.testing.assert_close(a.end_logits[real], b.end_logits[real], atol=SCORE_TOL, rtol=0)


def _compare_choices(theirs: Path, model, tok, config) -> None:
    auto = transformers.AutoModelForMultipleChoice.from_pretrained(str(theirs)).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(theirs))
    batch = _choices(tok, config)
    firsts = [TEXTS[i] for i in (0, 2) for _ in range(3)]
    seconds = [TEXTS[(i + k + 1) % 4] for i in (0, 2) for k in range(3)]
    hf_batch = hf_tok(firsts, seconds, padding=True, return_tensors="pt")
    assert hf_batch["input_ids"].view(2, 3, -1).tolist() == batch["input_ids"].tolist()
    with torch.no_grad():
        mine, theirs_logits = model(**batch).logits, auto(**batch).logits
    assert mine.argmax(-1).tolist() == theirs_logits.argmax(-1).tolist()
    torch.testing.assert_close(mine.softmax(-1), theirs_logits.softmax(-1), atol=SCORE_TOL, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_fine_tuned_export_matches_hf_pipeline(family: str, kind: str, tokenizers, tmp_path: Path) -> None:
    model, tok, config, ours, theirs = _export(family, kind, tokenizers, tmp_path)
    # HF reads both the export and the attnlab model directory itself (attnlab.io.hf_layout)
    for hf_dir in (theirs, ours):
        hf_config = json.loads((hf_dir / "config.json").read_text())
        assert hf_config["model_type"] == family
        if family == "electra" and kind == "multiple_choice":
            assert hf_config["summary_activation"] == "gelu"  # HF's own default, here the pooler's activation
        if kind == "classification":
            assert hf_config["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
            assert hf_config["label2id"] == {"negative": 0, "neutral": 1, "positive": 2}
            _compare_classification(ours, hf_dir, regression=False)
        elif kind == "regression":
            assert hf_config["problem_type"] == "regression"
            _compare_classification(ours, hf_dir, regression=True)
        elif kind == "token":
            assert list(hf_config["id2label"].values()) == TAGS
            _compare_tokens(ours, hf_dir)
        elif kind == "qa":
            _compare_qa(hf_dir, model, tok, config)
        else:
            _compare_choices(hf_dir, model, tok, config)
    # and back: attnlab reads the export as the same model
    back = load_model(theirs)
    assert type(back) is type(model)
    x = (
        _choices(tok, config)
        if kind == "multiple_choice"
        else _pad([tok.encode(t) for t in TEXTS], config.pad_token_id, config.type_vocab_size > 0)
    )
    assert back.config.pooler_activation == config.pooler_activation or not back.uses_pooler
    with torch.no_grad():
        a, b = model(**x), back(**x)
    field = "start_logits" if kind == "qa" else "logits"
    got, want = getattr(a, field), getattr(b, field)
    if kind in ("token", "qa"):  # per-token outputs: the real tokens' (see _compare_qa)
        real = x["attention_mask"].bool()
        got, want = got[real], want[real]
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    if kind in ("classification", "token"):
        assert back.options["labels"] == model.options["labels"]


def test_classifier_without_exact_family_head_takes_one_that_has_it(tokenizers, tmp_path: Path) -> None:
    """A tanh-pooled ELECTRA-shaped classifier (E != H): ELECTRA's HF head is gelu, so exporting it as
    ELECTRA is refused with the reason, but ALBERT's class holds the same post-LN encoder with its
    projection and a tanh pooler, so the export with no family picks it (with a warning) and HF's pipeline
    agrees; a tanh-pooled DistilBERT-shaped one (no segment embeddings) is refused as DistilBERT and taken by
    BERT's class, with one zero type row."""
    config, tok = _setup("electra", tokenizers)
    config = dataclasses.replace(config, pooler_activation="tanh")
    torch.manual_seed(0)
    model = _fine_tune(_model("classification", config), "classification", tok, config)
    save_model_dir(model, tok, tmp_path / "attnlab")
    with pytest.raises(UnsupportedHeadError, match="applies gelu to dense.* pooler applies tanh"):
        save_hf(model, tmp_path / "refused", family="electra", tokenizer=tok)
    assert not (tmp_path / "refused" / "model.safetensors").exists()
    with pytest.warns(UserWarning, match="exported as HF albert"):
        save_hf(model, tmp_path / "hf", tokenizer=tok)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "AlbertForSequenceClassification"
    ]
    _compare_classification(tmp_path / "attnlab", tmp_path / "hf", regression=False)
    config, tok = _setup("distilbert", tokenizers)
    config = dataclasses.replace(config, pooler_activation="tanh")
    for kind in ("classification", "multiple_choice"):
        refused = "applies relu to dense.* pooler applies tanh.* exactly as: bert"
        with pytest.raises(UnsupportedHeadError, match=refused):
            save_hf(_model(kind, config), tmp_path / "distil", family="distilbert", tokenizer=tok)
    # BERT's class holds it: its tanh pooler, and a zero type row for the missing segment embeddings
    torch.manual_seed(0)
    model = _fine_tune(_model("classification", config), "classification", tok, config)
    save_model_dir(model, tok, tmp_path / "distil-attnlab")
    with pytest.warns(UserWarning, match="exported as HF bert"):
        save_hf(model, tmp_path / "distil", tokenizer=tok)
    assert json.loads((tmp_path / "distil" / "config.json").read_text())["type_vocab_size"] == 1
    _compare_classification(tmp_path / "distil-attnlab", tmp_path / "distil", regression=False)


def test_pooler_activation_must_match_the_base_models_pooler(tokenizers, tmp_path: Path) -> None:
    """HF's BertModel pooler is tanh: a gelu-pooled encoder exports as a base model only without it."""
    config, tok = _setup("bert", tokenizers)
    model = EncoderForSequenceClassification.from_config(
        dataclasses.replace(config, pooler_activation="gelu")
    )
    with pytest.raises(UnsupportedHeadError, match="applies tanh to dense"):
        save_hf(model, tmp_path / "hf", family="bert", tokenizer=tok)
    with pytest.raises(CheckpointError, match="pooler_activation='gelu'.*pooler is tanh"):
        save_hf(model.encoder, tmp_path / "base", family="bert")
