"""A Universal Transformer tagging model as one config: what its directory records (`attnlab.io`).

`attnlab.models.universal` composes a `TaggingModel` from parts (a shared `DecoderLayer`, a stack, ACT), as
the experiments do; `UniversalConfig` names each choice of that composition as a field, and
`build_tagging_model` builds it, keeping the config on the model (``model.config``) so that `attnlab.io.save`
can write it and `attnlab.io.load` build it again.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.models.universal import TaggingModel, UniversalStack, VanillaStack, make_layer
from attnlab.nn.act import AdaptiveComputationTime
from attnlab.nn.local_attention import LocalSelfAttention

STACKS = ("universal", "vanilla")


@dataclass
class UniversalConfig:
    """One field per choice of a `TaggingModel`; the defaults are the Universal Transformer's (post-LN, fixed
    depth, full attention)."""

    vocab_size: int
    hidden_size: int = 64
    num_heads: int = 4
    intermediate_size: int = 256
    stack: str = "universal"  # "universal": one shared layer over depth; "vanilla": num_layers layers
    max_steps: int = 6  # universal: the depth (with ACT, its most)
    num_layers: int = 4  # vanilla: the layers
    max_positions: int = 1024
    norm_first: bool = False  # the paper's post-LN; True: pre-LN
    activation: str = "relu"
    dropout: float = 0.0
    act: bool = False  # adaptive computation time (section 2.2)
    act_threshold: float = 0.99
    halting_bias: float = 1.0  # the halting unit's initial bias (Graves: positive, so early steps go on)
    inject_input: bool = False  # the stack's input added again before every step after the first
    timestep_signal: bool = True  # eq. 1's P_t
    window: int | None = None  # local self-attention over this many positions (None: full attention)
    window_causal: bool = False
    ponder_weight: float = 0.0  # tau of Graves eq. 12

    def __post_init__(self) -> None:
        if self.stack not in STACKS:
            raise ValueError(
                f"UniversalConfig.stack: expected one of {', '.join(STACKS)}, got {self.stack!r}"
            )
        if self.act and self.stack != "universal":
            raise ValueError("UniversalConfig.act: adaptive computation time needs stack='universal'")


def build_tagging_model(config: UniversalConfig) -> TaggingModel:
    """The `TaggingModel` ``config`` describes, with ``model.config = config``."""
    h = config.hidden_size

    def layer():
        local = None
        if config.window is not None:
            local = LocalSelfAttention(h, config.num_heads, config.window, causal=config.window_causal)
        return make_layer(
            h, config.num_heads, config.intermediate_size, config.dropout, norm_first=config.norm_first,
            activation=config.activation, self_attention=local,
        )  # fmt: skip

    if config.stack == "vanilla":
        stack = VanillaStack([layer() for _ in range(config.num_layers)], h, config.max_positions)
    else:
        act = None
        if config.act:
            act = AdaptiveComputationTime(
                h, config.max_steps, threshold=config.act_threshold, bias_init=config.halting_bias
            )
        stack = UniversalStack(
            layer(), h, config.max_steps, config.max_positions, act=act, inject_input=config.inject_input,
            timestep_signal=config.timestep_signal,
        )  # fmt: skip
    model = TaggingModel(config.vocab_size, h, stack, ponder_weight=config.ponder_weight)
    model.config = config
    return model
