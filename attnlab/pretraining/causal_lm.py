"""The causal-LM objective (``Recipe.objective == "clm"``, the ``gpt`` recipe) on the pre-training machinery.

What differs from the masked LMs is small and lives here: the model is `attnlab.models.gpt.GPT` sized by a GPT
preset with the tokenizer's vocabulary and end-of-text id (`gpt_config`), the data is the corpus as one token
stream cut into blocks (`attnlab.data.blocks`), held-out figures are next-token loss, perplexity and accuracy
(`CausalLMMetric`), and the saved model is a causal-LM directory `attnlab generate` reads
(`save_causal_lm_run`).
The shards, trainer, checkpoints, resume, time budgets and DDP are `attnlab.pretraining.run`'s steps'.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import torch

from attnlab.atomic import write_json_atomic
from attnlab.data import list_files, read_documents
from attnlab.data.corpus import as_sentences, describe_empty
from attnlab.data.protocol import vocab_size_of
from attnlab.generation import GenerationConfig, generate
from attnlab.io import save
from attnlab.io.hf_tokenizer import hf_tokenizer_config
from attnlab.manifest import write_manifest
from attnlab.models.gpt import GPT, GPTConfig
from attnlab.models.gpt_presets import get_gpt_preset
from attnlab.tokenizers import byte_level_bpe
from attnlab.tokenizers.char import EOS, train_char_tokenizer
from attnlab.tokenizers.trainers import train_tokenizer
from attnlab.train.checkpoint import unwrap_model


def eos_id_of(tokenizer: Any) -> int:
    """The id ending each document: GPT-2's ``<|endoftext|>``, else RoBERTa's ``</s>``."""
    for token in (EOS, "</s>"):
        i = tokenizer.token_to_id(token)
        if i is not None:
            return int(i)
    raise ValueError(
        f"the tokenizer has no end-of-text token ({EOS} or </s>); a causal LM's stream needs one between "
        "documents"
    )


def gpt_config(
    preset: str | GPTConfig, tokenizer: Any, block_size: int, dropout: float, **overrides: Any
) -> GPTConfig:
    """The preset with the tokenizer's vocabulary and end-of-text id, a context of ``block_size``, the
    recipe's dropout, then ``overrides`` (GPTConfig fields)."""
    config = get_gpt_preset(preset) if isinstance(preset, str) else preset
    eos = eos_id_of(tokenizer)
    config = dataclasses.replace(
        config,
        vocab_size=vocab_size_of(tokenizer),
        max_positions=block_size,
        dropout=dropout,
        embedding_dropout=dropout,
        attention_dropout=dropout,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=None,
    )
    if overrides:
        known = {f.name for f in dataclasses.fields(GPTConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"model: unknown GPTConfig field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        config = dataclasses.replace(config, **overrides)
    return config


class CausalLMMetric:
    """Streaming held-out next-token loss (nats/token), perplexity and top-1 accuracy over every predicted
    position (``labels[:, 1:]`` from ``logits[:, :-1]``, the positions GPT's loss scores; with ``targets``
    in the batch, every position's, as segment-recurrent data gives them: `attnlab.data.streams`)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.nll, self.correct, self.count = 0.0, 0, 0

    def update(self, output: Any, batch: dict[str, torch.Tensor]) -> None:
        if "targets" in batch:  # targets[:, t] follows input_ids[:, t]
            logits = output.logits.float()  # (B, T, V)
            labels = batch["targets"].to(logits.device)  # (B, T)
        else:
            logits = output.logits[:, :-1].float()  # (B, T - 1, V)
            labels = batch["labels"][:, 1:].to(logits.device)  # (B, T - 1)
        keep = labels != -100
        logits, labels = logits[keep], labels[keep]
        self.nll += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
        self.correct += int((logits.argmax(-1) == labels).sum())
        self.count += int(labels.numel())

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            return {}
        loss = self.nll / self.count
        return {
            "lm_loss": loss,
            "lm_perplexity": math.exp(min(loss, 700.0)),
            "lm_accuracy": self.correct / self.count,
            "lm_tokens": float(self.count),
        }


def save_causal_lm_run(model: GPT, tokenizer: Any, directory: Path, *, run_id: str | None = None) -> Path:
    """OUTPUT/model: ``config.json`` + ``model.safetensors`` (attnlab.io.save) and the tokenizer files,
    with a manifest; `attnlab generate` and `attnlab perplexity` read it."""
    gpt = unwrap_model(model)
    save(gpt, directory)
    return finish_model_directory(directory, tokenizer, gpt.config.max_positions, run_id)


def finish_model_directory(directory: Path, tokenizer: Any, max_length: int, run_id: str | None) -> Path:
    """After the model files: the tokenizer files (``tokenizer_config.json`` too where HF has a class for
    the tokenizer) and, last, the manifest over everything in ``directory``."""
    tokenizer.save(directory)
    try:
        config = hf_tokenizer_config(tokenizer, model_max_length=max_length)
        write_json_atomic(config, directory / "tokenizer_config.json", indent=1)
    except (ValueError, TypeError, AttributeError):
        pass  # a character tokenizer has no HF tokenizer class; tokenizer.json alone holds it
    write_manifest(directory, run_id=run_id)
    return directory


@torch.no_grad()
def sample_continuations(
    model: GPT, tokenizer: Any, prompts: list[str], max_new_tokens: int, *, seed: int = 0
) -> list[str]:
    """One sampled continuation per prompt (top-k 40, temperature 0.8, as the GPT-2 paper's samples used
    top-k; seeded), decoded without special tokens. ``model``: a GPT (prompt and continuation within its
    context) or a Transformer-XL (no context limit: it generates with its memory, the prompt's last segment
    read in one call)."""
    model.eval()
    eos = model.config.eos_token_id
    context = getattr(model.config, "max_positions", None)  # None: Transformer-XL, relative positions
    out = []
    for i, prompt in enumerate(prompts):
        ids = list(tokenizer.encode(prompt, add_special_tokens=False).ids)
        if not ids:
            continue
        if context is None:
            ids, room = ids[-model.config.segment_length :], max_new_tokens
        else:
            ids = ids[-(context // 2) :]
            room = min(max_new_tokens, context - len(ids))
        cfg = GenerationConfig(max_new_tokens=room, do_sample=True, top_k=40, temperature=0.8, seed=seed + i)
        result = generate(model, torch.tensor([ids]), None, cfg)
        text = tokenizer.decode([t for t in result.sequences[0] if t != eos], skip_special_tokens=True)
        out.append(prompt + text)
    return out


def _utf8_text(path: Any) -> str:
    """The file's text; bytes that are not UTF-8 are an error naming the file, line and byte (a replacement
    character would be learnt as a symbol, silently)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{path}:{line}: not valid UTF-8 (byte {e.start}: {e.reason}); convert the file to UTF-8"
        ) from None


