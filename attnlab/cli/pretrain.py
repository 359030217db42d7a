"""``attnlab pretrain`` and ``attnlab fill-mask``: pre-train a BERT-family model, then query its masked LM.

attnlab pretrain                                   # the built-in demo: stdlib docstrings, bert-mini, ~4 min
attnlab pretrain --recipe roberta --corpus books/ --format text --minutes 30 --output runs/rb
attnlab pretrain --recipe electra --corpus wiki.txt --config e.yaml --set lr=1e-3 --set model.num_layers=6
attnlab pretrain --recipe bert --corpus wiki.txt --output runs/bert --resume
attnlab pretrain --recipe gpt --corpus ../shared/data/tinyshakespeare --format text --tokenizer-kind char
attnlab generate runs/pretrain-gpt/model --prompt "ROMEO:" --sample --top-k 40
attnlab pretrain --recipe transfo-xl --corpus ../shared/data/tinyshakespeare --format text --mem-len 64
attnlab perplexity runs/pretrain-transfo-xl/model --file ../shared/data/tinyshakespeare/input.txt
attnlab fill-mask runs/pretrain-bert/model "The function returns a [MASK] of strings." --top-k 5

``--set`` and ``--config`` (YAML) name recipe fields (``lr``, ``warmup``, ``max_steps``, ``batch_size``,
``dupe_factor``, ...), ``masking.FIELD`` (MaskingConfig), ``model.FIELD`` (EncoderConfig; GPTConfig or
TransfoXLConfig for the causal recipes) and
``trainer.FIELD`` (TrainerConfig: ``log_every``, ``save_every``, ``eval_every``, ``precision``,
``num_workers``, ...). A YAML file holds the same as nested mappings:
``{lr: 1e-3, masking: {rate: 0.2}, model: {num_layers: 6}}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlab.cli.elmo import run_pretrain_elmo
from attnlab.cli.overrides import check_overrides, collect_overrides
from attnlab.cli.parallel import check_parallel, parallel_settings
from attnlab.cli.pretrain_options import CORPUS_FORMATS_EPILOG, PRETRAIN_OPTIONS
from attnlab.train.footprint import StepDoesNotFit

# The main job's fill-mask examples: idioms of docstrings whose answer a reader of the standard library's
# documentation would give without hesitation, with that answer (chosen before any model saw them; none
# of these sentences is in the corpus as written).
DEMO_SENTENCES = (
    ("The function returns a [MASK] of strings.", "list"),
    ("Return True if the path exists, [MASK] otherwise.", "false"),
    ("Return the [MASK] of bytes written to the file.", "number"),
    ("Parse the arguments given on the [MASK] line.", "command"),
)
PRETRAIN_OUTPUTS = ("train", "model", "generator", "hf", "tokenizer")  # what a run writes in --output
# accuracy a run must add to the unigram guess before its result is called learning (5 points)
LEARNED_MARGIN = 0.05


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "pretrain",
        help="pre-train a BERT-family model (mlm, bert, roberta, albert, spanbert, electra recipes), a GPT "
        "(gpt: a causal LM for attnlab generate) or a Transformer-XL (transfo-xl: segment recurrence)",
        description="Prepare shards, train a tokenizer if none is given, pre-train with the shared Trainer, "
        "save the model and tokenizer (attnlab and HF layouts) and print held-out MLM accuracy and "
        "perplexity beside the unigram guess. Without --paper, the recipe runs at the sizes that learn "
        "most in --minutes on a CPU (attnlab.pretraining.budget: a small pre-LN model, short packed "
        "sequences, 40% masking, a high learning rate planned inside the budget). With no --corpus: a "
        "built-in corpus of the Python standard library's docstrings for --minutes (default 4), then "
        "fill-mask examples with the expected words.",
        epilog=CORPUS_FORMATS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for add_options in PRETRAIN_OPTIONS:
        add_options(p)
    p.set_defaults(func=run_pretrain)
    register_fill_mask(subparsers)


def register_fill_mask(subparsers: argparse._SubParsersAction) -> None:
    from attnlab.cli.args import positive_int

    f = subparsers.add_parser(
        "fill-mask",
        help="print a masked LM's top-k tokens for each [MASK] in a text",
        description="Load an attnlab or HF transformers directory (model with an MLM head + tokenizer files) "
        "and print the top-k tokens with their probabilities at every mask token of TEXT.",
    )
    f.add_argument("model_dir", metavar="MODEL_DIR")
    f.add_argument("text", metavar="TEXT", help='e.g. "Paris is the [MASK] of France."')
    f.add_argument("--top-k", type=positive_int, default=5, help="candidates per mask (default 5)")
    f.add_argument("--json", action="store_true", help="one JSON object")
    f.set_defaults(func=run_fill_mask)


@dataclass
class PretrainSettings:
    """What ``attnlab pretrain``'s options resolve to before anything is read or written."""

    recipe: Any
    preset: str
    minutes: float | None
    auto_steps: bool  # max_steps planned from --minutes
    builtin: bool  # no --corpus: the built-in corpus of stdlib docstrings
    overrides: dict[str, dict[str, Any]]
    trainer_overrides: dict[str, Any]


