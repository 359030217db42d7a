"""`ElmoConfig` and its presets: Peters et al. 2018 (ELMo), section 3.4 and the released models.

The released biLM (AllenNLP's ``elmo_2x4096_512_2048cnn_2xhighway``): 2048 character n-gram filters of
widths 1..7 ([1,32],[2,32],[3,64],[4,128],[5,256],[6,512],[7,1024]) over 16-dimensional character
embeddings, 2 highway layers, a projection to 512; two LSTM layers per direction with 4096 cells projected
to 512 and a residual connection between them; cell and projection values clipped at 3. (The list
[1,32],[2,64],...,[7,2048] sums to 4064 filters, not the paper's 2048; the presets follow the paper text
and the released options.json.) AllenNLP's smaller releases are ``elmo-small`` (2x1024_128_2048cnn_1xhighway)
and ``elmo-medium`` (2x2048_256_2048cnn_1xhighway); its table gives 13.6M / 28.0M / 93.6M parameters for
the three, which `count_parameters` reproduces (tests/models/test_elmo_model.py).

``elmo-cpu`` and ``elmo-tiny`` are this project's: sizes a 2-core machine trains in minutes. They drop the
clipping (``cell_clip=None``), which lets the LSTMs run on PyTorch's fused kernel instead of a per-step loop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

CHAR_ACTIVATIONS = ("relu", "tanh")
# AllenNLP's character ids: 256 UTF-8 byte values, then begin/end of sentence, begin/end of word and
# padding (256..260), all shifted by one so that 0 is a padded token: 262 rows.
CHAR_VOCAB_SIZE = 262


@dataclass(frozen=True)
class ElmoConfig:
    # --- character encoder (section 3.4; Kim et al. 2015's char CNN)
    max_chars: int = 50  # characters per token, begin/end-of-word markers included; longer tokens truncated
    char_dim: int = 16  # character embedding size
    filters: tuple[tuple[int, int], ...] = (
        (1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024),
    )  # fmt: skip  # (width, number of filters); their sum is the highway width
    char_activation: str = "relu"  # after the max-pool over positions (AllenNLP's order)
    num_highway: int = 2
    # --- biLM
    projection_dim: int = 512  # token vector and LSTM output size: the "512" of 2x4096_512
    cell_size: int = 4096  # LSTM memory cells per layer and direction, projected to projection_dim
    num_layers: int = 2  # LSTM layers per direction
    residual: bool = True  # the second layer adds its input to its output (section 3.4)
    cell_clip: float | None = 3.0  # |c| clipped after every step (options.json "cell_clip"); None: not
    proj_clip: float | None = 3.0  # |h| clipped after the projection ("proj_clip"); None: not
    dropout: float = 0.1  # on the token vectors and between LSTM layers, in training only
    # --- output softmax over a word vocabulary, shared by both directions (0: none, e.g. released weights)
    vocab_size: int = 0
    adaptive_cutoffs: tuple[int, ...] = ()  # torch's adaptive softmax cluster bounds; () = full softmax

    def __post_init__(self) -> None:
        def fail(name: str, expected: str) -> None:
            raise ValueError(f"ElmoConfig.{name}: expected {expected}, got {getattr(self, name)!r}")

        if self.char_activation not in CHAR_ACTIVATIONS:
            fail("char_activation", f"one of {', '.join(CHAR_ACTIVATIONS)}")
        if not self.filters or any(len(f) != 2 or min(f) < 1 for f in self.filters):
            fail("filters", "(width, count) pairs of positive ints")
        if max(w for w, _ in self.filters) > self.max_chars:
            fail("filters", f"widths <= max_chars ({self.max_chars})")
        if self.max_chars < 3:
            fail("max_chars", "an int >= 3 (begin, one character, end)")
        for name in ("char_dim", "projection_dim", "cell_size", "num_layers"):
            if getattr(self, name) < 1:
                fail(name, "a positive int")
        if self.num_highway < 0 or self.vocab_size < 0:
            fail("num_highway" if self.num_highway < 0 else "vocab_size", "an int >= 0")
        if self.projection_dim >= self.cell_size:
            fail(
                "projection_dim", f"fewer than cell_size ({self.cell_size}): the LSTM projects its cells down"
            )
        if not 0.0 <= self.dropout < 1.0:
            fail("dropout", "a probability in [0, 1)")
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                fail(name, "a positive number or None")
        cutoffs = list(self.adaptive_cutoffs)
        if cutoffs and (cutoffs != sorted(set(cutoffs)) or cutoffs[0] < 1 or cutoffs[-1] >= self.vocab_size):
            fail("adaptive_cutoffs", f"increasing ints between 1 and vocab_size - 1 ({self.vocab_size - 1})")

    @property
    def num_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def clipped(self) -> bool:
        return self.cell_clip is not None or self.proj_clip is not None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ElmoConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"ElmoConfig: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        values = dict(data)
        if "filters" in values:
            values["filters"] = tuple(tuple(int(x) for x in f) for f in values["filters"])
        if "adaptive_cutoffs" in values:
            values["adaptive_cutoffs"] = tuple(int(c) for c in values["adaptive_cutoffs"])
        return cls(**values)


ELMO = ElmoConfig()  # elmo_2x4096_512_2048cnn_2xhighway
ELMO_MEDIUM = dataclasses.replace(ELMO, num_highway=1, cell_size=2048, projection_dim=256)
ELMO_SMALL = dataclasses.replace(ELMO, num_highway=1, cell_size=1024, projection_dim=128)
# this project's CPU sizes: 512 filters, 512 cells -> 128, no clipping (the fused LSTM kernel)
ELMO_CPU = dataclasses.replace(
    ELMO, filters=((1, 32), (2, 32), (3, 64), (4, 128), (5, 128), (6, 64), (7, 64)),
    cell_size=512, projection_dim=128, cell_clip=None, proj_clip=None,
)  # fmt: skip
ELMO_TINY = dataclasses.replace(
    ELMO_CPU, filters=((1, 8), (2, 8), (3, 16), (4, 16)), char_dim=8, num_highway=1,
    cell_size=32, projection_dim=16, dropout=0.0,
)  # fmt: skip

PRESETS: dict[str, ElmoConfig] = {
    "elmo": ELMO,
    "elmo-medium": ELMO_MEDIUM,
    "elmo-small": ELMO_SMALL,
    "elmo-cpu": ELMO_CPU,
    "elmo-tiny": ELMO_TINY,
}


def get_preset(name: str, **overrides: Any) -> ElmoConfig:
    try:
        config = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown ELMo preset {name!r}; valid: {', '.join(PRESETS)}") from None
    return dataclasses.replace(config, **overrides) if overrides else config
