"""Inference pipelines over any saved model directory (attnlab or HF transformers layout).

``pipeline(task, directory, device=...)`` loads the model (`attnlab.io.load`) and the
tokenizer (`attnlab.tokenizers.load_tokenizer`) and returns one of:

- `FillMaskPipeline` (``"fill-mask"``): the top-k tokens for each mask with their probabilities
  (needs a masked-LM model: ``EncoderForPreTraining``);
- `QuestionAnsweringPipeline` (``"question-answering"``): answers that are spans of the passage, with
  exact character offsets (``context[start:end] == answer``); long passages are read in overlapping
  windows (`attnlab.tasks.features.qa_features`, `attnlab.tasks.qa_postprocess`);
- `TokenClassificationPipeline` (``"ner"``): one label per word (its first sub-token's), then grouped
  into entities (``B-X I-X ...`` merged; an ``I-X`` without a ``B-X`` starts an entity, as conlleval
  reads it) with character offsets and the mean word score;
- `TextClassificationPipeline` (``"text-classification"``): labels with softmax scores (a regression
  model returns its value);
- `EmbeddingPipeline` (``"embeddings"``): contextual vectors, pooled ``"cls"`` or ``"mean"`` (over real
  tokens), cosine similarity, and `EmbeddingPipeline.word_vector`: the vector of a word *in its context*
  (the mean of its sub-tokens' vectors), which differs between "river bank" and "bank account".

Every pipeline takes one input or a list, runs in batches of ``batch_size`` on ``device`` (CPU or GPU)
and returns plain Python values (JSON-serialisable), except embeddings (tensors on the CPU).

``backend="onnxruntime"`` (``from_directory``/`pipeline`) runs a directory written by ``attnlab export
--onnx`` on ONNX Runtime (`attnlab.inference.onnx_runner.OnnxRunner`, ``threads`` intra-op threads) instead
of PyTorch; the pipelines' code is the same, the runner answering the calls they make of a torch model.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.accel import optimize, skip_padding
from attnlab.inference.engine import check_engine, load_encoder
from attnlab.limits import FILL_MASK_WHAT, check_max_length, check_top_k, fillable_tokens
from attnlab.models import Encoder
from attnlab.nn.pooling import POOLINGS, masked_mean
from attnlab.tasks.attention import token_text
from attnlab.tasks.examples import QAExample
from attnlab.tasks.features import PAD_TOKENS, qa_features, special_id
from attnlab.tasks.qa_postprocess import QAWindow, postprocess_example
from attnlab.tokenizers import Encoding, Tokenizer, load_tokenizer
from attnlab.tokenizers.mask_token import MASK_SPELLINGS, no_mask_message, with_model_mask
from attnlab.train.distributed import resolve_device

MASK_TOKENS = MASK_SPELLINGS  # the spellings read as a model's mask (attnlab.tokenizers.mask_token)


def _as_list(inputs: Any) -> tuple[list, bool]:
    if isinstance(inputs, (str, tuple, dict)):
        return [inputs], True
    return list(inputs), False


def _architecture(model: nn.Module) -> str:
    """The attnlab architecture name (an `OnnxRunner` carries its exported model's)."""
    return getattr(model, "architecture", None) or type(model).__name__


def _encoder_of(model: nn.Module) -> nn.Module:
    if isinstance(model, Encoder):
        return model
    encoder = getattr(model, "encoder", None)
    if isinstance(encoder, Encoder) or getattr(model, "is_onnx_runner", False):
        return encoder
    raise TypeError(f"{type(model).__name__} holds no attnlab Encoder")


class Pipeline:
    """Shared plumbing: device, batching, tokenizer settings, tensors for the model."""

    task = ""
    source = "the model"  # named in errors; the directory when built by `from_directory`

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer,
        device: str | torch.device = "cpu",
        batch_size: int = 8,
        max_length: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.device = resolve_device(device)
        # an attnlab model takes the CPU fast paths (attnlab.accel), re-classed in place (not an OnnxRunner)
        self.model = model.to(self.device).eval()
        if isinstance(self.model, nn.Module):
            optimize(self.model)
        self.tokenizer = tokenizer
        self.config = model.config
        self.batch_size = batch_size
        limit = self.config.max_sequence_length
        check_max_length(max_length, limit, "max_length")
        self.max_length = min(max_length or limit, limit)
        self.pad_id = special_id(tokenizer, PAD_TOKENS)
        if self.pad_id is None:
            self.pad_id = self.config.pad_token_id
        self._check()

    def _check(self) -> None:
        """Refuse a model that cannot serve this pipeline (overridden)."""

    @classmethod
    def from_directory(
        cls,
        directory: str | os.PathLike,
        device: str | torch.device = "cpu",
        backend: str = "torch",
        threads: int | None = None,
        int8: bool = False,
        **kwargs: Any,
    ):
        """The pipeline over ``directory`` on ``backend`` (``torch`` or ``onnxruntime``), int8 if asked
        (`attnlab.inference.engine.load_encoder`)."""
        device = resolve_device(device)  # before loading the model: a bad --device costs no load time
        check_engine(backend, int8, device)
        model = load_encoder(directory, backend=backend, threads=threads, int8=int8)
        pipe = cls(model, load_tokenizer(directory), device=device, **kwargs)
        pipe.source = str(directory)
        return pipe

    def _encode(self, texts: Sequence[str | tuple[str, str]], truncate: bool = True) -> list[Encoding]:
        saved = self.tokenizer.truncation, self.tokenizer.padding
        try:
            if truncate:
                self.tokenizer.enable_truncation(self.max_length)
            else:
                self.tokenizer.no_truncation()
            self.tokenizer.no_padding()
            return [
                self.tokenizer.encode(t) if isinstance(t, str) else self.tokenizer.encode(*t) for t in texts
            ]
        finally:
            self.tokenizer.truncation, self.tokenizer.padding = saved

    def _tensors(self, encodings: Sequence[Encoding]) -> dict[str, Tensor]:
        """(B, T) ``input_ids``, ``attention_mask`` (+ ``token_type_ids``), padded on the right."""
        T = max(len(e.ids) for e in encodings)
        ids = torch.full((len(encodings), T), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(encodings), T), dtype=torch.long)
        types = torch.zeros((len(encodings), T), dtype=torch.long)
        for i, e in enumerate(encodings):
            n = len(e.ids)
            ids[i, :n] = torch.tensor(e.ids)
            mask[i, :n] = torch.tensor(e.attention_mask)
            types[i, :n] = torch.tensor(e.type_ids)
        batch = {"input_ids": ids, "attention_mask": mask}
        if self.config.type_vocab_size > 0:
            batch["token_type_ids"] = types
        return {k: v.to(self.device) for k, v in batch.items()}

    @torch.no_grad()
    def _forward(self, encodings: Sequence[Encoding], **kwargs: Any) -> Any:
        with skip_padding():  # the pipelines read real positions only (attnlab.accel.unpadded)
            output = self.model(**self._tensors(encodings), **kwargs)
        # finite weights (checked at load) can still give NaN/Inf on some input; never print them as scores
        fields = vars(output).items() if hasattr(output, "__dict__") else ()
        for name, value in fields:
            if torch.is_tensor(value) and value.is_floating_point() and not torch.isfinite(value).all():
                raise ValueError(
                    f"{self.source}: the model produced non-finite {name} (NaN/Inf) for this input; its "
                    "weights or inputs are damaged"
                )
        return output

    def _chunks(self, items: Sequence[Any]) -> Any:
        for start in range(0, len(items), self.batch_size):
            yield items[start : start + self.batch_size]


