"""`attnlab.accel.unpadded`: inside `skip_padding` an optimized encoder's layers run on a padded batch's
real tokens only. The real positions' outputs equal the padded batch's (within float32 rounding: the products
see other row counts), the padded positions are zeros, and outside the block, or where a layer cannot take
the path, nothing changes. Pipelines run inside the block and answer as before."""

from __future__ import annotations

import dataclasses

import encoder_layers
import pytest
import torch
from encoder_layers import inputs
from test_flat_layer import LAYER_KINDS, _int8_engines, packed_here

import attnlab.accel.fused_layer as fused_layer
from attnlab.accel.fused_encoder import FusedEncoder
from attnlab.accel.fused_layer import fused_layers
from attnlab.accel.unpadded import Rows, skip_padding, skipping_padding
from attnlab.inference import quantize
from attnlab.models import Encoder


def run(m: Encoder, ids: torch.Tensor, mask: torch.Tensor | None, **kwargs: object) -> torch.Tensor:
    with torch.inference_mode():
        return m(ids, attention_mask=mask, **kwargs).last_hidden_state


class RowsSpy(encoder_layers.Spy):
    """Counts the `Rows` the encoder built (each a forward on the real tokens only)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch, fused_layer, "Rows")


def check_unpadded(m: Encoder, monkeypatch: pytest.MonkeyPatch, tol: float = 1e-5) -> None:
    """``tol``: PyTorch's int8 engines quantize a product's input with one scale for all its rows, which the
    padded rows take part in; without them the scale changes (int8 rounding, not float32's)."""
    ids, mask = inputs()
    padded = run(m, ids, mask)
    spy = RowsSpy(monkeypatch)
    with skip_padding():
        got = run(m, ids, mask)
    assert spy.calls == 1
    real = mask.bool()
    torch.testing.assert_close(got[real], padded[real], rtol=tol, atol=tol)
    if m.final_norm is None:  # post-LN: the layers' zeros as they are
        assert not got[~real].any()
    else:  # pre-LN: the final LayerNorm of a zero vector is its bias
        torch.testing.assert_close(got[~real], m.final_norm.bias.expand_as(got[~real]))
    with fused_layers(False):  # and the module calls agree on the real tokens
        torch.testing.assert_close(got[real], run(m, ids, mask)[real], rtol=tol, atol=tol)


@packed_here
@LAYER_KINDS
@pytest.mark.parametrize("kernel_attention", [True, False], ids=["attnlab attention", "SDPA"])
def test_packed_layers_skip_the_padding(
    monkeypatch: pytest.MonkeyPatch, changes: dict, kernel_attention: bool
) -> None:
    monkeypatch.setattr(fused_layer, "KERNEL_ATTENTION", kernel_attention)
    check_unpadded(encoder_layers.model(**changes), monkeypatch)


@pytest.mark.parametrize("engine", _int8_engines())
@pytest.mark.parametrize("changes", [{}, {"norm_first": True}], ids=["post-LN", "pre-LN"])
def test_int8_layers_skip_the_padding_on_the_flat_path(
    monkeypatch: pytest.MonkeyPatch, engine: str, changes: dict
) -> None:
    tol = 1e-5 if engine != "int_mm" else 1e-2  # attnlab's quantization takes each row on its own
    check_unpadded(quantize(encoder_layers.model(**changes), engine=engine), monkeypatch, tol)


def test_separate_projections_on_the_flat_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Float layers the packed path refuses (here: ``cpu_gemm`` onednn) go to the flat function, their query,
    key and value three products (int8 layers have one stacked product): stacked for the attention."""
    monkeypatch.setattr(fused_layer, "_packed", lambda *a: False)
    monkeypatch.setattr(fused_layer, "cpu_gemm", lambda: "onednn")
    check_unpadded(encoder_layers.model(), monkeypatch)


@pytest.mark.parametrize("case", ["outside the block", "no padding", "hidden states", "module calls"])
def test_nothing_changes_where_the_path_does_not_apply(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    m = encoder_layers.model()
    ids, mask = inputs()
    kwargs: dict = {}
    if case == "no padding":
        mask = torch.ones_like(ids)
    if case == "hidden states":
        kwargs["output_hidden_states"] = True
    ref = run(m, ids, mask, **kwargs)
    spy = RowsSpy(monkeypatch)
    with skip_padding(case != "outside the block"), fused_layers(case != "module calls"):
        got = run(m, ids, mask, **kwargs)
    assert spy.calls == 0
    assert torch.equal(got, ref) or case == "module calls"


def test_the_switch_is_per_thread_and_restored() -> None:
    import threading

    seen = []
    with skip_padding():
        assert skipping_padding()
        t = threading.Thread(target=lambda: seen.append(skipping_padding()))
        t.start()
        t.join()
        with skip_padding(False):
            assert not skipping_padding()
        assert skipping_padding()
    assert not skipping_padding() and seen == [False]


def test_rows_gather_and_scatter() -> None:
    keep = torch.tensor([[True, True, False], [True, False, False]])
    x = torch.arange(18.0).view(2, 3, 3)
    rows = Rows(keep)
    got = rows.gather(x)
    assert torch.equal(got, x[keep][None])
    back = rows.scatter(got)
    assert torch.equal(back[keep], x[keep]) and not back[~keep].any()


def test_fill_mask_pipeline_answers_as_on_the_padded_batch() -> None:
    """A batch of texts of different lengths: the same tokens and scores within rounding as each text
    alone (no padding there) and as the padded batch."""
    from attnlab.models import EncoderForPreTraining
    from attnlab.tasks.pipelines import FillMaskPipeline
    from attnlab.tokenizers import bert_wordpiece

    words = "the a cat dog sat on mat ran far away house big small red".split()
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    torch.manual_seed(0)
    config = dataclasses.replace(encoder_layers.TINY, vocab_size=len(vocab))
    pipe = FillMaskPipeline(EncoderForPreTraining.from_config(config), bert_wordpiece(vocab), batch_size=8)
    assert type(pipe.model.encoder) is FusedEncoder  # the pipeline optimized its model (attnlab.accel)
    texts = ["the cat [MASK] on the mat", "a [MASK] dog", "the big red house ran far [MASK] away", "[MASK]"]
    batched = pipe(texts, top_k=3)
    alone = [pipe(t, top_k=3) for t in texts]
    with fused_layers(False):
        modules = pipe(texts, top_k=3)
    for got, *refs in zip(batched, alone, modules):
        for ref in refs:
            assert [o["token"] for o in got] == [o["token"] for o in ref]
            assert [o["score"] for o in got] == pytest.approx([o["score"] for o in ref], abs=1e-5)
