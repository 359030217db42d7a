"""QA post-processing: windows → n-best spans → exact character answers, SQuAD 2.0 null, JSON writers."""

import json
import re
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shared_data import DATA, require

from attnlab.metrics.squad import squad_v1_scores, squad_v2_scores
from attnlab.tasks.loaders.squad import load_squad
from attnlab.tasks.qa_postprocess import (
    QAWindow,
    context_offsets,
    max_context_masks,
    null_odds_dict,
    postprocess_example,
    postprocess_predictions,
    predictions_dict,
    window_candidates,
    write_nbest_json,
    write_null_odds_json,
    write_predictions_json,
)

HIGH, LOW = 10.0, -10.0
SQUAD_DEV = DATA / "squad" / "v1.1" / "dev-v1.1.json"


def pieces(text: str, piece: int = 3) -> list[tuple[int, int]]:
    """A stand-in sub-word tokenizer: words and punctuation, words cut into ``piece``-character pieces."""
    spans = []
    for m in re.finditer(r"\w+|[^\w\s]", text):
        for k in range(m.start(), m.end(), piece):
            spans.append((k, min(k + piece, m.end())))
    return spans


def make_windows(
    example_id, context, answer_span, question_len=4, window=12, stride=5, seed=0, cls_score=None
):
    """``[CLS] question [SEP] context piece [SEP]`` windows with logits peaked at the answer's tokens.

    Start logits are high only on the token starting at the answer's first character, end logits only on the
    token ending at its last character (where the window holds them); everything else is low noise.
    """
    rng = np.random.default_rng(seed)
    tokens = pieces(context)
    windows, first = [], 0
    while True:
        ctx = tokens[first : first + window]
        offsets = [None] * (question_len + 2) + ctx + [None]
        t = len(offsets)
        start, end = LOW + rng.random(t), LOW + rng.random(t)
        start[1:question_len], end[1:question_len] = HIGH + 5, HIGH + 5  # question tokens: must be ignored
        for i, span in enumerate(offsets):
            if span is not None and span[0] == answer_span[0]:
                start[i] = HIGH
            if span is not None and span[1] == answer_span[1]:
                end[i] = HIGH
        if cls_score is not None:
            start[0] = end[0] = cls_score / 2
        windows.append(QAWindow(example_id, start, end, offsets))
        if first + window >= len(tokens):
            return windows
        first += stride


LONG = (
    "The history of the valley begins long before any written record. Farmers came first, then traders who "
    "followed the river north. In 1848 the settlement was renamed Riverbend by the county commissioners, and "
    "its first school opened two years later. The railway arrived in 1871, bringing timber merchants and a "
    "small brewery that still operates today."
)


def straddling_answer() -> tuple[str, int, int, list[QAWindow]]:
    answer = "renamed Riverbend by the county commissioners"
    start = LONG.index(answer)
    span = (start, start + len(answer))
    windows = make_windows("q", LONG, span, window=20, stride=8)
    # the answer crosses a window boundary: some window holds its start token but not its end token
    holds = [
        ({o[0] for o in w.offsets if o} >= {start}, {o[1] for o in w.offsets if o} >= {span[1]})
        for w in windows
    ]
    assert (True, False) in holds and (True, True) in holds
    return answer, *span, windows


@pytest.mark.parametrize("use_max_context", [True, False])
def test_answer_straddling_windows_is_found_with_exact_offsets(use_max_context):
    answer, s, e, windows = straddling_answer()
    pred = postprocess_example(windows, LONG, max_answer_length=30, use_max_context=use_max_context)
    assert pred.text == answer and (pred.start_char, pred.end_char) == (s, e)
    assert LONG[pred.start_char : pred.end_char] == pred.text
    assert not pred.is_null and pred.best_non_null.score == pytest.approx(2 * HIGH, abs=2)


