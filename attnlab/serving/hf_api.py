"""Hugging Face inference API routes, so that an application written with ``huggingface_hub.InferenceClient``
(or against Text Generation Inference, or Text Embeddings Inference) only changes its base URL:

- ``POST /``: ``{"inputs": ..., "parameters": {...}}`` for the model's task (what ``InferenceClient(
  base_url=...)`` sends): ``fill-mask`` (masked LM), ``text-classification``, ``token-classification``,
  ``question-answering`` (fine-tuned encoders), ``feature-extraction`` (an encoder without a head),
  ``text-generation`` (GPT; TGI's parameters, ``details``, ``"stream": true`` as TGI's server-sent events),
  ``translation``;
- ``POST /pipeline/<task>``: any task the model serves, as Hugging Face's hosted API routes a model with
  several (every encoder also serves ``feature-extraction``);
- Text Embeddings Inference's ``POST /embed`` (mean-pooled, unit length unless ``"normalize": false``),
  ``/predict`` (classifiers), ``/tokenize`` and ``/decode``.

Each input is one request of the matching ``/v1/`` endpoint underneath (`ModelService.prepare`, the batcher,
``finish``): the same limits, token counting, batching, API key and metrics; the answers are the
pipelines', reshaped into Hugging Face's fields. Errors have Hugging Face's shape,
``{"error": "...", "error_type": "..."}``: 400 for a body or parameter this server does not take (unused
parameters in the sentence ``InferenceClient`` recognises), 422 for an input over the model's maximum, and
the server's 401, 413, 503 and 504.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError

import attnlab.serving.hf_schemas as H
import attnlab.serving.schemas as S
from attnlab.serving.service import RequestError
from attnlab.serving.token_logprobs import score_tokens

HF_TASKS = {  # /v1/ endpoint -> Hugging Face task name
    "fill-mask": "fill-mask",
    "classify": "text-classification",
    "ner": "token-classification",
    "qa": "question-answering",
    "embed": "feature-extraction",
    "generate": "text-generation",
    "translate": "translation",
}
TEI_PATHS = ("/embed", "/predict", "/tokenize", "/decode")


class HFError(Exception):
    """A request refused before it reaches the model: ``status`` and Hugging Face's ``error_type``."""

    def __init__(self, message: str, status: int = 400, error_type: str = "validation") -> None:
        super().__init__(message)
        self.status, self.error_type = status, error_type


class ClientGone(Exception):
    """The streaming client disconnected: raised on the model thread to end its generation early."""


def hf_error(status: int, message: str, error_type: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "error_type": error_type}, status_code=status, headers=headers)


def served_tasks(service: Any) -> list[str]:
    """The Hugging Face tasks ``service`` answers, its own task first (the one ``POST /`` runs)."""
    return [HF_TASKS[e] for e in service.endpoints if e in HF_TASKS]


def hf_paths(service: Any) -> list[str]:
    """The paths these routes add for ``service`` (for the metrics' labels and the API key)."""
    tei = {"encoder": list(TEI_PATHS), "gpt": ["/tokenize", "/decode"]}.get(service.kind, [])
    if "classify" not in service.endpoints and "/predict" in tei:
        tei.remove("/predict")
    return ["/", *(f"/pipeline/{t}" for t in served_tasks(service)), *tei]


def _validated(model: type[BaseModel], given: dict, what: str) -> Any:
    """``model(**given)``; a field it refuses becomes a 400 naming ``what.field``."""
    try:
        return model(**given)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(x) for x in first.get("loc", ()))
        raise HFError(
            f"'{what}.{field}': {first.get('msg')}" if field else first.get("msg", "invalid")
        ) from None


