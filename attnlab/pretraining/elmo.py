"""``attnlab pretrain --recipe elmo``: ELMo's bidirectional language model on raw text (Peters et al. 2018,
section 3.4: forward and backward LM losses, the token encoder and the softmax shared).

Raw text -> sentences (`attnlab.data.corpus`) -> words (`split_words`: word characters with inner
apostrophes and hyphens, each other symbol a token; case kept, the character CNN sees it) -> a word
vocabulary from the training sentences for the output softmax (``<S>``, ``</S>``, ``<UNK>`` first, as
bilm-tf's vocabulary files; adaptive softmax above `ADAPTIVE_FROM` words) -> batches of whole sentences
(char ids with the sentence markers, word ids) -> the shared `attnlab.train.Trainer` (checkpoints,
resume) -> held-out forward, backward and mean perplexity beside the unigram model's.

Deliberate differences from the paper's training (1 Billion Word Benchmark, 10 epochs, Adagrad 0.2,
a 793K-word sampled softmax, stateful 20-token windows): sentences are batched whole and stateless,
Adam with linear decay, and a corpus vocabulary of ``vocab_size`` words with an adaptive softmax.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import regex
import torch

from attnlab.accel import optimize
from attnlab.atomic import atomic_write, write_json_atomic
from attnlab.data.corpus import read_documents
from attnlab.io import save
from attnlab.io.families.elmo import read_vocab
from attnlab.io.format import read_json
from attnlab.models.elmo.bilm import ElmoBiLM, count_parameters
from attnlab.models.elmo.chars import BOS_TOKEN, EOS_TOKEN, word_char_ids
from attnlab.models.elmo.config import ElmoConfig, get_preset
from attnlab.pretraining.plan import MIN_USEFUL_STEPS
from attnlab.train import Trainer, TrainerConfig
from attnlab.train.budget import fit_warmup
from attnlab.train.checkpoint import latest_checkpoint
from attnlab.train.footprint import check_step_fits

UNK_TOKEN = "<UNK>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
ADAPTIVE_FROM = 5000  # vocabularies at least this large use the adaptive softmax
_WORD = regex.compile(r"[\p{L}\p{N}_]+(?:['’\-][\p{L}\p{N}_]+)*|[^\s\p{L}\p{N}_]")


def split_words(sentence: str) -> list[str]:
    """``"Don't stop-gap, 3.5!"`` -> ``["Don't", "stop-gap", ",", "3", ".", "5", "!"]``."""
    return _WORD.findall(sentence)


@dataclass(frozen=True)
class ElmoRecipe:
    """The run's settings; `attnlab pretrain --recipe elmo` fills them from its options."""

    preset: str = "elmo-cpu"
    vocab_size: int = 20000  # softmax words, specials included
    min_count: int = 2  # rarer words are <UNK> in the softmax (the input still reads their characters)
    max_words: int = 40  # longer sentences are cut into pieces of this many words
    batch_size: int = 32
    lr: float = 2e-3
    warmup: float = 0.02
    clip_norm: float = 5.0  # bilm-tf clipped the gradient norm at 10; 5 for Adam
    max_steps: int = 2000
    minutes: float | None = None
    heldout_every: int = 20  # every N-th document is held out
    eval_sentences: int = 2000
    seed: int = 0
    model: dict[str, Any] = field(default_factory=dict)  # ElmoConfig overrides


# --paper: bilm-tf's training of elmo_2x4096_512_2048cnn_2xhighway (Peters et al. 2018): windows of 20
# words, 128 a GPU on 3 GPUs, 10 epochs of the 1B Word Benchmark's 768,648,884 training words (1,000,844
# steps), its vocabulary of 793,471 words (those seen 3 times or more). Batches are per process here and the
# optimiser stays this module's Adam (the module docstring's deliberate differences).
PAPER = ElmoRecipe(
    preset="elmo", vocab_size=793_471, min_count=3, max_words=20, batch_size=128, max_steps=1_000_844
)


