"""attnlab.models: see docs/architecture.md."""