def test_nbest_unique_spans_probabilities_and_order():
    _, _, _, windows = straddling_answer()
    pred = postprocess_example(windows, LONG, n_best=7)
    assert len(pred.nbest) == 7
    spans = [(c.start_char, c.end_char) for c in pred.nbest]
    assert len(set(spans)) == len(spans)  # a span seen in several windows is listed once
    assert [c.score for c in pred.nbest] == sorted((c.score for c in pred.nbest), reverse=True)
    assert sum(c.probability for c in pred.nbest) == pytest.approx(1.0)
    for c in pred.nbest:
        assert LONG[c.start_char : c.end_char] == c.text
        w = windows[c.window]
        assert c.score == pytest.approx(w.start_logits[c.start_token] + w.end_logits[c.end_token])


def test_max_answer_length_and_order_constraints():
    context = "alpha beta gamma delta"
    offsets = [None, (0, 5), (6, 10), (11, 16), (17, 22), None]
    start = [0, 5, 0, 0, 0, 0]
    end = [0, 0, 0, 0, 9, 0]
    cands = window_candidates(start, end, offsets, context, max_answer_length=4)
    assert cands[0].text == "alpha beta gamma delta"
    # 4 tokens is too long for max_answer_length=3: the best must be shorter
    cands = window_candidates(start, end, offsets, context, max_answer_length=3)
    assert all(c.end_token - c.start_token + 1 <= 3 for c in cands)
    assert cands[0].text != "alpha beta gamma delta"
    # an end before its start is never a candidate
    cands = window_candidates([0, 0, 0, 0, 9, 0], [0, 9, 0, 0, 0, 0], offsets, context)
    assert all(c.end_token >= c.start_token for c in cands)


def test_special_and_question_tokens_never_answer():
    context = "one two"
    offsets = [None, None, None, (0, 3), (4, 7), None]
    start = [50, 50, 50, 1, 0, 50]
    end = [50, 50, 50, 0, 1, 50]
    pred = postprocess_example([QAWindow("x", start, end, offsets)], context)
    assert pred.text == "one two"


def test_max_context_prefers_the_window_where_the_token_is_central():
    # token (10, 12) is last in window 0 and in the middle of window 1
    w0 = [None, (0, 2), (3, 5), (6, 8), (10, 12), None]
    w1 = [None, (6, 8), (10, 12), (13, 15), None]
    masks = max_context_masks([w0, w1])
    # (6, 8): rank 2 of 4 in window 0 → min(2, 1) + 0.04; rank 0 of 3 in window 1 → 0.03: window 0
    assert masks[0] == [False, True, True, True, False, False]
    assert masks[1] == [False, False, True, True, False]


def test_squad2_null_vs_best_non_null_and_threshold():
    context = "The cat sat on the mat."
    span = (4, 7)  # "cat"
    windows = make_windows("n", context, span, window=4, stride=2, cls_score=25.0)
    null = postprocess_example(windows, context, version_2=True)
    assert null.is_null and null.text == "" and null.null_score == pytest.approx(25.0)
    assert null.null_odds == pytest.approx(25.0 - null.best_non_null.score)
    assert null.best_non_null.text == "cat"
    answered = postprocess_example(windows, context, version_2=True, null_threshold=10.0)
    assert not answered.is_null and answered.text == "cat"
    # the null score is the minimum over windows (BERT's run_squad)
    lower = [QAWindow(w.example_id, w.start_logits, w.end_logits, w.offsets) for w in windows]
    lower[-1] = QAWindow(
        "n", np.r_[-5.0, lower[-1].start_logits[1:]], lower[-1].end_logits, lower[-1].offsets
    )
    low = postprocess_example(lower, context, version_2=True)
    assert low.null_score == pytest.approx(-5.0 + 12.5)


