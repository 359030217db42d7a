"""The ELMo family: attnlab's own (``config.json`` + ``model.safetensors`` + ``vocab.txt``) and the
original released files (``options.json`` + weights in HDF5, AllenNLP's
``elmo_2x4096_512_2048cnn_2xhighway`` layout), both read by `load_elmo`.

The released HDF5 layout (bilm-tf's variable names, as AllenNLP's ``_ElmoCharacterEncoder`` and
``ElmoLstm.load_weights`` read them):

    char_embed                                   (261, E)       ids 1..261 (row 0, padding, is not stored)
    CNN/W_cnn_{i}, CNN/b_cnn_{i}                 (1, w, E, n), (n,)
    CNN_high_{k}/W_transform, b_transform        (F, F), (F,)   the nonlinear path h(x)   (x @ W: TF order)
    CNN_high_{k}/W_carry, b_carry                (F, F), (F,)   the gate t(x) that takes h(x)
    CNN_proj/W_proj, b_proj                      (F, P), (P,)
    RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell/   d = 0 forward, 1 backward; k = layer
        W_0   (I + P, 4C)  input and recurrent weights stacked; gates in TF's order i, j, f, o
        B     (4C,)        one bias; TF's LSTMCell adds forget_bias = 1.0 at run time, folded in here
        W_P_0 (C, P)       the projection

Files written here are atomic and sealed by a manifest (`attnlab.manifest`), verified on load; loading
never executes code. Every missing dataset, wrong shape or absent option is an error naming the file and
the field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlab.atomic import atomic_write, write_json_atomic
from attnlab.io.format import (
    CheckpointError,
    read_json,
    read_safetensors,
    resolve_dtype,
    write_safetensors_atomic,
)
from attnlab.io.registry import ModelFamily, register
from attnlab.manifest import verify_directory, write_manifest
from attnlab.models.elmo.bilm import ElmoBiLM
from attnlab.models.elmo.config import CHAR_VOCAB_SIZE, ElmoConfig

CONFIG_NAME, WEIGHTS_NAME, VOCAB_NAME = "config.json", "model.safetensors", "vocab.txt"
ARCHITECTURE = "ElmoBiLM"


# ------------------------------------------------------------------ attnlab directories
def save_elmo(
    model: ElmoBiLM, directory: str | os.PathLike, vocab: list[str] | None = None, run_id: str | None = None
) -> Path:
    """``config.json``, ``model.safetensors`` and (with a softmax) ``vocab.txt``, then the manifest."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config
    if config.vocab_size and (vocab is None or len(vocab) != config.vocab_size):
        got = "none" if vocab is None else len(vocab)
        raise ValueError(
            f"save_elmo: the softmax has {config.vocab_size} words but the vocabulary given has {got}"
        )
    tensors = {k: v for k, v in model.state_dict().items()}
    write_safetensors_atomic(
        tensors, directory / WEIGHTS_NAME, metadata={"format": "pt", "producer": "attnlab"}
    )
    write_json_atomic(
        {"format": "attnlab", "architecture": ARCHITECTURE, "model_type": "elmo", "config": config.to_dict()},
        directory / CONFIG_NAME,
    )
    files = [CONFIG_NAME, WEIGHTS_NAME]
    if config.vocab_size:
        with atomic_write(directory / VOCAB_NAME) as f:
            f.write("".join(f"{w}\n" for w in vocab))
        files.append(VOCAB_NAME)
    write_manifest(directory, files, run_id=run_id)
    return directory


