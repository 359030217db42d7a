"""The Hugging Face inference API routes, called with the real ``huggingface_hub.InferenceClient`` against
running servers of tiny random models: every task answers what the in-process pipeline (or generator)
answers; the Text Embeddings Inference routes; errors in Hugging Face's shape, never a 500."""

from __future__ import annotations

import json
import warnings

import pytest

pytest.importorskip("fastapi")
hub = pytest.importorskip("huggingface_hub")

import httpx  # noqa: E402
import torch  # noqa: E402
from huggingface_hub import InferenceClient  # noqa: E402
from huggingface_hub.errors import HfHubHTTPError  # noqa: E402
from serving_models import close, make_all, running  # noqa: E402

from attnlab.generation import generate  # noqa: E402
from attnlab.io import load  # noqa: E402
from attnlab.io.families.gpt2 import load_causal_lm  # noqa: E402
from attnlab.tasks.pipelines import pipeline  # noqa: E402
from attnlab.tokenizers import load_tokenizer  # noqa: E402
from attnlab.translation.recipe import translate_texts  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

KEY = "hf-key"
SENTENCE = "Alan Turing was born in London and worked at Manchester."
KINDS = ("mlm", "cls", "ner", "qa", "gpt", "mt")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return make_all(tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def urls(dirs):
    with running(dirs, KEY, "cls") as out:
        yield out


def client(urls, kind: str, path: str = "") -> InferenceClient:
    return InferenceClient(base_url=urls[kind] + path, api_key=KEY)


def greedy(d, prompt: str, **options) -> tuple[str, list[int]]:
    model, tok = load_causal_lm(d), load_tokenizer(d)
    ids = tok.encode(prompt, add_special_tokens=False).ids
    out = generate(model, torch.tensor([ids]), **options)
    return tok.decode(out.sequences[0], skip_special_tokens=True), out.sequences[0]


def test_fill_mask_equals_the_pipeline(dirs, urls):
    text = "the capital of france is [MASK] ."
    got = client(urls, "mlm").fill_mask(text, top_k=3)
    expected = pipeline("fill-mask", dirs["mlm"])(text, top_k=3)
    close(got, [{"score": e["score"], "token": e["token_id"], "token_str": e["token_str"],
                 "sequence": e["sequence"]} for e in expected])  # fmt: skip


def test_text_classification_equals_the_pipeline_and_needs_the_key(dirs, urls):
    text = "alan turing was born in london"
    got = client(urls, "cls").text_classification(text, top_k=2)
    close(got, pipeline("classify", dirs["cls"])(text, top_k=2))
    with pytest.raises(HfHubHTTPError) as caught:
        InferenceClient(base_url=urls["cls"], api_key="wrong").text_classification(text)
    assert caught.value.response.status_code == 401
    page = httpx.get(urls["cls"] + "/")  # the page stays open without the key
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def test_token_classification_both_aggregations_equal_the_pipeline(dirs, urls):
    pipe = pipeline("ner", dirs["ner"])
    close(client(urls, "ner").token_classification(SENTENCE), pipe(SENTENCE))
    got = client(urls, "ner").token_classification(SENTENCE, aggregation_strategy="none", ignore_labels=[])
    words = pipe(SENTENCE, aggregation="none")
    close(got, [{"entity": w["label"], "score": w["score"], "word": w["word"], "start": w["start"],
                 "end": w["end"]} for w in words])  # fmt: skip


def test_question_answering_equals_the_pipeline(dirs, urls):
    question, context = "where was alan turing born ?", "alan turing was born in london . " * 6
    pipe = pipeline("qa", dirs["qa"])
    close(client(urls, "qa").question_answering(question=question, context=context), pipe(question, context))
    got = client(urls, "qa").question_answering(question=question, context=context, top_k=3)
    close(got, pipe(question, context, top_k=3))


def test_feature_extraction_is_the_mean_pooled_unit_vector(dirs, urls):
    texts = ["paris is a city", "alan turing was born in london"]
    expected = pipeline("embed", dirs["qa"])(texts, pooling="mean")
    unit = torch.nn.functional.normalize(expected, dim=-1)
    for path in ("/pipeline/feature-extraction", "/embed"):  # HF's route for a second task; TEI's
        got = client(urls, "qa", path).feature_extraction(texts)
        assert got.shape == (2, expected.shape[1])
        torch.testing.assert_close(torch.from_numpy(got), unit, atol=1e-5, rtol=1e-5)
    raw = client(urls, "qa", "/embed").feature_extraction(texts[0], normalize=False)
    torch.testing.assert_close(torch.from_numpy(raw)[0], expected[0], atol=1e-5, rtol=1e-5)


def test_text_generation_greedy_sampled_details_and_stream_equal_the_generator(dirs, urls):
    c = client(urls, "gpt")
    prompt = "the capital of"
    text, ids = greedy(dirs["gpt"], prompt, max_new_tokens=6)
    assert c.text_generation(prompt, max_new_tokens=6) == text
    assert c.text_generation(prompt, max_new_tokens=6, return_full_text=True) == prompt + text
    out = c.text_generation(prompt, max_new_tokens=6, details=True)
    assert out.generated_text == text and out.details.finish_reason == "length"
    assert [t.id for t in out.details.tokens] == ids and out.details.generated_tokens == 6
    model = load_causal_lm(dirs["gpt"])
    prompt_ids = load_tokenizer(dirs["gpt"]).encode(prompt, add_special_tokens=False).ids
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt_ids + ids])).logits[0], -1)
    for i, t in enumerate(out.details.tokens):
        assert t.logprob == pytest.approx(float(logp[len(prompt_ids) + i - 1, t.id]), abs=1e-5)
    sampled, _ = greedy(dirs["gpt"], prompt, max_new_tokens=6, do_sample=True, top_k=5, seed=3)
    assert c.text_generation(prompt, max_new_tokens=6, do_sample=True, top_k=5, seed=3) == sampled
    pieces = list(c.text_generation(prompt, max_new_tokens=6, stream=True))
    assert "".join(pieces) == text
    events = list(c.text_generation(prompt, max_new_tokens=6, stream=True, details=True))
    assert events[-1].generated_text == text and events[-1].details.generated_tokens == 6
    assert all(e.generated_text is None for e in events[:-1])
    # each streamed token with its log-probability, as TGI sends it: that of `details` for the same token
    scored = [(t.id, t.logprob) for t in out.details.tokens]
    for e in events:
        assert e.token.logprob is not None and e.token.logprob < 0
        assert any(i == e.token.id and lp == pytest.approx(e.token.logprob, abs=1e-4) for i, lp in scored)


