"""attnlab.train: see docs/architecture.md."""
