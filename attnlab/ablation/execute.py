"""What each kind of run does, through the library's own entry points: `attnlab.pretraining.run.pretrain`
(pre-training and DistilBERT's distillation), `attnlab.translation.recipe.train_translation` and
`attnlab.tasks.finetune`, and the frozen-feature probes (`attnlab.ablation.probes`).

Every run of the lab shares one corpus and one tokenizer (`LabData`, prepared once under OUTPUT/data), so
that rows differ only in what their configuration says.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attnlab.ablation.runs import canonical_json
from attnlab.ablation.settings import LabSettings
from attnlab.io import load
from attnlab.metrics.bleu import corpus_bleu
from attnlab.pretraining import builtin_corpus
from attnlab.pretraining.corpus import corpus_documents, files_key, prepare_corpus
from attnlab.pretraining.distillation import (
    DISTILBERT,
    DistillationConfig,
    DistillationPreTrainer,
    build_student,
    load_teacher,
    student_config,
)
from attnlab.pretraining.recipes import Recipe, get_recipe
from attnlab.pretraining.run import pretrain
from attnlab.pretraining.tokenizer import train_or_load_tokenizer
from attnlab.tasks.finetune import FinetuneConfig, ModelSource, finetune
from attnlab.tokenizers import load_tokenizer
from attnlab.train import set_seed
from attnlab.translation.recipe import heldout_perplexity, train_translation, translate_texts

Log = Callable[[str], None]
HELDOUT_EVERY = 20  # every 20th document held out, as `attnlab pretrain`
# RoBERTa's end of text, added to the lab's WordPiece vocabulary: a causal LM (BERT Table 5's left-to-right
# row) ends each document with it; the encoders' inputs never hold it
END_OF_TEXT = "</s>"


def data_folder(output: Path, key: Any) -> Path:
    """OUTPUT/data/DIGEST: where the corpus and tokenizer that ``key`` (`LabData.key`, kept in every run's
    configuration as ``data``) are prepared."""
    return output / "data" / hashlib.sha256(canonical_json(key).encode()).hexdigest()[:12]


class LabData:
    """The corpus's shards and the lab's WordPiece tokenizer, prepared once under OUTPUT/data/KEY."""

    def __init__(self, settings: LabSettings, vocab_size: int, log: Log = print) -> None:
        self.settings, self.vocab_size, self.log = settings, vocab_size, log
        self._loaded: tuple[Any, Any, Any] | None = None

    def paths(self) -> tuple[list[Path], str]:
        if self.settings.corpus:
            return [Path(p) for p in self.settings.corpus], self.settings.corpus_format
        return [self.settings.output / "data" / "stdlib_docstrings.txt"], "sentences"

    @property
    def key(self) -> dict[str, Any]:
        """What identifies the corpus and tokenizer in every run's configuration."""
        if self.settings.corpus:
            files = files_key(*self.paths())
            source: Any = {"format": files["format"], "files": [[p, size] for p, size, _ in files["files"]]}
        else:
            source = {"builtin": "stdlib_docstrings"}
        added = [END_OF_TEXT]
        return {"corpus": source, "tokenizer": "wordpiece", "vocab_size": self.vocab_size, "added": added}

    @property
    def folder(self) -> Path:
        return data_folder(self.settings.output, self.key)

    def load(self) -> tuple[Any, Any, Any]:
        """(tokenizer, training shards, held-out shards), prepared on first use."""
        if self._loaded is None:
            paths, fmt = self.paths()
            if not self.settings.corpus and not paths[0].is_file():
                docs, chars = builtin_corpus.write_corpus(paths[0])
                self.log(f"built-in corpus: {docs} stdlib modules' docstrings, {chars:,} characters")
            source = corpus_documents(paths, fmt)
            tokenizer = train_or_load_tokenizer(
                get_recipe("bert"),
                source,
                self.folder / "tokenizer",
                vocab_size=self.vocab_size,
                log=self.log,
            )
            tokenizer.add_special_tokens([END_OF_TEXT])  # a no-op when the saved tokenizer has it
            train, heldout = prepare_corpus(
                source, tokenizer, self.folder / "shards", source_key=files_key(paths, fmt),
                heldout_every=HELDOUT_EVERY, workers=min(2, os.cpu_count() or 1), log=self.log,
            )  # fmt: skip
            self._loaded = (tokenizer, train, heldout)
        return self._loaded


def _trainer_overrides(device: str) -> dict[str, Any]:
    return {"progress_bar": False, "device": device, "save_every": 100, "log_every": 50}


def run_pretrain(
    folder: Path, data: LabData, recipe: Recipe, preset: str, model_overrides: Mapping[str, Any],
    minutes: float, seed: int, device: str, log: Log,
) -> dict[str, Any]:  # fmt: skip
    """Pre-train into ``folder`` (continuing from its checkpoints if an earlier attempt left some)."""
    tokenizer, train, heldout = data.load()
    resume = (folder / "run.json").is_file()
    result = pretrain(
        recipe, tokenizer, train, heldout, folder, preset=preset, model_overrides=dict(model_overrides),
        trainer_overrides=_trainer_overrides(device), minutes=minutes, auto_steps=True, resume=resume,
        overwrite=not resume, seed=seed, log=log,
    )  # fmt: skip
    return _pretrain_record(result, folder)


