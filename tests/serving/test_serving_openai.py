"""The OpenAI-compatible routes, called with the official ``openai`` client against a running server on tiny
random models: completions (greedy, seeded sampling, stop strings, logprobs, echo, n, lists of prompts,
streaming), chat completions (a chat template, and the 400 without one), embeddings and the model list
answer what the in-process generator and pipelines compute."""

from __future__ import annotations

import base64
import json
import shutil
import struct

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402
import torch  # noqa: E402
from serving_models import make, running  # noqa: E402

from attnlab.generation import generate  # noqa: E402
from attnlab.io.families.gpt2 import load_causal_lm  # noqa: E402
from attnlab.tasks.pipelines import pipeline  # noqa: E402
from attnlab.tokenizers import load_tokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

PROMPT = "the capital of"
KEY = "secret-key"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("openai")
    out = {kind: make(kind, root) for kind in ("gpt", "qa")}
    chat = root / "gpt-chat"
    shutil.copytree(out["gpt"], chat)
    template = (
        "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}:{% endif %}"
    )
    (chat / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    out["chat"] = chat
    return out


@pytest.fixture(scope="module")
def urls(dirs):
    with running(dirs, KEY, "gpt") as out:
        yield out


def client(urls, kind: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{urls[kind]}/v1", api_key=KEY, max_retries=0)


def in_process(d, prompt: str, **options) -> tuple[str, list[int]]:
    """What `attnlab.generation.generate` writes for ``prompt``: (text, new token ids)."""
    model, tok = load_causal_lm(d), load_tokenizer(d)
    ids = tok.encode(prompt, add_special_tokens=False).ids
    out = generate(model, torch.tensor([ids]), **options)
    return tok.decode(out.sequences[0], skip_special_tokens=True), out.sequences[0]


def test_models_lists_the_served_model(urls):
    (card,) = client(urls, "gpt").models.list().data
    assert card.id == "gpt" and card.owned_by == "attnlab" and card.kind == "gpt"
    (card,) = client(urls, "qa").models.list().data
    assert card.id == "qa" and card.pooling == "mean"


def test_greedy_completion_equals_the_in_process_generator(dirs, urls):
    got = client(urls, "gpt").completions.create(model="gpt", prompt=PROMPT, max_tokens=6, temperature=0)
    text, ids = in_process(dirs["gpt"], PROMPT, max_new_tokens=6)
    (choice,) = got.choices
    assert choice.text == text and choice.finish_reason == "length"
    assert got.usage.completion_tokens == len(ids) == 6 and got.usage.prompt_tokens == 3
    assert got.usage.total_tokens == 9 and got.object == "text_completion" and got.model == "gpt"


def test_seeded_sampling_is_reproducible_and_equals_the_generator(dirs, urls):
    c = client(urls, "gpt")
    options = dict(model="gpt", prompt=PROMPT, max_tokens=8, temperature=0.7, top_p=0.9, seed=11)
    a, b = c.completions.create(**options), c.completions.create(**options)
    assert a.choices[0].text == b.choices[0].text
    text, _ = in_process(dirs["gpt"], PROMPT, max_new_tokens=8, do_sample=True, temperature=0.7, top_p=0.9,
                         seed=11)  # fmt: skip
    assert a.choices[0].text == text


def test_lists_of_prompts_and_n_give_one_choice_each_in_order(dirs, urls):
    prompts = [PROMPT, "paris is"]
    got = client(urls, "gpt").completions.create(
        model="gpt", prompt=prompts, n=2, max_tokens=4, temperature=0
    )
    assert [c.index for c in got.choices] == [0, 1, 2, 3]
    for c in got.choices:
        assert c.text == in_process(dirs["gpt"], prompts[c.index // 2], max_new_tokens=4)[0]
    assert got.usage.prompt_tokens == 5 and got.usage.completion_tokens == 16


def test_stop_strings_cut_the_text_and_finish_with_stop(dirs, urls):
    text, _ = in_process(dirs["gpt"], PROMPT, max_new_tokens=8)
    stop = text.split()[2]
    got = client(urls, "gpt").completions.create(
        model="gpt", prompt=PROMPT, max_tokens=8, temperature=0, stop=stop
    )
    assert got.choices[0].text == text[: text.index(stop)] and got.choices[0].finish_reason == "stop"


def test_logprobs_and_echo_are_the_models_log_probabilities(dirs, urls):
    got = client(urls, "gpt").completions.create(
        model="gpt", prompt=PROMPT, max_tokens=4, temperature=0, logprobs=3, echo=True
    )
    (choice,) = got.choices
    assert choice.text.startswith(PROMPT)
    lp = choice.logprobs
    model, tok = load_causal_lm(dirs["gpt"]), load_tokenizer(dirs["gpt"])
    ids = (
        tok.encode(PROMPT, add_special_tokens=False).ids
        + in_process(dirs["gpt"], PROMPT, max_new_tokens=4)[1]
    )
    with torch.no_grad():
        expected = torch.log_softmax(model(torch.tensor([ids])).logits[0], -1)
    assert len(lp.tokens) == len(ids) == 7 and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for t in range(1, len(ids)):
        assert lp.token_logprobs[t] == pytest.approx(float(expected[t - 1, ids[t]]), abs=1e-5)
        assert len(lp.top_logprobs[t]) == 3
        assert max(lp.top_logprobs[t].values()) == pytest.approx(float(expected[t - 1].max()), abs=1e-5)
    for t in range(3, 7):  # greedy: each new token is the most likely one
        assert lp.token_logprobs[t] == pytest.approx(max(lp.top_logprobs[t].values()), abs=1e-6)
    assert lp.text_offset[0] == 0 and lp.tokens[0] == "the"


def test_streaming_sends_the_same_text_then_usage_then_done(urls):
    c = client(urls, "gpt")
    whole = c.completions.create(model="gpt", prompt=PROMPT, max_tokens=6, temperature=0)
    chunks = list(
        c.completions.create(
            model="gpt", prompt=PROMPT, max_tokens=6, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == whole.choices[0].text and len(chunks) >= 3
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].usage.completion_tokens == 6
    with httpx.stream(
        "POST", f"{urls['gpt']}/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
        json={"prompt": PROMPT, "max_tokens": 3, "stream": True}, timeout=30,
    ) as r:  # fmt: skip
        raw = "".join(r.iter_text())
    assert raw.rstrip().endswith("data: [DONE]")


def test_chat_completions_render_the_template_or_say_why_not(dirs, urls):
    with pytest.raises(openai.BadRequestError, match="no chat template"):
        client(urls, "gpt").chat.completions.create(model="gpt", messages=[{"role": "user", "content": "a"}])
    c = client(urls, "chat")
    messages = [{"role": "user", "content": "paris is"}, {"role": "user", "content": "the capital"}]
    got = c.chat.completions.create(model="gpt-chat", messages=messages, max_tokens=5, temperature=0)
    text, _ = in_process(dirs["chat"], "paris is the capital :", max_new_tokens=5)
    assert got.choices[0].message.content == text and got.choices[0].message.role == "assistant"
    assert got.object == "chat.completion" and got.usage.completion_tokens == 5
    streamed = c.chat.completions.create(
        model="gpt-chat", messages=messages, max_tokens=5, temperature=0, stream=True
    )
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices) == text


def test_embeddings_are_the_pipelines_mean_pooled_vectors(dirs, urls):
    texts = ["paris is a city", "alan turing was born in london ."]
    expected = pipeline("embed", dirs["qa"])(texts, pooling="mean")
    c = client(urls, "qa")
    for fmt in (openai.NOT_GIVEN, "float", "base64"):  # not given: the client asks for base64, decodes it
        got = c.embeddings.create(model="qa", input=texts, encoding_format=fmt)
        assert [d.index for d in got.data] == [0, 1]
        for d, want in zip(got.data, expected):
            vector = d.embedding
            if fmt == "base64":  # asked for: the client hands the string over
                raw = base64.b64decode(vector)
                vector = struct.unpack(f"<{len(raw) // 4}f", raw)
            assert torch.allclose(torch.tensor(vector), want, atol=1e-5)
    single = c.embeddings.create(model="qa", input=texts[0])
    assert torch.allclose(torch.tensor(single.data[0].embedding), expected[0], atol=1e-5)
    assert single.usage.prompt_tokens == 6  # [CLS] paris is a city [SEP]


def test_errors_have_openais_shape_and_status(urls):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{urls['gpt']}/v1", api_key="wrong", max_retries=0).models.list()
    c = client(urls, "gpt")
    with pytest.raises(openai.NotFoundError, match="not served here"):
        c.completions.create(model="other", prompt=PROMPT)
    with pytest.raises(openai.NotFoundError):
        c.embeddings.create(model="gpt", input="a")  # a GPT serves no embeddings
    with pytest.raises(openai.APIStatusError) as caught:
        c.completions.create(model="gpt", prompt=PROMPT, stop=["a", "b", "c", "d", "e"])
    assert "at most 4" in caught.value.response.json()["error"]["message"]
    with pytest.raises(openai.UnprocessableEntityError) as caught:  # a penalty not applied: refused
        c.completions.create(model="gpt", prompt=PROMPT, frequency_penalty=0.5)
    assert caught.value.response.json()["field"] == "frequency_penalty"


def test_generation_metrics_count_first_token_time_and_rate(urls):
    client(urls, "gpt").completions.create(model="gpt", prompt=PROMPT, max_tokens=3, temperature=0)
    text = httpx.get(f"{urls['gpt']}/metrics", headers={"X-API-Key": KEY}).text
    assert 'attnlab_time_to_first_token_seconds_count{endpoint="/v1/completions"}' in text
    assert 'attnlab_generated_tokens_per_second_count{endpoint="/v1/completions"}' in text
