"""The tokenizer of a pre-training run: the one saved in the run's directory, or the recipe's kind trained on
the corpus, saved with the files HF transformers rebuilds it from."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnlab.atomic import write_json_atomic
from attnlab.io.format import read_json
from attnlab.io.hf_tokenizer import hf_tokenizer_config
from attnlab.pretraining.causal_lm import train_causal_tokenizer
from attnlab.pretraining.corpus import DocumentSource, document_texts
from attnlab.pretraining.recipes import Recipe
from attnlab.tokenizers import load_tokenizer
from attnlab.tokenizers.files import save_vocab_files
from attnlab.tokenizers.trainers import train_tokenizer


def train_or_load_tokenizer(
    recipe: Recipe,
    source: DocumentSource,
    directory: str | os.PathLike,
    *,
    vocab_size: int | None = None,
    min_frequency: int | None = None,
    sample_chars: int | None = 50_000_000,
    log: Callable[[str], None] = print,
) -> Any:
    """The tokenizer saved in ``directory`` if there is one; otherwise the recipe's kind trained on (the first
    ``sample_chars`` characters of) the corpus and saved there. ``min_frequency`` None: chosen for WordPiece
    (see below), the trainer's default otherwise."""
    d = Path(directory)
    if (d / "tokenizer.json").is_file():
        return load_tokenizer(d)
    t0 = time.perf_counter()
    target = vocab_size or recipe.vocab_size
    adaptive = min_frequency is None and recipe.tokenizer == "wordpiece"
    if adaptive:
        # attnlab's WordPiece trainer ranks pairs by freq(ab) / (freq(a) freq(b)), which puts the merges of
        # frequent words last: when the vocabulary fills up before the merges run out, "the" stays "th ##e"
        # (seen on the books and the stdlib docstrings). So the pair threshold starts at 10 and rises until
        # the trainer stops on its own below the requested size (a smaller, whole-word vocabulary).
        min_frequency = 10
    if recipe.objective == "clm":  # characters, or byte-level BPE with <|endoftext|> (GPT-2's)
        tokenizer = train_causal_tokenizer(recipe.tokenizer, source, target, sample_chars)
        save_tokenizer_files(tokenizer, d, recipe, max(s.max_length for s in recipe.stages))
        log(f"trained a {recipe.tokenizer} tokenizer of {tokenizer.get_vocab_size():,} tokens -> {d}")
        return tokenizer
    texts = list(document_texts(source, sample_chars))
    for _ in range(6):
        tokenizer = train_tokenizer(
            recipe.tokenizer,
            iter(texts),
            target,
            lowercase=recipe.lowercase,
            min_frequency=min_frequency,
            show_progress=False,
        )
        if not adaptive or tokenizer.get_vocab_size() < target:
            break
        min_frequency *= 3
    save_tokenizer_files(tokenizer, d, recipe, max(s.max_length for s in recipe.stages))
    log(
        f"trained a {recipe.tokenizer} tokenizer of {tokenizer.get_vocab_size():,} tokens in "
        f"{time.perf_counter() - t0:.1f}s (min_frequency {min_frequency}) -> {d}"
    )
    return tokenizer


def save_tokenizer_files(tokenizer: Any, directory: Path, recipe: Recipe, max_length: int) -> None:
    """``tokenizer`` in ``directory``: tokenizer.json, vocab files where the kind has them, and the
    tokenizer_config.json HF rebuilds it from."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(directory)
    try:
        save_vocab_files(tokenizer, directory)
    except (ValueError, TypeError, AttributeError):
        pass  # a Unigram tokenizer has no vocab.txt / merges.txt form; tokenizer.json holds it
    # the class HF rebuilds this exact tokenizer with (AlbertTokenizerFast for Unigram, ...), its options;
    # the WordPiece class follows the HF family the model directory took (attnlab.io.hf_layout), if any
    model_config = directory / "config.json"
    family = read_json(model_config).get("hf_family") if model_config.is_file() else None
    config = hf_tokenizer_config(tokenizer, family, model_max_length=max_length)
    write_json_atomic(config, directory / "tokenizer_config.json", indent=1)