def read_vocab(path: Path, expected: int) -> list[str]:
    """The softmax's words, one per line; a count other than ``expected`` (the config's vocab_size) is an
    error naming both."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing; the model has a {expected}-word softmax and needs its vocabulary"
        )
    words = path.read_text(encoding="utf-8").splitlines()
    if len(words) != expected or len(set(words)) != len(words):
        what = (
            f"{len(words)} lines"
            if len(words) != expected
            else f"{len(words) - len(set(words))} repeated words"
        )
        raise ValueError(
            f"{path}: {what}, but the softmax has vocab_size={expected} rows (config.json field "
            "'vocab_size'); use the vocabulary the model was trained with"
        )
    return words


def is_elmo_directory(directory: str | os.PathLike) -> bool:
    directory = Path(directory)
    if released_files(directory) is not None:
        return True
    path = directory / CONFIG_NAME
    if not path.is_file():
        return False
    try:
        return read_json(path).get("architecture") == ARCHITECTURE
    except (CheckpointError, OSError):
        return False


def load_elmo(directory: str | os.PathLike) -> tuple[ElmoBiLM, list[str] | None]:
    """``(model in eval mode, softmax vocabulary or None)`` from an attnlab ELMo directory or a directory
    holding the released ``*options.json`` and ``*.hdf5`` (or the options file itself)."""
    directory = Path(directory)
    if not directory.exists():
        raise FileNotFoundError(f"{directory}: no such ELMo model directory")
    released = released_files(directory)
    if released is not None:
        return load_released(*released), None
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory}: expected an ELMo model directory or an options.json file")
    path = directory / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing; an ELMo directory holds config.json + model.safetensors (attnlab) or "
            "options.json + weights.hdf5 (the released files)"
        )
    verify_directory(directory)
    raw = read_json(path)
    if raw.get("architecture") != ARCHITECTURE:
        raise CheckpointError(
            f"{path}: field 'architecture' is {raw.get('architecture')!r}, expected {ARCHITECTURE!r} "
            "(an ELMo model); use the command for that model instead"
        )
    if not isinstance(raw.get("config"), dict):
        raise CheckpointError(f"{path}: field 'config': expected an object of ElmoConfig fields")
    try:
        config = ElmoConfig.from_dict(raw["config"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: field 'config': {e}") from e
    vocab = read_vocab(directory / VOCAB_NAME, config.vocab_size) if config.vocab_size else None
    tensors, _ = read_safetensors(directory / WEIGHTS_NAME)
    model = ElmoBiLM(config)
    expected = model.state_dict()
    missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or extra:
        raise CheckpointError(
            f"{directory / WEIGHTS_NAME}: does not match config.json (missing {missing[:5]}, "
            f"unexpected {extra[:5]})"
        )
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(
                f"{directory / WEIGHTS_NAME}: tensor {name!r} has shape {tuple(tensor.shape)}, config.json "
                f"implies {tuple(expected[name].shape)}"
            )
    model.load_state_dict(tensors)
    return model.eval(), vocab


# ------------------------------------------------------------------ the released files
def released_files(path: Path) -> tuple[Path, Path] | None:
    """``(options.json, weights.hdf5)`` when ``path`` is such a directory (one of each) or the options file
    next to one weights file; None otherwise."""
    if path.is_file() and path.suffix == ".json" and "options" in path.name:
        weights = sorted(path.parent.glob("*.hdf5")) + sorted(path.parent.glob("*.h5"))
        if len(weights) != 1:
            raise FileNotFoundError(
                f"{path}: expected one *.hdf5 weights file beside it, found {len(weights)}"
            )
        return path, weights[0]
    if not path.is_dir() or (path / CONFIG_NAME).is_file():
        return None
    options = sorted(path.glob("*options*.json"))
    weights = sorted(path.glob("*.hdf5")) + sorted(path.glob("*.h5"))
    if not options and not weights:
        return None
    if len(options) != 1 or len(weights) != 1:
        raise FileNotFoundError(
            f"{path}: expected one *options*.json and one *.hdf5 (the released ELMo files), found "
            f"{[p.name for p in options + weights]}"
        )
    return options[0], weights[0]


def config_from_options(options: dict[str, Any], path: Path) -> ElmoConfig:
    """An `ElmoConfig` from a released ``options.json`` (no softmax: the released weights hold none)."""

    def need(section: str, key: str) -> Any:
        block = options.get(section)
        if not isinstance(block, dict) or key not in block:
            raise CheckpointError(f"{path}: missing field '{section}.{key}'")
        return block[key]

    cnn = "char_cnn"
    embedding = need(cnn, "embedding")
    if not isinstance(embedding, dict) or "dim" not in embedding:
        raise CheckpointError(f"{path}: missing field 'char_cnn.embedding.dim'")
    n_characters = options[cnn].get("n_characters", CHAR_VOCAB_SIZE)
    if n_characters not in (CHAR_VOCAB_SIZE - 1, CHAR_VOCAB_SIZE):
        raise CheckpointError(
            f"{path}: field 'char_cnn.n_characters' is {n_characters}; ELMo's character ids need "
            "261 (+1 padding)"
        )
    try:
        return ElmoConfig(
            max_chars=int(options[cnn].get("max_characters_per_token", 50)),
            char_dim=int(embedding["dim"]),
            filters=tuple((int(w), int(n)) for w, n in need(cnn, "filters")),
            char_activation=str(need(cnn, "activation")),
            num_highway=int(need(cnn, "n_highway")),
            projection_dim=int(need("lstm", "projection_dim")),
            cell_size=int(need("lstm", "dim")),
            num_layers=int(need("lstm", "n_layers")),
            residual=bool(options["lstm"].get("use_skip_connections", False)),
            cell_clip=_clip(options["lstm"].get("cell_clip")),
            proj_clip=_clip(options["lstm"].get("proj_clip")),
            dropout=0.0,
            vocab_size=0,
        )
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from e


def _clip(value: Any) -> float | None:
    return None if value in (None, 0) else float(value)


class _Weights:
    """Reads datasets from the HDF5 file with errors naming the file, the dataset and the expected shape."""

    def __init__(self, handle: Any, path: Path) -> None:
        self.handle, self.path = handle, path

    def get(self, name: str, shape: tuple[int, ...], why: str) -> np.ndarray:
        try:
            node = self.handle[name]
        except KeyError:
            raise CheckpointError(
                f"{self.path}: missing dataset {name!r} (expected shape {shape}: {why}); not a complete ELMo "
                "weights file in AllenNLP's elmo_2x4096_512_2048cnn_2xhighway layout"
            ) from None
        if not hasattr(node, "shape"):
            raise CheckpointError(f"{self.path}: {name!r} is a group, expected a dataset of shape {shape}")
        if tuple(node.shape) != shape:
            raise CheckpointError(
                f"{self.path}: dataset {name!r} has shape {tuple(node.shape)}, options.json implies "
                f"{shape} ({why})"
            )
        value = np.asarray(node[...], dtype=np.float32)
        if not np.isfinite(value).all():
            raise CheckpointError(f"{self.path}: dataset {name!r} holds non-finite values (NaN or Inf)")
        return value


def _tf_gates_to_torch(w: np.ndarray, cell: int) -> np.ndarray:
    """Rows in TF's gate order i, j, f, o (j the candidate) -> torch's i, f, g, o."""
    i, j, f, o = (w[k * cell : (k + 1) * cell] for k in range(4))
    return np.concatenate([i, f, j, o], axis=0)


def load_released(options_path: str | os.PathLike, weights_path: str | os.PathLike) -> ElmoBiLM:
    """An `ElmoBiLM` (no softmax, eval mode) holding the released weights."""
    import h5py  # heavy: only the released HDF5 files need it

    options_path, weights_path = Path(options_path), Path(weights_path)
    config = config_from_options(read_json(options_path), options_path)
    if not weights_path.is_file():
        raise FileNotFoundError(f"{weights_path}: no such ELMo weights file")
    model = ElmoBiLM(config)
    E, F, P, C = config.char_dim, config.num_filters, config.projection_dim, config.cell_size
    state: dict[str, np.ndarray] = {}
    try:
        handle = h5py.File(weights_path, "r")
    except OSError as e:
        raise CheckpointError(f"{weights_path}: not a readable HDF5 file: {e}") from e
    with handle:
        w = _Weights(handle, weights_path)
        chars = w.get("char_embed", (CHAR_VOCAB_SIZE - 1, E), "character embeddings, char_cnn.embedding.dim")
        state["token_encoder.char_embedding.weight"] = np.concatenate([np.zeros((1, E), np.float32), chars])
        for i, (width, count) in enumerate(config.filters):
            kernel = w.get(f"CNN/W_cnn_{i}", (1, width, E, count), f"char_cnn.filters[{i}]")
            state[f"token_encoder.convolutions.{i}.weight"] = kernel[0].transpose(2, 1, 0)  # (n, E, w)
            state[f"token_encoder.convolutions.{i}.bias"] = w.get(
                f"CNN/b_cnn_{i}", (count,), f"char_cnn.filters[{i}]"
            )
        for k in range(config.num_highway):
            prefix, group = f"token_encoder.highway.layers.{k}", f"CNN_high_{k}"
            why = "char_cnn.n_highway, width = the filters' sum"
            state[f"{prefix}.transform.weight"] = w.get(f"{group}/W_transform", (F, F), why).T
            state[f"{prefix}.transform.bias"] = w.get(f"{group}/b_transform", (F,), why)
            state[f"{prefix}.gate.weight"] = w.get(f"{group}/W_carry", (F, F), why).T
            state[f"{prefix}.gate.bias"] = w.get(f"{group}/b_carry", (F,), why)
        state["token_encoder.projection.weight"] = w.get("CNN_proj/W_proj", (F, P), "lstm.projection_dim").T
        state["token_encoder.projection.bias"] = w.get("CNN_proj/b_proj", (P,), "lstm.projection_dim")
        for d, direction in enumerate(("forward_layers", "backward_layers")):
            for k in range(config.num_layers):
                group = f"RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell"
                prefix = f"lstm.{direction}.{k}.lstm"
                why = "lstm.dim cells, lstm.projection_dim"
                kernel = w.get(f"{group}/W_0", (P + P, 4 * C), why).T  # (4C, I + P); every layer's input is P
                bias = w.get(f"{group}/B", (4 * C,), why).copy()
                bias[2 * C : 3 * C] += 1.0  # TF's LSTMCell forget_bias, added at run time there
                state[f"{prefix}.weight_ih_l0"] = _tf_gates_to_torch(kernel[:, :P], C)
                state[f"{prefix}.weight_hh_l0"] = _tf_gates_to_torch(kernel[:, P:], C)
                state[f"{prefix}.bias_ih_l0"] = _tf_gates_to_torch(bias, C)
                state[f"{prefix}.bias_hh_l0"] = np.zeros(4 * C, np.float32)
                state[f"{prefix}.weight_hr_l0"] = w.get(f"{group}/W_P_0", (C, P), why).T
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}
    model.load_state_dict(tensors, strict=True)
    return model.eval()


def load_elmo_model(
    directory: str | os.PathLike, dtype: str | torch.dtype | None = None, device: str | torch.device = "cpu"
) -> ElmoBiLM:
    """`load_elmo`'s model (eval mode) on ``device``; the softmax vocabulary is `read_vocab`'s."""
    model, _ = load_elmo(directory)
    target = resolve_dtype(dtype)
    return (model if target is None else model.to(dtype=target)).to(device).eval()


def save_elmo_model(
    model: ElmoBiLM,
    directory: str | os.PathLike,
    dtype: str | torch.dtype | None = None,
    run_id: str | None = None,
    vocab: list[str] | None = None,
) -> Path:
    """`save_elmo` (``dtype`` must stay None: the released layout and the LSTM kernels are float32)."""
    if dtype is not None and resolve_dtype(dtype) != torch.float32:
        raise ValueError(f"ELMo directories hold float32 weights, not {dtype}")
    return save_elmo(model, directory, vocab, run_id=run_id)


def reads(directory: Path, raw: dict[str, Any] | None) -> bool:
    """attnlab's ELMo directories (``architecture`` ElmoBiLM) and the released options.json + HDF5 files."""
    if raw is not None:
        return raw.get("architecture") == ARCHITECTURE
    return released_files(directory) is not None


FAMILY = register(
    ModelFamily(
        name="elmo",
        what="an ELMo biLM",
        model_types=(ElmoBiLM,),
        reads=reads,
        load=load_elmo_model,
        save=save_elmo_model,
        commands="`attnlab elmo-embed`",
    )
)