# ---------------------------------------------------------------------------------------------------------
# fill-mask


class FillMaskPipeline(Pipeline):
    """``pipe("The capital of France is [MASK].", top_k=5)`` -> ``[{"token", "token_id", "score",
    "sequence"}, ...]`` (a list of such lists when the text has several masks)."""

    task = "fill-mask"

    def _check(self) -> None:
        if not hasattr(self.model, "mlm_head") and _architecture(self.model) != "EncoderForPreTraining":
            raise TypeError(
                f"fill-mask needs a masked-LM model (EncoderForPreTraining), not {_architecture(self.model)}"
            )
        self.mask_id = special_id(self.tokenizer, MASK_TOKENS)
        if self.mask_id is None:
            raise ValueError(f"the tokenizer has none of the mask tokens {MASK_TOKENS}")
        self.mask_token = self.tokenizer.id_to_token(self.mask_id)
        self.fillable = fillable_tokens(self.config.vocab_size, self.tokenizer.all_special_ids)  # top_k: 1..

    @torch.no_grad()
    def _mask_logits(self, encodings: Sequence[Encoding]) -> tuple[Tensor, dict[tuple[int, int], int]]:
        """The MLM head's logits only at the mask tokens, (M, V) float32, and each (row, position)'s index.

        The head's output layer (H x V) is most of a small model's cost when applied at every position
        (bert-mini: 8M of its 11M weights); applied at the masks only, as Google's run_pretraining.py gathers
        them, the values are the same. A model without a separate ``mlm_head`` (an ONNX Runtime session)
        computes every position's logits and the masks' rows are taken from them."""
        batch = self._tensors(encodings)
        rows, cols = (batch["input_ids"] == self.mask_id).nonzero(as_tuple=True)  # (M,), (M,)
        head = getattr(self.model, "mlm_head", None)
        if head is not None:
            with skip_padding():  # the rows read below are masks, never padding
                hidden = self.model.encoder(**batch).last_hidden_state  # (B, T, H)
            logits = head(hidden[rows, cols]).float()  # (M, V)
        else:
            logits = self._forward(encodings).mlm_logits.float()[rows, cols]  # (B, T, V) -> (M, V)
        where = {(b, t): i for i, (b, t) in enumerate(zip(rows.tolist(), cols.tolist()))}
        return logits, where

    def __call__(self, texts: str | Sequence[str], top_k: int = 5) -> list:
        check_top_k(top_k, self.fillable, "top_k", FILL_MASK_WHAT)
        items, single = _as_list(texts)
        results = []
        for chunk in self._chunks(items):
            encodings = self.encode(chunk)
            for e, top in zip(encodings, self.top_tokens(encodings, top_k)):
                results.append(self.fill(e, top))
        return results[0] if single else results

    # The three stages of a call, which a server runs apart: `encode` and `fill` on its event loop, only
    # `top_tokens` (the model) on its model thread, batched (attnlab.serving.service).

    def encode(self, texts: Sequence[str]) -> list[Encoding]:
        """Each text's encoding (truncated to ``max_length``; either mask spelling read as the model's token),
        ValueError for a text without a mask token."""
        encodings = self._encode([with_model_mask(text, self.mask_token) for text in texts])
        for text, e in zip(texts, encodings):
            self.check_mask(text, e)
        return encodings

    def check_mask(self, text: str, encoding: Encoding) -> None:
        if self.mask_id not in encoding.ids:
            where = f"{text!r} (after truncation to {self.max_length})"
            raise ValueError(f"no {self.mask_token} in {where}; {no_mask_message(self.mask_token)}")

    def top_tokens(self, encodings: Sequence[Encoding], top_k: int) -> list[list[tuple[int, list, list]]]:
        """The model's ``top_k`` tokens at each mask: per encoding, per mask in order, ``(position, scores,
        token ids)`` (plain lists: the scores' softmax over the whole vocabulary, best first)."""
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        logits, where = self._mask_logits(encodings)  # (M, V) at the M masks; where[(b, t)] = row
        # The softmax's top k as exp(logit - logsumexp): the (M, V) probabilities are never written (0.75x the
        # time at 8 masks). A NaN or +Inf logit makes its row's logsumexp NaN or +Inf.
        norm = torch.logsumexp(logits, -1, keepdim=True)  # (M, 1)
        if not torch.isfinite(norm).all():
            raise ValueError(
                f"{self.source}: the model produced non-finite mlm_logits (NaN/Inf) for this input; its "
                "weights or inputs are damaged"
            )
        top_logits, top_ids = logits.topk(min(top_k, logits.size(-1)))  # (M, k)
        top_scores, top_ids = (top_logits - norm).exp().tolist(), top_ids.tolist()
        return [
            [(t, top_scores[where[(b, t)]], top_ids[where[(b, t)]])
             for t, tid in enumerate(e.ids) if tid == self.mask_id]
            for b, e in enumerate(encodings)
        ]  # fmt: skip

    def fill(self, encoding: Encoding, top: list[tuple[int, list, list]]) -> list:
        """One text's answer from its `top_tokens`: per mask, each candidate's token, id, score and the text
        with it filled in (one list for a single mask, a list of them for several). Reads the tokenizer's
        vocabulary and decoder only (not its truncation settings), so it may run beside `encode`."""
        per_mask = []
        for t, scores, ids in top:
            options = []
            for score, tid in zip(scores, ids):
                filled = list(encoding.ids)
                filled[t] = tid
                options.append(
                    {
                        "token": self.tokenizer.id_to_token(tid),
                        "token_str": token_text(self.tokenizer, tid),  # HF's field: decode([tid])
                        "token_id": tid,
                        "score": score,
                        "sequence": self.tokenizer.decode(filled, skip_special_tokens=True),
                    }
                )
            per_mask.append(options)
        return per_mask[0] if len(per_mask) == 1 else per_mask


