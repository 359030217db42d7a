"""OpenAI-compatible routes, so that an application written against OpenAI's API (or vLLM's, TGI's,
llama.cpp's or Ollama's, which answer the same) only changes its base URL:

- ``GET /v1/models``: the one model served (its ``kind``; ``pooling`` for encoders);
- ``POST /v1/completions`` (GPT directories): ``prompt`` (text or list), ``max_tokens``, ``temperature`` (0:
  greedy), ``top_p``, ``n``, ``stop``, ``seed``, ``logprobs``, ``echo``, ``stream`` (server-sent events
  ending with ``data: [DONE]``), ``usage``, ``finish_reason`` ``stop``/``length``;
- ``POST /v1/chat/completions`` (GPT directories): the messages rendered by the model's chat template
  (`attnlab.serving.chat_template`); a model without one answers 400 saying so;
- ``POST /v1/embeddings`` (encoders): mean-pooled last hidden states over non-padding tokens, as sentence
  embedders pool; ``encoding_format`` ``float`` or ``base64`` (little-endian float32, what the ``openai``
  client asks for by default).

Every choice is one ``/v1/generate`` request underneath (`ModelService.prepare` and the batcher: the same
limits, token counting, model thread and metrics), and every embedding one ``/v1/embed`` request with mean
pooling. Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from attnlab.serving.chat_template import ChatTemplate
from attnlab.serving.errors import ERROR_NAMES
from attnlab.serving.openai_schemas import MAX_PROMPTS, ChatRequest, CompletionRequest, EmbeddingRequest
from attnlab.serving.schemas import EmbedRequest, GenerateRequest
from attnlab.serving.service import RequestError
from attnlab.serving.token_logprobs import completion_logprobs, score_tokens

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_STOPS = 4


class ClientGone(Exception):
    """The streaming client disconnected: raised on the model thread to end its generation early."""


def openai_error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = ERROR_NAMES.get(status, "error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


class OpenAIRoutes:
    """The routes' shared state: the service, the batcher and how failures become responses."""

    def __init__(self, service: Any, batcher: Any, settings: Any, failure: Callable, metrics: Any) -> None:
        self.service, self.batcher, self.settings, self.failure = service, batcher, settings, failure
        self.metrics = metrics
        self.name = service.directory.name
        self.chat = ChatTemplate(service.directory) if service.kind == "gpt" else None

    def error(self, error: BaseException) -> JSONResponse:
        """``error`` (what `app._failure` answers) in OpenAI's error shape."""
        if isinstance(error, ValidationError):
            first = error.errors()[0]
            field = ".".join(str(x) for x in first.get("loc", ()))
            return openai_error(400, f"field '{field}': {first.get('msg')}", field)
        response = self.failure(error, self.settings.timeout_s)
        body = json.loads(response.body)
        return openai_error(response.status_code, body["message"], body.get("field"))

    def wrong_model(self, model: str | None) -> JSONResponse | None:
        if model is None or model == self.name:
            return None
        return openai_error(404, f"the model '{model}' is not served here; this server serves '{self.name}'",
                            "model")  # fmt: skip

    # ----------------------------------------------------------------------------------------- generation

    def choice_requests(self, body: Any, prompts: list[str]) -> list[tuple[int, str, GenerateRequest]]:
        """(choice index, prompt, the ``/v1/generate`` request) for every prompt x ``n``."""
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if len(stops) > MAX_STOPS:
            raise RequestError(f"'stop' has {len(stops)} strings; at most {MAX_STOPS}", "stop")
        sample = body.temperature > 0
        out = []
        for p, prompt in enumerate(prompts):
            for j in range(body.n):
                seed = None if body.seed is None else body.seed + j  # n choices differ, each reproducible
                request = GenerateRequest(
                    text=prompt, max_new_tokens=body.max_tokens or DEFAULT_MAX_TOKENS, do_sample=sample,
                    temperature=body.temperature if sample else 1.0, top_p=body.top_p if sample else None,
                    seed=seed, stop=stops,
                )  # fmt: skip
                out.append((p * body.n + j, prompt, request))
        return out

    def start(
        self, request: GenerateRequest, on_piece: Callable[[str], None] | None, gone: threading.Event
    ) -> Coroutine[Any, Any, dict]:
        """One choice through ``/v1/generate``'s path: checked now (raises `RequestError`), answered by the
        returned coroutine; it records the time to the first token and the tokens per second."""
        started = time.perf_counter()
        first: list[float] = []

        def emit(event: dict) -> None:  # on the model thread, at each new piece of text
            if gone.is_set():
                raise ClientGone("the client disconnected")
            if not first:
                first.append(time.perf_counter())
            if on_piece is not None:
                on_piece(event["text"])

        prepared = self.service.prepare("generate", request, emit=emit)

        async def answer() -> dict:
            result = await asyncio.wait_for(self.batcher.submit(prepared), self.settings.timeout_s)
            seconds = time.perf_counter() - started
            ttft = (first[0] - started) if first else seconds
            self.metrics.generation("/v1/completions", ttft, len(result["tokens"]), seconds)
            return result

        return answer()

    def start_all(
        self,
        choices: list[tuple[int, str, GenerateRequest]],
        gone: threading.Event,
        on_piece: Callable[[int], Callable[[str], None]] | None = None,
    ) -> list[Coroutine[Any, Any, dict]]:
        """`start` for each choice; when one is refused, none runs."""
        started: list[Coroutine[Any, Any, dict]] = []
        try:
            for index, _, request in choices:
                started.append(self.start(request, on_piece(index) if on_piece else None, gone))
        except Exception:
            for coroutine in started:
                coroutine.close()
            raise
        return started

    async def logprobs(self, prompt: str, result: dict, top_n: int, echo: bool) -> tuple[dict, int]:
        """OpenAI's ``logprobs`` for a finished choice (scored on the model thread), and its prompt length."""
        tok = self.service.tokenizer
        prompt_ids = list(self.service.counter.encode(prompt, add_special_tokens=False).ids)
        ids = prompt_ids + list(result["tokens"])
        scored = await asyncio.get_running_loop().run_in_executor(
            self.batcher.executor, score_tokens, self.service.model, ids, top_n
        )
        first = 0 if echo else len(prompt_ids)

        def decode(piece: list[int]) -> str:
            return tok.decode(piece, skip_special_tokens=False)

        return completion_logprobs(scored, ids, first, decode, 0 if echo else len(prompt)), len(prompt_ids)

    def prompt_tokens(self, prompt: str) -> int:
        return len(self.service.counter.encode(prompt, add_special_tokens=False).ids)

    def finish_reason(self, result: dict) -> str:
        return "stop" if result["finished"] else "length"

    # ----------------------------------------------------------------------------------------- responses

    def envelope(self, chat: bool, chunk: bool = False) -> dict:
        kind = ("chat.completion" if chat else "text_completion") + (".chunk" if chunk and chat else "")
        prefix = "chatcmpl" if chat else "cmpl"
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
                "model": self.name}  # fmt: skip

    @staticmethod
    def choice(chat: bool, index: int, text: str, finish: str | None, logprobs: dict | None = None) -> dict:
        if chat:
            message = {"role": "assistant", "content": text}
            return {"index": index, "message": message, "finish_reason": finish, "logprobs": None}
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}

    @staticmethod
    def delta(chat: bool, index: int, text: str, finish: str | None) -> dict:
        if chat:
            return {"index": index, "delta": {"role": "assistant", "content": text} if text else {},
                    "finish_reason": finish, "logprobs": None}  # fmt: skip
        return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}

    @staticmethod
    def usage(prompt: int, completion: int) -> dict:
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    async def complete(self, body: Any, prompts: list[str], chat: bool) -> Any:
        """The answer to a completion (``chat``: a chat completion) of ``prompts``."""
        if len(prompts) > MAX_PROMPTS:
            return openai_error(400, f"{len(prompts)} prompts; at most {MAX_PROMPTS} per request", "prompt")
        gone = threading.Event()
        try:
            choices = self.choice_requests(body, prompts)
            if body.stream:
                return self.stream(body, choices, prompts, chat, gone)
            results = await asyncio.gather(*self.start_all(choices, gone))
        except Exception as error:  # noqa: BLE001 - every failure becomes an OpenAI error
            gone.set()  # the other choices stop at their next token
            return self.error(error)
        out, generated = [], 0
        top_n = getattr(body, "logprobs", None)
        echo = getattr(body, "echo", False)
        for (index, prompt, _), result in zip(choices, results):
            logprobs = None
            if top_n is not None:
                logprobs, _ = await self.logprobs(prompt, result, top_n, echo)
            text = prompt + result["text"] if echo else result["text"]
            out.append(self.choice(chat, index, text, self.finish_reason(result), logprobs))
            generated += len(result["tokens"])
        used = sum(self.prompt_tokens(p) for p in prompts)
        return {**self.envelope(chat), "choices": out, "usage": self.usage(used, generated)}

    def stream(
        self, body: Any, choices: list, prompts: list[str], chat: bool, gone: threading.Event
    ) -> StreamingResponse:
        """Server-sent events: one ``data:`` chunk per new piece of text of any choice, one with each
        choice's ``finish_reason``, the usage when ``stream_options.include_usage``, then ``data: [DONE]``."""
        if getattr(body, "logprobs", None) is not None:
            raise RequestError("'logprobs' is answered without streaming only; send \"stream\": false",
                               "logprobs")  # fmt: skip
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[tuple] = asyncio.Queue()

        def on_piece(index: int) -> Callable[[str], None]:
            return lambda piece: loop.call_soon_threadsafe(events.put_nowait, ("piece", index, piece))

        async def one(index: int, coroutine: Coroutine[Any, Any, dict]) -> None:
            try:
                events.put_nowait(("done", index, await coroutine))
            except Exception as error:  # noqa: BLE001 - sent to the client as an error event
                events.put_nowait(("error", index, error))

        runs = self.start_all(choices, gone, on_piece)  # refused here: an HTTP error, not a stream
        head = self.envelope(chat, chunk=True)

        def data(payload: dict) -> str:
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        async def sse():
            tasks = [asyncio.ensure_future(one(index, c)) for (index, _, _), c in zip(choices, runs)]
            try:
                if getattr(body, "echo", False):
                    for index, prompt, _ in choices:
                        yield data({**head, "choices": [self.delta(chat, index, prompt, None)]})
                left, generated = len(tasks), 0
                while left:
                    kind, index, value = await events.get()
                    if kind == "piece":
                        yield data({**head, "choices": [self.delta(chat, index, value, None)]})
                    elif kind == "done":
                        left -= 1
                        generated += len(value["tokens"])
                        finish = self.finish_reason(value)
                        yield data({**head, "choices": [self.delta(chat, index, "", finish)]})
                    else:
                        yield data(json.loads(self.error(value).body))
                        return
                if body.stream_options is not None and body.stream_options.include_usage:
                    used = sum(self.prompt_tokens(p) for p in prompts)
                    yield data({**head, "choices": [], "usage": self.usage(used, generated)})
                yield "data: [DONE]\n\n"
            finally:
                gone.set()  # a client gone mid-stream frees the model thread at the next token
                for task in tasks:
                    task.cancel()

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def embeddings(self, body: EmbeddingRequest) -> Any:
        """Mean-pooled embeddings of ``input`` (one ``/v1/embed`` request each, batched together)."""
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts or len(texts) > MAX_PROMPTS:
            return openai_error(400, f"'input' holds {len(texts)} texts; send 1 to {MAX_PROMPTS}", "input")
        try:
            prepared = [self.service.prepare("embed", EmbedRequest(text=t, pooling="mean")) for t in texts]
            timeout = self.settings.timeout_s
            results = await asyncio.gather(
                *(asyncio.wait_for(self.batcher.submit(p), timeout) for p in prepared)
            )
        except Exception as error:  # noqa: BLE001
            return self.error(error)
        dim = results[0]["dim"]
        if body.dimensions is not None and body.dimensions != dim:
            return openai_error(400, f"'dimensions' {body.dimensions}: this model's embeddings have {dim}",
                                "dimensions")  # fmt: skip
        data = []
        for i, result in enumerate(results):
            vector = result["embedding"]
            if body.encoding_format == "base64":
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": i, "embedding": vector})
        used = sum(p.tokens for p in prepared)
        usage = {"prompt_tokens": used, "total_tokens": used}
        return {"object": "list", "data": data, "model": self.name, "usage": usage}

    def models(self) -> dict:
        service = self.service
        card: dict[str, Any] = {
            "id": self.name, "object": "model", "created": int(service.directory.stat().st_mtime),
            "owned_by": "attnlab", "root": self.name, "kind": service.kind,
            "architecture": service.architecture, "max_model_len": service.max_tokens,
        }  # fmt: skip
        if service.kind == "encoder":
            card["pooling"] = "mean"  # /v1/embeddings
        if self.chat is not None:
            card["chat_template"] = self.chat.reason is None
        return {"object": "list", "data": [card]}


