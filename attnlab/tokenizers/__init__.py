"""attnlab.tokenizers: see docs/architecture.md."""