def run_pretrain(args: argparse.Namespace) -> int:
    """Errors reach `attnlab.cli.main`: one line for a user's, ``--debug`` for the traceback."""
    from attnlab.inference.allocator import bound_kernel_caches

    bound_kernel_caches()  # oneDNN's kernels per batch shape, capped (benchmarks/training_memory.py)
    if args.recipe == "elmo":  # ELMo's biLM: character inputs, a word softmax, its own data path
        with options_that_fit(args.paper):
            return run_pretrain_elmo(args)
    if args.dry_run:
        return print_memory_plan(args)
    from attnlab.pretraining.model import masked_lm_of
    from attnlab.pretraining.run import pretrain
    from attnlab.train import setup_distributed
    from attnlab.train.distributed import barrier
    from attnlab.train.run_dir import prepare_run_directory, read_run_file

    overrides = collect_overrides(args.config, args.set)
    # one process unless launched by torchrun; NCCL or gloo by the device the trainer will use
    ctx = setup_distributed(device=str(overrides["trainer"].get("device", "auto")))
    log = print if ctx.is_main else (lambda message: None)
    settings = pretrain_settings(args, overrides)
    check_parallel(settings.trainer_overrides, ctx.is_distributed, "pretrain")
    recipe, out = settings.recipe, Path(args.output or f"runs/pretrain-{settings.recipe.name}")
    given_tokenizer = check_inputs(args, settings)  # before anything is written into --output

    # one rule for run directories (attnlab.train.run_dir): another run's outputs are refused unless --resume
    # or --overwrite; --overwrite removes them all, the old tokenizer too (the shard cache in data/ is keyed
    # by corpus and tokenizer, so it is reused only when both are the same)
    overwrite = args.overwrite or (settings.builtin and not args.resume)
    if ctx.is_main:
        prepare_run_directory(
            out, "pretrain", PRETRAIN_OUTPUTS, resume=args.resume, overwrite=overwrite, log=log
        )
    barrier(ctx)
    run_id = (read_run_file(out) or {}).get("run_id")
    # under torchrun: rank 0 trains the tokenizer and prepares the shards, the others then reuse them
    if ctx.is_main:
        tokenizer, train_corpus, heldout = prepare_data(args, settings, out, given_tokenizer, log)
    barrier(ctx)
    if not ctx.is_main:
        tokenizer, train_corpus, heldout = prepare_data(args, settings, out, given_tokenizer, log)
    log(describe_run(settings))
    with options_that_fit(args.paper):
        result = pretrain(
            recipe, tokenizer, train_corpus, heldout, out, preset=settings.preset,
            model_overrides=settings.overrides["model"], trainer_overrides=settings.trainer_overrides,
            minutes=settings.minutes, auto_steps=settings.auto_steps, resume=args.resume,
            overwrite=overwrite, eval_examples=args.eval_examples, seed=args.seed, run_id=run_id, log=log,
        )  # fmt: skip
    if not ctx.is_main:
        return 0
    if recipe.objective == "clm":
        print_causal_result(result, heldout)
        return 0
    print_result(result, settings.preset, settings.minutes, paper=args.paper)
    if settings.builtin:
        print_demo(masked_lm_of(result.model), tokenizer)
    return 0


