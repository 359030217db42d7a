"""What a model directory can serve, and how a batch of requests runs on it.

`load_service(directory)` reads what the directory holds and builds a `ModelService`:

================================  ===============================================================
model                             endpoints (``/v1/<name>``)
================================  ===============================================================
masked LM (EncoderForPreTraining)  fill-mask, embed, attention
sequence classification           classify, embed, attention
token classification              ner, embed, attention
question answering                qa, embed, attention
any other encoder                 embed, attention
GPT (attnlab or HF GPT-2)         generate, attention
translation (translate-train)     translate
================================  ===============================================================

Each request passes three steps:

- `ModelService.prepare` (on the server's event loop, cheap): checks what the model needs (a mask token, the
  length limit), counts the request's tokens with a tokenizer of its own, and returns a `Prepared`: the
  batch key (requests with equal keys may share a batch: same endpoint and options) and the token count
  the batcher bounds batches by;
- `ModelService.run_batch` (on the one model thread): runs a list of prepared requests through the same
  pipeline the library offers in-process (`attnlab.tasks.pipelines`, `attnlab.generation.generate`,
  `attnlab.translation.recipe.translate_texts`, `attnlab.tasks.attention.attention_weights`) as one padded
  batch, so the server answers exactly what the pipeline does;
- `ModelService.finish` (on the event loop again): the answer's JSON from what the model thread returned.

Fill-mask runs its pipeline's stages apart (`FillMaskPipeline.encode`, ``top_tokens``, ``fill``): the
encoding made when counting is kept for the model thread when it is the pipeline's (not cut), and the
candidates' texts are decoded in `finish`, so the one model thread, which every request waits for, runs the
model and little else; the event loop's Python work runs while the model thread is in its kernels (they
release the GIL). The other endpoints run whole on the model thread.

Mask tokens differ by family (BERT's ``[MASK]``, RoBERTa's ``<mask>``): fill-mask reads either spelling as
the model's own token, and ``/v1/info`` says which it is. Token lists carry each token's text as ``decode``
of that token gives it (``token_str`` beside fill-mask's vocabulary ``token``; attention's ``tokens``), not
the vocabulary's byte-level pieces (``Ġthe``).
"""

from __future__ import annotations

import itertools
import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import attnlab.serving.schemas as schemas
from attnlab.accel import optimize
from attnlab.generation import GenerationConfig, generate, left_pad
from attnlab.generation.text_stream import TextStream, cut_at_stop
from attnlab.inference.engine import check_engine, load_encoder
from attnlab.io import load
from attnlab.io.directories import check_model_dir
from attnlab.limits import FILL_MASK_WHAT
from attnlab.tasks import pipelines as P
from attnlab.tasks.attention import attention_weights
from attnlab.tokenizers import Tokenizer, load_tokenizer
from attnlab.tokenizers import load_tokenizer as load_directory_tokenizer
from attnlab.tokenizers.mask_token import MASK_SPELLINGS, no_mask_message, with_model_mask
from attnlab.translation.config import is_seq2seq_config
from attnlab.translation.data import encode_text
from attnlab.translation.recipe import translate_texts

ENCODER_HEADS = {  # architecture -> the task endpoint its head serves
    "EncoderForPreTraining": "fill-mask",
    "EncoderForSequenceClassification": "classify",
    "EncoderForTokenClassification": "ner",
    "EncoderForQuestionAnswering": "qa",
}
_unique = itertools.count()  # batch keys of requests that never share a batch


class RequestError(ValueError):
    """A request the model cannot serve as given (HTTP 422), naming the field."""

    def __init__(self, message: str, field: str | None = None, status: int = 422) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


class TooManyTokens(RequestError):
    """An input over the model's maximum length (HTTP 422), when the request did not ask to truncate."""


@dataclass
class Prepared:
    """A validated request, ready for the batcher."""

    key: tuple  # requests with equal keys run in one batch (same endpoint and options)
    tokens: int  # its length in tokens: a batch costs (batch size) x (longest)
    request: Any  # the pydantic request
    emit: Callable[[dict], None] | None = field(default=None, repr=False)  # streaming: events to the client
    encoding: Any = field(default=None, repr=False)  # fill-mask: the text's encoding, when the pipeline's
    logprobs: bool = False  # generate, streamed (continuous): each piece with its token's log-probability


