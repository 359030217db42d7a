"""Model cards: the ``README.md`` with YAML front matter that every HF export carries.

The front matter follows the Hub's model-card metadata (``library_name``, ``pipeline_tag``, ``base_model``,
``datasets``, ``metrics`` and a ``model-index`` with the measured results); the body says what the model
is, its labels and how it was trained. What training knows (base model, task, data set, dev metrics,
command) is recorded next to the fine-tuned model by `write_training_record` (``training_run.json``) and
read back by ``attnlab convert`` through `read_training_record`.

The front matter is written with ``yaml.safe_dump`` (PyYAML, already the project's config reader), so no
value (a colon, a quote, a newline in a command) can break it.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from attnlab.atomic import atomic_write, write_json_atomic

CARD_NAME = "README.md"
TRAINING_RECORD = "training_run.json"

# attnlab task name -> (HF Hub data set, its configuration, display name)
DATASETS: dict[str, tuple[str, str | None, str]] = {
    **{
        name: ("nyu-mll/glue", name, f"GLUE {display}")
        for name, display in (
            ("cola", "CoLA"),
            ("sst2", "SST-2"),
            ("mrpc", "MRPC"),
            ("stsb", "STS-B"),
            ("qqp", "QQP"),
            ("mnli", "MNLI"),
            ("qnli", "QNLI"),
            ("rte", "RTE"),
            ("wnli", "WNLI"),
        )
    },
    "conll2003": ("eriktks/conll2003", None, "CoNLL-2003 (English NER)"),
    "squad": ("rajpurkar/squad", None, "SQuAD v1.1"),
    "squad2": ("rajpurkar/squad_v2", None, "SQuAD v2.0"),
    "swag": ("allenai/swag", "regular", "SWAG"),
}

# HF class-name suffix -> the Hub's pipeline tag (multiple choice has none)
PIPELINE_TAGS: dict[str, str | None] = {
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMultipleChoice": None,
    "ForMaskedLM": "fill-mask",
    "ForPreTraining": "fill-mask",
    "Model": "feature-extraction",
}


def pipeline_tag(hf_class: str) -> str | None:
    for suffix, tag in PIPELINE_TAGS.items():
        if hf_class.endswith(suffix):
            return tag
    return None


def write_training_record(directory: str | os.PathLike, record: Mapping[str, Any]) -> Path:
    """Write what a fine-tuning run knows (``task``, ``base_model``, ``metrics``, ``command``, ...) as
    ``training_run.json`` in the model directory, for the card of a later export."""
    path = Path(directory) / TRAINING_RECORD
    write_json_atomic(dict(record), path)
    return path


def command_line() -> str:
    """This process's command line as a user would type it (``attnlab finetune ...``), for provenance."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return shlex.join([program, *sys.argv[1:]])


