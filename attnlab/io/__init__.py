"""attnlab.io: see docs/architecture.md."""