def causal_documents(paths: list[Any], fmt: str, piece_chars: int = 16_384) -> Any:
    """A document source for a causal LM: documents whose "sentences" are lines ending in ``\\n``, so the
    shards' concatenated tokens are the text as written. Format ``text``: each file read as it is (line
    breaks kept; a masked LM's reader joins wrapped lines into paragraphs), cut at the first blank line after
    every ``piece_chars`` characters, so that one book (Tiny Shakespeare is one file) yields documents to
    hold some out (`attnlab.pretraining.corpus.split_rule`); the pieces are joined by end-of-text like any
    documents. The other formats (attnlab.data.corpus): their sentences, one per line."""
    names = [str(p) for p in paths]

    def raw_files() -> Any:
        files = list_files(names)
        seen_text = False
        for path in files:
            text = _utf8_text(path).replace("\r\n", "\n")
            seen_text = seen_text or bool(text.strip())
            piece: list[str] = []
            size = 0
            for line in text.splitlines(keepends=True):
                piece.append(line)
                size += len(line)
                if size >= piece_chars and not line.strip():  # cut at a blank line
                    yield piece
                    piece, size = [], 0
            if piece:
                yield piece
        if not seen_text:
            raise ValueError(describe_empty(names, files))

    def sentence_lines() -> Any:
        for doc in read_documents(names, fmt, split=False):
            yield [s + "\n" for s in as_sentences(doc)]

    return raw_files if fmt == "text" else sentence_lines


def train_causal_tokenizer(kind: str, source: Any, vocab_size: int, sample_chars: int | None) -> Any:
    """A causal LM's tokenizer trained on (the first ``sample_chars`` characters of) ``source``: characters
    (`attnlab.tokenizers.char`) or byte-level BPE with ``<|endoftext|>`` as its first token (GPT-2's)."""
    texts, total = [], 0
    for doc in source():
        texts.append("".join(doc))
        total += len(texts[-1])
        if sample_chars is not None and total >= sample_chars:
            break
    if kind == "char":
        return train_char_tokenizer(texts)
    if kind != "byte_level_bpe":
        raise ValueError(f"a causal LM's tokenizer is 'byte_level_bpe' or 'char', not {kind!r}")
    trained = train_tokenizer(kind, iter(texts), vocab_size, special_tokens=[EOS], show_progress=False)
    # GPT-2's pipeline around the trained vocabulary: no <s> ... </s> template, so a prompt encodes the same
    # with or without special tokens (HF's text-generation pipeline adds them by default)
    return byte_level_bpe(trained.model, template="gpt2", special_tokens=[EOS])