@contextlib.contextmanager
def options_that_fit(paper: bool) -> Iterator[None]:
    """A step too large for the machine or the budget (`StepDoesNotFit`) gets the options that would fit:
    --paper fixes the batch and lengths, so there it is the budget's sizes (without --paper)."""
    try:
        yield
    except StepDoesNotFit as error:
        if paper:
            advice = "without --paper the command picks the sizes that fit the --minutes given"
        else:
            advice = "give more --minutes, or a smaller --batch-size, --max-length or --preset"
        raise StepDoesNotFit(f"{error}: {advice}") from None


def pretrain_settings(args: argparse.Namespace, overrides: dict[str, dict[str, Any]]) -> PretrainSettings:
    """The recipe (the paper's with --paper; otherwise its budget version for --minutes), the preset, the
    time plan and the overrides, from the options; the options that contradict each other are refused."""
    from attnlab.pretraining.budget import MODEL_CHANGES, budget_for, for_budget
    from attnlab.pretraining.recipes import get_recipe

    builtin = not args.corpus
    # --attention/--window/--global-tokens are model.attention/attention_window/global_tokens
    for flag, field in (("attention", "attention"), ("window", "attention_window"), ("global_tokens",) * 2,
                        ("hashes", "lsh_num_hashes")):  # fmt: skip
        if getattr(args, flag) is not None:
            overrides["model"][field] = getattr(args, flag)
    recipe = get_recipe(args.recipe)
    if args.tokenizer_kind is not None:
        recipe = recipe.override(tokenizer=args.tokenizer_kind)
    if args.mem_len is not None:  # model.mem_len (TransfoXLConfig)
        if not recipe.segment_recurrence:
            raise ValueError(
                f"--mem-len is Transformer-XL's memory (--recipe transfo-xl), not {recipe.name}'s"
            )
        overrides["model"]["mem_len"] = args.mem_len
    minutes = args.minutes if args.minutes is not None else (4.0 if builtin else None)
    budget = None
    if args.paper:
        if any(v is not None for v in (args.max_steps, args.batch_size, args.max_length)):
            raise ValueError(
                "--paper takes the paper's steps, batch and lengths; drop --max-steps, --batch-size "
                "and --max-length"
            )
    else:
        # the sizes and optimisation that learn most in the time given (attnlab.pretraining.budget)
        budget = budget_for(minutes, recipe.objective, recurrent=recipe.segment_recurrence)
        recipe = for_budget(
            recipe, budget, max_steps=1000 if args.max_steps is None else args.max_steps,
            batch_size=args.batch_size,
            max_length=args.max_length,
        )  # fmt: skip
        if recipe.objective != "clm":  # pre-LN: GPT presets are pre-LN already
            overrides["model"] = {**MODEL_CHANGES, **overrides["model"]}
    if overrides["masking"]:
        overrides["recipe"]["masking"] = overrides["masking"]
    recipe = recipe.override(**overrides["recipe"])
    auto_steps = minutes is not None and args.max_steps is None and "max_steps" not in overrides["recipe"]
    trainer_overrides = {"progress_bar": not args.no_progress, **overrides["trainer"]}
    trainer_overrides.update(parallel_settings(args))  # --parallel and its options: trainer.FIELD
    trainer_overrides.setdefault("save_every", 200)
    trainer_overrides.setdefault("log_every", 10)
    preset = args.preset or (budget.preset if budget else recipe.preset)
    return PretrainSettings(recipe, preset, minutes, auto_steps, builtin, overrides, trainer_overrides)


