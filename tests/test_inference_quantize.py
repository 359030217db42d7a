"""attnlab's int8 path (attnlab.inference.quantize): every linear layer, attnlab's `Linear` included (which
torch.ao's dynamic quantization skips), becomes an `Int8Linear`; outputs stay close to float32; the tied word
embedding is left float32; the pipelines run on a quantized model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.inference import Int8Linear, quantize
from attnlab.inference.quantize import cpu_has_vnni
from attnlab.models import EncoderForPreTraining, EncoderForSequenceClassification, get_preset
from attnlab.nn.linear import Linear

pytestmark = [
    pytest.mark.skipif(
        torch.backends.quantized.engine not in ("fbgemm", "x86", "onednn"), reason="no x86 quantized engine"
    ),
    pytest.mark.usefixtures("one_thread"),  # tests/conftest.py
]


@pytest.mark.parametrize("reduce_range", [False, True, None])
def test_int8_linear_close_to_float(reduce_range):
    if reduce_range is False and not cpu_has_vnni():
        # AVX2 without VNNI sums pairs of 8-bit products in int16, which saturates with full-range
        # activations: the reason reduce_range exists and why None (the default) picks it on such CPUs
        pytest.skip("full-range int8 activations need VNNI; this CPU has none")
    torch.manual_seed(0)
    layer = Linear(64, 48)
    x = torch.randn(3, 7, 64)
    q = Int8Linear.from_float(layer, reduce_range=reduce_range)
    ref, got = layer(x), q(x)
    assert got.shape == ref.shape
    rel = ((got - ref).norm() / ref.norm()).item()
    assert q.reduce_range == (not cpu_has_vnni() if reduce_range is None else reduce_range)
    assert rel < (0.03 if q.reduce_range else 0.015), rel
    assert rel > 0  # it is quantized


def test_quantize_replaces_every_linear_and_keeps_outputs_close():
    torch.manual_seed(1)
    cfg = get_preset("bert-mini", vocab_size=200, max_position_embeddings=64)
    model = EncoderForSequenceClassification.from_config(cfg, 2).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    # what torch.ao's quantize_dynamic catches: only exact nn.Linear, none of attnlab's layers
    ao = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    assert sum(isinstance(m, Linear) for m in ao.modules()) == linears
    q = quantize(model)
    assert sum(isinstance(m, nn.Linear) for m in q.modules()) == 0
    assert sum(isinstance(m, Int8Linear) for m in q.modules()) == linears == 4 * 6 + 1 + 1
    assert isinstance(model.classifier, Linear)  # a copy: the float model is untouched
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
