"""attnlab.metrics: see docs/architecture.md."""
