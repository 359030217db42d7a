"""``--config`` (YAML) and ``--set KEY=VALUE`` overrides of ``attnlab pretrain``, ``distill`` and the ELMo
recipe: recipe fields, ``masking.FIELD``, ``model.FIELD`` and ``trainer.FIELD``; checked against the
configs they name before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from attnlab.yaml_files import numbers, parse_yaml, read_yaml

SECTIONS = ("masking", "model", "trainer")


def _parse_value(text: str) -> Any:
    try:
        return parse_yaml(text)
    except yaml.YAMLError:
        return text


def collect_overrides(config_file: str | None, sets: list[str]) -> dict[str, dict[str, Any]]:
    """``{"recipe": {...}, "masking": {...}, "model": {...}, "trainer": {...}}`` from a YAML file then
    ``KEY=VALUE`` strings (later wins)."""
    out: dict[str, dict[str, Any]] = {"recipe": {}, "masking": {}, "model": {}, "trainer": {}}
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such config file")
        data = numbers(read_yaml(path) or {})  # lr: "1e-3", quoted to pass YAML 1.1, is a number too
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
        for key, value in data.items():
            if key in SECTIONS:
                if not isinstance(value, dict):
                    raise ValueError(f"{path}: field {key!r}: expected a mapping of fields, got {value!r}")
                out[key].update(value)
            else:
                out["recipe"][key] = value
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        section, dot, name = key.partition(".")
        if dot and section in SECTIONS:
            out[section][name] = _parse_value(value)
        elif dot:
            raise ValueError(f"--set {item!r}: unknown section {section!r}; valid: {', '.join(SECTIONS)}")
        else:
            out["recipe"][key] = _parse_value(value)
    return out


def check_overrides(recipe: Any, preset: str, overrides: dict[str, dict[str, Any]]) -> None:
    """``model.*`` and ``trainer.*`` overrides name fields that exist and hold valid values (the configs'
    own checks), before a tokenizer or shards are written."""
    from attnlab.models.gpt_presets import GPT_PRESETS
    from attnlab.models.transfo_xl import TRANSFO_XL_PRESETS
    from attnlab.pretraining.model import check_model_overrides

    # an encoder's preset is checked where it is read
    if recipe.segment_recurrence and preset not in TRANSFO_XL_PRESETS:
        raise ValueError(
            f"--preset {preset!r} is not a Transformer-XL preset; valid: {', '.join(TRANSFO_XL_PRESETS)}"
        )
    if recipe.objective == "clm" and not recipe.segment_recurrence and preset not in GPT_PRESETS:
        raise ValueError(f"--preset {preset!r} is not a GPT preset; valid: {', '.join(GPT_PRESETS)}")
    check_model_overrides(recipe, preset, overrides["model"])
    try:
        recipe.trainer_config(output_dir=".", **overrides["trainer"])
    except TypeError as e:
        raise ValueError(f"trainer: {e}") from None
