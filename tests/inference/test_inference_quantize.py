"""attnlab's int8 path (attnlab.inference.quantize): every linear layer, `FastLinear` included (which
torch.ao's dynamic quantization skips), becomes an `Int8Linear`; outputs stay close to float32 on each engine;
the tied word embedding is left float32; the pipelines run on a quantized model; no deprecated PyTorch API."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from attnlab.accel import onednn_int8, optimize
from attnlab.accel.linear import FastLinear
from attnlab.inference import Int8Linear, quantize
from attnlab.inference.quantize import ENGINES, auto_engine, cpu_has_vnni
from attnlab.models import EncoderForPreTraining, EncoderForSequenceClassification, get_preset

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def skip_unless_available(engine: str) -> None:
    from attnlab.accel import int8_gemm

    if engine == "attnlab" and not int8_gemm.available():
        pytest.skip(f"attnlab's int8 kernel is not available: {int8_gemm.unavailable_reason()}")
    if engine == "onednn" and not onednn_int8.available():
        pytest.skip(f"oneDNN's int8 products are not used here: {onednn_int8.unavailable_reason()}")


@pytest.mark.parametrize("reduce_range", [False, True, None])
def test_int8_linear_close_to_float_on_int_mm(reduce_range):
    if reduce_range is False and not cpu_has_vnni():
        # AVX2 without VNNI sums pairs of 8-bit products in int16, which may saturate with full-range
        # activations: the reason reduce_range exists and why None (the default) picks it on such CPUs
        pytest.skip("full-range int8 activations need VNNI; this CPU has none")
    torch.manual_seed(0)
    layer = FastLinear(64, 48)
    x = torch.randn(3, 7, 64)
    q = Int8Linear.from_float(layer, reduce_range=reduce_range, engine="int_mm")
    ref, got = layer(x), q(x)
    assert got.shape == ref.shape
    rel = ((got - ref).norm() / ref.norm()).item()
    assert q.reduce_range == (not cpu_has_vnni() if reduce_range is None else reduce_range)
    assert rel < (0.03 if q.reduce_range else 0.015), rel
    assert rel > 0  # it is quantized


def test_int8_linear_close_to_float_on_attnlabs_kernel():
    skip_unless_available("attnlab")
    torch.manual_seed(0)
    layer = FastLinear(64, 48)
    x = torch.randn(3, 7, 64)
    q = Int8Linear.from_float(layer, engine="attnlab")
    rel = ((q(x) - layer(x)).norm() / layer(x).norm()).item()
    assert 0 < rel < (0.03 if q.reduce_range else 0.015), rel  # 8-bit activations with VNNI, else 7


@pytest.mark.parametrize("engine", ENGINES)
def test_no_deprecated_pytorch_api_is_called(engine):
    skip_unless_available(engine)
    model = EncoderForSequenceClassification.from_config(get_preset("bert-tiny", vocab_size=50), 2).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecation warning (quantized tensors warn so) fails the test
        q = quantize(model, engine=engine)
        with torch.inference_mode():
            q(torch.randint(0, 50, (2, 9)))


def test_quantize_replaces_every_linear_and_keeps_outputs_close():
    torch.manual_seed(1)
    cfg = get_preset("bert-mini", vocab_size=200, max_position_embeddings=64)
    model = EncoderForSequenceClassification.from_config(cfg, 2).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    optimize(model)  # as `predict` runs it: every nn.Linear a FastLinear
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    # what torch.ao's quantize_dynamic swaps: modules whose type is exactly nn.Linear, none of an optimized
    # model's layers (they would all stay float32)
    assert not any(type(m) is nn.Linear for m in model.modules())
    q = quantize(model)
    assert sum(isinstance(m, nn.Linear) for m in q.modules()) == 0
    assert linears == 4 * 6 + 1 + 1
    # and each self-attention's query, key and value once more, stacked (one product)
    assert sum(isinstance(m, Int8Linear) for m in q.modules()) == linears + 4
    stacked = q.encoder.attention[0].layer.qkv
    assert isinstance(stacked, Int8Linear) and (stacked.in_features, stacked.out_features) == (256, 768)
    assert isinstance(model.classifier, FastLinear)  # a copy: the float model is untouched
    ids = torch.randint(0, 200, (4, 32))
    mask = torch.ones_like(ids)
    mask[0, 20:] = 0
    with torch.inference_mode():
        ref = model(ids, attention_mask=mask, output_hidden_states=True)
        got = q(ids, attention_mask=mask, output_hidden_states=True)
    keep = mask.bool()
    a, b = ref.hidden_states[-1][keep], got.hidden_states[-1][keep]  # (tokens, H)
    rel = ((a - b).norm() / a.norm()).item()
    assert 0 < rel < 0.03, rel
    assert torch.nn.functional.cosine_similarity(ref.logits, got.logits, dim=0).min() > 0.95


def test_tied_embedding_stays_float_and_fill_mask_runs():
    from attnlab.tasks.pipelines import FillMaskPipeline
    from attnlab.tokenizers import bert_wordpiece

    torch.manual_seed(2)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"])}
    cfg = get_preset("bert-tiny", vocab_size=len(vocab), max_position_embeddings=32)
    model = EncoderForPreTraining.from_config(cfg).eval()
    q = quantize(model)
    assert q.encoder.embeddings.word.weight.dtype == torch.float32
    assert isinstance(q.mlm_head.decoder, Int8Linear)
    preds = FillMaskPipeline(q, bert_wordpiece(vocab))("the cat [MASK]", top_k=3)
    ref = FillMaskPipeline(model, bert_wordpiece(vocab))("the cat [MASK]", top_k=3)
    assert [p["token"] for p in preds][0] == [p["token"] for p in ref][0]
    assert abs(preds[0]["score"] - ref[0]["score"]) < 0.05


@pytest.mark.parametrize("kernel", [False, True])
def test_auto_engine_takes_attnlabs_kernel_where_it_is_available(kernel):
    assert auto_engine(kernel) == ("attnlab" if kernel else "int_mm")


def test_auto_engine_takes_onednn_where_the_cpu_has_vnni():
    from attnlab.accel import int8_gemm

    want = "onednn" if onednn_int8.available() else ("attnlab" if int8_gemm.available() else "int_mm")
    assert auto_engine() == want
    if int8_gemm.available() and int8_gemm.levels() == int8_gemm.VNNI_LEVELS:
        # where oneDNN is not taken on a VNNI CPU, the reason is this PyTorch build, never a wrong product
        assert onednn_int8.available() or "no oneDNN" in onednn_int8.unavailable_reason()


@pytest.mark.parametrize("engine", ENGINES)
def test_quantize_packs_for_the_engine_asked(engine):
    from attnlab.accel import int8_gemm

    skip_unless_available(engine)
    torch.manual_seed(3)
    cfg = get_preset("bert-tiny", vocab_size=100, max_position_embeddings=32)
    model = EncoderForSequenceClassification.from_config(cfg, 2).eval()
    q = quantize(model, engine=engine)
    ids = torch.randint(0, 100, (2, 16))
    with torch.inference_mode():
        ref, got = model(ids).logits, q(ids).logits
    assert torch.allclose(ref, got, atol=0.05), (ref, got)
    packed = q.classifier._packed
    assert isinstance(packed, int8_gemm.Int8Weight) == (engine == "attnlab")
    assert isinstance(packed, onednn_int8.OneDNNInt8Weight) == (engine == "onednn")
    assert f"{engine}: " in repr(q.classifier)
    with pytest.raises(ValueError, match="one of 'onednn', 'attnlab', 'int_mm', got 'x86'"):
        quantize(model, engine="x86")


@pytest.mark.parametrize("engine", ENGINES)
def test_stacked_qkv_equals_the_three_int8_projections(engine):
    from attnlab.nn.attention import MultiHeadAttention

    skip_unless_available(engine)
    torch.manual_seed(4)
    attn = quantize(MultiHeadAttention(64, 4), engine=engine)
    assert isinstance(attn.qkv, Int8Linear) and attn.qkv.out_features == 192
    x = torch.randn(2, 9, 64)
    with torch.inference_mode():
        stacked, _ = attn(x)
        stacked_qkv = attn._self_projections(x)
        attn.qkv = None  # the three separate int8 products
        separate, _ = attn(x)
        separate_qkv = attn._self_projections(x)
    for a, b in zip(stacked_qkv, separate_qkv):
        assert torch.equal(a, b)
    assert torch.equal(stacked, separate)


def test_the_attnlab_engine_refuses_clearly_where_its_kernel_is_missing(monkeypatch):
    from attnlab.accel import int8_gemm

    monkeypatch.setattr(int8_gemm, "available", lambda: False)
    monkeypatch.setattr(int8_gemm, "unavailable_reason", lambda: "ATTNLAB_INT8_GEMM=off")
    with pytest.raises(RuntimeError, match="'attnlab' int8 engine is not available: ATTNLAB_INT8_GEMM=off"):
        quantize(nn.Linear(8, 4), engine="attnlab")
    assert auto_engine() == "int_mm"  # PyTorch's int8 product instead
    assert isinstance(quantize(nn.Sequential(nn.Linear(8, 4)))[0], Int8Linear)
