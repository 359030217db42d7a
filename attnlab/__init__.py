"""attnlab: the Transformer and the BERT family end to end."""

__version__ = "0.1.0"