def print_memory_plan(args: argparse.Namespace) -> int:
    """``--dry-run``: the per-process memory of the run the options describe (attnlab.train.memory_plan),
    from the model built on the meta device (nothing allocated, nothing read or written)."""
    import os

    import torch

    from attnlab.models import get_preset
    from attnlab.pretraining.model import build_pretraining_model
    from attnlab.train.memory_plan import plan_memory

    settings = pretrain_settings(args, collect_overrides(args.config, args.set))
    recipe = settings.recipe
    if recipe.objective == "clm" or recipe.segment_recurrence:
        raise ValueError(f"--dry-run plans the encoder recipes; {recipe.name} is a causal LM")
    world_size = args.world_size or int(os.environ.get("WORLD_SIZE", "1"))
    config = get_preset(settings.preset)
    with torch.device("meta"):
        model = build_pretraining_model(recipe, config)
    parallel = settings.trainer_overrides.get("parallel", "ddp")
    batch, length = recipe.batch_size, max(s.max_length for s in recipe.stages)
    plan = plan_memory(
        model, world_size=world_size, parallel=parallel, batch_size=batch, length=length,
        hidden=config.hidden_size, heads=config.num_heads,
        activation_checkpointing=bool(settings.trainer_overrides.get("activation_checkpointing")),
    )  # fmt: skip
    print(f"{settings.preset} ({recipe.name}), batch {batch} per process, length {length}")
    print("\n".join(plan.lines()))
    return 0


def check_inputs(args: argparse.Namespace, settings: PretrainSettings) -> Any:
    """Everything the user gave, checked before anything is written into --output: the corpus paths, the
    overrides against their configs, --workers and the tokenizer directory (returned, loaded, or None)."""
    from attnlab.tokenizers import load_tokenizer

    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    for path in args.corpus or ():
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such corpus file or directory")
    check_overrides(settings.recipe, settings.preset, settings.overrides)
    if not args.tokenizer:
        return None
    if not Path(args.tokenizer).is_dir():
        raise NotADirectoryError(f"{args.tokenizer}: --tokenizer expects a tokenizer directory")
    return load_tokenizer(args.tokenizer)


def prepare_data(
    args: argparse.Namespace,
    settings: PretrainSettings,
    out: Path,
    tokenizer: Any,
    log: Callable[[str], None],
) -> tuple[Any, Any, Any]:
    """The tokenizer (given, or trained on the corpus into OUTPUT/tokenizer) and the training and held-out
    shards (OUTPUT/data); the built-in corpus is written into OUTPUT/corpus first."""
    import os

    from attnlab.pretraining import builtin_corpus
    from attnlab.pretraining.causal_lm import causal_documents
    from attnlab.pretraining.corpus import corpus_documents, files_key, prepare_corpus
    from attnlab.pretraining.tokenizer import train_or_load_tokenizer

    recipe, causal = settings.recipe, settings.recipe.objective == "clm"
    if settings.builtin:
        corpus_file = out / "corpus" / "stdlib_docstrings.txt"
        if not corpus_file.is_file():
            docs, chars = builtin_corpus.write_corpus(corpus_file)
            log(f"built-in corpus: {docs} stdlib modules' docstrings, {chars:,} characters -> {corpus_file}")
        paths, fmt = [corpus_file], "sentences"
    else:
        paths, fmt = [Path(p) for p in args.corpus], args.format
    # a causal LM reads the text as written (line breaks kept), a masked LM its sentences
    source = causal_documents(paths, fmt) if causal else corpus_documents(paths, fmt)
    if tokenizer is None:
        tokenizer = train_or_load_tokenizer(
            recipe, source, out / "tokenizer", vocab_size=args.vocab_size,
            min_frequency=args.tokenizer_min_frequency, log=log,
        )  # fmt: skip
    train, heldout = prepare_corpus(
        source, tokenizer, out / "data", source_key={**files_key(paths, fmt), "causal": causal},
        heldout_every=args.heldout_every, workers=args.workers or min(2, os.cpu_count() or 1), log=log,
    )  # fmt: skip
    return tokenizer, train, heldout


def describe_run(settings: PretrainSettings) -> str:
    """The run in one line: recipe, objective and data, preset, batch, lengths and time budget."""
    recipe = settings.recipe
    if recipe.segment_recurrence:
        data = "segments of parallel streams in order, memory carried"
    elif recipe.objective == "clm":
        data = "blocks of the token stream"
    else:
        data = f"{recipe.instance_format}, {recipe.masking.strategy} masking"
    return (
        f"recipe {recipe.name} ({recipe.objective}, {data}), preset {settings.preset}, batch "
        f"{recipe.batch_size}, lengths {[s.max_length for s in recipe.stages]}"
        + (f", time budget {settings.minutes:g} min" if settings.minutes is not None else "")
    )


