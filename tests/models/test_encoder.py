"""The configurable Encoder, its config, heads and pre-training compositions (tiny configs)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from attnlab.models import (
    ARCHITECTURES,
    Encoder,
    EncoderConfig,
    EncoderForPreTraining,
    MaskedLMHead,
    ReplacedTokenDetection,
    ReplacedTokenHead,
    SentencePairHead,
    count_parameters,
    masked_lm_loss,
)

TINY = EncoderConfig(
    vocab_size=99,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    hidden_dropout=0.0,
    attention_dropout=0.0,
)


def tiny(**changes: object) -> EncoderConfig:
    return dataclasses.replace(TINY, **changes)


def batch(b: int = 3, t: int = 9, vocab: int = 99, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 7:] = 0
    ids[mask == 0] = 0
    return ids, mask


VARIANTS = {
    "bert": tiny(),
    "roberta": tiny(type_vocab_size=1, pad_token_id=1, position_offset=2, layer_norm_eps=1e-5),
    "albert": tiny(embedding_size=16, sharing="all", activation="gelu_tanh"),
    "albert-attention": tiny(embedding_size=16, sharing="attention"),
    "albert-ffn": tiny(embedding_size=16, sharing="ffn"),
    "electra-gen": tiny(embedding_size=48, add_pooler=False),
    "distilbert": tiny(type_vocab_size=0, add_pooler=False),
    "pre-ln-sinusoidal": tiny(norm_first=True, position_embedding="sinusoidal", activation="relu"),
}


# -- outputs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_forward_shapes_and_paths_agree(name: str) -> None:
    torch.manual_seed(0)
    cfg = VARIANTS[name]
    enc = Encoder(cfg).eval()
    ids, mask = batch()
    fast = enc(ids, attention_mask=mask)
    full = enc(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    assert fast.last_hidden_state.shape == (3, 9, 32)
    assert fast.hidden_states is None and fast.attentions is None
    assert (fast.pooled_output is not None) == cfg.add_pooler
    if cfg.add_pooler:
        assert fast.pooled_output.shape == (3, 32)
    assert len(full.hidden_states) == cfg.num_layers + 1
    assert all(h.shape == (3, 9, 32) for h in full.hidden_states)
    assert len(full.attentions) == cfg.num_layers
    assert all(a.shape == (3, 4, 9, 9) for a in full.attentions)
    torch.testing.assert_close(fast.last_hidden_state, full.last_hidden_state, atol=1e-5, rtol=1e-5)
    # padded keys get no attention
    for a in full.attentions:
        assert torch.all(a[1, :, :, 5:] == 0) and torch.all(a[2, :, :, 7:] == 0)


@pytest.mark.parametrize("name", ["bert", "roberta", "albert"])
def test_padding_does_not_change_real_tokens(name: str) -> None:
    torch.manual_seed(0)
    enc = Encoder(VARIANTS[name]).eval()
    ids, mask = batch()
    out = enc(ids, attention_mask=mask).last_hidden_state
    ids2 = ids.clone()
    ids2[mask == 0] = 7  # other pad contents, still masked
    if name == "roberta":
        ids2[mask == 0] = 1  # RoBERTa positions depend on the pad id itself
    out2 = enc(ids2, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(out[real], out2[real], atol=1e-5, rtol=1e-5)
    # and a sequence alone equals the same sequence padded in a batch
    alone = enc(ids[1:2, :5]).last_hidden_state
    torch.testing.assert_close(alone[0], out[1, :5], atol=1e-5, rtol=1e-5)


def test_hidden_states_follow_layer_plan() -> None:
    torch.manual_seed(0)
    enc = Encoder(tiny()).eval()
    ids, mask = batch()
    out = enc(ids, attention_mask=mask, output_hidden_states=True)
    torch.testing.assert_close(out.hidden_states[0], enc.embeddings(ids))
    x = out.hidden_states[0]
    bias = enc.attention_bias(mask, x.dtype)
    for i, (a, f) in enumerate(enc.layer_plan):
        x = enc.feed_forward[f](enc.attention[a](x, mask=bias)[0])
        torch.testing.assert_close(out.hidden_states[i + 1], x)
    torch.testing.assert_close(out.last_hidden_state, x)


def test_pre_ln_has_final_norm_post_ln_does_not() -> None:
    post, pre = Encoder(tiny()), Encoder(tiny(norm_first=True))
    assert post.final_norm is None and all(not r.norm_first for r in post.attention)
    assert pre.final_norm is not None and all(r.norm_first for r in [*pre.attention, *pre.feed_forward])
    ids, _ = batch()
    out = pre(ids, output_hidden_states=True)
    a, f = pre.layer_plan[-1]
    last_layer = pre.feed_forward[f](pre.attention[a](out.hidden_states[-2])[0])
    torch.testing.assert_close(out.last_hidden_state, pre.final_norm(last_layer))
    # as HF's pre-LN classes (RoBERTa-PreLayerNorm, GPT-2): the last hidden state is the output itself
    assert out.hidden_states[-1] is out.last_hidden_state


# -- state-dict names (the model contract) ------------------------------------------------------------
def _layer_keys(prefix: str, names: tuple[str, ...], count: int) -> set[str]:
    keys = set()
    for j in range(count):
        for n in names:
            keys |= {f"{prefix}.{j}.layer.{n}.weight", f"{prefix}.{j}.layer.{n}.bias"}
        keys |= {f"{prefix}.{j}.norm.weight", f"{prefix}.{j}.norm.bias"}
    return keys


@pytest.mark.parametrize(
    ("name", "n_att", "n_ff", "extra"),
    [
        (
            "bert",
            2,
            2,
            {
                "embeddings.position.weight",
                "embeddings.token_type.weight",
                "pooler.dense.weight",
                "pooler.dense.bias",
            },
        ),
        (
            "albert",
            1,
            1,
            {
                "embeddings.position.weight",
                "embeddings.token_type.weight",
                "embeddings.project.weight",
                "embeddings.project.bias",
                "pooler.dense.weight",
                "pooler.dense.bias",
            },
        ),
        (
            "albert-attention",
            1,
            2,
            {
                "embeddings.position.weight",
                "embeddings.token_type.weight",
                "embeddings.project.weight",
                "embeddings.project.bias",
                "pooler.dense.weight",
                "pooler.dense.bias",
            },
        ),
        (
            "albert-ffn",
            2,
            1,
            {
                "embeddings.position.weight",
                "embeddings.token_type.weight",
                "embeddings.project.weight",
                "embeddings.project.bias",
                "pooler.dense.weight",
                "pooler.dense.bias",
            },
        ),
        ("distilbert", 2, 2, {"embeddings.position.weight"}),
        (
            "pre-ln-sinusoidal",
            2,
            2,
            {
                "embeddings.token_type.weight",
                "final_norm.weight",
                "final_norm.bias",
                "pooler.dense.weight",
                "pooler.dense.bias",
            },
        ),
    ],
)
def test_state_dict_keys_are_the_contract(name: str, n_att: int, n_ff: int, extra: set[str]) -> None:
    enc = Encoder(VARIANTS[name])
    expected = {"embeddings.word.weight", "embeddings.norm.weight", "embeddings.norm.bias"} | extra
    expected |= _layer_keys("attention", ("query", "key", "value", "output"), n_att)
    expected |= _layer_keys("feed_forward", ("up", "down"), n_ff)
    assert set(enc.state_dict()) == expected


# -- cross-layer sharing (ALBERT) ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sharing", "plan"),
    [
        ("none", ((0, 0), (1, 1), (2, 2))),
        ("all", ((0, 0), (0, 0), (0, 0))),
        ("attention", ((0, 0), (0, 1), (0, 2))),
        ("ffn", ((0, 0), (1, 0), (2, 0))),
    ],
)
def test_sharing_plans(sharing: str, plan: tuple) -> None:
    enc = Encoder(tiny(num_layers=3, sharing=sharing))
    assert enc.layer_plan == plan
    assert len(enc.attention) == len({a for a, _ in plan}) and len(enc.feed_forward) == len(
        {f for _, f in plan}
    )


def test_all_shared_runs_the_same_module_every_layer_and_counts_shrink() -> None:
    L = 4
    shared = Encoder(tiny(num_layers=L, sharing="all"))
    calls: list[int] = []
    shared.attention[0].register_forward_hook(lambda m, i, o: calls.append(id(m)))
    shared(batch()[0])
    assert calls == [id(shared.attention[0])] * L  # attention[0] reused by every layer

    H, I = 32, 37  # noqa: E741 (the papers' names: hidden, intermediate)
    attention = 4 * (H * H + H) + 2 * H
    ffn = 2 * H * I + I + H + 2 * H
    full = count_parameters(tiny(num_layers=L))
    assert count_parameters(tiny(num_layers=L, sharing="all")) == full - (L - 1) * (attention + ffn)
    assert count_parameters(tiny(num_layers=L, sharing="attention")) == full - (L - 1) * attention
    assert count_parameters(tiny(num_layers=L, sharing="ffn")) == full - (L - 1) * ffn
    assert count_parameters(shared) == count_parameters(tiny(num_layers=L, sharing="all"))


def test_shared_weights_get_gradients_from_every_layer() -> None:
    torch.manual_seed(0)
    enc = Encoder(tiny(num_layers=3, sharing="all"))
    ids, mask = batch()
    enc(ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert enc.attention[0].layer.query.weight.grad is not None
    assert torch.count_nonzero(enc.attention[0].layer.query.weight.grad) > 0


# -- initialisation -----------------------------------------------------------------------------------
def test_bert_initialisation() -> None:
    torch.manual_seed(0)
    enc = Encoder(tiny(hidden_size=256, num_heads=4, intermediate_size=512, initializer_range=0.05))
    w = enc.feed_forward[0].layer.up.weight
    assert abs(w.std().item() - 0.05) < 0.003 and abs(w.mean().item()) < 0.003
    assert abs(enc.embeddings.word.weight.std().item() - 0.05) < 0.005
    assert torch.all(enc.attention[1].layer.key.bias == 0)
    assert torch.all(enc.attention[1].norm.weight == 1) and torch.all(enc.attention[1].norm.bias == 0)
    assert torch.all(enc.embeddings.norm.weight == 1)


# -- heads and compositions ---------------------------------------------------------------------------
def test_pretraining_ties_and_losses() -> None:
    torch.manual_seed(0)
    model = EncoderForPreTraining.from_config(tiny(embedding_size=16), pair_head=True)
    assert model.mlm_head.decoder.weight is model.encoder.embeddings.word.weight
    assert model.mlm_head.dense.weight.shape == (16, 32) and model.mlm_head.norm.weight.shape == (16,)
    assert model.mlm_head.decoder.bias is None and model.mlm_head.bias.shape == (99,)
    ids, mask = batch()
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 3], labels[2, 0] = 5, 6, 7
    pair = torch.tensor([0, 1, 1])
    out = model(ids, attention_mask=mask, labels=labels, pair_labels=pair)
    assert out.mlm_logits.shape == (3, 9, 99) and out.pair_logits.shape == (3, 2)
    picked = out.mlm_logits[labels != -100]
    mlm = F.cross_entropy(picked, labels[labels != -100])
    torch.testing.assert_close(out.mlm_loss, mlm)
    torch.testing.assert_close(out.loss, mlm + F.cross_entropy(out.pair_logits, pair))
    # gradients reach the shared embedding from both uses
    out.loss.backward()
    assert model.encoder.embeddings.word.weight.grad is not None
    # no labelled position: a zero loss, not NaN
    none = masked_lm_loss(out.mlm_logits.detach(), torch.full_like(ids, -100))
    assert none.item() == 0.0


def test_pretraining_without_pair_head_and_untied() -> None:
    model = EncoderForPreTraining.from_config(tiny(), tie_weights=False)
    assert model.pair_head is None
    assert model.mlm_head.decoder.weight is not model.encoder.embeddings.word.weight
    with pytest.raises(ValueError, match="no pair_head"):
        model(batch()[0], pair_labels=torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="needs an encoder with a pooler"):
        EncoderForPreTraining(
            Encoder(tiny(add_pooler=False)), MaskedLMHead.from_config(TINY), SentencePairHead(32)
        )
    with pytest.raises(ValueError, match="unknown option"):
        EncoderForPreTraining.from_config(tiny(), nsp=True)


def test_replaced_token_detection() -> None:
    torch.manual_seed(0)
    model = ReplacedTokenDetection.from_config(tiny(add_pooler=False))
    assert isinstance(model.rtd_head, ReplacedTokenHead) and model.config is model.encoder.config
    ids, mask = batch()
    labels = torch.randint(0, 2, ids.shape)
    out = model(ids, attention_mask=mask, labels=labels)
    assert out.logits.shape == (3, 9)
    real = mask.bool()
    expected = F.binary_cross_entropy_with_logits(out.logits[real], labels[real].float())
    torch.testing.assert_close(out.loss, expected)


def test_architectures_registry() -> None:
    core = {"Encoder", "EncoderForPreTraining", "ReplacedTokenDetection"}
    assert core <= set(ARCHITECTURES)  # task heads (attnlab.models.task_heads) register there too
    assert all(callable(getattr(cls, "from_config", None)) for cls in ARCHITECTURES.values())
    for name in sorted(core):
        cls = ARCHITECTURES[name]
        model = cls.from_config(TINY)
        assert isinstance(model, cls) and model.config == TINY, name
    assert ARCHITECTURES["EncoderForPreTraining"].from_config(TINY, pair_head=True).pair_head is not None


def test_training_reduces_loss() -> None:
    torch.manual_seed(0)
    model = EncoderForPreTraining.from_config(tiny(num_layers=1), pair_head=True)
    ids, mask = batch(b=4, t=8)
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 0] = ids[0, 0]
    pair = torch.tensor([0, 1, 0, 1])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        loss = model(ids, attention_mask=mask, labels=labels, pair_labels=pair).loss
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first


# -- config -------------------------------------------------------------------------------------------
def test_config_round_trip_and_unknown_keys() -> None:
    cfg = tiny(embedding_size=16, sharing="ffn", norm_first=True)
    assert EncoderConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match=r"unknown key\(s\) hidden_act, num_hidden_layers; valid: "):
        EncoderConfig.from_dict({**cfg.to_dict(), "num_hidden_layers": 2, "hidden_act": "gelu"})


def test_pooler_activation_defaults_to_tanh_and_old_configs_read_as_tanh() -> None:
    """BERT's tanh is the default, so every existing model is unchanged; a config.json written before the
    field existed reads as tanh. Each choice computes act(dense(h[:, 0]))."""
    old = tiny().to_dict()
    del old["pooler_activation"]
    assert EncoderConfig.from_dict(old).pooler_activation == "tanh"
    torch.manual_seed(0)
    h = torch.randn(2, 5, 32)
    for name, act in [("tanh", torch.tanh), ("gelu", F.gelu), ("relu", F.relu)]:
        pooler = Encoder(tiny(pooler_activation=name)).pooler
        torch.testing.assert_close(pooler(h), act(pooler.dense(h[:, 0])), atol=0, rtol=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "activation",
            "swish",
            "activation: expected one of gelu, gelu_sigmoid, gelu_tanh, relu, got 'swish'",
        ),
        ("sharing", "layers", "sharing: expected one of none, all, attention, ffn, got 'layers'"),
        ("position_embedding", "rotary", "position_embedding: expected one of learned, sinusoidal"),
        ("num_heads", 5, "hidden_size 32 is not divisible by num_heads 5"),
        ("hidden_size", 0, "hidden_size: expected a positive int"),
        ("embedding_size", 0, "embedding_size: expected a positive int or None"),
        ("hidden_dropout", 1.5, r"hidden_dropout: expected a probability in \[0, 1\)"),
        ("pad_token_id", 99, r"pad_token_id: expected an int in \[0, vocab_size=99\)"),
        ("type_vocab_size", -1, "type_vocab_size: expected an int >= 0"),
        ("norm_first", "yes", "norm_first: expected a bool"),
        (
            "pooler_activation",
            "sigmoid",
            "pooler_activation: expected one of tanh, gelu, gelu_sigmoid, gelu_tanh, relu, got 'sigmoid'",
        ),
    ],
)
def test_config_validation(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny(**{field: value})


# -- bad input ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder(tiny()).eval()


def test_bad_ids(encoder: Encoder) -> None:
    ids, mask = batch()
    with pytest.raises(
        ValueError, match=r"token id 120 out of range; ids must be in \[0, 98\] \(vocab_size=99\)"
    ):
        encoder(torch.tensor([[1, 120, 3]]))
    with pytest.raises(ValueError, match="token id -1 out of range"):
        encoder(torch.tensor([[1, -1, 3]]))
    with pytest.raises(
        TypeError, match=r"input_ids: expected an integer tensor \(torch.long\), got torch.float32"
    ):
        encoder(ids.float())
    with pytest.raises(ValueError, match=r"input_ids: expected shape \(B, T\), got \(9,\)"):
        encoder(ids[0])
    with pytest.raises(ValueError, match=r"expected shape \(B, T\), got \(1, 3, 9\)"):
        encoder(ids[None])
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        encoder([[1, 2, 3]])


def test_bad_masks_and_lengths(encoder: Encoder) -> None:
    ids, mask = batch()
    with pytest.raises(
        ValueError, match=r"attention_mask: expected the shape of input_ids \(3, 9\), got \(3, 8\)"
    ):
        encoder(ids, attention_mask=mask[:, :8])
    with pytest.raises(
        ValueError, match=r"token_type_ids: expected the shape of input_ids \(3, 9\), got \(9,\)"
    ):
        encoder(ids, token_type_ids=mask[0])
    with pytest.raises(ValueError, match=r"token_type_ids: id 2 out of range; must be in \[0, 1\]"):
        encoder(ids, token_type_ids=torch.full_like(ids, 2))
    with pytest.raises(ValueError, match="sequence length 65 exceeds the maximum 64"):
        encoder(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match=r"position_ids: position 64 out of range; must be in \[0, 63\]"):
        encoder(ids, position_ids=torch.arange(56, 65)[None])
    roberta = Encoder(VARIANTS["roberta"])
    with pytest.raises(ValueError, match=r"sequence length 63 exceeds the maximum 62 .*position_offset=2"):
        roberta(torch.ones(1, 63, dtype=torch.long))
    with pytest.raises(ValueError, match="no segment embeddings"):
        Encoder(VARIANTS["distilbert"])(ids, token_type_ids=torch.zeros_like(ids))
    with pytest.raises(ValueError, match="labels: expected shape"):
        EncoderForPreTraining.from_config(TINY)(ids, labels=ids[:, :4])


def test_demo_command(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from attnlab.cli import demo

    parser = argparse.ArgumentParser()
    demo.register(parser.add_subparsers())
    args = parser.parse_args(
        ["demo", "--preset", "bert-tiny", "--vocab-size", "50", "--batch-size", "2", "--seq-len", "8"]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "last_hidden_state (2, 8, 128)" in printed
    assert "MLM decoder tied to the word embedding: True" in printed
    assert "albert-xxlarge" in printed and "222,595,584" in printed


def test_encoder_forward_parameter_order_is_pinned() -> None:
    """The compositions (attnlab.models.pretraining, task_heads) call the encoder positionally in this order;
    reordering Encoder.forward must fail here rather than silently swap masks and segment ids."""
    import inspect

    params = list(inspect.signature(Encoder.forward).parameters)
    assert params[:7] == [
        "self",
        "input_ids",
        "attention_mask",
        "token_type_ids",
        "position_ids",
        "output_hidden_states",
        "output_attentions",
    ]
