"""GPT on the shared decoder layer: parity with HF transformers' GPT2LMHeadModel (test-only reference) on
identical weights, HF directories both ways, the cache, padding, parameter counts of the presets."""

from __future__ import annotations

import pytest
import torch

from attnlab.io.hf_gpt2 import (
    config_from_gpt2,
    load_gpt2,
    save_gpt2,
    state_dict_from_gpt2,
    state_dict_to_gpt2,
)
from attnlab.models.decoder import DecoderLayer
from attnlab.models.gpt import GPTConfig, build_gpt, count_parameters
from attnlab.models.gpt_presets import GPT_PRESETS, get_gpt_preset

transformers = pytest.importorskip("transformers")

V = 97


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_hf_config(**overrides) -> transformers.GPT2Config:
    kwargs = dict(
        vocab_size=V, n_positions=40, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    kwargs.update(overrides)
    return transformers.GPT2Config(**kwargs)


def hf_pair(seed: int = 0, **overrides):
    """(HF GPT2LMHeadModel with perturbed biases/norms, attnlab GPT loaded from its state dict)."""
    torch.manual_seed(seed)
    hc = tiny_hf_config(**overrides)
    hf = transformers.GPT2LMHeadModel(hc).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif "ln" in name and name.endswith("weight"):
                p.normal_(1.0, 0.3)
    cfg = config_from_gpt2(hc.to_dict())
    ours = build_gpt(cfg).eval()
    ours.load_state_dict(state_dict_from_gpt2(hf.state_dict(), cfg))
    return hf, ours


@pytest.mark.parametrize("activation", ["gelu_new", "relu"])
def test_logits_equal_hf(activation: str) -> None:
    hf, ours = hf_pair(activation_function=activation)
    ids = torch.randint(0, V, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids).logits
        mine = ours(ids).logits
    assert mine.shape == ref.shape == (3, 17, V)
    torch.testing.assert_close(mine, ref, rtol=0, atol=1e-5)


def test_loss_equals_hf_and_ignores_minus_100() -> None:
    hf, ours = hf_pair()
    ids = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(2))
    labels = ids.clone()
    labels[0, :5] = -100
    with torch.no_grad():
        torch.testing.assert_close(
            ours(ids, labels=labels).loss, hf(ids, labels=labels).loss, rtol=0, atol=1e-5
        )


def test_left_padded_batch_equals_hf_and_unpadded() -> None:
    hf, ours = hf_pair(seed=3)
    ids = torch.randint(3, V, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding
    ids[1, :4] = 2
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        mine = ours(ids, attention_mask=mask).logits
        ref = hf(ids, attention_mask=mask, position_ids=positions).logits
        alone = ours(ids[1:, 4:]).logits
    torch.testing.assert_close(mine[mask.bool()], ref[mask.bool()], rtol=0, atol=1e-5)
    torch.testing.assert_close(mine[1, 4:], alone[0], rtol=0, atol=1e-5)


def test_cached_steps_equal_full_forward() -> None:
    _, ours = hf_pair(seed=4)
    ids = torch.randint(0, V, (2, 10), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        full = ours(ids, attention_mask=mask).logits
        cache = ours.new_cache()
        first = ours(ids[:, :6], attention_mask=mask[:, :6], cache=cache).logits
        steps = [first]
        for t in range(6, 10):
            steps.append(ours(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache).logits)
    torch.testing.assert_close(torch.cat(steps, dim=1)[mask.bool()], full[mask.bool()], rtol=0, atol=1e-5)


def test_export_loads_in_transformers(tmp_path) -> None:
    torch.manual_seed(5)
    cfg = GPTConfig(vocab_size=V, max_positions=32, hidden_size=32, num_layers=2, num_heads=4, dropout=0.0,
                    embedding_dropout=0.0, attention_dropout=0.0, bos_token_id=1, eos_token_id=2)  # fmt: skip
    ours = build_gpt(cfg).eval()
    save_gpt2(ours, tmp_path / "hf")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()
    ids = torch.randint(0, V, (2, 11), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, ours(ids).logits, rtol=0, atol=1e-5)
    back = load_gpt2(tmp_path / "hf")
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name


def test_untied_output_projection_round_trips_through_hf_and_attnlab(tmp_path) -> None:
    from attnlab.io.families.gpt2 import load_causal_lm, save_causal_lm

    torch.manual_seed(8)
    cfg = GPTConfig(vocab_size=V, max_positions=32, hidden_size=32, num_layers=2, num_heads=4, dropout=0.0,
                    embedding_dropout=0.0, attention_dropout=0.0, bos_token_id=1, eos_token_id=2,
                    tie_word_embeddings=False)  # fmt: skip
    ours = build_gpt(cfg).eval()
    assert ours.lm_head.weight is not ours.embed.word.weight
    assert sum(p.numel() for p in ours.parameters()) == count_parameters(cfg)
    assert (
        count_parameters(cfg)
        == count_parameters(GPTConfig(**{**cfg.__dict__, "tie_word_embeddings": True})) + V * 32
    )
    save_gpt2(ours, tmp_path / "hf")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    assert hf.lm_head.weight.data_ptr() != hf.transformer.wte.weight.data_ptr()
    ids = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, ours(ids).logits, rtol=0, atol=1e-5)
    for back in (load_gpt2(tmp_path / "hf"), load_causal_lm(save_causal_lm(ours, tmp_path / "ours"))):
        assert not back.config.tie_word_embeddings
        for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items()):
            assert torch.equal(a, b), name


