"""``attnlab info`` describes every kind of model directory the project writes or reads (not only encoders),
and a closed standard output (``attnlab info X | head``) ends any command quietly."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from serving_models import make

from attnlab.cli import BROKEN_PIPE_EXIT, main
from attnlab.io.families.elmo import save_elmo
from attnlab.io.families.transfo_xl import save_transfo_xl
from attnlab.models.elmo import ElmoBiLM
from attnlab.models.elmo import get_preset as elmo_preset
from attnlab.models.transfo_xl import TransfoXLConfig, build_transfo_xl
from attnlab.train.checkpoint import save_checkpoint

REPO = Path(__file__).resolve().parents[2]


def _stored(module: torch.nn.Module) -> int:
    """Values a weights file holds for ``module``: each parameter and buffer once (tied ones once)."""
    seen = {}
    for t in module.state_dict().values():
        seen[(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))] = t.numel()
    return sum(seen.values())


@pytest.fixture(scope="module")
def directories(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dirs")
    found = {kind: make(kind, root) for kind in ("gpt", "mt", "cls", "mlm")}
    torch.manual_seed(0)
    xl = build_transfo_xl(TransfoXLConfig(vocab_size=30, hidden_size=32, num_layers=2, num_heads=2,
                                          intermediate_size=64, segment_length=8, mem_len=6))  # fmt: skip
    found["xl"] = save_transfo_xl(xl, root / "xl")
    save_elmo(ElmoBiLM(dataclasses.replace(elmo_preset("elmo-tiny"), vocab_size=0)), root / "elmo")
    found["elmo"] = root / "elmo"
    reformer = root / "reformer"  # the fields and a weights file as HF's ReformerModelWithLMHead saves them
    reformer.mkdir()
    (reformer / "config.json").write_text(json.dumps(
        {"model_type": "reformer", "architectures": ["ReformerModelWithLMHead"], "hidden_size": 8,
         "attn_layers": ["local", "lsh"], "transformers_version": "4.40.0"}
    ))  # fmt: skip
    save_file({"lm_head.decoder.weight": torch.zeros(5, 16)}, reformer / "model.safetensors")
    found["reformer"] = reformer
    ut = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))  # any Trainer-trained model
    step = root / "checkpoints" / "step-000007"
    found["checkpoint"] = save_checkpoint(step, ut, {}, {"step": 7, "run_id": "r1"})
    found["_xl_model"] = xl
    return found


@pytest.mark.parametrize(
    "kind, source, architecture",
    [
        ("gpt", "attnlab causal language model (GPT)", "GPT"),
        ("mt", "attnlab translation encoder-decoder", "Seq2Seq"),
        ("xl", "attnlab Transformer-XL language model", "TransfoXL"),
        ("elmo", "attnlab ELMo bidirectional language model", "ElmoBiLM"),
        ("reformer", "HF transformers reformer directory", "ReformerModelWithLMHead"),
        ("checkpoint", "attnlab training checkpoint", "weights and training state"),
        ("cls", "attnlab checkpoint", "EncoderForSequenceClassification"),
        ("mlm", "attnlab checkpoint", "EncoderForPreTraining"),
    ],
)
def test_info_describes_every_kind_of_directory(directories, capsys, kind, source, architecture) -> None:
    assert main(["info", str(directories[kind])]) == 0
    out, err = capsys.readouterr()
    assert f"source        {source}" in out and f"architecture  {architecture}" in out and err == ""
    assert main(["info", str(directories[kind]), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert isinstance(info["config"], dict)
    assert info.get("parameters") or info.get("stored_values")


def test_info_counts_what_the_weights_hold(directories, capsys) -> None:
    assert main(["info", str(directories["xl"]), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["stored_values"] == _stored(directories["_xl_model"])
    assert info["config"]["mem_len"] == 6 and "attnlab generate" in info["used_by"]
    assert main(["info", str(directories["checkpoint"]), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["stored_values"] == 4 * 4 + 4 + 4 * 2 + 2 and "step 7, run r1" in info["source"]
    assert main(["info", str(directories["gpt"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["max_positions"] == 32


@pytest.mark.parametrize("argv", [["info", "bert-base-uncased"], ["--help"], ["info", "--help"]])
def test_a_closed_standard_output_ends_quietly(argv) -> None:
    """``attnlab ... | head``: the reader leaves early; no "Broken pipe" error, no traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)  # fmt: skip
    proc.stdout.close()  # the reader leaves before the command has written anything
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert err == "" and code in (0, BROKEN_PIPE_EXIT)


def test_a_broken_pipe_inside_a_command_is_not_reported_as_an_error(monkeypatch, capsys) -> None:
    import attnlab.cli.models as models

    def closed(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(models, "run_info", closed)  # main builds its parser afresh: it takes this one
    assert main(["info", "bert-base-uncased"]) == BROKEN_PIPE_EXIT
    assert "Broken pipe" not in capsys.readouterr().err


def test_info_on_a_run_directory_names_the_models_inside(directories, tmp_path, capsys) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(directories["cls"], run / "best")
    assert main(["info", str(run)]) == 1
    assert f"{run}: no config.json; a run directory? Its models: {run / 'best'}" in capsys.readouterr().err
