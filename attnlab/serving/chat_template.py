"""A model directory's chat template: the Jinja text that turns ``messages`` into one prompt.

Read from ``tokenizer_config.json``'s ``chat_template`` (a string, or Hugging Face's list of named templates,
``default`` first) or a ``chat_template.jinja`` file beside it. It is rendered in Jinja's immutable
sandbox, so a template can format text but not reach Python objects, files or code. No template (or no
jinja2) leaves ``ChatTemplate.reason`` saying why, which ``/v1/chat/completions`` answers with a 400.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

try:
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:  # the 400 then names the missing package
    ImmutableSandboxedEnvironment = None  # type: ignore[assignment,misc]
    TemplateError = Exception  # type: ignore[assignment,misc]


def _find(directory: Path) -> tuple[str | None, dict]:
    """(template text or None, tokenizer_config.json's fields)."""
    config: dict = {}
    path = directory / "tokenizer_config.json"
    if path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        config = loaded if isinstance(loaded, dict) else {}
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if template is None and (directory / "chat_template.jinja").is_file():
        template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    return (template if isinstance(template, str) else None), config


def _special(config: dict, name: str) -> str:
    value = config.get(name)
    if isinstance(value, dict):  # {"content": "<s>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else ""


class ChatTemplate:
    """``render(messages)`` -> the prompt text, when ``reason`` is None."""

    def __init__(self, directory: Path) -> None:
        text, config = _find(directory)
        self.reason: str | None = None
        self.template: Any = None
        self.tokens = {"bos_token": _special(config, "bos_token"), "eos_token": _special(config, "eos_token")}
        if text is None:
            self.reason = (
                f"this model ({directory.name}) has no chat template: neither tokenizer_config.json's "
                "'chat_template' nor chat_template.jinja is in its directory; use /v1/completions with a "
                "prompt instead"
            )
        elif ImmutableSandboxedEnvironment is None:
            self.reason = "rendering the model's chat template needs jinja2 (pip install jinja2)"
        else:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise
            try:
                self.template = env.from_string(text)
            except TemplateError as e:
                self.reason = f"{directory.name}'s chat template does not parse: {e}"

    def render(self, messages: list[dict]) -> str:
        """The prompt for ``messages`` with the assistant's turn opened (``add_generation_prompt``)."""
        try:
            return self.template.render(messages=messages, add_generation_prompt=True, **self.tokens)
        except TemplateError as e:
            raise ValueError(f"the chat template refused these messages: {e}") from None


def _raise(message: str) -> None:
    raise TemplateError(message)
