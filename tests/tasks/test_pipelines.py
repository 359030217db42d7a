"""Pipelines on tiny random models saved as attnlab and HF directories: outputs are well formed (answers are
exact spans of the passage, entities consistent with the text, scores are probabilities), batching does
not change them, and the lecture's examples run mechanically (NUS and precipitation passages, "bank")."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from attnlab.cli import main
from attnlab.io.hf_encoders import save_hf
from attnlab.models import (
    EncoderForPreTraining,
    EncoderForQuestionAnswering,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
    get_preset,
)
from attnlab.tasks.finetune import save_model_dir
from attnlab.tasks.pipelines import EmbeddingPipeline, group_entities, pipeline
from attnlab.tokenizers import bert_wordpiece

NUS = (
    "The National University of Singapore (NUS) is the national research university of Singapore. "
    "Founded in 1905 as the Straits Settlements and Federated Malay States Government Medical School, NUS is "
    "the oldest higher education institution in Singapore. It is consistently ranked within the top 20 "
    "universities in the world and is considered to be the best university in the Asia-Pacific. NUS is a "
    "comprehensive research university, offering a wide range of disciplines, including the sciences, "
    "medicine and dentistry, design and environment, law, arts and social sciences, engineering, business, "
    "computing and music at both the undergraduate and postgraduate levels."
)
PRECIPITATION = (
    "In meteorology, precipitation is any product of the condensation of atmospheric water vapor that falls "
    "under gravity. The main forms of precipitation include drizzle, rain, sleet, snow, graupel and hail... "
    "Precipitation forms as smaller droplets coalesce via collision with other rain drops or ice crystals "
    'within a cloud. Short, intense periods of rain in scattered locations are called "showers".'
)
QUESTIONS = [
    ("What can we learn in NUS?", NUS),
    ("What does NUS mean?", NUS),
    ("What causes precipitation to fall?", PRECIPITATION),
    (
        "What is another main form of precipitation besides drizzle, rain, snow, sleet and hail?",
        PRECIPITATION,
    ),
    ("Where do water droplets collide with ice crystals to form precipitation?", PRECIPITATION),
]
BANK = [
    "It is safest to deposit your money in the bank.",
    "All the animals lined up along the river bank.",
    "Today, blood banks collect blood.",
]
LABELS = ["O", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]


def _vocab() -> dict[str, int]:
    text = " ".join([NUS, PRECIPITATION, *BANK, *(q for q, _ in QUESTIONS)]).lower()
    words = sorted(set(re.findall(r"\w+|[^\w\s]", text)) - {"banks"}) + ["##s"]  # "banks" = bank ##s
    return {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices on shared CPUs
    torch.manual_seed(0)
    vocab = _vocab()
    tok = bert_wordpiece(vocab)
    cfg = get_preset("bert-tiny", vocab_size=len(vocab), max_position_embeddings=64)
    root = tmp_path_factory.mktemp("pipes")
    out = {
        "mlm": save_model_dir(EncoderForPreTraining.from_config(cfg), tok, root / "mlm"),
        "qa": save_model_dir(EncoderForQuestionAnswering.from_config(cfg), tok, root / "qa"),
        "ner": save_model_dir(EncoderForTokenClassification.from_config(cfg, 5, LABELS), tok, root / "ner"),
        "cls": save_model_dir(
            EncoderForSequenceClassification.from_config(cfg, 3, ["neg", "neu", "pos"]), tok, root / "cls"
        ),
        "reg": save_model_dir(EncoderForSequenceClassification.from_config(cfg, 1), tok, root / "reg"),
    }
    hf = root / "hf_mlm"  # the same kind of model in HF transformers' layout
    save_hf(EncoderForPreTraining.from_config(dataclasses.replace(cfg, add_pooler=False)), hf)
    tok.save(hf / "tokenizer.json")
    out["hf_mlm"] = hf
    yield out
    torch.set_num_threads(threads)


def test_qa_answers_are_exact_spans_of_the_seed_passages(dirs):
    qa = pipeline("question-answering", dirs["qa"], max_length=64)  # forces several windows per passage
    for question, context in QUESTIONS:
        answers = qa(question, context, top_k=5, max_answer_length=12)
        assert 1 <= len(answers) <= 5
        for a in answers:
            assert 0 <= a["start"] < a["end"] <= len(context)
            assert context[a["start"] : a["end"]] == a["answer"] and a["answer"].strip() == a["answer"]
            assert 0.0 <= a["score"] <= 1.0
        assert [a["score"] for a in answers] == sorted((a["score"] for a in answers), reverse=True)
    best = qa(QUESTIONS[1][0], NUS)
    assert isinstance(best, dict) and NUS[best["start"] : best["end"]] == best["answer"]
    nullable = qa(QUESTIONS[1][0], NUS, version_2=True, null_threshold=-1e9)  # the null answer always wins
    assert nullable["answer"] == "" and nullable["start"] == -1


def test_qa_batching_does_not_change_answers(dirs):
    one = pipeline("qa", dirs["qa"], max_length=64, batch_size=1)(QUESTIONS, top_k=2)
    many = pipeline("qa", dirs["qa"], max_length=64, batch_size=16)(QUESTIONS, top_k=2)
    assert [[(a["start"], a["end"]) for a in x] for x in one] == [
        [(a["start"], a["end"]) for a in x] for x in many
    ]
    for x, y in zip(one, many):
        assert [a["score"] for a in x] == pytest.approx([a["score"] for a in y], abs=1e-5)


def test_group_entities_merges_b_and_i_and_splits_on_type_changes():
    text = "New York and Los Angeles Lakers"
    spans = [(0, 3), (4, 8), (9, 12), (13, 16), (17, 24), (25, 31)]
    tags = ["B-LOC", "I-LOC", "O", "I-LOC", "I-LOC", "I-ORG"]
    words = [
        {"label": t, "score": 0.5 + 0.1 * i, "start": s, "end": e}
        for i, (t, (s, e)) in enumerate(zip(tags, spans))
    ]
    ents = group_entities(words, text)
    assert [(e["entity_group"], e["word"]) for e in ents] == [
        ("LOC", "New York"),
        ("LOC", "Los Angeles"),  # an I- after O starts an entity (conlleval's reading)
        ("ORG", "Lakers"),  # a type change starts a new one
    ]
    assert ents[0]["score"] == pytest.approx(0.55)


def test_ner_entities_are_consistent_with_the_text(dirs):
    ner = pipeline("ner", dirs["ner"], max_length=32)  # several windows for the NUS passage
    text = NUS
    ents = ner(text)
    words = ner(text, aggregation="none")
    assert all(w["label"] in LABELS for w in words)
    # every word of the passage (as the tokenizer splits it) got exactly one prediction, in order
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)
    assert len(words) == len(re.findall(r"\w+|[^\w\s]", text))
    previous_end = 0
    for e in ents:
        assert text[e["start"] : e["end"]] == e["word"] and e["start"] >= previous_end
        assert e["entity_group"] in {"ORG", "LOC"} and 0.0 < e["score"] <= 1.0
        previous_end = e["end"]
    assert ents == group_entities(words, text)
    # texts are batched together (padding differs): the same words, labels and spans, scores to 1e-5
    both = ner([PRECIPITATION, text], aggregation="none")
    assert [(w["label"], w["start"], w["end"]) for w in both[1]] == [
        (w["label"], w["start"], w["end"]) for w in words
    ]
    assert [w["score"] for w in both[1]] == pytest.approx([w["score"] for w in words], abs=1e-5)


def test_text_classification_scores_are_probabilities(dirs):
    cls = pipeline("text-classification", dirs["cls"])
    out = cls(["the bank", ("the river", "bank")], top_k=None)
    for labels in out:
        assert sorted(d["label"] for d in labels) == ["neg", "neu", "pos"]
        assert sum(d["score"] for d in labels) == pytest.approx(1.0)
        assert [d["score"] for d in labels] == sorted((d["score"] for d in labels), reverse=True)
    assert len(cls("the bank", top_k=1)) == 1
    reg = pipeline("text-classification", dirs["reg"])("the bank")
    assert reg["label"] == "score" and isinstance(reg["score"], float)


@pytest.mark.parametrize("which", ["mlm", "hf_mlm"])
def test_fill_mask_top_k(dirs, which):
    fm = pipeline("fill-mask", dirs[which])
    out = fm("the national [MASK] of singapore", top_k=4)
    assert len(out) == 4 and all(0.0 <= o["score"] <= 1.0 for o in out)
    assert [o["score"] for o in out] == sorted((o["score"] for o in out), reverse=True)
    for o in out:
        assert o["sequence"].startswith("the national") and o["token"].replace("##", "") in o["sequence"]
    two = fm("[MASK] is the national [MASK] .", top_k=2)
    assert len(two) == 2 and all(len(x) == 2 for x in two)
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        fm("no mask here")
    with pytest.raises(TypeError, match="masked-LM"):
        pipeline("fill-mask", dirs["qa"])


def test_bank_gets_different_vectors_in_different_contexts(dirs):
    emb = pipeline("embeddings", dirs["mlm"])
    money, river = emb.word_vector(BANK[0], "bank"), emb.word_vector(BANK[1], "bank")
    assert money.shape == (128,)
    assert float(torch.cosine_similarity(money, river, dim=0)) < 1 - 1e-4  # context changes the vector
    torch.testing.assert_close(emb.word_vector(BANK[0], "bank"), money)
    # "banks" is bank ##s: the word's vector is the mean of its two sub-tokens
    blood = emb.word_vector(BANK[2], "banks")
    enc = emb._encode([BANK[2]])[0]
    rows = [i for i, t in enumerate(enc.tokens) if t in ("bank", "##s")]
    torch.testing.assert_close(blood, emb._hidden([enc], -1)[0, rows].mean(0))
    with pytest.raises(ValueError, match="occurs 0 time"):
        emb.word_vector(BANK[1], "money")
    assert emb.similarity(BANK[0], BANK[0]) == pytest.approx(1.0, abs=1e-5)
    pooled = emb(BANK, pooling="mean")
    assert pooled.shape == (3, 128)
    torch.testing.assert_close(pooled[1], emb(BANK[1], pooling="mean"), atol=1e-5, rtol=0)
    hf = pipeline("embed", dirs["hf_mlm"])
    assert isinstance(hf, EmbeddingPipeline) and hf(BANK[0]).shape == (128,)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_matches_cpu(dirs):
    cpu = pipeline("qa", dirs["qa"])(QUESTIONS, top_k=1)
    gpu = pipeline("qa", dirs["qa"], device="cuda")(QUESTIONS, top_k=1)
    assert [a["answer"] for a in cpu] == [a["answer"] for a in gpu]


def test_cli_predict_writes_json_lines(dirs, tmp_path, capsys):
    questions = tmp_path / "qa.tsv"
    questions.write_text("".join(f"{q}\t{c}\n" for q, c in QUESTIONS), encoding="utf-8")
    out = tmp_path / "answers.jsonl"
    assert main(["predict", "qa", str(dirs["qa"]), "--file", str(questions), "--output", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == len(QUESTIONS)
    for r in records:
        a = r["answer"]
        assert r["context"][a["start"] : a["end"]] == a["answer"]
    assert main(["predict", "ner", str(dirs["ner"]), "--text", NUS]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert all(NUS[e["start"] : e["end"]] == e["word"] for e in json.loads(line)["entities"])
    assert main(["predict", "embed", str(dirs["mlm"]), "--text", BANK[1], "--word", "bank"]) == 0
    assert len(json.loads(capsys.readouterr().out)["vector"]) == 128
    assert main(["predict", "qa", str(dirs["qa"]), "--text", "no tab here"]) == 2
    assert "qa needs --question" in capsys.readouterr().err


def test_non_finite_outputs_are_refused_naming_the_model(dirs):
    cls = pipeline("text-classification", dirs["cls"])
    assert str(dirs["cls"]) in cls.source
    cls("the bank")  # finite
    with torch.no_grad():  # weights damaged after loading (loading itself refuses non-finite tensors)
        next(p for p in cls.model.parameters() if p.dim() == 2).fill_(float("nan"))
    with pytest.raises(ValueError, match="non-finite .*damaged") as e:
        cls("the bank")
    assert str(dirs["cls"]) in str(e.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_fill_mask_refuses_non_finite_logits(dirs, value):
    fill = pipeline("fill-mask", dirs["mlm"])
    fill("the [MASK] of the river")  # finite
    with torch.no_grad():  # one vocabulary entry's bias damaged after loading: one logit of each row
        fill.model.mlm_head.bias[7] = value
    with pytest.raises(ValueError, match="non-finite mlm_logits .*damaged"):
        fill("the [MASK] of the river")
