"""Tiny random model directories for the serving tests (API and browser): every kind `attnlab serve` reads;
servers running them on threads (`running`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import torch

from attnlab.io import save
from attnlab.models import (
    EncoderForPreTraining,
    EncoderForQuestionAnswering,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
    get_preset,
)
from attnlab.models.gpt import build_gpt
from attnlab.models.gpt_presets import get_gpt_preset
from attnlab.serving.app import create_app
from attnlab.serving.server import BackgroundServer
from attnlab.serving.service import load_service
from attnlab.serving.settings import ServeSettings
from attnlab.tasks.finetune import save_model_dir
from attnlab.tokenizers import bert_wordpiece
from attnlab.tokenizers.files import save_tokenizer_json
from attnlab.translation.config import transformer_tiny
from attnlab.translation.data import train_joint_bpe
from attnlab.translation.model import build_model

TEXT = (
    "The capital of France is Paris . Paris is a city on the river Seine in the north of France . "
    "Alan Turing was born in London and worked at Manchester on machines that think ."
)
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
KINDS = ("mlm", "cls", "ner", "qa", "gpt", "mt")


def vocab() -> dict[str, int]:
    words = sorted(set(re.findall(r"\w+|[^\w\s]", TEXT.lower())))
    return {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}


def make(kind: str, root: Path) -> Path:
    """A model directory of ``kind`` (one of `KINDS`) under ``root``; random weights, seeded."""
    torch.manual_seed(0)
    d = root / kind
    if kind == "gpt":
        tok = bert_wordpiece(vocab())  # any attnlab tokenizer; GPT reads it without special tokens
        cfg = get_gpt_preset("gpt-char-tiny", vocab_size=len(vocab()), hidden_size=32, num_layers=2,
                             num_heads=2, max_positions=32)  # fmt: skip
        save(build_gpt(cfg), d)
        save_tokenizer_json(tok, d / "tokenizer.json")
        return d
    if kind == "mt":
        tok = train_joint_bpe(TEXT.split(" . "), vocab_size=300)
        config = transformer_tiny(vocab_size=tok.vocab_size, dropout=0.0, d_model=32, d_ff=64, num_layers=1)
        save(build_model(config), d, tokenizer=tok)
        return d
    tok = bert_wordpiece(vocab())
    cfg = get_preset("bert-tiny", vocab_size=len(vocab()), max_position_embeddings=32)
    model = {
        "mlm": lambda: EncoderForPreTraining.from_config(cfg),
        "cls": lambda: EncoderForSequenceClassification.from_config(cfg, 3, ["neg", "neu", "pos"]),
        "ner": lambda: EncoderForTokenClassification.from_config(cfg, 5, LABELS),
        "qa": lambda: EncoderForQuestionAnswering.from_config(cfg),
    }[kind]()
    return save_model_dir(model, tok, d)


def make_all(root: Path, kinds: tuple[str, ...] = KINDS) -> dict[str, Path]:
    """A directory of each kind under ``root`` (`make`)."""
    return {kind: make(kind, root) for kind in kinds}


@contextmanager
def running(dirs: dict[str, Path], key: str, keyed: str) -> Iterator[dict[str, str]]:
    """A server on a thread for each directory (the ``keyed`` one requires API key ``key``); their URLs by
    name, for the real clients (``openai``, ``huggingface_hub``)."""
    with ExitStack() as stack:
        urls = {}
        for name, d in dirs.items():
            settings = ServeSettings(api_key=key) if name == keyed else None
            urls[name] = stack.enter_context(BackgroundServer(create_app(load_service(d), settings)))
        yield urls


def close(a, b, path="") -> None:
    """``a == b`` with floats compared to 1e-5 (a batch of one against a pipeline's own batch; the HF
    client's dataclasses compared as dicts of their fields that are set)."""
    if hasattr(a, "__dataclass_fields__"):
        a = {k: getattr(a, k) for k in a.__dataclass_fields__ if getattr(a, k) is not None}
    if isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-5), path
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (path, a.keys(), b.keys())
        for k in a:
            close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{path}[{i}]")
    else:
        assert a == b, path