def test_hf_save_pretrained_directory_loads(tmp_path) -> None:
    hf, ours = hf_pair(seed=6)
    hf.save_pretrained(tmp_path / "hf")
    loaded = load_gpt2(tmp_path / "hf")
    assert loaded.lm_head.weight is loaded.embed.word.weight
    ids = torch.randint(0, V, (1, 8))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, hf(ids).logits, rtol=0, atol=1e-5)


def test_state_dict_round_trip_is_exact() -> None:
    hf, ours = hf_pair(seed=7)
    back = state_dict_to_gpt2(ours.state_dict(), ours.config)
    for name, value in back.items():
        assert torch.equal(value, hf.state_dict()[name]), name


def test_c_attn_split_is_not_trivial() -> None:
    """A swapped q/k/v split would change the logits: the parity test above can fail."""
    hf, ours = hf_pair(seed=8)
    state = state_dict_from_gpt2(hf.state_dict(), ours.config)
    a = "decoder.layers.0.self_attn.layer."
    state[a + "value.weight"], state[a + "key.weight"] = state[a + "key.weight"], state[a + "value.weight"]
    ours.load_state_dict(state)
    ids = torch.randint(0, V, (1, 8))
    with torch.no_grad():
        assert (ours(ids).logits - hf(ids).logits).abs().max() > 1e-3  # 100x the parity tolerance


@pytest.mark.parametrize("name", ["gpt2", "gpt2-medium"])
def test_gpt2_parameter_counts_equal_hf(name: str) -> None:
    cfg = get_gpt_preset(name)
    hc = transformers.GPT2Config(n_embd=cfg.hidden_size, n_layer=cfg.num_layers, n_head=cfg.num_heads)
    with torch.device("meta"):
        hf = transformers.GPT2LMHeadModel(hc)
        ours = build_gpt(cfg)
    hf_count = sum(p.numel() for p in {id(p): p for p in hf.parameters()}.values())
    assert count_parameters(cfg) == hf_count == sum(p.numel() for p in ours.parameters())
    assert hf_count == {"gpt2": 124_439_808, "gpt2-medium": 354_823_168}[name]


def test_every_preset_counts_and_builds_on_meta() -> None:
    golden = {"gpt": 116_534_784, "gpt-char-tiny": 867_072, "gpt-bpe-small": 13_891_584}  # char: untied
    for name in GPT_PRESETS:
        cfg = get_gpt_preset(name)
        with torch.device("meta"):
            model = build_gpt(cfg)
        assert sum(p.numel() for p in model.parameters()) == count_parameters(cfg), name
        if name in golden:
            assert count_parameters(cfg) == golden[name]
    assert get_gpt_preset("gpt").norm_first is False and get_gpt_preset("gpt2").norm_first is True


