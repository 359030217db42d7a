"""attnlab serve's HTTP API on tiny random models: every endpoint answers what the in-process pipeline answers
for the same input, dynamic batching changes nothing but the batch size, and every error has its status
code and a JSON body naming the problem (413, 422, 404, 401, 503 + Retry-After, 504)."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402
from serving_models import close, make_all  # noqa: E402

from attnlab.cli import main  # noqa: E402
from attnlab.serving.app import create_app  # noqa: E402
from attnlab.serving.server import BackgroundServer  # noqa: E402
from attnlab.serving.service import load_service  # noqa: E402
from attnlab.serving.settings import ServeSettings  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return make_all(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def services(dirs):
    return {kind: load_service(d) for kind, d in dirs.items()}


@pytest.fixture(scope="module")
def clients(services):
    out, stack = {}, []
    for kind, service in services.items():
        client = TestClient(create_app(service))
        out[kind] = client.__enter__()
        stack.append(client)
    yield out
    for client in stack:
        client.__exit__(None, None, None)


# ----------------------------------------------------------------------------------------- equality


def test_endpoints_follow_the_model(services):
    assert services["mlm"].endpoints == ("fill-mask", "embed", "attention")
    assert services["cls"].endpoints == ("classify", "embed", "attention")
    assert services["ner"].endpoints == ("ner", "embed", "attention")
    assert services["qa"].endpoints == ("qa", "embed", "attention")
    assert services["gpt"].endpoints == ("generate", "attention")
    assert services["mt"].endpoints == ("translate",)


def test_every_endpoint_answers_what_the_in_process_pipeline_answers(dirs, clients, capsys):
    from attnlab.io import load
    from attnlab.io import load as load_model
    from attnlab.tasks.attention import attention_weights
    from attnlab.tasks.pipelines import pipeline
    from attnlab.tokenizers import load_tokenizer
    from attnlab.translation.recipe import translate_texts

    def post(kind: str, endpoint: str, body: dict) -> dict:
        r = clients[kind].post(f"/v1/{endpoint}", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    text = "paris is a city on the river seine in the north of france ."
    masked = "the capital of france is [MASK] . paris is a [MASK] ."
    close(
        post("mlm", "fill-mask", {"text": masked, "top_k": 3})["predictions"],
        pipeline("fill-mask", dirs["mlm"])(masked, top_k=3),
    )
    pair = ("alan turing was born in london", "paris is a city")
    close(
        post("cls", "classify", {"text": pair[0], "text_pair": pair[1]})["predictions"],
        pipeline("classify", dirs["cls"])(pair),
    )
    sentence = "Alan Turing was born in London and worked at Manchester."
    close(post("ner", "ner", {"text": sentence})["entities"], pipeline("ner", dirs["ner"])(sentence))
    close(
        post("ner", "ner", {"text": sentence, "aggregation": "none"})["words"],
        pipeline("ner", dirs["ner"])(sentence, aggregation="none"),
    )
    question, context = "where was alan turing born ?", "alan turing was born in london . " * 6
    close(
        post("qa", "qa", {"question": question, "context": context, "top_k": 3})["answers"],
        pipeline("qa", dirs["qa"])(question, context, top_k=3),
    )
    for pooling in ("cls", "mean"):
        got = post("qa", "embed", {"text": text, "pooling": pooling})
        close(got["embedding"], pipeline("embed", dirs["qa"])(text, pooling=pooling).tolist())
    for kind in ("mlm", "gpt"):
        model, tok = load_model(dirs[kind]) if kind == "mlm" else None, load_tokenizer(dirs[kind])
        if kind == "gpt":
            from attnlab.io.families.gpt2 import load_causal_lm

            model = load_causal_lm(dirs[kind])
        close(
            post(kind, "attention", {"text": "paris is a city"}),
            attention_weights(model, tok, "paris is a city"),
        )
    close(
        post("mlm", "attention", {"text": "paris is a city", "text_pair": "in france"}),
        attention_weights(
            load_model(dirs["mlm"]), load_tokenizer(dirs["mlm"]), "paris is a city", "in france"
        ),
    )
    # generation: what `attnlab generate --json` prints for the same prompt and options
    assert (
        main(
            [
                "generate",
                str(dirs["gpt"]),
                "--prompt",
                "the capital of",
                "--max-new-tokens",
                "6",
                "--sample",
                "--seed",
                "3",
                "--top-k",
                "5",
                "--json",
            ]
        )
        == 0
    )
    cli = json.loads(capsys.readouterr().out)[0]
    got = post(
        "gpt",
        "generate",
        {"text": "the capital of", "max_new_tokens": 6, "do_sample": True, "seed": 3, "top_k": 5},
    )
    assert (got["text"], got["tokens"]) == (cli["text"], cli["tokens"])
    model, tok = load(dirs["mt"]), load_tokenizer(dirs["mt"])
    for beam in (1, 3):
        got = post("mt", "translate", {"text": "paris is a city", "beam_size": beam, "max_length_offset": 5})
        assert (
            got["translation"]
            == translate_texts(model, tok, ["paris is a city"], beam, max_length_offset=5)[0]
        )


def test_generate_streams_the_same_text_as_server_sent_events(clients):
    body = {"text": "the capital of", "max_new_tokens": 8}
    whole = clients["gpt"].post("/v1/generate", json=body).json()
    with clients["gpt"].stream("POST", "/v1/generate", json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = "".join(r.iter_text())
    blocks = [b for b in raw.split("\n\n") if b.strip()]
    pieces = [json.loads(b[len("data: ") :]) for b in blocks if b.startswith("data: ")]
    done = [b for b in blocks if b.startswith("event: done")]
    assert len(done) == 1 and blocks[-1] == done[0]
    final = json.loads(done[0].split("data: ", 1)[1])
    assert final["text"] == whole["text"] and final["tokens"] == whole["tokens"]
    assert "".join(p["text"] for p in pieces) == whole["text"] and len(pieces) >= 2


def test_concurrent_requests_share_a_batch_and_answer_as_alone(dirs, services):
    """Eight requests sent together with a 300 ms window run as one padded batch (the metrics say so) and
    each answer equals the pipeline's answer for that text alone."""
    from attnlab.tasks.pipelines import pipeline

    texts = [f"paris is a [MASK] {'city ' * i}." for i in range(8)]  # different lengths: padding matters
    settings = ServeSettings(max_wait_ms=300)
    with TestClient(create_app(services["mlm"], settings)) as client:
        results: dict[int, dict] = {}

        def send(i: int) -> None:
            results[i] = client.post("/v1/fill-mask", json={"text": texts[i], "top_k": 2}).json()

        threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        metrics = client.get("/metrics").text
    alone = pipeline("fill-mask", dirs["mlm"], batch_size=1)
    for i, text in enumerate(texts):
        close(results[i]["predictions"], alone(text, top_k=2))
    sizes = {
        line.split('le="')[1].split('"')[0]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith('attnlab_batch_size_bucket{endpoint="fill-mask"')
    }
    assert sizes["+Inf"] - sizes["1.0"] >= 1, metrics  # at least one batch of more than one request