# ---------------------------------------------------------------------------------------------------------
# question answering


class QuestionAnsweringPipeline(Pipeline):
    """``pipe(question, context)`` or ``pipe([(q, c), ...])`` -> ``{"answer", "start", "end", "score"}``
    (``top_k > 1``: a list of them). ``context[start:end] == answer`` always; with ``version_2`` an
    empty answer (``start = end = -1``) is returned when the null score wins."""

    task = "question-answering"

    def _check(self) -> None:
        is_qa = _architecture(self.model) == "EncoderForQuestionAnswering"
        if not hasattr(self.model, "qa_outputs") and not is_qa:
            raise TypeError(
                f"question answering needs EncoderForQuestionAnswering; this is {_architecture(self.model)}"
            )

    def __call__(
        self,
        question: str | Sequence[tuple[str, str]],
        context: str | None = None,
        top_k: int = 1,
        max_answer_length: int = 30,
        stride: int = 128,
        max_query_length: int = 64,
        version_2: bool = False,
        null_threshold: float = 0.0,
    ) -> Any:
        if context is not None:
            if not isinstance(question, str):
                raise TypeError("give (question, context) strings, or a list of (question, context) pairs")
            pairs, single = [(question, context)], True
        else:
            pairs, single = _as_list(question)
        examples = [QAExample(str(i), "", c, q, ()) for i, (q, c) in enumerate(pairs)]
        features = qa_features(
            self.tokenizer, examples, self.max_length, min(stride, max(self.max_length // 4, 1)),
            max_query_length, training=False, with_token_types=self.config.type_vocab_size > 0,
        )  # fmt: skip
        windows: dict[int, list[QAWindow]] = {}
        for chunk in self._chunks(features):
            encs = [Encoding(ids=f.inputs["input_ids"], attention_mask=f.inputs["attention_mask"],
                             type_ids=f.inputs.get("token_type_ids", [0] * len(f.inputs["input_ids"])))
                    for f in chunk]  # fmt: skip
            out = self._forward(encs)
            for b, f in enumerate(chunk):
                n = len(f.inputs["input_ids"])
                windows.setdefault(f.example_index, []).append(
                    QAWindow(
                        f.example_id,
                        out.start_logits[b, :n].float().cpu().numpy(),
                        out.end_logits[b, :n].float().cpu().numpy(),
                        f.offsets,
                        f.cls_index,
                    )
                )
        results = []
        for i, ex in enumerate(examples):
            if i not in windows:
                raise ValueError(f"question {i}: no room for the passage in {self.max_length} tokens")
            pred = postprocess_example(
                windows[i], ex.context, n_best=max(top_k, 20), max_answer_length=max_answer_length,
                version_2=version_2, null_threshold=null_threshold,
            )  # fmt: skip
            answers = []
            if pred.is_null and version_2:
                answers.append(
                    {"answer": "", "start": -1, "end": -1, "score": None, "null_odds": pred.null_odds}
                )
            for c in pred.nbest[: top_k - len(answers)]:
                answers.append(
                    {"answer": c.text, "start": c.start_char, "end": c.end_char, "score": c.probability}
                )
            if not answers:
                answers.append({"answer": "", "start": -1, "end": -1, "score": 0.0})
            results.append(answers[0] if top_k == 1 else answers)
        return results[0] if single else results


# ---------------------------------------------------------------------------------------------------------
# token classification (NER)


def group_entities(words: Sequence[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Merge word predictions ``{"label", "score", "start", "end"}`` into entities.

    ``B-X`` starts an entity, ``I-X`` continues one of type X (else starts one), ``O`` (or any tag without
    a ``B-``/``I-`` prefix, then the whole tag is the type) ends it. Each entity:
    ``{"entity_group", "word": text[start:end], "start", "end", "score": mean word score}``.
    """
    entities: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    scores: list[float] = []

    def close() -> None:
        nonlocal current, scores
        if current is not None:
            current["score"] = sum(scores) / len(scores)
            current["word"] = text[current["start"] : current["end"]]
            entities.append(current)
        current, scores = None, []

    for w in words:
        label = w["label"]
        if label == "O":
            close()
            continue
        prefix, kind = (label[:2], label[2:]) if label[:2] in ("B-", "I-") else ("B-", label)
        if prefix == "I-" and current is not None and current["entity_group"] == kind:
            current["end"] = w["end"]
            scores.append(w["score"])
            continue
        close()
        current = {"entity_group": kind, "start": w["start"], "end": w["end"]}
        scores = [w["score"]]
    close()
    return entities


class TokenClassificationPipeline(Pipeline):
    """``pipe(text)`` -> entities ``[{"entity_group", "word", "start", "end", "score"}]``;
    ``aggregation="none"`` returns every word's ``{"word", "label", "score", "start", "end"}`` instead."""

    task = "ner"

    def _check(self) -> None:
        if _architecture(self.model) != "EncoderForTokenClassification":
            raise TypeError(f"NER needs EncoderForTokenClassification; this is {_architecture(self.model)}")
        self.id2label = self.model.id2label

    def __call__(self, texts: str | Sequence[str], aggregation: str = "simple") -> list:
        if aggregation not in ("simple", "none"):
            raise ValueError(f"aggregation must be 'simple' or 'none', got {aggregation!r}")
        items, single = _as_list(texts)
        results = []
        saved = self.tokenizer.truncation, self.tokenizer.padding
        try:
            self.tokenizer.enable_truncation(self.max_length, stride=min(32, self.max_length // 4))
            self.tokenizer.no_padding()
            encoded = [self.tokenizer.encode(t) for t in items]
        finally:
            self.tokenizer.truncation, self.tokenizer.padding = saved
        # Every window of every text, batched together; windows of one text stay in order.
        flat = [(i, w) for i, e in enumerate(encoded) for w in (e, *e.overflowing)]
        words: list[dict[int, dict[str, Any]]] = [{} for _ in items]  # per text: word id -> prediction
        for chunk in self._chunks(flat):
            probs = self._forward([w for _, w in chunk]).logits.float().softmax(-1).cpu()  # (B, T, C)
            for b, (i, w) in enumerate(chunk):
                for t, wid in enumerate(w.word_ids):
                    if wid is None or w.sequence_ids[t] is None:
                        continue
                    s, end = w.offsets[t]
                    if wid in words[i]:  # a later piece of the word: only its characters count
                        words[i][wid]["start"] = min(words[i][wid]["start"], s)
                        words[i][wid]["end"] = max(words[i][wid]["end"], end)
                        continue
                    score, label = probs[b, t].max(-1)  # the word's first sub-token decides (BERT 5.3)
                    words[i][wid] = {
                        "label": self.id2label[int(label)],
                        "score": float(score),
                        "start": s,
                        "end": end,
                    }
        for text, found in zip(items, words):
            ordered = [found[k] for k in sorted(found)]
            for w in ordered:
                w["word"] = text[w["start"] : w["end"]]
            results.append(ordered if aggregation == "none" else group_entities(ordered, text))
        return results[0] if single else results


# ---------------------------------------------------------------------------------------------------------
# text classification


class TextClassificationPipeline(Pipeline):
    """``pipe(text)`` or ``pipe((text_a, text_b))`` -> ``[{"label", "score"}, ...]`` best first (``top_k``
    of them; None = all). A regression model (one output) returns ``{"label": "score", "score": value}``."""

    task = "text-classification"

    def _check(self) -> None:
        if _architecture(self.model) != "EncoderForSequenceClassification":
            raise TypeError(
                f"text classification needs EncoderForSequenceClassification, not {_architecture(self.model)}"
            )
        self.id2label = self.model.id2label

    def __call__(self, texts: str | tuple[str, str] | Sequence, top_k: int | None = None) -> list:
        items, single = _as_list(texts)
        results = []
        for chunk in self._chunks(items):
            logits = self._forward(self._encode(chunk)).logits.float().cpu()  # (B, C)
            for row in logits:
                if row.numel() == 1:
                    results.append({"label": "score", "score": float(row[0])})
                    continue
                probs = row.softmax(-1)
                order = probs.argsort(descending=True).tolist()[: top_k or len(probs)]
                results.append([{"label": self.id2label[i], "score": float(probs[i])} for i in order])
        return results[0] if single else results


# ---------------------------------------------------------------------------------------------------------
# contextual embeddings


class EmbeddingPipeline(Pipeline):
    """Contextual vectors from any attnlab model's encoder.

    ``pipe(texts, pooling="cls" | "mean")`` -> (N, H) float tensor; ``layer`` picks a hidden state
    (-1: the last, 0: the embeddings). ``similarity(a, b)`` is the cosine of two pooled texts;
    ``word_vector(text, word)`` the (H,) vector of ``word`` in ``text``.
    """

    task = "embeddings"

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, *args: Any, **kwargs: Any) -> None:
        super().__init__(model, tokenizer, *args, **kwargs)
        self.encoder = _encoder_of(self.model)

    @torch.no_grad()
    def _hidden(self, encodings: Sequence[Encoding], layer: int) -> Tensor:
        batch = self._tensors(encodings)
        with skip_padding():  # pooling and word vectors read real positions only
            out = self.encoder(**batch, output_hidden_states=layer != -1)
        hidden = out.last_hidden_state if layer == -1 else out.hidden_states[layer]
        return hidden.float()  # (B, T, H)

    def __call__(self, texts: str | Sequence[str], pooling: str = "cls", layer: int = -1) -> Tensor:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        items, single = _as_list(texts)
        vectors = []
        for chunk in self._chunks(items):
            encodings = self._encode(chunk)
            hidden = self._hidden(encodings, layer)  # (B, T, H)
            if pooling == "cls":
                vectors.append(hidden[:, 0])
            else:
                vectors.append(masked_mean(hidden, self._tensors(encodings)["attention_mask"]))
        out = torch.cat(vectors).cpu()  # (N, H)
        return out[0] if single else out

    def similarity(self, a: str, b: str, pooling: str = "cls", layer: int = -1) -> float:
        va, vb = self([a, b], pooling=pooling, layer=layer)
        return float(F.cosine_similarity(va, vb, dim=0))

    def word_vector(self, text: str, word: str, occurrence: int = 0, layer: int = -1) -> Tensor:
        """The (H,) vector of the ``occurrence``-th whole-word, case-insensitive match of ``word`` in
        ``text``: the mean of the hidden states of the tokens inside its characters."""
        matches = list(re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text, flags=re.IGNORECASE))
        if len(matches) <= occurrence:
            raise ValueError(
                f"{word!r} occurs {len(matches)} time(s) in {text!r}; asked for occurrence {occurrence}"
            )
        start, end = matches[occurrence].span()
        (e,) = self._encode([text])
        rows = [
            t for t, ((s, f), sid) in enumerate(zip(e.offsets, e.sequence_ids))
            if sid is not None and f > s and s < end and f > start
        ]  # fmt: skip
        if not rows:
            raise ValueError(
                f"{word!r} at characters {start}:{end} has no token (truncated at {self.max_length}?)"
            )
        hidden = self._hidden([e], layer)[0]  # (T, H)
        return hidden[rows].mean(0).cpu()


def cosine(a: Tensor, b: Tensor) -> float:
    """Cosine similarity of two (H,) vectors."""
    return float(F.cosine_similarity(a.float(), b.float(), dim=0))


PIPELINES: dict[str, type[Pipeline]] = {
    "fill-mask": FillMaskPipeline,
    "question-answering": QuestionAnsweringPipeline,
    "qa": QuestionAnsweringPipeline,
    "ner": TokenClassificationPipeline,
    "token-classification": TokenClassificationPipeline,
    "text-classification": TextClassificationPipeline,
    "classify": TextClassificationPipeline,
    "embeddings": EmbeddingPipeline,
    "embed": EmbeddingPipeline,
}


def pipeline(
    task: str, directory: str | os.PathLike, device: str | torch.device = "cpu", **kwargs: Any
) -> Pipeline:
    """The pipeline for ``task`` (a key of `PIPELINES`) over the model and tokenizer in ``directory``."""
    if task not in PIPELINES:
        raise ValueError(f"unknown pipeline {task!r}; valid: {', '.join(PIPELINES)}")
    return PIPELINES[task].from_directory(directory, device=device, **kwargs)


__all__ = [
    "PIPELINES",
    "EmbeddingPipeline",
    "FillMaskPipeline",
    "Pipeline",
    "QuestionAnsweringPipeline",
    "TextClassificationPipeline",
    "TokenClassificationPipeline",
    "cosine",
    "group_entities",
    "pipeline",
]