class ModelService:
    """A loaded model, its tokenizers and the endpoints it serves."""

    def __init__(
        self, directory: Path, kind: str, model: Any, tokenizer: Any, counter: Any, int8: bool = False
    ) -> None:
        self.directory = directory
        self.int8 = int8  # int8 weights (attnlab's quantize, or ONNX Runtime's model.int8.onnx)
        self.kind = kind  # "encoder" | "gpt" | "seq2seq"
        self.model = model
        self.tokenizer = tokenizer  # used on the model thread only (pipelines set truncation on it)
        self.counter = counter  # a second copy, used on the event loop to count tokens
        self.counter.no_truncation()
        self.counter.no_padding()
        self.architecture = getattr(model, "architecture", None) or type(model).__name__
        self.backend = "onnxruntime" if getattr(model, "is_onnx_runner", False) else "torch"
        self.pipes: dict[str, Any] = {}
        if kind == "encoder":
            task = ENCODER_HEADS.get(self.architecture)
            built = {"fill-mask": P.FillMaskPipeline, "classify": P.TextClassificationPipeline,
                     "ner": P.TokenClassificationPipeline, "qa": P.QuestionAnsweringPipeline}  # fmt: skip
            if task is not None:
                self.pipes[task] = built[task](model, tokenizer)
            self.pipes["embed"] = P.EmbeddingPipeline(model, tokenizer)
            self.max_tokens = self.pipes["embed"].max_length
            # attention weights come from the torch model's explicit attention path; an ONNX graph has none
            attention = ("attention",) if self.backend == "torch" else ()
            self.endpoints = (*([task] if task else []), "embed", *attention)
        elif kind == "gpt":
            self.max_tokens = model.config.max_positions
            self.endpoints = ("generate", "attention")
        else:
            self.max_tokens = model.config.max_positions
            self.endpoints = ("translate",)

    # ------------------------------------------------------------------------------------------ description

    def info(self) -> dict[str, Any]:
        """What the web page and clients need to know: the model and its endpoints."""
        out: dict[str, Any] = {
            "model": self.directory.name,
            "architecture": self.architecture,
            "kind": self.kind,
            "backend": self.backend,
            "int8": self.int8,
            "endpoints": [f"/v1/{e}" for e in self.endpoints],
            "max_tokens": self.max_tokens,
        }
        if "fill-mask" in self.pipes:
            out["mask_token"] = self.pipes["fill-mask"].mask_token
            out["mask_token_aliases"] = [m for m in MASK_SPELLINGS if m != out["mask_token"]]
        for task in ("classify", "ner"):
            if task in self.pipes:
                id2label = self.pipes[task].id2label
                out["labels"] = [id2label[i] for i in sorted(id2label)] if id2label else []
        return out

    def describe_missing(self, endpoint: str) -> str:
        return (
            f"this model ({self.architecture} from {self.directory.name}) does not serve /v1/{endpoint}; "
            f"it serves {', '.join(f'/v1/{e}' for e in self.endpoints)}"
        )

    # ------------------------------------------------------------------------------------ event-loop side

    def _count(self, text: str, pair: str | None = None, special: bool = True) -> Any:
        if pair is not None:
            return self.counter.encode(text, pair)
        return self.counter.encode(text, add_special_tokens=special)

    def _fit(self, n: int, truncate: bool, what: str = "text") -> int:
        if n <= self.max_tokens:
            return n
        if truncate:
            return self.max_tokens
        raise TooManyTokens(
            f"the input is {n} tokens long; this model reads at most {self.max_tokens} "
            '(shorten it, or send "truncate": true to cut it)',
            field=what,
        )

    def prepare(self, endpoint: str, request: Any, emit: Callable[[dict], None] | None = None) -> Prepared:
        """Validate ``request`` for this model and count its tokens (raises `RequestError`)."""
        r = request
        if endpoint == "fill-mask":
            pipe = self.pipes["fill-mask"]
            text = with_model_mask(r.text, pipe.mask_token)
            if text != r.text:
                r = r.model_copy(update={"text": text})
            if r.top_k > pipe.fillable:
                raise RequestError(
                    f"'top_k' {r.top_k}: the model has {pipe.fillable} {FILL_MASK_WHAT}; choose 1 to "
                    f"{pipe.fillable}",
                    "top_k",
                )
            encoding = self._count(r.text)
            ids = encoding.ids
            n = self._fit(len(ids), r.truncate)
            if pipe.mask_id not in ids[:n]:
                where = f" within the first {n} tokens" if n < len(ids) else ""
                raise RequestError(
                    f"'text' has no {pipe.mask_token} token{where} to fill "
                    f"({no_mask_message(pipe.mask_token)})",
                    "text",
                )
            # Not cut: the same encoding as the pipeline's (same tokenizer file; truncation changes nothing)
            kept = encoding if n == len(ids) and n <= pipe.max_length else None
            return Prepared(("fill-mask", r.top_k), n, r, encoding=kept)
        if endpoint == "classify":
            n = self._fit(len(self._count(r.text, r.text_pair).ids), r.truncate)
            return Prepared(("classify", r.top_k), n, r)
        if endpoint == "embed":
            n = self._fit(len(self._count(r.text).ids), r.truncate)
            return Prepared(("embed", r.pooling), n, r)
        if endpoint == "ner":  # long texts are read in overlapping windows, as the pipeline does
            n = len(self._count(r.text).ids)
            return Prepared(("ner", r.aggregation), n, r)
        if endpoint == "qa":  # so are long passages
            n = len(self._count(r.question, r.context).ids)
            return Prepared(("qa", r.top_k, r.max_answer_length, r.version_2, r.null_threshold), n, r)
        if endpoint == "attention":
            if self.kind == "gpt" and r.text_pair is not None:
                raise RequestError(
                    "'text_pair' needs an encoder (sentence pairs); this is a GPT", "text_pair"
                )
            n = (
                len(self._count(r.text, r.text_pair).ids)
                if self.kind == "encoder"
                else len(self._count(r.text, special=False).ids)
            )
            self._fit(n, False)  # attention is shown for the whole text, never a cut one
            return Prepared(("attention", next(_unique)), n, r)
        if endpoint == "generate":
            n = len(self._count(r.text, special=False).ids)
            if n == 0:
                raise RequestError("'text' encodes to no tokens", "text")
            if n >= self.max_tokens and not r.truncate:
                raise TooManyTokens(
                    f"the prompt is {n} tokens long; this model's context is {self.max_tokens} positions "
                    '(with room for one new token); shorten it, or send "truncate": true to keep its end',
                    field="text",
                )
            vocab = self.model.config.vocab_size
            for name, value in (("top_k", r.top_k if r.do_sample else None), ("num_beams", r.num_beams)):
                if value is not None and value > vocab:
                    why = f"the model has {vocab} tokens; choose 1 to {vocab}"
                    raise RequestError(f"'{name}' {value}: {why}", name)
            if r.do_sample and r.num_beams > 1:
                raise RequestError("sampling with beams is not supported: use do_sample or num_beams > 1",
                                   "num_beams")  # fmt: skip
            if r.stream and r.num_beams > 1:
                raise RequestError("streaming needs greedy search or sampling (num_beams 1)", "stream")
            return Prepared(("generate", next(_unique)), min(n, self.max_tokens), r, emit)
        if endpoint == "translate":
            n = len(encode_text(self.counter, [r.text.strip()])[0])
            self._fit(n, False)
            return Prepared(("translate", r.beam_size, r.alpha, r.max_length_offset), n, r)
        raise RequestError(f"unknown endpoint {endpoint!r}", status=404)

    def finish(self, prepared: Prepared, result: Any) -> Any:
        """The answer's JSON from what `run_batch` returned for ``prepared`` (on the event loop)."""
        if prepared.key[0] == "fill-mask":
            encoding, top = result
            return {"predictions": self.pipes["fill-mask"].fill(encoding, top)}
        return result

    # --------------------------------------------------------------------------------------- model side

    def run_batch(self, key: tuple, batch: Sequence[Prepared]) -> list[Any]:
        """Results (or the exception each request raised) for ``batch``, in order, on the model thread.

        The batch runs as one call of the pipeline; when that call raises, each request runs alone so that
        one bad input fails only its own request."""
        try:
            return self._run(key[0], [p.request for p in batch], batch)
        except Exception as error:  # noqa: BLE001 - isolated below, re-raised per request
            if len(batch) == 1:
                return [error]
        out: list[Any] = []
        for p in batch:
            try:
                out.extend(self._run(key[0], [p.request], [p]))
            except Exception as error:  # noqa: BLE001
                out.append(error)
        return out

    def _pipe(self, name: str, size: int) -> Any:
        pipe = self.pipes[name]
        pipe.batch_size = max(size, 1)  # the whole dynamic batch is one forward pass
        return pipe

    def _run(self, endpoint: str, rs: list[Any], batch: Sequence[Prepared]) -> list[Any]:
        n = len(rs)
        if endpoint == "fill-mask":  # the model's part only; `finish` makes the answers
            pipe = self.pipes["fill-mask"]
            missing = [i for i, p in enumerate(batch) if p.encoding is None]  # cut texts: encoded here
            encodings = [p.encoding for p in batch]
            for i, e in zip(missing, pipe.encode([rs[i].text for i in missing])):
                encodings[i] = e
            return list(zip(encodings, pipe.top_tokens(encodings, rs[0].top_k)))
        if endpoint == "classify":
            items = [r.text if r.text_pair is None else (r.text, r.text_pair) for r in rs]
            return [{"predictions": x} for x in self._pipe("classify", n)(items, top_k=rs[0].top_k)]
        if endpoint == "ner":
            results = self._pipe("ner", n)([r.text for r in rs], aggregation=rs[0].aggregation)
            key = "entities" if rs[0].aggregation == "simple" else "words"
            return [{key: x} for x in results]
        if endpoint == "qa":
            r0 = rs[0]
            results = self._pipe("qa", n)(
                [(r.question, r.context) for r in rs], top_k=r0.top_k, max_answer_length=r0.max_answer_length,
                version_2=r0.version_2, null_threshold=r0.null_threshold,
            )  # fmt: skip
            return [{"answers": x if isinstance(x, list) else [x]} for x in results]
        if endpoint == "embed":
            vectors = self._pipe("embed", n)([r.text for r in rs], pooling=rs[0].pooling)  # (N, H)
            return [
                {"embedding": v.tolist(), "dim": int(v.numel()), "pooling": rs[0].pooling} for v in vectors
            ]
        if endpoint == "attention":
            return [self.attention(r.text, r.text_pair) for r in rs]
        if endpoint == "generate":
            return [self.generate(rs[0], batch[0].emit)]
        if endpoint == "translate":
            r0 = rs[0]
            outs = translate_texts(
                self.model, self.tokenizer, [r.text for r in rs], beam_size=r0.beam_size, alpha=r0.alpha,
                max_length_offset=r0.max_length_offset, batch_size=n,
            )  # fmt: skip
            return [{"translation": t} for t in outs]
        raise RequestError(f"unknown endpoint {endpoint!r}", status=404)

    def attention(self, text: str, text_pair: str | None = None) -> dict[str, Any]:
        return attention_weights(self.model, self.tokenizer, text, text_pair)

    def generate(self, r: schemas.GenerateRequest, emit: Callable[[dict], None] | None = None) -> dict:
        """What ``attnlab generate --json`` computes for one prompt; ``emit`` receives
        ``{"token", "text"}`` events as tokens arrive (``text``: the new characters)."""
        model, tok = self.model, self.tokenizer
        eos = model.config.eos_token_id
        cfg = GenerationConfig(
            max_new_tokens=r.max_new_tokens, do_sample=r.do_sample, num_beams=r.num_beams,
            temperature=r.temperature, top_k=r.top_k, top_p=r.top_p, repetition_penalty=r.repetition_penalty,
            seed=r.seed, truncate_prompt=r.truncate,
        )  # fmt: skip
        ids = list(tok.encode(r.text, add_special_tokens=False).ids)
        input_ids, mask = left_pad([ids], eos if eos is not None else 0)

        def decode(row: list[int]) -> str:
            return tok.decode([t for t in row if t != eos], skip_special_tokens=True)

        stops = list(r.stop)
        stop = (lambda row, toks: any(s in decode(toks) for s in stops)) if stops else None
        on_step = None
        if emit is not None:  # each piece with its last token's log-probability (TGI's stream)
            logprob = [0.0]

            def send(token: int, piece: str) -> None:
                emit({"token": token, "text": piece, "logprob": logprob[0]})

            stream = TextStream(decode, stops, send)

            def on_step(toks: torch.Tensor, done: torch.Tensor, logprobs: torch.Tensor) -> None:
                logprob[0] = float(logprobs[0])
                stream.step(int(toks[0]), bool(done[0]))

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = generate(model, input_ids, mask, cfg, on_step=on_step, stop=stop)
        text = cut_at_stop(decode(out.sequences[0]), stops)
        return {
            "text": text,
            "tokens": out.sequences[0],
            "finished": out.finished[0],
            "warnings": [str(w.message) for w in caught],
        }

    def warm_up(self) -> None:
        """One small forward pass, so the first request does not pay for lazy initialisation."""
        sample = {
            "fill-mask": lambda: schemas.FillMaskRequest(text=f"a {self.pipes['fill-mask'].mask_token} b"),
            "classify": lambda: schemas.ClassifyRequest(text="a b"),
            "ner": lambda: schemas.NerRequest(text="a b"),
            "qa": lambda: schemas.QARequest(question="a", context="a b"),
            "embed": lambda: schemas.EmbedRequest(text="a b"),
            "generate": lambda: schemas.GenerateRequest(text="a", max_new_tokens=1),
            "translate": lambda: schemas.TranslateRequest(text="a", beam_size=1, max_length_offset=1),
        }
        endpoint = self.endpoints[0]
        try:
            p = self.prepare(endpoint, sample[endpoint]())
            self._run(endpoint, [p.request], [p])
        except RequestError:
            pass  # a vocabulary without these letters: the first request warms up instead


