"""The JSON bodies each ``/v1/`` endpoint accepts, as pydantic models (FastAPI validates them and the
OpenAPI docs show them).

Every request is a JSON object; unknown fields are refused (``extra="forbid"``: a misspelt option is an
error naming it, not silently ignored) and types are strict (``"5"`` is not an integer). ``truncate``: an
input longer than the model's maximum is cut to it instead of refused (422).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_TEXT_CHARS = 100_000  # a bound before tokenising; the body limit (--max-body-bytes) usually bites first


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextRequest(Request):
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, description="the input text")
    truncate: bool = Field(False, description="cut an input over the model's maximum instead of a 422")


class FillMaskRequest(TextRequest):
    top_k: int = Field(5, ge=1, le=100, description="predictions per mask token")


class ClassifyRequest(TextRequest):
    text_pair: str | None = Field(None, min_length=1, max_length=MAX_TEXT_CHARS)
    top_k: int | None = Field(None, ge=1, description="labels returned, best first (default: all)")


class NerRequest(Request):
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, description="read in windows when long")
    aggregation: Literal["simple", "none"] = Field("simple", description="entities, or every word's label")


class QARequest(Request):
    question: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    context: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, description="read in windows when long")
    top_k: int = Field(1, ge=1, le=20)
    max_answer_length: int = Field(30, ge=1, le=512, description="in tokens")
    version_2: bool = Field(False, description="SQuAD 2.0: the empty answer may win")
    null_threshold: float = 0.0


class EmbedRequest(TextRequest):
    pooling: Literal["cls", "mean"] = "cls"


class GenerateRequest(TextRequest):
    max_new_tokens: int = Field(50, ge=1, le=2048)
    do_sample: bool = False
    num_beams: int = Field(1, ge=1, le=8)
    temperature: float = Field(1.0, gt=0)
    top_k: int | None = Field(None, ge=1)
    top_p: float | None = Field(None, gt=0, le=1)
    repetition_penalty: float = Field(1.0, gt=0)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list, max_length=8, description="stop strings (not returned)")
    stream: bool = Field(False, description="server-sent events, one per new token (greedy and sampling)")


class TranslateRequest(Request):
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, description="one sentence")
    beam_size: int = Field(4, ge=1, le=16, description="1: greedy")
    alpha: float = Field(0.6, ge=0, description="GNMT length penalty")
    max_length_offset: int = Field(50, ge=1, le=512, description="output at most source length + this")


class AttentionRequest(Request):
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, description="the sentence")
    text_pair: str | None = Field(None, min_length=1, max_length=MAX_TEXT_CHARS)


REQUESTS: dict[str, type[Request]] = {
    "fill-mask": FillMaskRequest,
    "classify": ClassifyRequest,
    "ner": NerRequest,
    "qa": QARequest,
    "embed": EmbedRequest,
    "generate": GenerateRequest,
    "translate": TranslateRequest,
    "attention": AttentionRequest,
}
