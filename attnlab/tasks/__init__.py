"""attnlab.tasks: see docs/architecture.md."""
