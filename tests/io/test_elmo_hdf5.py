"""The released ELMo files: a small options.json + weights.hdf5 written here in AllenNLP's
elmo_2x4096_512_2048cnn_2xhighway layout, loaded by attnlab, checked against a reference written below
from the equations in numpy (TF's conventions: x @ W, gates i, j, f, o, forget bias +1, the highway gate
named W_carry taking the transform path), within 1e-5. Bad files give errors naming the file and field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

h5py = pytest.importorskip("h5py")

from attnlab.io.families.elmo import load_elmo, save_elmo  # noqa: E402
from attnlab.io.format import CheckpointError  # noqa: E402
from attnlab.models.elmo import ElmoBiLM, batch_char_ids, get_preset, word_char_ids  # noqa: E402

OPTIONS = {
    "lstm": {"use_skip_connections": True, "projection_dim": 6, "cell_clip": 3, "proj_clip": 3, "dim": 10,
             "n_layers": 2},
    "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 2,
                 "embedding": {"dim": 4}, "n_characters": 262, "max_characters_per_token": 50},
}  # fmt: skip


def write_released(directory, rng, scale=1.0, skip=None):
    cnn, lstm = OPTIONS["char_cnn"], OPTIONS["lstm"]
    E, P, C = cnn["embedding"]["dim"], lstm["projection_dim"], lstm["dim"]
    F = sum(n for _, n in cnn["filters"])
    data = {"char_embed": rng.normal(size=(261, E))}
    for i, (w, n) in enumerate(cnn["filters"]):
        data[f"CNN/W_cnn_{i}"] = rng.normal(size=(1, w, E, n)) * 0.5
        data[f"CNN/b_cnn_{i}"] = rng.normal(size=(n,)) * 0.1
    for k in range(cnn["n_highway"]):
        for part in ("transform", "carry"):
            data[f"CNN_high_{k}/W_{part}"] = rng.normal(size=(F, F)) * 0.3
            data[f"CNN_high_{k}/b_{part}"] = rng.normal(size=(F,)) * 0.3
    data["CNN_proj/W_proj"] = rng.normal(size=(F, P)) * 0.3
    data["CNN_proj/b_proj"] = rng.normal(size=(P,)) * 0.1
    for d in range(2):
        for k in range(lstm["n_layers"]):
            g = f"RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell"
            data[f"{g}/W_0"] = rng.normal(size=(P + P, 4 * C)) * scale
            data[f"{g}/B"] = rng.normal(size=(4 * C,)) * 0.3
            data[f"{g}/W_P_0"] = rng.normal(size=(C, P)) * scale
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "elmo_options.json").write_text(json.dumps(OPTIONS))
    with h5py.File(directory / "elmo_weights.hdf5", "w") as f:
        for name, value in data.items():
            if name != skip:
                f.create_dataset(name, data=value.astype(np.float32))
    return {k: v.astype(np.float64) for k, v in data.items()}


# ---- the reference: Peters et al. 2018 / bilm-tf equations in numpy, float64 ----
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def ref_token(w, word):
    cnn = OPTIONS["char_cnn"]
    ids = np.array(word_char_ids(word)) - 1  # back to the file's rows (no padding row)
    emb = w["char_embed"][ids]  # (50, E)
    pooled = []
    for i, (width, _count) in enumerate(cnn["filters"]):
        kernel = w[f"CNN/W_cnn_{i}"][0]  # (width, E, n)
        conv = np.stack([np.einsum("ke,ken->n", emb[t : t + width], kernel) for t in range(50 - width + 1)])
        pooled.append(np.maximum((conv + w[f"CNN/b_cnn_{i}"]).max(axis=0), 0.0))
    x = np.concatenate(pooled)
    for k in range(cnn["n_highway"]):
        t = sigmoid(x @ w[f"CNN_high_{k}/W_carry"] + w[f"CNN_high_{k}/b_carry"])
        h = np.maximum(x @ w[f"CNN_high_{k}/W_transform"] + w[f"CNN_high_{k}/b_transform"], 0.0)
        x = t * h + (1 - t) * x
    return x @ w["CNN_proj/W_proj"] + w["CNN_proj/b_proj"]


def ref_lstm(w, d, k, xs):
    C, clip = OPTIONS["lstm"]["dim"], 3.0
    g = f"RNN_{d}/RNN/MultiRNNCell/Cell{k}/LSTMCell"
    c, h, out = np.zeros(C), np.zeros(w[f"{g}/W_P_0"].shape[1]), []
    for x in xs:
        z = np.concatenate([x, h]) @ w[f"{g}/W_0"] + w[f"{g}/B"]
        i, j, f, o = np.split(z, 4)
        c = np.clip(sigmoid(f + 1.0) * c + sigmoid(i) * np.tanh(j), -clip, clip)
        h = np.clip((sigmoid(o) * np.tanh(c)) @ w[f"{g}/W_P_0"], -clip, clip)
        out.append(h)
    return np.stack(out)


def reference(w, sentence):
    tokens = np.stack([ref_token(w, t) for t in ["<S>", *sentence, "</S>"]])
    layers = [np.concatenate([tokens, tokens], -1)]
    f_in, b_in = tokens, tokens[::-1]
    for k in range(OPTIONS["lstm"]["n_layers"]):
        f_out, b_out = ref_lstm(w, 0, k, f_in), ref_lstm(w, 1, k, b_in)
        if k > 0:
            f_out, b_out = f_out + f_in, b_out + b_in
        layers.append(np.concatenate([f_out, b_out[::-1]], -1))
        f_in, b_in = f_out, b_out
    return layers


def test_released_layout_matches_reference(tmp_path):
    rng = np.random.default_rng(0)
    w = write_released(tmp_path / "elmo", rng, scale=3.0)
    model, vocab = load_elmo(tmp_path / "elmo")
    assert (
        vocab is None and model.config.cell_clip == 3.0 and model.config.filters == ((1, 4), (2, 4), (3, 8))
    )
    sentences = [["The", "bank", "of", "the", "river", "."], ["Émile", "deposited", "cash"]]
    ids, mask = batch_char_ids(sentences)
    with torch.no_grad():
        out32 = model(ids, mask)
        out64 = model.double()(ids, mask)  # the loader's layout and the equations, free of float32 rounding
    hit_clip = False
    for b, sentence in enumerate(sentences):
        expected = reference(w, sentence)
        n = len(sentence) + 2
        for got64, got32, ref in zip(out64.layers, out32.layers, expected):
            np.testing.assert_allclose(got64[b, :n].numpy(), ref, atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(got32[b, :n].double().numpy(), ref, atol=1e-4, rtol=1e-4)
        hit_clip |= bool(np.abs(expected[1]).max() >= 3.0 - 1e-9)
    assert hit_clip, "the weights should be large enough for proj_clip to act"


def test_missing_dataset_names_file_and_field(tmp_path):
    write_released(tmp_path / "elmo", np.random.default_rng(1), skip="CNN_high_1/W_carry")
    with pytest.raises(CheckpointError, match=r"elmo_weights\.hdf5: missing dataset 'CNN_high_1/W_carry'"):
        load_elmo(tmp_path / "elmo")


def test_wrong_shape_and_missing_option(tmp_path):
    write_released(tmp_path / "elmo", np.random.default_rng(2))
    options = json.loads((tmp_path / "elmo" / "elmo_options.json").read_text())
    options["lstm"]["dim"] = 12
    (tmp_path / "elmo" / "elmo_options.json").write_text(json.dumps(options))
    with pytest.raises(
        CheckpointError, match=r"dataset 'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape"
    ):
        load_elmo(tmp_path / "elmo")
    del options["char_cnn"]["filters"]
    (tmp_path / "elmo" / "elmo_options.json").write_text(json.dumps(options))
    with pytest.raises(CheckpointError, match=r"elmo_options\.json: missing field 'char_cnn\.filters'"):
        load_elmo(tmp_path / "elmo")


def test_attnlab_directory_round_trip_and_vocab_mismatch(tmp_path):
    import dataclasses

    torch.manual_seed(0)
    config = dataclasses.replace(get_preset("elmo-tiny"), vocab_size=5)
    model = ElmoBiLM(config).eval()
    vocab = ["<S>", "</S>", "<UNK>", "bank", "river"]
    save_elmo(model, tmp_path / "m", vocab)
    loaded, words = load_elmo(tmp_path / "m")
    assert words == vocab
    ids, mask = batch_char_ids([["a", "bank"]])
    for a, b in zip(model(ids, mask).layers, loaded(ids, mask).layers):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    (tmp_path / "m" / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nbank\n")
    with pytest.raises(ValueError, match=r"vocab\.txt: 4 lines, but the softmax has vocab_size=5"):
        from attnlab.io.families.elmo import VOCAB_NAME, read_vocab

        read_vocab(tmp_path / "m" / VOCAB_NAME, 5)
    with pytest.raises(ValueError, match=r"vocab\.txt"):  # the manifest or the count catches it on load
        load_elmo(tmp_path / "m")