def _pretrain_record(result: Any, folder: Path) -> dict[str, Any]:
    metrics = {
        k.removeprefix("eval_"): float(v)
        for k, v in result.eval_metrics.items()
        if isinstance(v, (int, float))
    }
    for name in ("mlm_accuracy", "unigram_accuracy"):  # percent, as every other score of the lab
        if name in metrics:
            metrics[name] *= 100.0
    return {"model_dir": str(Path(result.model_dir).relative_to(folder)), "steps": result.steps,
            "seconds": result.seconds, "metrics": metrics}  # fmt: skip


def run_distill(
    folder: Path, data: LabData, teacher_dir: Path, options: Mapping[str, Any], max_length: int,
    batch_size: int, lr: float, minutes: float, seed: int, device: str, log: Log,
) -> dict[str, Any]:  # fmt: skip
    """DistilBERT's triple loss from the teacher in ``teacher_dir`` (`attnlab distill`'s steps): a student
    of half the teacher's layers, from its layers unless ``options["random_init"]``."""
    _, train, heldout = data.load()
    teacher, tokenizer = load_teacher(teacher_dir)
    loss = DistillationConfig(**{k: v for k, v in options.items() if k != "random_init"})
    recipe = DISTILBERT.override(
        stages=[max_length], batch_size=batch_size, lr=lr, max_steps=1000, dropout=0.0,
        masking={"rate": 0.15, "max_predictions": None},
    )  # fmt: skip
    set_seed(seed)
    config = student_config(teacher.config, dropout=0.0)
    student, _ = build_student(teacher, config, random_init=bool(options.get("random_init", False)))
    resume = (folder / "run.json").is_file()
    result = pretrain(
        recipe, tokenizer, train, heldout, folder, trainer_overrides=_trainer_overrides(device),
        minutes=minutes, auto_steps=True, resume=resume, overwrite=not resume, seed=seed, log=log,
        model=DistillationPreTrainer(student, teacher, loss),
    )  # fmt: skip
    return _pretrain_record(result, folder)


def run_translate(
    folder: Path, data_dir: Path, preset: str, overrides: Mapping[str, Any], max_tokens: int, minutes: float,
    seed: int, sentences: int, device: str, log: Log,
) -> dict[str, Any]:  # fmt: skip
    """The Transformer on Multi30k EN->DE for ``minutes``, ``max_tokens`` a batch; greedy BLEU on the first
    ``sentences`` of val and the perplexity per subword on all of val."""
    d = data_dir / "multi30k"
    resume = (folder / "plan.json").is_file() or (folder / "train").is_dir()
    run = train_translation(
        d / "train.en", d / "train.de", folder, config_overrides=dict(overrides), preset_name=preset,
        vocab_size=8000, max_length=128, max_tokens=max_tokens, minutes=minutes, auto_steps=True, warmup=4000,
        warmup_share=0.2, average_last=2, save_every=200, seed=seed, resume=resume, overwrite=not resume,
        trainer_overrides={"progress_bar": False, "device": device, "log_every": 50}, log=log,
    )  # fmt: skip
    model = load(run.model_dir, device=device)
    tokenizer = load_tokenizer(run.model_dir)
    sources = (d / "val.en").read_text(encoding="utf-8").splitlines()
    refs = (d / "val.de").read_text(encoding="utf-8").splitlines()
    hyps = translate_texts(model, tokenizer, sources[:sentences], beam_size=1)
    bleu = corpus_bleu(hyps, refs[:sentences])
    perplexity = heldout_perplexity(model, tokenizer, sources, refs)
    return {"model_dir": str(Path(run.model_dir).relative_to(folder)), "steps": run.steps,
            "metrics": {"bleu": float(bleu.score), "perplexity": perplexity},
            "signature": str(bleu.signature)}  # fmt: skip


FINETUNE_TASKS = {"sst2_finetune": ("sst2", "glue/SST-2"), "conll_finetune": ("conll2003", "conll2003"),
                  "squad_finetune": ("squad", "squad")}  # fmt: skip


def run_finetune(
    folder: Path, probe: str, model_dir: Path, data_dir: Path, lr: float, examples: int, minutes: float,
    seed: int, device: str,
) -> dict[str, Any]:  # fmt: skip
    """One fine-tuning run (BERT's recipe, one learning rate, one seed) for ``minutes``; best dev score."""
    task, sub = FINETUNE_TASKS[probe]
    cfg = FinetuneConfig(
        learning_rates=(lr,), seeds=(seed,), minutes=minutes, max_train_examples=examples,
        output_dir=folder / "finetune", keep_best=False, overwrite=True, device=device,
    )  # fmt: skip
    result = finetune(task, data_dir / sub, ModelSource(directory=model_dir), cfg)
    run = result.runs[0]
    return {"metrics": {result.metric: float(result.median)}, "steps": getattr(run, "steps", None)}