def test_one_at_a_time_generation_streams_each_tokens_log_probability(dirs):
    """Without continuous batching (``--no-continuous``) the stream's tokens carry the log-probabilities that
    ``details`` scores for them, as the continuous batch's do."""
    from attnlab.serving import create_app, load_service
    from attnlab.serving.server import BackgroundServer
    from attnlab.serving.settings import ServeSettings

    app = create_app(load_service(dirs["gpt"]), ServeSettings(continuous=False))
    with BackgroundServer(app) as url:
        c = InferenceClient(base_url=url)
        out = c.text_generation("the capital of", max_new_tokens=6, details=True)
        events = list(c.text_generation("the capital of", max_new_tokens=6, stream=True, details=True))
    assert events and events[-1].generated_text == out.generated_text
    scored = iter([(t.id, t.logprob) for t in out.details.tokens])
    for e in events:  # a piece of text may take several tokens: it carries its last token's
        lp = next(lp for i, lp in scored if i == e.token.id)
        assert e.token.logprob == pytest.approx(lp, abs=1e-4)


def test_unused_generation_parameters_are_refused_as_the_client_expects(dirs, urls):
    # the client reads the 400's sentence, warns, and sends the request again without them
    text, _ = greedy(dirs["gpt"], "paris is", max_new_tokens=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = client(urls, "gpt").text_generation("paris is", max_new_tokens=4, typical_p=0.5)
    assert got == text and any("typical_p" in str(w.message) for w in caught)


def test_translation_equals_the_recipe(dirs, urls):
    model, tok = load(dirs["mt"]), load_tokenizer(dirs["mt"])
    got = client(urls, "mt").translation("paris is a city")
    assert (
        got.translation_text == translate_texts(model, tok, ["paris is a city"], 4, max_length_offset=50)[0]
    )
    greedy_one = client(urls, "mt").translation("paris is a city", generate_parameters={"num_beams": 1})
    assert greedy_one.translation_text == translate_texts(model, tok, ["paris is a city"], 1)[0]


def post(urls, kind: str, path: str, body, **kw) -> httpx.Response:
    return httpx.post(urls[kind] + path, headers={"Authorization": f"Bearer {KEY}"}, timeout=30, **kw,
                      **({"json": body} if not isinstance(body, bytes) else {"content": body}))  # fmt: skip


def test_tei_predict_tokenize_and_decode(dirs, urls):
    pipe = pipeline("classify", dirs["cls"])
    pair = ["alan turing was born in london", "paris is a city"]
    close(post(urls, "cls", "/predict", {"inputs": pair}).json(), pipe(tuple(pair)))
    got = post(urls, "cls", "/predict", {"inputs": ["paris is a city", pair]}).json()
    close(got, [pipe("paris is a city"), pipe(tuple(pair))])
    tok = load_tokenizer(dirs["qa"])
    (tokens,) = post(urls, "qa", "/tokenize", {"inputs": "paris is a city"}).json()
    encoding = tok.encode("paris is a city")
    assert [t["id"] for t in tokens] == encoding.ids
    assert [t["special"] for t in tokens] == [True, False, False, False, False, True]
    assert [t["text"] for t in tokens[1:-1]] == ["paris", "is", "a", "city"] and tokens[1]["start"] == 0
    decoded = post(urls, "qa", "/decode", {"ids": [encoding.ids, encoding.ids[1:3]]}).json()
    assert decoded == [tok.decode(encoding.ids), "paris is"]


@pytest.mark.parametrize(
    ("kind", "path", "body", "status", "words"),
    [
        ("mlm", "/", b"{not json", 400, "not valid JSON"),
        ("mlm", "/", [1, 2], 400, "JSON object"),
        ("mlm", "/", {"parameters": {}}, 400, "'inputs' is required"),
        ("mlm", "/", {"inputs": "no mask here"}, 422, "[MASK]"),
        ("mlm", "/", {"inputs": "[MASK] " + "paris " * 40}, 422, "at most 32"),
        ("mlm", "/", {"inputs": "a [MASK]", "parameters": {"top_k": 0}}, 400, "top_k"),
        ("mlm", "/", {"inputs": "a [MASK]", "parameters": {"targets": ["x"]}}, 400, "model_kwargs"),
        ("mlm", "/pipeline/text-generation", {"inputs": "a"}, 400, "serves fill-mask, feature-extraction"),
        ("mlm", "/predict", {"inputs": "a"}, 404, ""),
        ("gpt", "/", {"inputs": "paris " * 40}, 422, "context"),
        ("gpt", "/", {"inputs": ["a", "b"]}, 400, "one text"),
        ("gpt", "/", {"inputs": "a", "parameters": {"max_new_tokens": 99999}}, 400, "max_new_tokens"),
        ("gpt", "/embed", {"inputs": "a"}, 404, ""),
        ("qa", "/", {"inputs": {"question": "a"}}, 400, "context"),
        (
            "cls",
            "/",
            {"inputs": "a", "parameters": {"function_to_apply": "sigmoid"}},
            400,
            "function_to_apply",
        ),
        ("mt", "/", {"inputs": "a", "parameters": {"src_lang": "fr"}}, 400, "src_lang"),
    ],
)
def test_bad_requests_answer_hugging_faces_error_shape(urls, kind, path, body, status, words):
    r = post(urls, kind, path, body)
    assert r.status_code == status, r.text
    if status != 404:
        error = r.json()
        assert set(error) == {"error", "error_type"} and words in error["error"], error


def test_routes_are_counted_in_the_metrics(urls):
    post(urls, "qa", "/embed", {"inputs": "paris"})
    text = httpx.get(urls["qa"] + "/metrics").text
    assert 'attnlab_requests_total{endpoint="/embed",status="200"}' in text
    assert json.loads(httpx.get(urls["qa"] + "/v1/info").text)["kind"] == "encoder"
