"""ONNX export (attnlab.inference.onnx_export) and ONNX Runtime (OnnxRunner): outputs equal PyTorch's within
1e-4 for masked LM, sequence classification, token classification and QA models at batch sizes and lengths
other than the traced ones, with padding; the pipelines give the same answers on both backends; ``attnlab
export`` and ``attnlab predict --backend onnxruntime`` end to end; bad directories are clear errors.

An export takes ~5 s of CPU, so the default run exports the classifier only; the masked-LM, NER and QA
models' parity and pipelines are ``-m slow``."""

from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from attnlab.cli import main  # noqa: E402
from attnlab.inference.onnx_export import export_onnx  # noqa: E402
from attnlab.inference.onnx_runner import OnnxRunner  # noqa: E402
from attnlab.models import (  # noqa: E402
    EncoderForPreTraining,
    EncoderForQuestionAnswering,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
    get_preset,
)
from attnlab.tasks.finetune import save_model_dir  # noqa: E402
from attnlab.tasks.pipelines import pipeline  # noqa: E402
from attnlab.tokenizers import bert_wordpiece  # noqa: E402

ATOL = 1e-4
WORDS = "the cat sat on mat it was tired a dog ran home paris is in france where did go".split()
VOCAB = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
LABELS = ["O", "B-LOC", "I-LOC"]

MODELS = {
    "mlm": lambda cfg: EncoderForPreTraining.from_config(cfg),
    "cls": lambda cfg: EncoderForSequenceClassification.from_config(cfg, 3, ["neg", "neu", "pos"]),
    "ner": lambda cfg: EncoderForTokenClassification.from_config(cfg, 3, LABELS),
    "qa": lambda cfg: EncoderForQuestionAnswering.from_config(cfg),
    # --pooling mean: the masked mean over a dynamic T (traced at (2, 8)), no pooler
    "cls-mean": lambda cfg: EncoderForSequenceClassification.from_config(
        cfg, 3, ["neg", "neu", "pos"], pooling="mean"
    ),
}
FIELDS = {"mlm": ["mlm_logits"], "cls": ["logits"], "ner": ["logits"], "qa": ["start_logits", "end_logits"],
          "cls-mean": ["logits"]}  # fmt: skip


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class _Exports(dict):
    """kind -> (torch model, its saved directory, its ONNX directory), exported on first use.
    Weights = initialisation + noise (non-trivial biases and LayerNorms)."""

    def __init__(self, root) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, kind: str):
        torch.manual_seed(list(MODELS).index(kind))
        cfg = get_preset("bert-tiny", vocab_size=len(VOCAB), max_position_embeddings=64)
        model = MODELS[kind](cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.02)
        tok = bert_wordpiece(VOCAB)
        src = save_model_dir(model, tok, self.root / kind)
        export_onnx(model, self.root / f"{kind}-onnx", tokenizer=tok, int8=kind == "cls")
        self[kind] = (model, src, self.root / f"{kind}-onnx")
        return self[kind]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _Exports(tmp_path_factory.mktemp("onnx"))


SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=() if k in ("cls", "cls-mean") else SLOW) for k in MODELS]
)  # fmt: skip
def test_outputs_equal_pytorch(exported, kind):
    model, _, onnx_dir = exported[kind]
    runner = OnnxRunner(onnx_dir, threads=1)
    assert runner.architecture == type(model).__name__
    g = torch.Generator().manual_seed(1)
    for b, t in [(1, 5), (3, 17), (4, 64)]:  # neither the traced (2, 8) nor one another
        ids = torch.randint(0, len(VOCAB), (b, t), generator=g)
        mask = torch.ones_like(ids)
        mask[-1, t // 2 :] = 0  # the last row padded
        types = (torch.arange(t) >= t // 3).long().expand(b, t).contiguous()
        with torch.inference_mode():
            ref = model(ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
        got = runner(input_ids=ids, attention_mask=mask, token_type_ids=types)
        for name in FIELDS[kind]:
            diff = (getattr(ref, name) - getattr(got, name)).abs().max().item()
            assert diff <= ATOL, (kind, name, b, t, diff)
        hidden = (ref.hidden_states[-1] - got.last_hidden_state).abs().max().item()
        assert hidden <= ATOL, (kind, b, t, hidden)


def test_int8_graph_runs_and_stays_close(exported):
    model, _, onnx_dir = exported["cls"]
    runner = OnnxRunner(onnx_dir, threads=1, int8=True)
    ids = torch.randint(0, len(VOCAB), (4, 20), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        ref = model(ids).logits
    got = runner(input_ids=ids).logits
    assert got.shape == ref.shape and torch.isfinite(got).all()
    assert (ref - got).abs().max() < 0.1 * ref.abs().max() + 1e-3  # quantized: close, not equal
    plain = exported.root / "cls-plain"  # the same export without the int8 file
    plain.mkdir()
    for f in onnx_dir.iterdir():
        if f.name != "model.int8.onnx":
            (plain / f.name).write_bytes(f.read_bytes())
    with pytest.raises(FileNotFoundError, match="export with --int8"):
        OnnxRunner(plain, int8=True)


def test_classify_and_embed_pipelines_agree_across_backends(exported):
    _check_pipelines(exported, [
        ("text-classification", "cls", ("the cat sat on the mat", "a dog ran home")),
        ("embeddings", "cls", ("the cat sat", "a dog ran home today")),
    ])  # fmt: skip


@SLOW
def test_ner_fill_mask_qa_pipelines_agree_across_backends(exported):
    _check_pipelines(exported, [
        ("ner", "ner", ("paris is in france", "the cat sat")),
        ("fill-mask", "mlm", ("the cat [MASK] on the mat",)),
        ("embeddings", "mlm", ("the cat sat", "a dog ran home today")),
    ])  # fmt: skip
    _, src, onnx_dir = exported["qa"]
    question, context = "where did the cat go", "the cat sat on the mat and a dog ran home"
    a = pipeline("qa", src)(question, context, top_k=3)
    b = pipeline("qa", onnx_dir, backend="onnxruntime")(question, context, top_k=3)
    _assert_close(a, b)


def _check_pipelines(exported, cases) -> None:
    for task, kind, texts in cases:
        _, src, onnx_dir = exported[kind]
        a = pipeline(task, src)(list(texts))
        b = pipeline(task, onnx_dir, backend="onnxruntime", threads=1)(list(texts))
        if task == "embeddings":
            assert (a - b).abs().max() <= ATOL
            continue
        _assert_close(a, b)


def _assert_close(a, b) -> None:
    """Same structure, same strings, numbers within 1e-4."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_close(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_close(x, y)
    elif isinstance(a, float):
        assert abs(a - b) <= ATOL, (a, b)
    else:
        assert a == b


def test_cli_export_and_predict_with_onnxruntime(exported, tmp_path, capsys):
    _, src, _ = exported["cls"]
    out = tmp_path / "cls-onnx"
    assert main(["export", str(src), "--onnx", str(out), "--int8"]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "max abs difference" in err
    assert {p.name for p in out.iterdir()} >= {"model.onnx", "model.int8.onnx", "config.json", "onnx.json",
                                              "tokenizer.json", "manifest.json"}  # fmt: skip
    rows = []
    for backend in ("torch", "onnxruntime"):
        model = src if backend == "torch" else out
        argv = ["predict", "classify", str(model), "--text", "the cat sat", "--backend", backend]
        assert main(argv) == 0
        rows.append(json.loads(capsys.readouterr().out))
    _assert_close(rows[0], rows[1])


def test_predict_int8_on_both_engines(exported, capsys, monkeypatch):
    """``predict --int8``: attnlab's int8 layers on torch, the export's model.int8.onnx on ONNX Runtime; the
    same labels as float32, scores close; CPU only. The command caps oneDNN's kernel caches."""
    from attnlab.inference.allocator import KERNEL_CACHES
    from attnlab.inference.engine import check_engine

    for name in KERNEL_CACHES:
        monkeypatch.delenv(name, raising=False)  # restored after the test
    _, src, onnx_dir = exported["cls"]
    rows = {}
    engines = {"fp32": [str(src)], "torch int8": [str(src), "--int8"],
               "ort int8": [str(onnx_dir), "--backend", "onnxruntime", "--int8"]}  # fmt: skip
    for name, argv in engines.items():
        assert main(["predict", "classify", *argv, "--text", "the cat sat on the mat"]) == 0
        rows[name] = {p["label"]: p["score"] for p in json.loads(capsys.readouterr().out)["labels"]}
    for name in ("torch int8", "ort int8"):
        assert rows[name].keys() == rows["fp32"].keys()
        for label, score in rows[name].items():
            assert score == pytest.approx(rows["fp32"][label], abs=0.05), name
    assert all(os.environ.get(name) == "64" for name in KERNEL_CACHES)
    pipe = pipeline("text-classification", src, int8=True)
    assert type(pipe.model.encoder.attention[0].layer.qkv).__name__ == "Int8Linear"
    with pytest.raises(ValueError, match="--int8 runs on the CPU"):
        check_engine("torch", True, "cuda")


def test_bad_directories_are_clear_errors(exported, tmp_path, capsys):
    _, src, onnx_dir = exported["cls"]
    with pytest.raises(FileNotFoundError, match="attnlab export MODEL --onnx DIR"):
        OnnxRunner(src)  # a torch model directory
    assert main(["predict", "classify", str(src), "--text", "x", "--backend", "onnxruntime"]) == 2
    assert "model.onnx: no such file" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing"), "--onnx", str(tmp_path / "o")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["export", str(src), "--onnx", str(src)]) == 2
    assert "the model's own directory" in capsys.readouterr().err
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for f in onnx_dir.iterdir():
        (damaged / f.name).write_bytes(f.read_bytes())
    (damaged / "model.onnx").write_bytes((damaged / "model.onnx").read_bytes()[:1000])
    with pytest.raises(Exception, match="model.onnx"):
        OnnxRunner(damaged)
    runner = OnnxRunner(onnx_dir)
    with pytest.raises(ValueError, match="exceeds the maximum 64"):
        runner(input_ids=torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="must be in"):
        runner(input_ids=torch.full((1, 4), len(VOCAB)))


@pytest.mark.parametrize("opset", [5, 17, 23, 999])
def test_export_opset_outside_what_the_exporter_writes_is_one_error_and_writes_nothing(
    exported, tmp_path, capsys, opset
):
    _, src, _ = exported["cls"]
    out = tmp_path / "o"
    assert main(["export", str(src), "--onnx", str(out), "--opset", str(opset)]) == 2
    err = capsys.readouterr().err
    assert f"--opset {opset}: expected 18 to 22" in err and "Traceback" not in err
    assert not out.exists()


def test_export_records_the_opset_model_onnx_declares(exported):
    import onnx

    from attnlab.inference.onnx_export import file_opset

    _, _, onnx_dir = exported["cls"]
    recorded = json.loads((onnx_dir / "onnx.json").read_text())["opset"]
    assert recorded == file_opset(onnx.load(str(onnx_dir / "model.onnx"))) == 18


def test_failed_export_leaves_no_output_directory(exported, tmp_path, capsys, monkeypatch):
    from attnlab.cli import export

    _, src, _ = exported["cls"]
    monkeypatch.setattr(export, "_parity", lambda *a: 1.0)  # ONNX Runtime disagreeing with PyTorch
    out = tmp_path / "o"
    assert main(["export", str(src), "--onnx", str(out)]) == 2
    assert "the export is not usable" in capsys.readouterr().err
    assert not out.exists()


def test_bert_base_width_exports_with_dynamic_axes(tmp_path):
    """attnlab's Linear under torch.export: its oneDNN size test must not run on symbolic sizes; at BERT-base
    width it put a guard on the batch size (the pooler's (B, 768) product) and the export failed ("Expected op
    to be '==', got <= for 16/9 <= batch")."""
    from attnlab.models import Encoder

    torch.manual_seed(0)
    cfg = get_preset("bert-base-uncased", vocab_size=50, num_layers=1, intermediate_size=64,
                     max_position_embeddings=64)  # fmt: skip
    model = Encoder(cfg).eval()
    export_onnx(model, tmp_path)
    ids = torch.randint(0, 50, (3, 11))
    with torch.inference_mode():
        ref = model(ids).last_hidden_state
    assert (OnnxRunner(tmp_path, threads=1)(ids).last_hidden_state - ref).abs().max() <= ATOL
