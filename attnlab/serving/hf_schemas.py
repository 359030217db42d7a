"""The JSON bodies of the Hugging Face inference API routes (`attnlab.serving.hf_api`), as
``huggingface_hub.InferenceClient`` and Text Embeddings Inference's clients send them.

A task's request is ``{"inputs": ..., "parameters": {...}}`` (feature extraction sends its options beside
``inputs`` instead). Types are lax, as Hugging Face's are. A parameter this server does not apply is refused
with the sentence Hugging Face's servers use for unused keyword arguments (``The following `model_kwargs`
are not used by the model: [...]``): ``InferenceClient.text_generation`` recognises it, warns, and sends the
request again without them. A parameter left out or sent as ``null`` takes its default.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from attnlab.serving.openai_schemas import MAX_PROMPTS
from attnlab.serving.schemas import MAX_TEXT_CHARS


class Parameters(BaseModel):
    """A task's ``parameters``: the options this server applies (others are refused before this)."""

    model_config = ConfigDict(extra="forbid")


class FillMaskParameters(Parameters):
    top_k: int = Field(5, ge=1, le=100, description="predictions per mask token")


class TextClassificationParameters(Parameters):
    top_k: int | None = Field(None, ge=1, description="labels returned, best first (default: all)")
    function_to_apply: Literal["softmax"] = Field("softmax", description="the probabilities' function")


class TokenClassificationParameters(Parameters):
    aggregation_strategy: Literal["simple", "none"] = Field("simple", description="entities, or each word")
    ignore_labels: list[str] = Field(["O"], description="labels left out with aggregation 'none'")


class QuestionAnsweringParameters(Parameters):
    top_k: int = Field(1, ge=1, le=20)
    max_answer_len: int = Field(30, ge=1, le=512, description="in tokens")
    handle_impossible_answer: bool = Field(False, description="SQuAD 2.0: the empty answer may win")


class TextGenerationParameters(Parameters):
    """TGI's parameters; temperature other than 1, ``top_k`` or ``top_p`` mean sampling, as in TGI."""

    max_new_tokens: int = Field(100, ge=1, le=2048)
    do_sample: bool = False
    temperature: float | None = Field(None, gt=0)
    top_k: int | None = Field(None, ge=1)
    top_p: float | None = Field(None, gt=0, le=1)
    repetition_penalty: float = Field(1.0, gt=0)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list, max_length=8, description="stop strings (not returned)")
    return_full_text: bool = Field(False, description="the prompt before the generated text")
    details: bool = Field(False, description="finish reason, token ids and log-probabilities")
    decoder_input_details: Literal[False] = False
    watermark: Literal[False] = False


class TranslationGenerateParameters(Parameters):
    num_beams: int = Field(4, ge=1, le=16, description="1: greedy")


class TranslationParameters(Parameters):
    generate_parameters: TranslationGenerateParameters = Field(default_factory=TranslationGenerateParameters)


class FeatureExtractionOptions(Parameters):
    """Feature extraction's options (beside ``inputs``; also TEI's ``/embed``)."""

    normalize: bool = Field(True, description="unit length (TEI's default)")
    truncate: bool = Field(False, description="cut an input over the model's maximum instead of a 422")
    truncation_direction: Literal["right", "Right"] = "right"


class QAInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    context: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)


class PairInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    text_pair: str | None = Field(None, min_length=1, max_length=MAX_TEXT_CHARS)


class PredictOptions(Parameters):
    """TEI's ``/predict`` options."""

    raw_scores: Literal[False] = False
    truncate: bool = False
    truncation_direction: Literal["right", "Right"] = "right"


class TokenizeRequest(BaseModel):
    """TEI's ``/tokenize``."""

    model_config = ConfigDict(extra="forbid")
    inputs: str | list[str]
    add_special_tokens: bool = True
    prompt_name: None = None


class DecodeRequest(BaseModel):
    """TEI's ``/decode``."""

    model_config = ConfigDict(extra="forbid")
    ids: list[int] | list[list[int]]
    skip_special_tokens: bool = True


PARAMETERS: dict[str, type[Parameters]] = {
    "fill-mask": FillMaskParameters,
    "text-classification": TextClassificationParameters,
    "token-classification": TokenClassificationParameters,
    "question-answering": QuestionAnsweringParameters,
    "text-generation": TextGenerationParameters,
    "translation": TranslationParameters,
    "feature-extraction": FeatureExtractionOptions,
}


def unused(task: str, given: dict) -> list[str]:
    """The keys of ``given`` (a ``parameters`` object) with a value that this server does not apply."""
    known = PARAMETERS[task].model_fields
    return sorted(k for k, v in given.items() if k not in known and v is not None)


def texts(inputs: object, what: str = "inputs") -> list[str]:
    """``inputs`` as a list of texts: one text, or a list of 1 to `MAX_PROMPTS` (raises ValueError)."""
    items = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
        raise ValueError(f"'{what}' must be a text or a list of texts")
    if not 1 <= len(items) <= MAX_PROMPTS:
        raise ValueError(f"'{what}' holds {len(items)} texts; send 1 to {MAX_PROMPTS}")
    for t in items:
        if not t or len(t) > MAX_TEXT_CHARS:
            raise ValueError(f"'{what}': each text must hold 1 to {MAX_TEXT_CHARS:,} characters")
    return items
