"""attnlab.nn: see docs/architecture.md."""
