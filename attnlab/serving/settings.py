"""`ServeSettings`: how ``attnlab serve`` runs (every field is a command-line option of the same name)."""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.serving.batching import BatchLimits


@dataclass
class ServeSettings:
    host: str = "127.0.0.1"  # loopback only unless asked: a model server is not a public service by default
    port: int = 8000
    max_batch_tokens: int = 4096  # padded tokens per dynamic batch (size x longest request)
    max_wait_ms: float = 5.0  # how long the oldest request waits for others to join its batch
    max_batch_size: int = 64  # requests per batch (1: no dynamic batching, the benchmark's peer)
    max_queue: int = 256  # requests waiting for a batch; more get 503 + Retry-After
    max_body_bytes: int = 1_000_000  # larger request bodies get 413
    timeout_s: float = 30.0  # a request not answered by then gets 504
    api_key: str | None = None  # when set, /v1/* (except /v1/info) and /metrics need it
    backend: str = "torch"  # or "onnxruntime" (encoders)
    graceful_s: float = 30.0  # on shutdown, how long in-flight requests may take to finish
    continuous: bool = True  # GPT: generation requests join one running decode batch (continuous batching)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        for name in ("max_body_bytes", "timeout_s", "graceful_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key is empty; leave it out or give a secret")
        self.limits()  # checks the batching fields

    def limits(self) -> BatchLimits:
        return BatchLimits(self.max_batch_tokens, self.max_wait_ms, self.max_batch_size, self.max_queue)