class WordVocab:
    def __init__(self, words: Sequence[str]) -> None:
        if list(words[: len(SPECIALS)]) != list(SPECIALS):
            raise ValueError(
                f"WordVocab: the first words must be {', '.join(SPECIALS)}, got {list(words[:3])}"
            )
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("WordVocab: repeated words")
        self.unk = self.index[UNK_TOKEN]

    def __len__(self) -> int:
        return len(self.words)

    def ids(self, sentence: Sequence[str]) -> list[int]:
        return [self.index.get(w, self.unk) for w in sentence]

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], max_size: int, min_count: int = 1) -> WordVocab:
        counts = Counter(w for s in sentences for w in s)
        ranked = [w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_count]
        return cls([*SPECIALS, *[w for w in ranked if w not in SPECIALS][: max_size - len(SPECIALS)]])


def read_sentences(
    paths: Sequence[str | os.PathLike],
    fmt: str,
    max_words: int,
    heldout_every: int,
    max_chars: int | None = None,
) -> tuple[list[list[str]], list[list[str]], dict[str, int]]:
    """``(train, heldout, counts)``: word lists; every ``heldout_every``-th document goes to held-out text
    (at least one document each side). Empty sentences are skipped and counted."""
    documents: list[list[list[str]]] = []
    chars = empty = 0
    for doc in read_documents(paths, fmt):
        sentences = []
        for text in doc:
            words = split_words(text)
            if not words:
                empty += 1
                continue
            for start in range(0, len(words), max_words):
                sentences.append(words[start : start + max_words])
            chars += len(text)
        if sentences:
            documents.append(sentences)
        if max_chars is not None and chars >= max_chars:
            break
    if not documents:
        raise ValueError(f"{', '.join(map(str, paths))}: no words found in the corpus")
    every = heldout_every if len(documents) >= 2 * heldout_every else max(2, len(documents) // 2)
    train, heldout = [], []
    for i, sentences in enumerate(documents):
        (heldout if len(documents) > 1 and i % every == every - 1 else train).extend(sentences)
    if not heldout:  # one document: its last tenth
        cut = max(1, len(train) // 10)
        train, heldout = train[:-cut], train[-cut:]
    if not train:
        raise ValueError(f"{', '.join(map(str, paths))}: too little text to hold some out (one sentence)")
    return train, heldout, {"documents": len(documents), "empty_sentences": empty}


class SentenceDataset(torch.utils.data.Dataset):
    """Word lists as a map-style dataset, so the Trainer's `ResumableLoader` shuffles and resumes exactly."""

    def __init__(self, sentences: Sequence[Sequence[str]]) -> None:
        self.sentences = sentences

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, i: int) -> Sequence[str]:
        return self.sentences[i]


class ElmoCollator:
    """Sentences (word lists) -> ``{"char_ids" (B, T+2, C), "mask" (B, T+2), "word_ids" (B, T+2)}``."""

    def __init__(self, vocab: WordVocab, max_chars: int) -> None:
        self.vocab, self.max_chars = vocab, max_chars
        self._chars: dict[str, list[int]] = {}

    def _char_ids(self, word: str) -> list[int]:
        ids = self._chars.get(word)
        if ids is None:
            ids = self._chars[word] = word_char_ids(word, self.max_chars)
            if len(self._chars) > 500_000:
                self._chars.clear()
        return ids

    def __call__(self, sentences: Sequence[Sequence[str]]) -> dict[str, torch.Tensor]:
        rows = [[BOS_TOKEN, *s, EOS_TOKEN] for s in sentences]
        T = max(len(r) for r in rows)
        char_ids = torch.zeros(len(rows), T, self.max_chars, dtype=torch.long)
        word_ids = torch.full((len(rows), T), -100, dtype=torch.long)
        mask = torch.zeros(len(rows), T, dtype=torch.bool)
        for b, row in enumerate(rows):
            char_ids[b, : len(row)] = torch.tensor([self._char_ids(w) for w in row])
            word_ids[b, : len(row)] = torch.tensor(self.vocab.ids(row))
            mask[b, : len(row)] = True
        return {"char_ids": char_ids, "mask": mask, "word_ids": word_ids}


class PerplexityMetric:
    """Held-out forward / backward / mean perplexity per predicted word (the Trainer's streaming metric)."""

    def reset(self) -> None:
        self.f = self.b = self.n = 0.0

    def __init__(self) -> None:
        self.reset()

    def update(self, output: Any, batch: Any) -> None:
        self.f += float(output.nll_forward)
        self.b += float(output.nll_backward)
        self.n += float(output.num_predictions)

    def compute(self) -> dict[str, float]:
        n = max(self.n, 1.0)
        return {
            "ppl_forward": math.exp(self.f / n),
            "ppl_backward": math.exp(self.b / n),
            "ppl": math.exp(0.5 * (self.f + self.b) / n),
            "words": self.n,
        }


def unigram_perplexity(
    train: Sequence[Sequence[str]], heldout: Sequence[Sequence[str]], vocab: WordVocab
) -> float:
    """The perplexity of word frequencies (add-one) over the softmax vocabulary: what an LM must beat."""
    counts = Counter(i for s in train for i in vocab.ids([*s, EOS_TOKEN]))
    total = sum(counts.values()) + len(vocab)
    nll = n = 0
    for s in heldout:
        for i in vocab.ids([*s, EOS_TOKEN]):
            nll -= math.log((counts[i] + 1) / total)
            n += 1
    return math.exp(nll / max(n, 1))


@dataclass
class ElmoPretrainResult:
    model: ElmoBiLM
    vocab: WordVocab
    model_dir: Path
    steps: int
    seconds: float
    metrics: dict[str, float]
    unigram_ppl: float


def model_config(recipe: ElmoRecipe, vocab_size: int) -> ElmoConfig:
    base = get_preset(recipe.preset)
    cutoffs = ()
    if vocab_size >= ADAPTIVE_FROM:
        cutoffs = (2000, min(10000, vocab_size - 1)) if vocab_size > 10001 else (2000,)
    return replace(base, **{"vocab_size": vocab_size, "adaptive_cutoffs": cutoffs, **recipe.model})


def pretrain_elmo(
    recipe: ElmoRecipe,
    paths: Sequence[str | os.PathLike],
    fmt: str,
    out: Path,
    *,
    resume: bool = False,
    run_id: str | None = None,
    progress: bool = True,
    max_chars: int | None = None,
    log: Callable[[str], None] = print,
) -> ElmoPretrainResult:
    """Train, checkpoint (``out/train``), save ``out/model`` and return held-out perplexities."""
    torch.manual_seed(recipe.seed)
    started = time.monotonic()
    train, heldout, counts = read_sentences(paths, fmt, recipe.max_words, recipe.heldout_every, max_chars)
    vocab_file = out / "vocab.txt"
    if resume and vocab_file.is_file():  # the vocabulary the checkpoints' softmax was built with
        vocab = WordVocab(vocab_file.read_text(encoding="utf-8").splitlines())
    else:
        vocab = WordVocab.build(train, recipe.vocab_size, recipe.min_count)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_write(vocab_file) as f:
            f.write("".join(f"{w}\n" for w in vocab.words))
    read_vocab(vocab_file, len(vocab))  # the file fits the softmax about to be built
    heldout = heldout[: recipe.eval_sentences]
    train_words = sum(len(s) for s in train)
    covered = sum(1 for s in heldout for w in s if w in vocab.index) / max(1, sum(len(s) for s in heldout))
    log(
        f"elmo: {len(train):,} training sentences ({train_words:,} words, {counts['documents']} documents, "
        f"{counts['empty_sentences']} empty skipped), {len(heldout):,} held out; "
        f"vocabulary {len(vocab):,} words (held-out coverage {100 * covered:.1f}%), "
        f"read in {time.monotonic() - started:.0f} s"
    )
    config = model_config(recipe, len(vocab))
    config_file = out / "elmo_config.json"  # the run's model, so that a resume rebuilds the same one
    if resume and config_file.is_file():
        saved = ElmoConfig.from_dict(read_json(config_file))
        if saved.vocab_size != len(vocab):
            raise ValueError(
                f"{vocab_file}: {len(vocab)} words, but this run's softmax has vocab_size={saved.vocab_size} "
                f"({config_file} field 'vocab_size'); restore the run's vocab.txt or start a new run"
            )
        config = saved
    else:
        write_json_atomic(config.to_dict(), config_file)
    model = ElmoBiLM(config)
    seconds_left = None if recipe.minutes is None else 60.0 * recipe.minutes - (time.monotonic() - started)
    check_step_fits(model, recipe.batch_size, recipe.max_words + 2, seconds_left)  # + <S> and </S>
    log(
        f"elmo: preset {recipe.preset}: {count_parameters(model) / 1e6:.2f}M parameters + softmax "
        f"{(count_parameters(model, softmax=True) - count_parameters(model)) / 1e6:.2f}M "
        f"({'adaptive ' + str(config.adaptive_cutoffs) if config.adaptive_cutoffs else 'full'})"
    )
    collate = ElmoCollator(vocab, config.max_chars)
    eval_batches = [collate(heldout[i : i + 64]) for i in range(0, len(heldout), 64)]
    tconfig = TrainerConfig(
        max_steps=recipe.max_steps, max_minutes=recipe.minutes, batch_size=recipe.batch_size, lr=recipe.lr,
        betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, warmup=recipe.warmup, schedule="linear",
        clip_norm=recipe.clip_norm, output_dir=out / "train", seed=recipe.seed, log_every=20,
        save_every=200, progress_bar=progress, tensorboard=False,
    )  # fmt: skip
    callbacks = []
    if recipe.minutes is not None:
        callbacks.append(_plan_from_step_time(recipe.minutes * 60.0, log))
    optimize(model, "training")  # oneDNN's products where they are faster (attnlab.accel)
    trainer = Trainer(
        model, tconfig, SentenceDataset(train), eval_data=eval_batches, collate_fn=collate,
        metric_fn=PerplexityMetric(), callbacks=callbacks, run_id=run_id,
    )  # fmt: skip
    if resume and latest_checkpoint(out / "train" / "checkpoints") is not None:
        trainer.resume(log=log)
    train_started = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - train_started
    metrics = trainer.evaluate()
    unigram = unigram_perplexity(train, heldout, vocab)
    model_dir = save(model, out / "model", vocab=vocab.words, run_id=trainer.run_id)
    return ElmoPretrainResult(
        model=model.eval(), vocab=vocab, model_dir=model_dir, steps=trainer.step,
        seconds=seconds, metrics=metrics, unigram_ppl=unigram,
    )  # fmt: skip


def _plan_from_step_time(seconds: float, log: Callable[[str], None]) -> Callable[[Any, dict], None]:
    """After 20 and 200 steps, set the run's length to what the remaining time allows, so the schedule ends
    when the time does (the trainer's max_minutes stops it in any case)."""
    state: dict[str, Any] = {"start": None, "warned": False}

    def callback(trainer: Any, record: dict) -> None:
        step = trainer.step
        if state["start"] is None:
            state["start"] = (time.monotonic(), step)
            return
        if step in (20, 200):
            t0, s0 = state["start"]
            per_step = (time.monotonic() - t0) / max(1, step - s0)
            total = max(step + 1, int(seconds / per_step * 0.97))
            log(f"elmo: {per_step:.2f} s/step -> {total} steps in the budget")
            if total < MIN_USEFUL_STEPS and not state["warned"]:  # said once, not at every re-plan
                state["warned"] = True
                log(
                    f"warning: only {total} steps fit in {seconds / 60:g} minutes, too few for the biLM to "
                    "learn much beyond word frequencies; give it more time (--minutes)"
                )
            fit_warmup(trainer, total, log)  # the warm-up scales to the steps that fit
            trainer.set_total_steps(total)

    return callback