def test_writers_produce_official_format(tmp_path):
    context = "Paris is the capital of France."
    examples = {"a": context, "b": context}
    windows = make_windows("a", context, (0, 5), cls_score=-20.0) + make_windows(
        "b", context, (24, 30), cls_score=40.0
    )
    preds = postprocess_predictions(examples, windows, version_2=True)
    assert predictions_dict(preds) == {"a": "Paris", "b": ""}
    write_predictions_json(tmp_path / "predictions.json", preds)
    write_null_odds_json(tmp_path / "null_odds.json", preds)
    write_nbest_json(tmp_path / "nbest.json", preds)
    on_disk = json.loads((tmp_path / "predictions.json").read_text())
    odds = json.loads((tmp_path / "null_odds.json").read_text())
    assert on_disk == {"a": "Paris", "b": ""}
    assert odds == pytest.approx(null_odds_dict(preds)) and odds["a"] < 0 < odds["b"]
    nbest = json.loads((tmp_path / "nbest.json").read_text())
    assert nbest["a"][0]["text"] == "Paris" and set(nbest["a"][0]) >= {"text", "probability", "start_logit"}
    scores = squad_v2_scores(on_disk, {"a": ["Paris"], "b": []}, na_probs=odds)
    assert scores["exact"] == 100.0 and scores["best_exact"] == 100.0


def test_bad_input():
    with pytest.raises(ValueError, match="offsets has 2 entries but the window has 3 tokens"):
        window_candidates([0, 0, 0], [0, 0, 0], [None, (0, 1)], "ab")
    with pytest.raises(ValueError, match="token 1: offset"):
        window_candidates([0, 0], [0, 0], [None, (0, 9)], "ab")
    with pytest.raises(ValueError, match="no window"):
        postprocess_predictions({"a": "x", "b": "y"}, [QAWindow("a", [0, 1], [0, 1], [None, (0, 1)])])
    with pytest.raises(ValueError, match="only for version_2"):
        null_odds_dict(postprocess_predictions({"a": "x"}, [QAWindow("a", [0, 1], [0, 1], [None, (0, 1)])]))


WORDS = st.text(alphabet=string.ascii_letters + "é", min_size=1, max_size=9)


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(WORDS, min_size=3, max_size=50),
    data=st.data(),
    window=st.integers(4, 16),
)
def test_property_peaked_logits_recover_any_answer(words, data, window):
    context = " ".join(words)
    tokens = pieces(context)
    stride = data.draw(st.integers(1, window - 1))
    starts = [0]  # the windows make_windows builds: every stride tokens until the passage is covered
    while starts[-1] + window < len(tokens):
        starts.append(starts[-1] + stride)
    home = data.draw(st.sampled_from(starts))  # the answer lies inside this window (maybe others too)
    top = min(len(tokens), home + window) - 1
    first = data.draw(st.integers(home, top))
    last = data.draw(st.integers(first, top))
    span = (tokens[first][0], tokens[last][1])
    windows = make_windows("p", context, span, window=window, stride=stride)
    pred = postprocess_example(windows, context, max_answer_length=window)
    assert (pred.start_char, pred.end_char) == span
    assert pred.text == context[span[0] : span[1]]


def test_with_a_real_wordpiece_tokenizer():
    """Offsets from HF `tokenizers` (test-only reference): lowercasing, accents and [UNK] still map back."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers, pre_tokenizers, processors

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + list(
        string.ascii_lowercase + string.digits + string.punctuation
    )
    vocab += ["##" + c for c in string.ascii_lowercase + string.digits]  # every word becomes many pieces
    tok = tokenizers.Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    tok.enable_truncation(max_length=40, stride=16, strategy="only_second")
    context = "Le Dénver Broncos battirent les Carolina Panthers 24\u201310, remportant leur troisième titre."
    answer = "Panthers 24\u201310"
    s = context.index(answer)
    gold = (s, s + len(answer))
    encoding = tok.encode("Qui a perdu?", context)
    windows = []
    for enc in [encoding, *encoding.overflowing]:
        offsets = [o if sid == 1 else None for o, sid in zip(enc.offsets, enc.sequence_ids)]
        start = np.array([HIGH if o and o[0] == gold[0] else LOW for o in offsets])
        end = np.array([HIGH if o and o[1] == gold[1] else LOW for o in offsets])
        windows.append(QAWindow("fr", start, end, offsets))
    assert len(windows) > 2
    has_start = [any(o and o[0] == gold[0] for o in w.offsets) for w in windows]
    has_end = [any(o and o[1] == gold[1] for o in w.offsets) for w in windows]
    assert any(a and not b for a, b in zip(has_start, has_end))  # the answer straddles a window boundary
    assert any(a and b for a, b in zip(has_start, has_end))
    pred = postprocess_example(windows, context, max_answer_length=40)
    assert pred.text == answer and (pred.start_char, pred.end_char) == gold


def test_bert_token_level_rule_would_lose_the_straddling_answer():
    """Why spans, not start tokens, get the max-context rule (the named deviation in the module)."""
    answer, s, e, windows = straddling_answer()
    masks = max_context_masks([w.offsets for w in windows])
    found = [
        c
        for k, w in enumerate(windows)
        for c in window_candidates(w.start_logits, w.end_logits, w.offsets, LONG, 20, 30, masks[k], window=k)
        if (c.start_char, c.end_char) == (s, e)
    ]
    assert found == []  # the start token is most central in a window that does not hold the end
    assert postprocess_example(windows, LONG).text == answer


def _char_wordpiece(max_length: int, stride: int):
    """A BERT pipeline from HF `tokenizers` (test-only); its vocabulary splits words into characters."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers, pre_tokenizers, processors

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + list(
        string.ascii_lowercase + string.digits + string.punctuation
    )
    vocab += ["##" + c for c in string.ascii_lowercase + string.digits]
    tok = tokenizers.Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    tok.enable_truncation(max_length=max_length, stride=stride, strategy="only_second")
    return tok


