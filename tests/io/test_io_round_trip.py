"""``attnlab.io.load(attnlab.io.save(model))`` for every family: the same class, the same outputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import attnlab.translation  # noqa: F401  (registers the translation family)
from attnlab import io
from attnlab.models import EncoderForPreTraining, get_preset
from attnlab.models.elmo import config as elmo_config
from attnlab.models.elmo.bilm import ElmoBiLM
from attnlab.models.gpt import GPTConfig, build_gpt
from attnlab.models.reformer import Reformer, ReformerConfig
from attnlab.models.transfo_xl import TransfoXLConfig, build_transfo_xl
from attnlab.models.universal_config import UniversalConfig, build_tagging_model
from attnlab.tokenizers import load_tokenizer


def _encoder():
    config = dataclasses.replace(
        get_preset("bert-base-uncased"), vocab_size=99, hidden_size=32, num_layers=2, num_heads=4,
        intermediate_size=37, max_position_embeddings=64,
    )  # fmt: skip
    model = EncoderForPreTraining.from_config(config, pair_head=True)
    return model, lambda m: m(torch.tensor([[1, 5, 7, 2]]))


def _gpt():
    config = GPTConfig(
        vocab_size=50, max_positions=32, hidden_size=32, num_layers=2, num_heads=4, dropout=0.0,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return build_gpt(config), lambda m: m(torch.tensor([[1, 5, 7, 2]]))


def _transfo_xl():
    config = TransfoXLConfig(
        vocab_size=31, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=24, mem_len=8
    )
    return build_transfo_xl(config), lambda m: m(torch.tensor([[1, 5, 7, 2]]))


def _reformer():
    config = ReformerConfig(
        vocab_size=20, max_positions=32, hidden_size=16, num_heads=2, intermediate_size=24,
        attention_layers=["lsh", "local"], num_hashes=2, num_buckets=4, lsh_chunk_length=4,
        local_chunk_length=4, hash_seed=0,
    )  # fmt: skip
    return Reformer(config), lambda m: m(torch.tensor([[1, 5, 7, 2, 3, 4, 6, 8]]))


def _elmo():
    model = ElmoBiLM(elmo_config.get_preset("elmo-tiny"))
    chars = torch.randint(1, 200, (1, 4, model.config.max_chars), generator=torch.Generator().manual_seed(0))
    return model, lambda m: m(chars)


def _universal(**fields):
    def build():
        config = UniversalConfig(
            vocab_size=12, hidden_size=16, num_heads=2, intermediate_size=24, max_steps=3, **fields
        )
        return build_tagging_model(config), lambda m: m(torch.tensor([[1, 5, 7, 2]]))

    return build


BUILDERS = {
    "universal": _universal(),
    "universal-act-local": _universal(act=True, window=2),
    "vanilla": _universal(stack="vanilla", num_layers=2, norm_first=True),
    "encoder": _encoder,
    "gpt": _gpt,
    "transfo_xl": _transfo_xl,
    "reformer": _reformer,
    "elmo": _elmo,
}


def _tensors(output):
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in _tensors(item)]
    if dataclasses.is_dataclass(output):
        return [t for f in dataclasses.fields(output) for t in _tensors(getattr(output, f.name))]
    return []


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_load_of_save_gives_the_same_model_and_outputs(kind: str, tmp_path) -> None:
    torch.manual_seed(0)
    model, run = BUILDERS[kind]()
    model.eval()
    io.save(model, tmp_path / kind)
    assert (tmp_path / kind / "manifest.json").is_file()
    back = io.load(tmp_path / kind)
    assert type(back) is type(model) and not back.training
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in back.state_dict().items())
    with torch.no_grad():
        for a, b in zip(_tensors(run(model)), _tensors(run(back)), strict=True):
            assert torch.equal(a, b)


def test_translation_round_trip_through_io(tmp_path) -> None:
    from attnlab.translation.config import preset
    from attnlab.translation.data import special_ids, train_joint_bpe
    from attnlab.translation.model import build_model

    bpe = train_joint_bpe(["a man rides a horse .", "ein mann reitet ein pferd .", "a dog runs ."], 300)
    ids = special_ids(bpe)
    config = preset(
        "transformer-tiny", num_layers=1, d_model=16, d_ff=32, num_heads=2, vocab_size=bpe.vocab_size,
        pad_token_id=ids["pad"], bos_token_id=ids["bos"], eos_token_id=ids["eos"],
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(config).eval()
    io.save(model, tmp_path / "m", tokenizer=bpe)
    back = io.load(tmp_path / "m")
    assert type(back) is type(model)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in back.state_dict().items())
    assert load_tokenizer(tmp_path / "m").vocab_size == bpe.vocab_size


def test_a_command_given_another_family_says_what_the_directory_holds(tmp_path) -> None:
    model, _ = _gpt()
    io.save(model, tmp_path / "gpt")
    with pytest.raises(TypeError, match="build_tagging_model"):  # composed by hand: no config to record
        io.save(_universal()()[0].__class__(12, 16, nn.Identity()), tmp_path / "ut")
    with pytest.raises(io.CheckpointError, match=r"holds a causal language model \(GPT\).*attnlab generate"):
        io.load(tmp_path / "gpt", expect="bert")


def test_the_old_entry_points_warn_and_go_through_io(tmp_path) -> None:
    model, _ = _encoder()
    with pytest.warns(DeprecationWarning, match="attnlab.io.save"):
        io.save_pretrained(model, tmp_path / "m")
    with pytest.warns(DeprecationWarning, match="attnlab.io.load"):
        assert type(io.load_pretrained(tmp_path / "m")) is type(model)
    with pytest.warns(DeprecationWarning, match=r"attnlab.io.save\(\.\.\., hf=True\)"):
        io.save_hf(model, tmp_path / "hf")
    with pytest.warns(DeprecationWarning, match="attnlab.io.load"):
        assert type(io.load_hf(tmp_path / "hf")) is type(model)


def test_io_imports_only_downward_and_at_module_level() -> None:
    """attnlab.io imports no task package (tasks, pretraining, translation, generation, serving, cli), and no
    attnlab module inside a function (optional heavy libraries only)."""
    import ast
    from pathlib import Path

    root = Path(io.__file__).parent
    upward = ("attnlab.tasks", "attnlab.pretraining", "attnlab.translation", "attnlab.generation",
              "attnlab.serving", "attnlab.cli", "attnlab.train")  # fmt: skip
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        inner = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("attnlab"):
                assert not node.module.startswith(upward), f"{path}: imports {node.module}"
                assert id(node) not in inner, f"{path}:{node.lineno}: imports {node.module} inside a function"