class HFRoutes:
    """The routes' shared state, the tasks, and how failures become Hugging Face's errors."""

    def __init__(self, service: Any, batcher: Any, settings: Any, failure: Callable, metrics: Any) -> None:
        self.service, self.batcher, self.settings, self.failure = service, batcher, settings, failure
        self.metrics = metrics
        self.tasks = served_tasks(service)
        self.runners = {
            "fill-mask": self.fill_mask, "text-classification": self.text_classification,
            "token-classification": self.token_classification, "question-answering": self.question_answering,
            "feature-extraction": self.feature_extraction, "text-generation": self.text_generation,
            "translation": self.translation,
        }  # fmt: skip

    # --------------------------------------------------------------------------------------------- errors

    def error(self, error: BaseException) -> JSONResponse:
        if isinstance(error, HFError):
            return hf_error(error.status, str(error), error.error_type)
        if isinstance(error, (ValidationError, ValueError)) and not isinstance(error, RequestError):
            return hf_error(400, str(error), "validation")
        response = self.failure(error, self.settings.timeout_s)
        body = json.loads(response.body)
        kind = {422: "validation", 503: "overloaded", 504: "timeout"}.get(response.status_code, body["error"])
        headers = {k: v for k, v in response.headers.items() if k.lower() == "retry-after"}
        return hf_error(response.status_code, body["message"], kind, headers or None)

    @staticmethod
    async def json_body(request: Request) -> dict:
        """The request's JSON object (400 when it is not one)."""
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise HFError(f"the body is not valid JSON ({error})") from None
        if not isinstance(body, dict):
            raise HFError('the body must be a JSON object, {"inputs": ..., "parameters": {...}}')
        return body

    def parameters(self, task: str, body: dict, extra: tuple[str, ...] = ()) -> Any:
        """The task's parameters from ``body`` (unused ones refused in the sentence HF's clients read)."""
        unknown = sorted(set(body) - {"inputs", "parameters", "options", *extra})
        if unknown:
            raise HFError(f"unknown field(s) {unknown}: the body holds 'inputs' and 'parameters'")
        if "inputs" not in body:
            raise HFError("'inputs' is required")
        given = body.get("parameters") or {}
        if not isinstance(given, dict):
            raise HFError("'parameters' must be a JSON object")
        if task == "feature-extraction":  # its options come beside 'inputs'
            given = {**given, **{k: body[k] for k in extra if k in body}}
        if unused := H.unused(task, given):
            raise HFError(f"The following `model_kwargs` are not used by the model: {unused} (attnlab serves "
                          f"{task} with {sorted(H.PARAMETERS[task].model_fields)})")  # fmt: skip
        return _validated(H.PARAMETERS[task], {k: v for k, v in given.items() if v is not None}, "parameters")

    # ------------------------------------------------------------------------------------------- running

    async def run(self, endpoint: str, requests: list[Any]) -> list[Any]:
        """Each request through ``/v1/<endpoint>``'s path (prepared first: one refused, none runs)."""
        prepared = [self.service.prepare(endpoint, r) for r in requests]
        timeout = self.settings.timeout_s
        results = await asyncio.gather(*(asyncio.wait_for(self.batcher.submit(p), timeout) for p in prepared))
        return [self.service.finish(p, r) for p, r in zip(prepared, results)]

    async def answer(self, task: str, body: dict) -> Any:
        if task not in self.tasks:
            served = ", ".join(self.tasks)
            raise HFError(f"this model ({self.service.architecture} from {self.service.directory.name}) does "
                          f"not serve {task}; it serves {served}", 400, "not_supported")  # fmt: skip
        return await self.runners[task](body)

    async def fill_mask(self, body: dict) -> Any:
        p = self.parameters("fill-mask", body)
        items = H.texts(body["inputs"])
        results = await self.run("fill-mask", [S.FillMaskRequest(text=t, top_k=p.top_k) for t in items])

        def shape(predictions: list) -> list:
            if predictions and isinstance(predictions[0], list):  # several masks: one list each
                return [shape(x) for x in predictions]
            return [{"score": x["score"], "token": x["token_id"], "token_str": x["token_str"],
                     "sequence": x["sequence"]} for x in predictions]  # fmt: skip

        out = [shape(r["predictions"]) for r in results]
        return out[0] if isinstance(body["inputs"], str) else out

    async def text_classification(self, body: dict) -> Any:
        p = self.parameters("text-classification", body)
        inputs = body["inputs"]
        items = inputs if isinstance(inputs, list) else [inputs]
        pairs = [_validated(H.PairInput, x, "inputs") if isinstance(x, dict) else x for x in items]
        requests = [
            S.ClassifyRequest(text=x.text, text_pair=x.text_pair, top_k=p.top_k)
            if isinstance(x, H.PairInput) else S.ClassifyRequest(text=H.texts(x)[0], top_k=p.top_k)
            for x in pairs
        ]  # fmt: skip
        return [r["predictions"] for r in await self.run("classify", requests)]  # a list per input

    async def token_classification(self, body: dict) -> Any:
        p = self.parameters("token-classification", body)
        items = H.texts(body["inputs"])
        results = await self.run(
            "ner", [S.NerRequest(text=t, aggregation=p.aggregation_strategy) for t in items]
        )
        if p.aggregation_strategy == "simple":
            out = [r["entities"] for r in results]
        else:
            out = [
                [{"entity": w["label"], "score": w["score"], "word": w["word"], "start": w["start"],
                  "end": w["end"]} for w in r["words"] if w["label"] not in p.ignore_labels]
                for r in results
            ]  # fmt: skip
        return out[0] if isinstance(body["inputs"], str) else out

    async def question_answering(self, body: dict) -> Any:
        p = self.parameters("question-answering", body)
        inputs = body["inputs"]
        items = [
            _validated(H.QAInput, x, "inputs") for x in (inputs if isinstance(inputs, list) else [inputs])
        ]
        requests = [
            S.QARequest(question=x.question, context=x.context, top_k=p.top_k,
                        max_answer_length=p.max_answer_len, version_2=p.handle_impossible_answer)
            for x in items
        ]  # fmt: skip
        out = []
        for r in await self.run("qa", requests):
            answers = [{k: a[k] for k in ("answer", "score", "start", "end")} for a in r["answers"]]
            out.append(answers[0] if p.top_k == 1 else answers)
        return out if isinstance(inputs, list) else out[0]

    async def feature_extraction(self, body: dict) -> Any:
        extra = (
            "normalize",
            "truncate",
            "truncation_direction",
            "prompt_name",
            "dimensions",
            "encoding_format",
        )
        p = self.parameters("feature-extraction", body, extra)
        return await self.embed(H.texts(body["inputs"]), p.normalize, p.truncate)

    async def embed(self, items: list[str], normalize: bool, truncate: bool) -> list[list[float]]:
        """Mean-pooled embeddings (as ``/v1/embeddings``), of unit length when ``normalize``."""
        requests = [S.EmbedRequest(text=t, pooling="mean", truncate=truncate) for t in items]
        vectors = [r["embedding"] for r in await self.run("embed", requests)]
        if normalize:
            vectors = [[x / n for x in v] if (n := sum(x * x for x in v) ** 0.5) > 0 else v for v in vectors]
        return vectors

    async def translation(self, body: dict) -> Any:
        p = self.parameters("translation", body)
        beams = p.generate_parameters.num_beams
        items = H.texts(body["inputs"])
        results = await self.run("translate", [S.TranslateRequest(text=t, beam_size=beams) for t in items])
        return [{"translation_text": r["translation"]} for r in results]

    # --------------------------------------------------------------------------------------- generation

    def generate_request(self, body: dict) -> tuple[H.TextGenerationParameters, S.GenerateRequest]:
        p = self.parameters("text-generation", body, ("stream",))
        if not isinstance(body["inputs"], str):
            raise HFError("'inputs' must be one text (the prompt)")
        prompt = H.texts(body["inputs"])[0]
        sample = (
            p.do_sample or (p.temperature not in (None, 1.0)) or p.top_k is not None or p.top_p is not None
        )
        request = _validated(S.GenerateRequest, dict(
            text=prompt, max_new_tokens=p.max_new_tokens, do_sample=sample, temperature=p.temperature or 1.0,
            top_k=p.top_k if sample else None, top_p=p.top_p if sample else None,
            repetition_penalty=p.repetition_penalty, seed=p.seed, stop=p.stop,
            stream=bool(body.get("stream")),
        ), "parameters")  # fmt: skip
        return p, request

    def prompt_length(self, prompt: str) -> int:
        return len(self.service.counter.encode(prompt, add_special_tokens=False).ids)

    def finish_reason(self, request: S.GenerateRequest, result: dict) -> str:
        if not result["finished"]:
            return "length"
        whole = self.service.counter.decode(result["tokens"], skip_special_tokens=True)
        return "stop_sequence" if any(s in whole for s in request.stop) else "eos_token"

    def start(self, request: S.GenerateRequest, on_token: Callable | None, gone: threading.Event) -> Any:
        """One generation through ``/v1/generate``'s path; records time to first token and tokens/s."""
        started, first = time.perf_counter(), []

        def emit(event: dict) -> None:  # on the model thread, at each new piece of text
            if gone.is_set():
                raise ClientGone("the client disconnected")
            first.append(first[0] if first else time.perf_counter())
            if on_token is not None:
                on_token(event)

        prepared = self.service.prepare("generate", request, emit=emit)
        prepared.logprobs = on_token is not None  # TGI's stream gives each token's log-probability

        async def answer() -> dict:
            result = await asyncio.wait_for(self.batcher.submit(prepared), self.settings.timeout_s)
            seconds = time.perf_counter() - started
            self.metrics.generation("/", (first[0] if first else time.perf_counter()) - started,
                                    len(result["tokens"]), seconds)  # fmt: skip
            return result

        return answer()

    async def text_generation(self, body: dict) -> Any:
        p, request = self.generate_request(body)
        if request.stream:
            return self.stream(p, request)
        result = await self.start(request, None, threading.Event())
        text = request.text + result["text"] if p.return_full_text else result["text"]
        out: dict[str, Any] = {"generated_text": text}
        if p.details:
            out["details"] = await self.details(request, result)
        return [out]

    async def details(self, request: S.GenerateRequest, result: dict) -> dict:
        """TGI's ``details``: finish reason, token count, seed, each new token with its log-probability."""
        prompt = list(self.service.counter.encode(request.text, add_special_tokens=False).ids)
        ids = prompt + list(result["tokens"])  # scored in one forward pass, as OpenAI's logprobs are
        scored = await asyncio.get_running_loop().run_in_executor(
            self.batcher.executor, score_tokens, self.service.model, ids, 0
        )
        decode, special = self.service.counter.decode, self.service.counter.all_special_ids
        tokens = [
            {"id": t, "text": decode([t], skip_special_tokens=False),
             "logprob": scored.logprobs[len(prompt) + i], "special": t in special}
            for i, t in enumerate(result["tokens"])
        ]  # fmt: skip
        return {"finish_reason": self.finish_reason(request, result), "generated_tokens": len(tokens),
                "seed": request.seed, "prefill": [], "tokens": tokens}  # fmt: skip

    def stream(self, p: H.TextGenerationParameters, request: S.GenerateRequest) -> StreamingResponse:
        """TGI's server-sent events: one per new piece of text (``token``), the last one with
        ``generated_text`` and ``details``; a client that goes away ends its generation at the next token."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict] = asyncio.Queue()
        gone = threading.Event()
        run = self.start(request, lambda e: loop.call_soon_threadsafe(events.put_nowait, e), gone)

        def data(index: int, event: dict | None, end: dict | None = None) -> str:
            token = {"id": event["token"] if event else 0, "text": event["text"] if event else "",
                     "logprob": event.get("logprob") if event else None, "special": False}  # fmt: skip
            payload = {"index": index, "token": token, "generated_text": None, "details": None, **(end or {})}
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        async def sse():
            task = asyncio.ensure_future(run)
            held, index = None, 0  # one event held back: the last carries the whole text
            try:
                while True:
                    get = asyncio.ensure_future(events.get())
                    done, _ = await asyncio.wait({get, task}, return_when=asyncio.FIRST_COMPLETED)
                    if get in done:
                        if held is not None:
                            index += 1
                            yield data(index, held)
                        held = get.result()
                        continue
                    get.cancel()
                    while not events.empty():
                        if held is not None:
                            index += 1
                            yield data(index, held)
                        held = events.get_nowait()
                    try:
                        result = task.result()
                    except Exception as error:  # noqa: BLE001 - TGI's error event
                        body = json.loads(self.error(error).body)
                        yield f"data: {json.dumps(body)}\n\n"
                        return
                    text = request.text + result["text"] if p.return_full_text else result["text"]
                    details = {"finish_reason": self.finish_reason(request, result),
                               "generated_tokens": len(result["tokens"]), "seed": request.seed,
                               "input_length": self.prompt_length(request.text)}  # fmt: skip
                    yield data(index + 1, held, {"generated_text": text, "details": details})
                    return
            finally:
                gone.set()
                if not task.done():
                    task.cancel()

        return StreamingResponse(sse(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    # ------------------------------------------------------------------------------ Text Embeddings Inference

    async def tei_embed(self, body: dict) -> Any:
        p = self.parameters("feature-extraction", body, ("normalize", "truncate", "truncation_direction",
                                                          "prompt_name"))  # fmt: skip
        return await self.embed(H.texts(body.get("inputs")), p.normalize, p.truncate)

    async def tei_predict(self, body: dict) -> Any:
        options = {k: v for k, v in body.items() if k != "inputs" and v is not None}
        p = _validated(H.PredictOptions, options, "body")
        inputs = body.get("inputs")
        if inputs is None:
            raise HFError("'inputs' is required")

        def is_pair(x: Any) -> bool:
            return isinstance(x, list) and len(x) == 2 and all(isinstance(s, str) for s in x)

        single = isinstance(inputs, str) or is_pair(inputs)
        items = [inputs] if single else inputs
        if not isinstance(items, list) or not items:
            raise HFError("'inputs' must be a text, a pair [text, text], or a list of those")
        requests = []
        for x in items:
            text, pair = (x[0], x[1]) if is_pair(x) else (H.texts(x)[0], None)
            given = {"text": text, "text_pair": pair, "truncate": p.truncate}
            requests.append(_validated(S.ClassifyRequest, given, "inputs"))
        out = [r["predictions"] for r in await self.run("classify", requests)]
        return out[0] if single else out

    def tei_tokenize(self, body: dict) -> Any:
        r = _validated(H.TokenizeRequest, body, "body")
        counter = self.service.counter
        special_ids = counter.all_special_ids
        out = []
        for text in H.texts(r.inputs):
            e = counter.encode(text, add_special_tokens=r.add_special_tokens)
            out.append(
                [
                    tei_token(text, i, tok, span, i in special_ids)
                    for i, tok, span in zip(e.ids, e.tokens, e.offsets)
                ]
            )
        return out

    def tei_decode(self, body: dict) -> Any:
        r = _validated(H.DecodeRequest, body, "body")
        batches = r.ids if r.ids and isinstance(r.ids[0], list) else [r.ids]
        size = self.service.counter.get_vocab_size()
        for ids in batches:
            if bad := [i for i in ids if not 0 <= i < size]:
                raise HFError(f"'ids': {bad[:5]} are not token ids of this model (0 to {size - 1})")
        return [
            self.service.counter.decode(ids, skip_special_tokens=r.skip_special_tokens) for ids in batches
        ]


def tei_token(text: str, token_id: int, token: str, span: tuple[int, int], special: bool) -> dict:
    """TEI's token: its id, its text in the input (a special token's own string), where it is."""
    start, stop = span
    added = special and start == stop  # a special token the template added: no place in the text
    return {"id": token_id, "text": token if added else text[start:stop], "special": special,
            "start": None if added else start, "stop": None if added else stop}  # fmt: skip


def add_hf_routes(
    app: FastAPI, service: Any, batcher: Any, settings: Any, failure: Callable, metrics: Any
) -> None:
    """Register the Hugging Face inference API routes the model serves (see the module docstring)."""
    routes = HFRoutes(service, batcher, settings, failure, metrics)

    def route(path: str, summary: str, handler: Callable) -> None:
        async def endpoint(request: Request) -> Any:
            try:
                result = handler(await routes.json_body(request))
                if asyncio.iscoroutine(result):
                    result = await result
            except Exception as error:  # noqa: BLE001 - every failure becomes HF's error shape
                return routes.error(error)
            return result if isinstance(result, StreamingResponse) else JSONResponse(result)

        app.post(path, summary=summary, tags=["Hugging Face"])(endpoint)

    default = routes.tasks[0]
    route("/", f"Hugging Face inference API: {default}", lambda body: routes.answer(default, body))
    for task in routes.tasks:
        route(f"/pipeline/{task}", f"Hugging Face inference API: {task}",
              lambda body, task=task: routes.answer(task, body))  # fmt: skip

    @app.post("/pipeline/{task}", include_in_schema=False)
    async def other_task(task: str) -> Any:
        return routes.error(HFError(f"this model does not serve {task}; it serves {', '.join(routes.tasks)}",
                                    400, "not_supported"))  # fmt: skip

    paths = hf_paths(service)
    tei = {"/embed": routes.tei_embed, "/predict": routes.tei_predict, "/tokenize": routes.tei_tokenize,
           "/decode": routes.tei_decode}  # fmt: skip
    for path, handler in tei.items():
        if path in paths:
            route(path, f"Text Embeddings Inference: {path[1:]}", handler)