@pytest.mark.data
def test_oracle_logits_on_real_squad_passages_map_back_exactly():
    """Windows over real SQuAD passages, logits peaked at a gold answer: every answer maps back exactly."""
    require(SQUAD_DEV)
    examples = [e for e in load_squad(SQUAD_DEV) if e.title == "Super_Bowl_50"][:120]
    tok = _char_wordpiece(max_length=192, stride=64)  # ~4-8 windows per passage at one piece per character
    windows, straddling = [], 0
    for ex in examples:
        text, start = ex.answers[0]
        gold = (start, start + len(text))
        encoding = tok.encode(ex.question, ex.context)
        has = []
        for enc in [encoding, *encoding.overflowing]:
            offsets = context_offsets(enc.offsets, enc.sequence_ids)
            # as feature building labels them: the tokens that contain the answer's first and last character
            s = np.array([HIGH if o and o[0] <= gold[0] < o[1] else LOW for o in offsets])
            e = np.array([HIGH if o and o[0] < gold[1] <= o[1] else LOW for o in offsets])
            windows.append(QAWindow(ex.id, s, e, offsets))
            has.append((HIGH in s, HIGH in e))
        straddling += (True, False) in has or (False, True) in has
    preds = postprocess_predictions(examples, windows, max_answer_length=400)
    assert straddling > 10  # many answers cross a window boundary
    inexact = []
    for ex in examples:
        p = preds[ex.id]
        assert ex.context[p.start_char : p.end_char] == p.text
        if (p.text, p.start_char) != ex.answers[0]:
            # only where a gold boundary falls inside a token: "2" of "2½" ("½" is not in the vocabulary,
            # so the whole word is one [UNK] token); the prediction is then the covering token span
            assert p.start_char <= ex.answers[0][1] and ex.answers[0][0] in p.text
            inexact.append(ex.answers[0][0])
    assert inexact == ["2", "2"]
    scores = squad_v1_scores(predictions_dict(preds), examples)
    assert scores["exact_match"] == pytest.approx(100 * (len(examples) - 2) / len(examples))


def test_context_offsets_from_tokenizer_output():
    offsets = [(0, 0), (0, 3), (4, 7), (0, 0), (0, 5), (6, 9), (0, 0)]
    sequence_ids = [None, 0, 0, None, 1, 1, None]
    assert context_offsets(offsets, sequence_ids) == [None, None, None, None, (0, 5), (6, 9), None]
    assert context_offsets(np.array(offsets), sequence_ids, context_sequence=0)[1:3] == [(0, 3), (4, 7)]
    with pytest.raises(ValueError, match="7 offsets but 2 sequence ids"):
        context_offsets(offsets, [None, 0])