# ------------------------------------------------------------------------------------------- errors


def test_validation_errors_name_the_field(clients):
    c = clients["mlm"]
    r = c.post("/v1/fill-mask", content=b'{"text": "a [MASK]"', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.json()["message"]
    for body, field, words in [
        ({}, "text", "required"),
        ({"text": "a [MASK]", "top_k": "5"}, "top_k", "integer"),
        ({"text": "a [MASK]", "top_k": 0}, "top_k", "greater than or equal to 1"),
        ({"text": "a [MASK]", "topk": 3}, "topk", "unknown field"),
        ({"text": ""}, "text", "at least 1 character"),
        ({"text": "paris is a city"}, "text", "no [MASK] token"),
    ]:
        r = c.post("/v1/fill-mask", json=body)
        assert r.status_code == 422, body
        got = r.json()
        assert got["status"] == 422 and got["field"] == field and words in got["message"], got
    r = c.post("/v1/fill-mask", json=["a [MASK]"])
    assert r.status_code == 422 and "JSON object" in r.json()["message"]


def test_a_fill_mask_batch_answers_what_the_pipeline_answers_each_text(dirs, services):
    """A batch that mixes texts of other lengths and one cut to the model's 32 positions: the event loop's
    encodings (kept) and the model thread's (for the cut text) give the pipeline's answers."""
    from attnlab.serving import schemas
    from attnlab.tasks.pipelines import pipeline

    service = services["mlm"]
    texts = ["paris is a [MASK] .", "the capital of france is [MASK] . paris is a [MASK] on the river .",
             "the capital of france is [MASK] ." + " paris is a city ." * 20]  # fmt: skip
    prepared = [service.prepare("fill-mask", schemas.FillMaskRequest(text=t, top_k=2, truncate=True))
                for t in texts]  # fmt: skip
    assert [p.encoding is None for p in prepared] == [False, False, True]
    results = service.run_batch(prepared[0].key, prepared)
    pipe = pipeline("fill-mask", dirs["mlm"])
    for text, p, result in zip(texts, prepared, results):
        close(service.finish(p, result)["predictions"], pipe(text, top_k=2))


def test_too_many_tokens_is_422_unless_truncation_is_asked(clients):
    long = "the capital of france is [MASK] ." + " paris is a city ." * 20  # > 32 positions
    r = clients["mlm"].post("/v1/fill-mask", json={"text": long})
    assert r.status_code == 422 and r.json()["field"] == "text"
    assert "tokens long; this model reads at most 32" in r.json()["message"]
    r = clients["mlm"].post("/v1/fill-mask", json={"text": long, "truncate": True})
    assert r.status_code == 200 and len(r.json()["predictions"]) == 5
    late_mask = "paris is a city ." * 20 + " [MASK]"
    r = clients["mlm"].post("/v1/fill-mask", json={"text": late_mask, "truncate": True})
    assert r.status_code == 422 and "within the first 32 tokens" in r.json()["message"]
    r = clients["gpt"].post("/v1/generate", json={"text": "paris is a city ." * 10})
    assert r.status_code == 422 and "context is 32" in r.json()["message"]
    r = clients["gpt"].post(
        "/v1/generate", json={"text": "paris is a city ." * 10, "truncate": True, "max_new_tokens": 2}
    )
    assert r.status_code == 200 and r.json()["warnings"]


def test_unserved_endpoint_is_404_naming_the_ones_it_has(clients):
    r = clients["mlm"].post("/v1/qa", json={"question": "a", "context": "b"})
    assert r.status_code == 404
    got = r.json()
    assert got["endpoints"] == ["/v1/fill-mask", "/v1/embed", "/v1/attention"]
    assert "does not serve /v1/qa" in got["message"]
    assert clients["gpt"].post("/v1/nope", json={}).status_code == 404
    assert clients["mt"].get("/v1/translate").status_code == 405


def test_body_over_the_limit_is_413(services):
    app = create_app(services["mlm"], ServeSettings(max_body_bytes=300))
    with TestClient(app) as c:
        assert c.post("/v1/fill-mask", json={"text": "a [MASK]"}).status_code == 200
        r = c.post("/v1/fill-mask", json={"text": "[MASK] " + "x" * 400})
        assert r.status_code == 413 and "300 bytes" in r.json()["message"]

        def chunks():  # no Content-Length: counted as it arrives
            yield b'{"text": "'
            for _ in range(10):
                yield b"x" * 50
            yield b'"}'

        r = c.post("/v1/fill-mask", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413


def test_api_key(services):
    app = create_app(services["cls"], ServeSettings(api_key="s3cret"))
    body = {"text": "paris is a city"}
    with TestClient(app) as c:
        r = c.post("/v1/classify", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert c.post("/v1/classify", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert (
            c.post("/v1/classify", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        )
        assert c.post("/v1/classify", json=body, headers={"X-API-Key": "s3cret"}).status_code == 200
        assert c.get("/metrics").status_code == 401
        assert c.get("/health").status_code == 200 and c.get("/").status_code == 200
        assert c.get("/v1/info").json()["auth_required"] is True


def _blocking(app) -> threading.Event:
    """Make the app's model thread wait for the returned event before each batch."""
    gate = threading.Event()
    batcher = app.state.batcher
    run = batcher.run_batch

    def run_batch(key, batch):
        gate.wait(10)
        return run(key, batch)

    batcher.run_batch = run_batch
    return gate


def _wait_for(condition, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_full_queue_is_503_with_retry_after_and_slow_request_is_504(services):
    app = create_app(services["cls"], ServeSettings(max_queue=1, max_wait_ms=0, timeout_s=5))
    body = {"text": "paris is a city"}
    with TestClient(app) as c:
        gate = _blocking(app)
        batcher = app.state.batcher
        answers: list[int] = []
        sender = lambda: answers.append(c.post("/v1/classify", json=body).status_code)  # noqa: E731
        first = threading.Thread(target=sender)
        first.start()
        _wait_for(lambda: batcher.running == 1)  # on the model thread, held
        second = threading.Thread(target=sender)
        second.start()
        _wait_for(lambda: batcher.depth() == 1)  # waiting in the queue
        r = c.post("/v1/classify", json=body)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "busy" in r.json()["message"]
        gate.set()
        first.join()
        second.join()
        assert answers == [200, 200]
    app = create_app(services["cls"], ServeSettings(timeout_s=0.2))
    with TestClient(app) as c:
        gate = _blocking(app)
        r = c.post("/v1/classify", json=body)
        assert r.status_code == 504 and "0.2 s" in r.json()["message"]
        gate.set()
        assert c.post("/v1/classify", json=body).status_code == 200  # the server goes on


def test_health_ready_and_prometheus_metrics(clients):
    c = clients["ner"]
    assert c.get("/health").json() == {"status": "ok"}
    assert c.get("/ready").status_code == 200
    c.post("/v1/ner", json={"text": "Alan Turing"})
    c.post("/v1/ner", json={"text": ""})
    text = c.get("/metrics").text
    assert 'attnlab_requests_total{endpoint="/v1/ner",status="200"}' in text
    assert 'attnlab_requests_total{endpoint="/v1/ner",status="422"}' in text
    assert 'attnlab_request_duration_seconds_bucket{endpoint="/v1/ner",le="+Inf"}' in text
    assert 'attnlab_batch_size_count{endpoint="ner"}' in text
    assert "attnlab_queue_depth 0" in text and "# TYPE attnlab_batch_tokens histogram" in text
    info = c.get("/v1/info").json()
    assert info["labels"] == ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"] and info["max_tokens"] == 32
    spec = c.get("/openapi.json").json()
    assert "/v1/ner" in spec["paths"] and "/v1/fill-mask" not in spec["paths"]


def test_graceful_shutdown_lets_in_flight_requests_finish(services):
    """Shutdown asked while a request runs on the model thread: the request still gets its answer."""
    import httpx

    app = create_app(services["cls"])
    server = BackgroundServer(app)
    with server as url:
        gate = _blocking(app)
        result: dict = {}
        t = threading.Thread(
            target=lambda: result.update(
                r=httpx.post(f"{url}/v1/classify", json={"text": "paris"}, timeout=30)
            )
        )
        t.start()
        _wait_for(lambda: app.state.batcher.running == 1)
        server.server.should_exit = True  # what SIGINT/SIGTERM set in uvicorn
        time.sleep(0.3)
        assert app.state.ready  # still serving the request: the app's shutdown has not begun
        gate.set()
        t.join(30)
    assert result["r"].status_code == 200 and result["r"].json()["predictions"]
    assert not server.thread.is_alive() and not app.state.ready


def test_serve_command_errors_are_one_line(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "--max-batch-tokens" in out and "127.0.0.1" in out


def test_onnxruntime_backend_answers_as_torch(dirs, services, tmp_path):
    """--backend onnxruntime on an `attnlab export --onnx` directory: the same labels, scores within 1e-4."""
    pytest.importorskip("onnxruntime")
    import attnlab.inference.onnx_export as export
    from attnlab.io import load as load_model
    from attnlab.tokenizers import load_tokenizer

    out = export.export_onnx(load_model(dirs["cls"]), tmp_path / "onnx", load_tokenizer(dirs["cls"]))
    service = load_service(out, backend="onnxruntime", threads=1)
    assert service.endpoints == ("classify", "embed") and service.backend == "onnxruntime"
    body = {"text": "alan turing was born in london", "text_pair": "paris is a city"}
    with TestClient(create_app(service)) as c, TestClient(create_app(services["cls"])) as t:
        got, want = c.post("/v1/classify", json=body).json(), t.post("/v1/classify", json=body).json()
        assert c.get("/v1/info").json()["backend"] == "onnxruntime"
    assert [p["label"] for p in got["predictions"]] == [p["label"] for p in want["predictions"]]
    for a, b in zip(got["predictions"], want["predictions"]):
        assert a["score"] == pytest.approx(b["score"], abs=1e-4)


def test_int8_serves_the_int8_model_close_to_float32(dirs, services):
    """--int8 on the torch engine: every linear layer int8 (attnlab.inference.quantize), scores close to the
    float32 service's; a GPT is refused with the option named."""
    from attnlab.inference import Int8Linear

    service = load_service(dirs["cls"], int8=True)
    assert any(isinstance(m, Int8Linear) for m in service.model.modules())
    body = {"text": "alan turing was born in london", "text_pair": "paris is a city"}
    with TestClient(create_app(service)) as c, TestClient(create_app(services["cls"])) as t:
        got, want = c.post("/v1/classify", json=body).json(), t.post("/v1/classify", json=body).json()
        assert c.get("/v1/info").json()["int8"] is True and t.get("/v1/info").json()["int8"] is False
        assert c.post("/v1/attention", json={"text": "paris is a city"}).status_code == 200
    scores = {p["label"]: p["score"] for p in want["predictions"]}
    assert {p["label"] for p in got["predictions"]} == scores.keys()
    for p in got["predictions"]:
        assert p["score"] == pytest.approx(scores[p["label"]], abs=0.05)  # quantized: close, not equal
    with pytest.raises(ValueError, match="a GPT; --int8 serves encoders"):
        load_service(dirs["gpt"], int8=True)


def test_attnlab_serve_process_finishes_in_flight_requests_on_sigterm(dirs):
    """The real command: ``attnlab serve`` binds 127.0.0.1, and a request whose body is still arriving when
    SIGTERM comes is read, answered, and only then does the process exit."""
    import signal
    import socket
    import subprocess
    import sys

    import httpx

    from attnlab.serving.server import free_port

    port = free_port()
    cmd = [sys.executable, "-m", "attnlab", "serve", str(dirs["cls"]), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < end, (
                proc.stdout.read() if proc.poll() else "slow"
            )
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        body = json.dumps({"text": "paris is a city"}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(
                f"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            )
            time.sleep(0.5)  # the server has the headers and waits for the body
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            sock.sendall(body)
            response = b""
            while chunk := sock.recv(65536):
                response += chunk
        assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after its clean stop
    finally:
        if proc.poll() is None:
            proc.kill()
    head, _, payload = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and json.loads(payload)["predictions"]
    log = proc.stdout.read()
    assert f"on http://127.0.0.1:{port}/" in log and "/v1/classify" in log