def finetune_record(
    task: str,
    base_model: str | None,
    metrics: Mapping[str, Any],
    *,
    initialisation: str | None = None,
    learning_rate: float | None = None,
    train_examples: int | None = None,
    eval_examples: int | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """What a fine-tuning run knows about the model it keeps: the task (its data set), the base model (None:
    trained from ``initialisation``, e.g. a preset's random weights), the best dev metrics (finite numbers
    only), the learning rate, example counts and the command."""
    kept = {
        k.removeprefix("eval_"): float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step"
    }
    stem = Path(str(base_model)).name if base_model else "attnlab"
    record: dict[str, Any] = {
        "task": task,
        "name": f"{stem}-finetuned-{task}",
        "metrics": kept,
        "split": "validation",
        "command": command if command is not None else command_line(),
    }
    extra = {
        "base_model": None if base_model is None else str(base_model),
        "initialisation": initialisation,
        "learning_rate": learning_rate,
        "train_examples": train_examples,
        "eval_examples": eval_examples,
    }
    record.update({k: v for k, v in extra.items() if v is not None})
    return record


def _read_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_training_record(directory: str | os.PathLike) -> dict[str, Any]:
    """The ``training_run.json`` of a model directory; for a ``RUN/best`` fine-tuned before it was written,
    what ``RUN/results.json`` says (task, the kept run's dev metrics); {} when neither is there. A malformed
    file is an error naming it."""
    directory = Path(directory)
    path = directory / TRAINING_RECORD
    if path.is_file():
        return _read_object(path)
    results = directory.parent / "results.json"
    if directory.name != "best" or not results.is_file():
        return {}
    data = _read_object(results)
    runs = [r for r in data.get("runs") or [] if isinstance(r, dict) and r.get("best_dir")]
    metric = data.get("metric")
    chosen = [r for r in runs if r.get("learning_rate") == data.get("learning_rate")]

    def score(run: dict[str, Any]) -> float:
        value = (run.get("best") or {}).get(metric)
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else -math.inf

    best = max(chosen, key=score, default=None)
    if not isinstance(data.get("task"), str) or best is None:
        return {}
    return finetune_record(
        data["task"], None, best.get("best") or {}, learning_rate=data.get("learning_rate"), command=""
    )


def card_metadata(hf_config: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """The front matter: library, pipeline tag, base model, data set, metrics and a model-index."""
    hf_class = (hf_config.get("architectures") or ["?"])[0]
    tag = pipeline_tag(hf_class)
    meta: dict[str, Any] = {
        "library_name": "transformers",
        "tags": ["attnlab", str(hf_config.get("model_type"))],
    }
    if tag:
        meta["pipeline_tag"] = tag
    if record.get("base_model"):
        meta["base_model"] = str(record["base_model"])
    task = record.get("task")
    dataset = DATASETS.get(str(task)) if task else None
    if dataset:
        meta["datasets"] = [dataset[0]]
    metrics = {k: v for k, v in (record.get("metrics") or {}).items() if isinstance(v, (int, float))}
    if metrics:
        meta["metrics"] = sorted(metrics)
    if task and metrics:
        ds: dict[str, Any] = {
            "name": dataset[2] if dataset else str(task),
            "type": dataset[0] if dataset else str(task),
        }
        if dataset and dataset[1]:
            ds["config"] = dataset[1]
        ds["split"] = str(record.get("split", "validation"))
        meta["model-index"] = [
            {
                "name": str(record.get("name") or task),
                "results": [
                    {
                        "task": {"type": tag or "multiple-choice", "name": str(task)},
                        "dataset": ds,
                        "metrics": [
                            {"type": k, "value": float(v), "name": k} for k, v in sorted(metrics.items())
                        ],
                    }
                ],
            }
        ]
    return meta


def card_text(hf_config: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    """The whole ``README.md``: front matter, then what the model is, its labels and how it was made."""
    hf_class = (hf_config.get("architectures") or ["?"])[0]
    front = yaml.safe_dump(card_metadata(hf_config, record), sort_keys=False, allow_unicode=True)
    lines = ["---", front.rstrip("\n"), "---", ""]
    title = record.get("name") or record.get("task") or hf_class
    lines += [
        f"# {title}",
        "",
        f"HF transformers class `{hf_class}` ({hf_config.get('model_type')}), written by attnlab.",
    ]
    task = record.get("task")
    if task:
        dataset = DATASETS.get(str(task))
        lines.append(
            f"Fine-tuned on {dataset[2] if dataset else task}"
            + (f" from `{record['base_model']}`." if record.get("base_model") else "")
            + (f" from {record['initialisation']}." if record.get("initialisation") else "")
            + ("" if record.get("base_model") or record.get("initialisation") else ".")
        )
    labels = hf_config.get("id2label")
    if isinstance(labels, Mapping) and hf_config.get("problem_type") != "regression":
        names = ", ".join(f"{k}: `{v}`" for k, v in labels.items())
        lines += ["", f"Labels: {names}."]
    metrics = record.get("metrics") or {}
    if metrics:
        lines += [
            "",
            f"## Results ({record.get('split', 'validation')})",
            "",
            "| metric | value |",
            "|---|---|",
        ]
        lines += [
            f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in metrics.items()
        ]
    facts = [
        f"- {label}: {record[key]}"
        for key, label in (
            ("learning_rate", "learning rate (chosen on dev)"),
            ("train_examples", "training examples"),
            ("eval_examples", "dev examples"),
        )
        if record.get(key) is not None
    ]
    if facts or record.get("command"):
        lines += ["", "## Training", "", *facts]
        if record.get("command"):
            lines += ["", "```bash", str(record["command"]), "```"]
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "from transformers import pipeline",
        "",
        f"pipe = pipeline({pipeline_tag(hf_class) or 'feature-extraction'!r}, model='path/to/this/dir')",
        "```",
        "",
    ]
    return "\n".join(lines)


def write_model_card(
    directory: str | os.PathLike, hf_config: Mapping[str, Any], record: Mapping[str, Any]
) -> Path:
    """Write ``README.md`` (`card_text`) into ``directory``, atomically."""
    path = Path(directory) / CARD_NAME
    with atomic_write(path) as f:
        f.write(card_text(hf_config, record))
    return path
