"""The report step of a pre-training run: the held-out figures beside the unigram guess, and the saved
model (OUTPUT/model, OUTPUT/generator for ELECTRA, OUTPUT/hf in HF transformers' layout where it has one)."""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from attnlab.io import save
from attnlab.manifest import write_manifest
from attnlab.models.gpt import GPT, GPTConfig
from attnlab.models.transfo_xl import TransfoXLConfig
from attnlab.pretraining.causal_lm import save_causal_lm_run
from attnlab.pretraining.electra import ElectraPreTrainer
from attnlab.pretraining.inputs import RunInputs
from attnlab.pretraining.model import ModelConfig, final_model
from attnlab.pretraining.recipes import Recipe
from attnlab.pretraining.stages import StagesResult
from attnlab.pretraining.tokenizer import save_tokenizer_files
from attnlab.pretraining.transfo_xl import save_transfo_xl_run
from attnlab.train import ResumableLoader


def held_out_metrics(
    stages: StagesResult, inputs: RunInputs, eval_loader: ResumableLoader, vocab_size: int, is_main: bool
) -> dict[str, float]:
    """The last evaluation (run now if the last stage did not end with one), with the unigram guess on the
    same held-out tokens (``eval_unigram_*``) on the main process."""
    # decided alike on every rank (only rank 0 holds last_eval): evaluate is a collective call under DDP
    trainer = stages.trainer
    metrics = dict(trainer.last_eval) if stages.evaluated else trainer.evaluate()
    if is_main and metrics:
        metrics.update(inputs.baseline(eval_loader, vocab_size))
    return metrics


def save_final(
    model: nn.Module,
    tokenizer: Any,
    recipe: Recipe,
    out: Path,
    config: ModelConfig,
    log: Callable[[str], None] = print,
    *,
    run_id: str | None = None,
) -> Path:
    """OUTPUT/model (attnlab), OUTPUT/generator (ELECTRA) and OUTPUT/hf (HF transformers, where the model
    has an HF class; otherwise ``log`` says why not) with tokenizers. A GPT: OUTPUT/model as a causal-LM
    directory (attnlab.io.families.gpt2) and OUTPUT/hf as HF GPT-2 (attnlab.io.hf_gpt2). A Transformer-XL:
    OUTPUT/model as attnlab.io.families.transfo_xl's directory (weights, no memory), no OUTPUT/hf."""
    if isinstance(config, GPTConfig):
        return _save_final_gpt(model, tokenizer, out, log, run_id=run_id)
    if isinstance(config, TransfoXLConfig):
        shutil.rmtree(out / "hf", ignore_errors=True)  # no stale export of an earlier run
        log("no HF transformers export: transformers 5 has no Transformer-XL class")
        return save_transfo_xl_run(model, tokenizer, out / "model", run_id=run_id)

    max_length = config.max_sequence_length
    kept = final_model(model)
    model_dir = save(kept, out / "model", run_id=run_id)
    save_tokenizer_files(tokenizer, model_dir, recipe, max_length)
    write_manifest(model_dir, run_id=run_id)  # weights, config and tokenizer files, verified on load
    if isinstance(model, ElectraPreTrainer):
        save(model.generator, out / "generator", run_id=run_id)
        save_tokenizer_files(tokenizer, out / "generator", recipe, max_length)
        write_manifest(out / "generator", run_id=run_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "HF ... has no pooler": said in the export's config
            save(kept, out / "hf", hf=True, tokenizer=tokenizer)  # tokenizer_config: HF rebuilds it
    except (ValueError, TypeError) as e:
        shutil.rmtree(out / "hf", ignore_errors=True)  # no stale export of an earlier run
        log(f"no HF transformers export: {' '.join(str(e).split())}")
    return model_dir


def _save_final_gpt(
    model: GPT, tokenizer: Any, out: Path, log: Callable[[str], None], *, run_id: str | None
) -> Path:
    model_dir = save_causal_lm_run(model, tokenizer, out / "model", run_id=run_id)
    try:
        save(model, out / "hf", hf=True)
        tokenizer.save(out / "hf")
    except (ValueError, TypeError) as e:
        shutil.rmtree(out / "hf", ignore_errors=True)
        log(f"no HF transformers export: {' '.join(str(e).split())}")
    return model_dir