# ---------------------------------------------------------------------------------------------- loading


def _read_config(d: Path) -> dict:
    try:
        raw = json.loads((d / "config.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{d / 'config.json'}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{d / 'config.json'}: expected a JSON object")
    return raw


GPT_TYPES = ("gpt2", "openai-gpt")  # HF model_type values of the GPT directories served


def load_service(
    directory: str | os.PathLike, backend: str = "torch", threads: int | None = None, int8: bool = False
) -> ModelService:
    """The `ModelService` for whatever ``directory`` holds (see the module docstring).

    ``backend="onnxruntime"``: ``directory`` is an ``attnlab export MODEL --onnx DIR`` directory, run by
    `attnlab.inference.onnx_runner.OnnxRunner` with ``threads`` intra-op threads (encoders; no attention
    view: ONNX graphs return no attention probabilities). ``int8`` (encoders): attnlab's int8 layers
    (`attnlab.inference.quantize`) on ``torch``, the export's ``model.int8.onnx`` on ``onnxruntime``.
    """
    check_engine(backend, int8)
    if threads is not None:
        torch.set_num_threads(threads)
    d = check_model_dir(directory, "MODEL_DIR")
    raw = _read_config(d)
    if is_seq2seq_config(raw):
        if backend != "torch" or int8:
            option = "--int8" if int8 else f"--backend {backend}"
            raise ValueError(f"{d}: a translation model; {option} serves encoders, use torch in float32")

        model, tokenizer = load(d, expect="marian"), load_directory_tokenizer(d)
        counter = load_pretrained_tokenizer(d)
        kind = "seq2seq"
    elif backend == "torch" and (raw.get("architecture") == "GPT" or raw.get("model_type") in GPT_TYPES):
        if int8:
            raise ValueError(f"{d}: a GPT; --int8 serves encoders, use float32")
        model, tokenizer, counter, kind = load(d, expect="gpt2"), load_tokenizer(d), load_tokenizer(d), "gpt"
    else:
        model = load_encoder(d, backend=backend, threads=threads, int8=int8)
        tokenizer, counter, kind = load_tokenizer(d), load_tokenizer(d), "encoder"
    if kind != "encoder":  # (load_encoder optimized the encoders already)
        optimize(model)  # the CPU fast paths of decoding
    return ModelService(d, kind, model.eval(), tokenizer, counter, int8=int8)


def load_pretrained_tokenizer(d: Path) -> Any:
    return Tokenizer.from_file(str(d / "tokenizer.json"))