def test_gpt_uses_the_shared_decoder_layer_without_cross_attention() -> None:
    model = build_gpt(get_gpt_preset("gpt-char-tiny", vocab_size=65, tie_word_embeddings=True))
    assert all(type(layer) is DecoderLayer and layer.cross_attn is None for layer in model.decoder.layers)
    assert model.lm_head.weight is model.embed.word.weight
    assert model.decoder.final_norm is not None
    assert build_gpt(get_gpt_preset("gpt", vocab_size=50, max_positions=8, hidden_size=16, num_layers=1,
                                    num_heads=2)).decoder.final_norm is None  # fmt: skip


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="GPTConfig.num_heads"):
        GPTConfig(num_heads=0)
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(hidden_size=100, num_heads=3)
    with pytest.raises(ValueError, match="GPTConfig.activation"):
        GPTConfig(activation="swish")
    with pytest.raises(ValueError, match="unknown GPT preset 'gpt3'"):
        get_gpt_preset("gpt3")
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        config_from_gpt2(tiny_hf_config(scale_attn_by_inverse_layer_idx=True).to_dict())


def test_context_overflow_is_a_clear_error() -> None:
    model = build_gpt(get_gpt_preset("gpt-char-tiny", vocab_size=65)).eval()
    with pytest.raises(ValueError, match="longer than the model's context of 64"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_buffered_cache_grows_and_reorders_like_the_full_forward() -> None:
    """Past the first buffer (64 positions) and after a beam-style row reorder, cached steps still equal
    the full forward of the reordered sequences."""
    from attnlab.models.decoder import reorder_cache

    torch.manual_seed(9)
    cfg = GPTConfig(vocab_size=V, max_positions=160, hidden_size=32, num_layers=2, num_heads=4, dropout=0.0,
                    embedding_dropout=0.0, attention_dropout=0.0, bos_token_id=1, eos_token_id=2)  # fmt: skip
    model = build_gpt(cfg).eval()
    ids = torch.randint(0, V, (3, 150), generator=torch.Generator().manual_seed(9))
    rows = torch.tensor([2, 0, 0])
    with torch.no_grad():
        cache = model.new_cache()
        steps = [model(ids[:, :5], cache=cache).logits]
        for t in range(5, 70):
            steps.append(model(ids[:, t : t + 1], cache=cache).logits)
        reorder_cache(cache, rows)
        ids = ids.index_select(0, rows)
        steps = [s.index_select(0, rows) for s in steps]
        for t in range(70, 150):
            steps.append(model(ids[:, t : t + 1], cache=cache).logits)
        full = model(ids).logits
    assert cache[0]["self"]["key_buffer"].size(2) >= 150 and cache[0]["self"]["key"].size(2) == 150
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


def test_original_gpt_logits_equal_hf_openai_gpt() -> None:
    """The `gpt` preset's layout (post-LN, no final norm) against HF's OpenAIGPTLMHeadModel on the same
    weights; its parameter count equals HF's for the full size."""
    torch.manual_seed(10)
    hc = transformers.OpenAIGPTConfig(
        vocab_size=V, n_positions=24, n_embd=32, n_layer=2, n_head=4, afn="gelu", resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    hf = transformers.OpenAIGPTLMHeadModel(hc).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif "ln" in name and name.endswith("weight"):
                p.normal_(1.0, 0.3)
    cfg = get_gpt_preset(
        "gpt", vocab_size=V, max_positions=24, hidden_size=32, num_layers=2, num_heads=4,
        activation="gelu_tanh",  # HF's afn="gelu" is the tanh approximation (gelu_new)
        dropout=0.0, embedding_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    ours = build_gpt(cfg).eval()
    ours.load_state_dict(state_dict_from_gpt2(hf.state_dict(), cfg, family="openai-gpt"))
    ids = torch.randint(0, V, (2, 13), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, hf(ids).logits, rtol=0, atol=1e-5)
    with torch.device("meta"):
        full = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig())
    assert sum(p.numel() for p in {id(p): p for p in full.parameters()}.values()) == count_parameters(
        get_gpt_preset("gpt")
    )
