"""attnlab.data: see docs/architecture.md."""
