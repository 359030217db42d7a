"""The JSON bodies of the OpenAI-compatible routes (`attnlab.serving.openai_api`), as the official ``openai``
client sends them.

Types are lax as OpenAI's are (``temperature`` may be ``0`` or ``0.7``), but unknown fields are refused
(``extra="forbid"``): a field this server would silently ignore is an error naming it. ``temperature`` 0 is
greedy search; above 0, sampling (OpenAI's default is 1). Penalties OpenAI offers that attnlab's generator
does not apply are accepted only at their neutral value (0).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from attnlab.serving.schemas import MAX_TEXT_CHARS

MAX_PROMPTS = 64  # prompts (or inputs) in one request


class OpenAIRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, description="the served model's id (GET /v1/models); checked when given")
    user: str | None = Field(None, description="accepted and ignored (OpenAI's end-user id)")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class SamplingFields(OpenAIRequest):
    max_tokens: int | None = Field(None, ge=1, le=2048, description="new tokens per choice (default 16)")
    temperature: float = Field(1.0, ge=0, le=100, description="0: greedy search; > 0: sampling")
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=16, description="choices per prompt")
    stop: str | list[str] | None = Field(None, description="up to 4 stop strings (not returned)")
    seed: int | None = Field(None, description="sampling: the same seed gives the same tokens")
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = Field(0.0, ge=0, le=0, description="only 0 (not applied)")
    frequency_penalty: float = Field(0.0, ge=0, le=0, description="only 0 (not applied)")


class CompletionRequest(SamplingFields):
    prompt: str | list[str] = Field(description="a text, or a list of texts (one choice set each)")
    logprobs: int | None = Field(None, ge=0, le=20, description="top-N log-probabilities per token")
    echo: bool = Field(False, description="the prompt before the completion")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # templates may read more (name, tool_calls)
    role: str
    content: str | None = Field(None, max_length=MAX_TEXT_CHARS)


class ChatRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)


class EmbeddingRequest(OpenAIRequest):
    input: str | list[str] = Field(description="a text or a list of texts")
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, description="only the model's own width")
