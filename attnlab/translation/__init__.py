"""attnlab.translation: see docs/architecture.md."""
