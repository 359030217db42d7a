"""``attnlab info`` and ``attnlab convert``: inspect presets and checkpoints, convert attnlab <-> HF.

attnlab info bert-base-uncased          # a preset: its config and parameter count
attnlab info runs/bert/checkpoint       # an attnlab or HF transformers directory
attnlab convert hf/bert-base-uncased out/bert --dtype bfloat16   # HF -> attnlab (detected)
attnlab convert out/bert hf/export --family bert                 # attnlab -> HF (detected)
attnlab convert runs/sst2/best hf/sst2                           # fine-tuned -> BertForSequenceClass.

An export to HF holds the weights and config.json (task models as ``*For{Task}`` with id2label), the
tokenizer (tokenizer.json, vocabulary files, a tokenizer_config.json whose class rebuilds it) and a model
card (README.md) with what the fine-tuning run recorded: task, data set, dev metrics, command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DIRECTIONS = ("hf", "attnlab")


def register(subparsers: argparse._SubParsersAction) -> None:
    from attnlab.io.format import DTYPES
    from attnlab.io.hf import FAMILIES

    info = subparsers.add_parser(
        "info",
        help="print a preset's or checkpoint directory's config and parameter count",
        description="Print the EncoderConfig and parameter count of a preset name, "
        "an attnlab checkpoint directory or a HF transformers directory.",
    )
    info.add_argument(
        "target", metavar="PRESET_OR_DIR", help="preset name (e.g. bert-base-uncased) or checkpoint directory"
    )
    info.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    info.set_defaults(func=run_info)

    convert = subparsers.add_parser(
        "convert",
        help="convert a checkpoint directory between HF transformers and attnlab layouts",
        description="Convert SRC to DST. The direction is detected from SRC (a HF config.json has "
        "model_type) unless --to is given. Fine-tuned task models export as the family's *For{Task} "
        "class with their label names; the tokenizer and a model card (README.md) go with an export.",
    )
    convert.add_argument("src", metavar="SRC", help="source directory (HF transformers or attnlab)")
    convert.add_argument("dst", metavar="DST", help="destination directory (created if needed)")
    convert.add_argument("--to", choices=DIRECTIONS, help="target layout (default: the other one)")
    convert.add_argument("--dtype", choices=sorted(DTYPES), help="cast the weights (default: keep)")
    convert.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        help="HF family to export as (default: inferred from the config)",
    )
    convert.add_argument(
        "--architecture",
        help="attnlab architecture to read a HF directory as (e.g. Encoder to drop the heads)",
    )
    convert.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="directory whose tokenizer goes with the export (default: SRC's own tokenizer files)",
    )
    convert.set_defaults(func=run_convert)


# what each non-encoder attnlab directory holds and which commands take it (config.json "architecture")
OTHER_MODELS = {
    "GPT": ("causal language model (GPT)", "attnlab generate, attnlab perplexity"),
    "TransfoXL": ("Transformer-XL language model", "attnlab generate, attnlab perplexity"),
    "Seq2Seq": ("translation encoder-decoder", "attnlab translate"),
    "ElmoBiLM": ("ELMo bidirectional language model", "attnlab embed"),
}
HF_OTHER_MODELS = {  # HF model_type of the non-encoder HF directories attnlab reads
    "gpt2": "causal language model (GPT-2)",
    "openai-gpt": "causal language model (OpenAI GPT)",
    "transfo-xl": "Transformer-XL language model",
    "reformer": "Reformer language model",
    "marian": "translation encoder-decoder (Marian)",
}
_HF_NOISE = ("id2label", "label2id", "architectures", "transformers_version", "task_specific_params")


def _stored_values(path: Path) -> int | None:
    """Values in a directory's weights (each tied tensor once), read from the file header; None without
    weights the header reader knows."""
    from attnlab.io.hf_encoders import hf_parameter_count

    try:
        return hf_parameter_count(path)
    except (OSError, ValueError):
        return None


def _describe_encoder(path: Path) -> dict[str, Any]:
    from attnlab.io.checkpoint import build_model, read_checkpoint_config
    from attnlab.models import count_parameters

    architecture, options, config, raw = read_checkpoint_config(path)
    model = build_model(architecture, config, options, meta=True)
    hf = f" in HF's layout ({raw['architectures'][0]})" if raw.get("architectures") else ""
    return {
        "source": f"attnlab checkpoint {path}{hf}",
        "architecture": architecture + (f" {json.dumps(options)}" if options else ""),
        "config": config.to_dict(),
        "encoder_parameters": count_parameters(config),
        "parameters": count_parameters(model),
    }


def _describe_hf(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    from attnlab.io.checkpoint import CheckpointError
    from attnlab.io.hf_encoders import describe_hf
    from attnlab.models import count_parameters

    model_type = raw["model_type"]
    if model_type not in HF_OTHER_MODELS:
        try:
            hf_class, architecture, config = describe_hf(path)
        except CheckpointError:
            pass  # a family attnlab does not read as an encoder: described from config.json alone below
        else:
            return {
                "source": f"HF transformers {model_type} directory {path}",
                "architecture": f"{hf_class} (weights present; attnlab {architecture})",
                "config": config.to_dict(),
                "encoder_parameters": count_parameters(config),
                "stored_values": _stored_values(path),
            }
    what = HF_OTHER_MODELS.get(model_type, "model attnlab does not read as an encoder")
    classes = raw.get("architectures") or [model_type]
    return {
        "source": f"HF transformers {model_type} directory {path}: a {what}",
        "architecture": str(classes[0]),
        "config": {k: v for k, v in raw.items() if k not in _HF_NOISE},
        "stored_values": _stored_values(path),
    }


def _describe_other(path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """A GPT, Transformer-XL, translation or ELMo directory: its config.json's config and the stored values
    (no model is built: the weights' header says the size)."""
    architecture = str(raw.get("architecture"))
    what, commands = OTHER_MODELS.get(architecture, ("model", "the command that wrote it"))
    hf = f" in HF's layout ({raw['architectures'][0]})" if raw.get("architectures") else ""
    config = raw.get("config") if isinstance(raw.get("config"), dict) else {}
    return {
        "source": f"attnlab {what} {path}{hf}",
        "architecture": architecture,
        "config": config,
        "stored_values": _stored_values(path),
        "used_by": commands,
    }


def _describe_checkpoint(path: Path) -> dict[str, Any]:
    """A training checkpoint (``checkpoints/step-N``): weights and trainer state, no config.json (any model
    the Trainer trained, the Universal Transformer's included)."""
    from attnlab.io.format import read_json

    state = read_json(path / "trainer_state.json")
    return {
        "source": f"attnlab training checkpoint {path} (step {state.get('step')}, run {state.get('run_id')})",
        "architecture": "weights and training state (no config.json; the run's model directory has one)",
        "config": state.get("config") if isinstance(state.get("config"), dict) else {},
        "stored_values": _stored_values(path),
    }


def _describe_directory(path: Path) -> dict[str, Any]:
    from attnlab.io.format import CONFIG_NAME, read_json, written_by_attnlab
    from attnlab.models import ARCHITECTURES

    config_path = path / CONFIG_NAME
    if not config_path.is_file() and (path / "trainer_state.json").is_file():
        return _describe_checkpoint(path)
    if not config_path.is_file():  # a run directory: name the model directories inside it
        inside = sorted({c.parent for c in [*path.glob("*/config.json"), *path.glob("*/*/config.json")]})
        if inside:
            names = ", ".join(str(d) for d in inside[:6]) + (", ..." if len(inside) > 6 else "")
            raise FileNotFoundError(f"{path}: no {CONFIG_NAME}; a run directory? Its models: {names}")
    if config_path.is_file():
        raw = read_json(config_path)
        if "model_type" in raw and not written_by_attnlab(raw):
            return _describe_hf(path, raw)
        if written_by_attnlab(raw) and raw.get("architecture") not in ARCHITECTURES:
            return _describe_other(path, raw)
    return _describe_encoder(path)  # an encoder, or the error that says what is missing


def _describe(target: str) -> dict[str, Any]:
    """Source, architecture, config and parameter counts of a preset or of any model directory attnlab
    writes or reads (encoders and task models, GPT, Transformer-XL, translation, ELMo, HF's), without
    loading weights."""
    from attnlab.models import count_parameters, get_preset

    path = Path(target)
    if path.is_dir():
        return _describe_directory(path)
    if path.exists():
        raise NotADirectoryError(f"{path}: expected a preset name or a checkpoint directory")
    config = get_preset(target)
    return {
        "source": f"preset {target}",
        "architecture": "Encoder",
        "config": config.to_dict(),
        "encoder_parameters": count_parameters(config),
    }


def run_info(args: argparse.Namespace) -> int:
    try:
        info = _describe(args.target)
    except (OSError, ValueError) as e:
        print(f"attnlab info: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"source        {info['source']}")
    print(f"architecture  {info['architecture']}")
    print("config")
    width = max((len(k) for k in info["config"]), default=0)
    for key, value in info["config"].items():
        print(f"  {key:<{width}}  {value}")
    if "encoder_parameters" in info:
        print(f"encoder parameters  {info['encoder_parameters']:,}")
    if info.get("parameters") is not None:
        print(f"model parameters    {info['parameters']:,} (heads included, tied weights once)")
    if info.get("stored_values") is not None:
        print(f"stored values       {info['stored_values']:,} (every tensor in the weights file, once)")
    if "used_by" in info:
        print(f"used by             {info['used_by']}")
    return 0


def _convert_tokenizer(args: argparse.Namespace, src: Path) -> Any:
    """The tokenizer that travels with a conversion: ``--tokenizer DIR``'s, else SRC's; None (with a warning
    on stderr) when SRC has none, since an export without one leaves ``AutoTokenizer`` nothing to load."""
    from attnlab.tokenizers import load_tokenizer

    if args.tokenizer:
        return load_tokenizer(args.tokenizer)
    names = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
    if any((src / name).is_file() for name in names):
        return load_tokenizer(src)  # a damaged file is an error naming it, not a silent omission
    print(
        f"attnlab convert: warning: {src} has no tokenizer files; {args.dst} gets none "
        "(pass --tokenizer DIR to include one)",
        file=sys.stderr,
    )
    return None


def run_convert(args: argparse.Namespace) -> int:
    from attnlab.io import is_hf_directory, load, save
    from attnlab.io.format import check_directory
    from attnlab.io.model_card import read_training_record

    try:
        src = check_directory(args.src)
        from_hf = is_hf_directory(src)
        to = args.to or ("attnlab" if from_hf else "hf")
        dst = Path(args.dst)
        if dst.exists() and not dst.is_dir():
            raise NotADirectoryError(f"{dst}: exists and is not a directory")
        if from_hf:
            model = load(src, **({"architecture": args.architecture} if args.architecture else {}))
        else:
            if args.architecture:
                raise ValueError("--architecture applies to HF sources only")
            model = load(src)
        tokenizer = _convert_tokenizer(args, src)
        if to == "hf":
            record = {} if from_hf else read_training_record(src)
            save(model, dst, hf=True, family=args.family, dtype=args.dtype, tokenizer=tokenizer, card=record)
        else:
            if args.family:
                raise ValueError("--family applies to exports to HF (--to hf) only")
            save(model, dst, dtype=args.dtype)
            if tokenizer is not None:
                tokenizer.save(dst / "tokenizer.json")
    except (OSError, ValueError, TypeError) as e:
        print(f"attnlab convert: {e}", file=sys.stderr)
        return 1
    print(f"{'HF' if from_hf else 'attnlab'} {src} -> {to} {dst} ({type(model).__name__})")
    return 0