def openai_paths(service: Any) -> list[str]:
    """The OpenAI-compatible paths this model serves."""
    kind = {"gpt": ["/v1/completions", "/v1/chat/completions"], "encoder": ["/v1/embeddings"]}
    return ["/v1/models", *kind.get(service.kind, [])]


def add_openai_routes(
    app: FastAPI, service: Any, batcher: Any, settings: Any, failure: Callable, metrics: Any
) -> None:
    """Register the OpenAI-compatible routes the model serves (see the module docstring)."""
    routes = OpenAIRoutes(service, batcher, settings, failure, metrics)

    @app.get("/v1/models", summary="the model served (OpenAI's model list)", tags=["OpenAI"])
    async def models() -> dict:
        return routes.models()

    if service.kind == "gpt":

        @app.post("/v1/completions", summary="OpenAI completions", tags=["OpenAI"])
        async def completions(body: CompletionRequest) -> Any:
            prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
            return routes.wrong_model(body.model) or await routes.complete(body, prompts, chat=False)

        @app.post("/v1/chat/completions", summary="OpenAI chat completions", tags=["OpenAI"])
        async def chat_completions(body: ChatRequest) -> Any:
            if (wrong := routes.wrong_model(body.model)) is not None:
                return wrong
            if routes.chat.reason is not None:
                return openai_error(400, routes.chat.reason, "messages")
            try:
                prompt = routes.chat.render([m.model_dump(exclude_none=True) for m in body.messages])
            except ValueError as error:
                return openai_error(400, str(error), "messages")
            return await routes.complete(body, [prompt], chat=True)

    if service.kind == "encoder":

        @app.post("/v1/embeddings", summary="OpenAI embeddings (mean pooling)", tags=["OpenAI"])
        async def embeddings(body: EmbeddingRequest) -> Any:
            return routes.wrong_model(body.model) or await routes.embeddings(body)
