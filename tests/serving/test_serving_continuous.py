"""Continuous batching in a running server: generation requests of different prompt lengths arriving at
different times share decoding steps (the metrics show batches of several rows) and each answers what the
in-process generator answers for it alone, streamed or not, through /v1/generate, the OpenAI completions and
the Hugging Face route; a streaming client that leaves frees its row at once; --no-continuous answers the
same."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402
import torch  # noqa: E402
from serving_models import make  # noqa: E402

from attnlab.generation import generate  # noqa: E402
from attnlab.io.families.gpt2 import load_causal_lm  # noqa: E402
from attnlab.serving.app import create_app  # noqa: E402
from attnlab.serving.server import BackgroundServer  # noqa: E402
from attnlab.serving.service import load_service  # noqa: E402
from attnlab.serving.settings import ServeSettings  # noqa: E402
from attnlab.tokenizers import load_tokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

PROMPTS = [
    "the capital of",
    "paris is a city on the river seine in the north of france",
    "alan",
    "alan turing was born in london and worked at manchester on machines",
    "the river",
    "machines that think",
]
STEP_S = 0.02  # each forward pass of the served model is slowed by this, so that requests overlap


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return make("gpt", tmp_path_factory.mktemp("continuous"))


def slowed_app(d, **settings):
    service = load_service(d)
    service.model.register_forward_pre_hook(lambda module, args: time.sleep(STEP_S))
    return create_app(service, ServeSettings(**settings))


def alone(d, prompt: str, max_new_tokens: int) -> dict:
    model, tok = load_causal_lm(d), load_tokenizer(d)
    ids = tok.encode(prompt, add_special_tokens=False).ids
    out = generate(model, torch.tensor([ids]), max_new_tokens=max_new_tokens)
    return {"text": tok.decode(out.sequences[0], skip_special_tokens=True), "tokens": out.sequences[0]}


def stream(url: str, body: dict) -> dict:
    with httpx.stream("POST", f"{url}/v1/generate", json={**body, "stream": True}, timeout=60) as r:
        raw = "".join(r.iter_text())
    done = [b for b in raw.split("\n\n") if b.startswith("event: done")]
    return json.loads(done[0].split("data: ", 1)[1])


def batch_sizes(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    return {
        line.split('le="')[1].split('"')[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith('attnlab_batch_size_bucket{endpoint="generate"')
    }


def send_staggered(url: str) -> dict[int, dict]:
    """Each prompt from its own thread, 40 ms after the one before: every second one streamed, the last
    through the OpenAI client, one through the Hugging Face route."""
    results: dict[int, dict] = {}

    def send(i: int) -> None:
        time.sleep(0.04 * i)
        body = {"text": PROMPTS[i], "max_new_tokens": 6 + 3 * i}
        if i == len(PROMPTS) - 1:
            got = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0).completions.create(
                model="gpt", prompt=PROMPTS[i], max_tokens=body["max_new_tokens"], temperature=0
            )
            results[i] = {"text": got.choices[0].text}
        elif i == 2:
            got = httpx.post(
                url, json={"inputs": PROMPTS[i], "parameters": {"max_new_tokens": 12}}, timeout=60
            )
            results[i] = {"text": got.json()[0]["generated_text"]}
        elif i % 2:
            results[i] = stream(url, body)
        else:
            results[i] = httpx.post(f"{url}/v1/generate", json=body, timeout=60).json()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_requests_arriving_apart_share_steps_and_answer_as_alone(gpt):
    with BackgroundServer(slowed_app(gpt)) as url:
        results = send_staggered(url)
        sizes = batch_sizes(url)
    for i, prompt in enumerate(PROMPTS):
        expected = alone(gpt, prompt, 6 + 3 * i)
        assert results[i]["text"] == expected["text"], (i, prompt)
        if "tokens" in results[i]:
            assert results[i]["tokens"] == expected["tokens"]
    assert sizes["+Inf"] - sizes["2.0"] >= 1, sizes  # steps of three rows or more


def test_without_continuous_batching_the_answers_are_the_same(gpt):
    with BackgroundServer(slowed_app(gpt, continuous=False)) as url:
        results = send_staggered(url)
    for i, prompt in enumerate(PROMPTS):
        assert results[i]["text"] == alone(gpt, prompt, 6 + 3 * i)["text"]


def test_a_streaming_client_that_leaves_frees_its_row(gpt):
    app = slowed_app(gpt)
    continuous = app.state.batcher.continuous
    rows = []
    add = continuous.decoder.add

    def recorded(*args, **kwargs):
        rows.append(add(*args, **kwargs))
        return rows[-1]

    continuous.decoder.add = recorded
    with BackgroundServer(app) as url:
        body = {"text": "the capital of", "max_new_tokens": 28, "stream": True}
        with httpx.stream("POST", f"{url}/v1/generate", json=body, timeout=60) as r:
            first = next(r.iter_lines())
            assert first.startswith("data: ") and "error" not in first, first
        end = time.monotonic() + 10
        while not rows and time.monotonic() < end:  # the prefill streams its token before add returns
            time.sleep(0.01)
        while (continuous.busy() or continuous.decoder.rows) and time.monotonic() < end:
            time.sleep(0.01)
        assert not continuous.busy() and continuous.decoder.rows == []
        assert rows, "the streamed request never reached the decoder"
        row = rows[0]  # the streamed request's row
        assert row.done and len(row.generated) < 28  # left before its limit
        after = httpx.post(f"{url}/v1/generate", json={"text": "the river", "max_new_tokens": 5}, timeout=60)
        assert after.json()["text"] == alone(gpt, "the river", 5)["text"]
