"""`plan_memory`: per-process memory of DDP and FSDP runs, from a model built on the meta device."""

from __future__ import annotations

import torch
from test_train_fsdp import tiny_model

from attnlab.train.memory_plan import plan_memory


def _plan(**options):
    with torch.device("meta"):
        model = tiny_model()
    shape = {"batch_size": 4, "length": 8, "hidden": 16, "heads": 2}
    return model, plan_memory(model, **{"world_size": 4, "parallel": "ddp", **shape, **options})


def test_ddp_holds_the_whole_model_gradients_and_both_adam_moments_on_every_rank():
    model, plan = _plan()
    count = sum(p.numel() for p in model.parameters())
    assert plan.parameter_count == count
    assert (plan.parameters, plan.gradients, plan.optimizer) == (4 * count, 4 * count, 8 * count)


def test_fsdp_holds_a_quarter_on_4_ranks_plus_one_layer_unsharded():
    model, ddp = _plan()
    _, fsdp = _plan(parallel="fsdp")
    layer = sum(p.numel() for m in (model.model.encoder.attention[0], model.model.encoder.feed_forward[0])
                for p in m.parameters())  # fmt: skip
    assert fsdp.optimizer == 2 * 4 * -(-ddp.parameter_count // 4)
    assert fsdp.parameters == 4 * (-(-ddp.parameter_count // 4) + layer)
    assert fsdp.activations == ddp.activations  # the batch per rank is the same


def test_activation_checkpointing_keeps_less_than_all_layers_activations():
    _, plain = _plan(parallel="fsdp")
    _, checkpointed = _plan(parallel="fsdp", activation_checkpointing=True)
    assert checkpointed.activations < plain.activations
    assert "total" in checkpointed.lines()[-1]


def test_shared_layers_count_once_as_weights_and_each_time_as_activations():
    from attnlab.models import EncoderForPreTraining, get_preset

    shape = {"batch_size": 2, "length": 8}
    with torch.device("meta"):
        albert = EncoderForPreTraining.from_config(get_preset("albert-base", vocab_size=100))
    plan = plan_memory(albert, **shape)
    config = albert.config
    assert config.num_layers == 12  # one layer's weights, applied 12 times
    want = 12 * plan_memory(albert, **shape, layers=1).activations
    assert plan.activations == want > 0
    assert plan.parameters == 4 * sum(p.numel() for p in albert.parameters())