def _hf_note(model_dir: Path, out: Path) -> str:
    """Where HF transformers finds the model: the model directory itself when it took HF's layout
    (`attnlab.io.hf_layout`), else the run's ``hf/`` export when there is one."""
    from attnlab.io.format import read_json

    raw = read_json(Path(model_dir) / "config.json")
    if "model_type" in raw:
        return f"transformers loads it as it is, {(raw.get('architectures') or ['?'])[0]}; "
    return f"HF layout: {out / 'hf'}; " if (out / "hf").is_dir() else ""


def print_result(result: Any, preset: str, minutes: float | None, *, paper: bool = False) -> None:
    """What the model can do: held-out MLM accuracy and perplexity beside the unigram guess, and a plain
    word when the run learned little more than token frequencies (``paper``: the command refuses
    --max-steps, so only --minutes is advised)."""
    m = result.eval_metrics
    out = result.output_dir
    hf = _hf_note(result.model_dir, out)
    if "eval_mlm_accuracy" not in m:
        print(f"trained {result.steps} steps in {result.seconds / 60:.1f} min (no held-out MLM evaluation)")
        print(f"model: {result.model_dir}  ({hf}logs and loss_curve.png: {out / 'train'})")
        return
    accuracy, perplexity = m["eval_mlm_accuracy"], m["eval_mlm_perplexity"]
    base_acc, base_ppl = m.get("eval_unigram_accuracy"), m.get("eval_unigram_perplexity")
    print(
        f"trained {result.steps} steps in {result.seconds / 60:.1f} min; held-out MLM accuracy "
        f"{100 * accuracy:.1f}%"
        + (f" (unigram guess {100 * base_acc:.1f}%)" if base_acc is not None else "")
        + f", perplexity {perplexity:.1f}"
        + (f" (unigram {base_ppl:.0f})" if base_ppl is not None else "")
        + f", over {int(m.get('eval_mlm_tokens', 0)):,} masked held-out tokens (15% masked)"
    )
    print(f"model: {result.model_dir}  ({hf}logs and loss_curve.png: {out / 'train'})")
    learned_little = base_acc is not None and (
        accuracy < base_acc + LEARNED_MARGIN or perplexity > 0.5 * base_ppl
    )
    if learned_little:
        smaller = "" if preset == "bert-tiny" else " or a smaller model (--preset bert-tiny)"
        more = "--minutes" if paper else "--minutes, --max-steps"
        print(
            f"warning: this model learned little beyond token frequencies: {100 * accuracy:.1f}% against "
            f"{100 * base_acc:.1f}% for always guessing the most frequent token, perplexity {perplexity:.0f} "
            f"against {base_ppl:.0f}. {result.steps} steps are too few for {preset}; give it more steps "
            f"({more}){smaller}.",
            file=sys.stderr,
        )


