"""attnlab.inference.allocator.bound_kernel_caches: oneDNN's and ideep's per-shape kernel caches capped for
the inference commands, unless the environment sets them (what it saves: benchmarks/serve.py --int8)."""

from __future__ import annotations

from attnlab.inference.allocator import KERNEL_CACHES, bound_kernel_caches


def test_caps_both_caches_and_keeps_what_the_environment_sets() -> None:
    env: dict[str, str] = {}
    bound_kernel_caches(environ=env)
    assert env == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64", "LRU_CACHE_CAPACITY": "64"}
    env = {"LRU_CACHE_CAPACITY": "1024"}
    bound_kernel_caches(16, environ=env)
    assert env == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "16", "LRU_CACHE_CAPACITY": "1024"}
    assert set(KERNEL_CACHES) == set(env)
