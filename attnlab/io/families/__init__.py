"""One module per model family, each knowing its directory and its HF form, registered on import
(`attnlab.io.registry`): `gpt2`, `transfo_xl`, `reformer`, `elmo`, `universal`, and `bert` (the encoders and
their heads). Translation's Marian family is registered by `attnlab.translation`.
"""

from attnlab.io.families import bert, elmo, gpt2, reformer, transfo_xl, universal

__all__ = ["bert", "elmo", "gpt2", "reformer", "transfo_xl", "universal"]