def print_causal_result(result: Any, heldout: Any, samples: int = 3) -> None:
    """What a causal LM can do: held-out next-token loss and perplexity beside the unigram model's, then a
    few sampled continuations of held-out text (Transformer-XL: token by token with its memory)."""
    from attnlab.data.blocks import TokenBlocks
    from attnlab.pretraining.causal_lm import eos_id_of, sample_continuations
    from attnlab.pretraining.transfo_xl import SegmentRecurrence

    m, out = result.eval_metrics, result.output_dir
    print(f"trained {result.steps} steps in {result.seconds / 60:.1f} min", end="")
    if "eval_lm_loss" in m:
        base = m.get("eval_unigram_perplexity")
        print(
            f"; held-out loss {m['eval_lm_loss']:.3f} nats/token, perplexity {m['eval_lm_perplexity']:.2f}"
            + (f" (unigram {base:.1f})" if base is not None else "")
            + f", next-token accuracy {100 * m['eval_lm_accuracy']:.1f}% over {int(m['eval_lm_tokens']):,} "
            "held-out tokens"
        )
    else:
        print(" (no held-out evaluation)")
    print(f"model: {result.model_dir}  (logs and loss_curve.png: {out / 'train'})")
    gpt, tokenizer = result.model, result.tokenizer
    if isinstance(gpt, SegmentRecurrence):
        xl, eos = gpt.model, eos_id_of(tokenizer)
        context = xl.config.segment_length
        blocks = TokenBlocks(heldout, context, eos, shift=False)
        prompts = _prompts(blocks, tokenizer, eos, max(4, context // 8), samples)
        print("samples (held-out text, then the model's continuation with its memory; top-k 40, temp. 0.8):")
        for prompt, text in zip(prompts, sample_continuations(xl, tokenizer, prompts, context)):
            print(f"--- {prompt!r}\n{text}")
        print(
            f"more: attnlab perplexity {result.model_dir} --file FILE (segments with the memory carried), "
            f'attnlab generate {result.model_dir} --prompt "..." --sample --top-k 40'
        )
        return
    if getattr(gpt.config, "attention", "full") == "lsh":  # LSH attention has no cache and needs whole chunks
        print("no samples: a model with attention='lsh' is trained and scored here, not used to generate")
        return
    context = gpt.config.max_positions
    blocks = TokenBlocks(heldout, context, eos_id_of(tokenizer), shift=False)
    prompt_tokens = max(4, context // 8)
    prompts = _prompts(blocks, tokenizer, gpt.config.eos_token_id, prompt_tokens, samples)
    print("samples (held-out text, then the model's continuation; top-k 40, temperature 0.8):")
    for prompt, text in zip(prompts, sample_continuations(gpt, tokenizer, prompts, context - prompt_tokens)):
        print(f"--- {prompt!r}\n{text}")
    print(f'more: attnlab generate {result.model_dir} --prompt "..." --sample --top-k 40')


def _prompts(blocks: Any, tokenizer: Any, eos: int | None, prompt_tokens: int, samples: int) -> list[str]:
    """Up to ``samples`` prompts: the first ``prompt_tokens`` of blocks spread over the held-out text."""
    step = max(1, len(blocks) // samples)
    prompts = []
    for i in range(0, len(blocks), step):
        ids = [int(t) for t in blocks[i]["input_ids"][:prompt_tokens] if int(t) != eos]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        if text.strip():
            prompts.append(text)
        if len(prompts) == samples:
            break
    return prompts


def print_demo(mlm: Any, tokenizer: Any) -> None:
    """The main job's fill-mask examples, each with the word a reader expects and whether the model's top 5
    hold it."""
    from attnlab.pretraining.fill_mask import fill_mask, mask_token_of

    mask, _ = mask_token_of(tokenizer)
    print("fill-mask (top 5; the expected word in brackets):")
    hits = 0
    for sentence, expected in DEMO_SENTENCES:
        predictions = fill_mask(mlm, tokenizer, sentence.replace("[MASK]", mask), top_k=5)[0]
        words = [(p.text or p.token).strip().lower() for p in predictions]
        hit = expected in words
        hits += hit
        shown = "  ".join(f"{w} {p.score:.2f}" for w, p in zip(words, predictions))
        print(f"  {sentence}  [{expected}] {'found' if hit else 'missed'}\n      {shown}")
    print(f"{hits} of {len(DEMO_SENTENCES)} expected words in the top 5")


def run_fill_mask(args: argparse.Namespace) -> int:
    from attnlab.pretraining.fill_mask import fill_mask, format_predictions, load_masked_lm

    model, tokenizer = load_masked_lm(args.model_dir)
    predictions = fill_mask(model, tokenizer, args.text, top_k=args.top_k)
    if args.json:
        print(
            json.dumps(
                {
                    "text": args.text,
                    "masks": [
                        [
                            {"token": p.token, "text": p.text, "score": p.score, "id": p.token_id}
                            for p in preds
                        ]
                        for preds in predictions
                    ],
                }
            )
        )
    else:
        print(format_predictions(args.text, predictions))
    return 0
