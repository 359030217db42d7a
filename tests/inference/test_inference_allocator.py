"""attnlab.inference.allocator.keep_freed_memory: glibc keeps freed large blocks for reuse, so a forward's
big tensors are not faulted in afresh each time. Process-wide, so each case runs in a child process; the
page-fault count (getrusage's minor faults) shows whether a freed 64 MiB block came back as new memory."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from attnlab.inference.allocator import keep_freed_memory

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's allocator only"
)

CHILD = r"""
import json, resource, sys
import torch
from attnlab.inference.allocator import keep_freed_memory
applied = keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):  # the heap grows to its working size in the first few (aligned blocks)
    x = torch.ones(16 * 1024 * 1024)  # 64 MiB, above glibc's largest mmap threshold
    del x
before = faults()
for _ in range(5):
    x = torch.ones(16 * 1024 * 1024)
    del x
print(json.dumps({"applied": applied, "faults_per_alloc": (faults() - before) / 5}))
"""


def _child(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "ATTNLAB_MALLOC"))}
    kept = _child(env)
    assert kept["applied"] is True
    # 64 MiB is 16,384 pages of 4 KiB: glibc's default unmaps and maps it again, faulting every page
    default = _child({**env, "ATTNLAB_MALLOC": "default"})
    assert default["applied"] is False
    assert default["faults_per_alloc"] > 8000, default
    assert kept["faults_per_alloc"] < 100, kept


def test_bad_setting_names_the_variable():
    with pytest.raises(ValueError, match="ATTNLAB_MALLOC must be 'reuse' or 'default', got 'arena'"):
        keep_freed_memory({"ATTNLAB_MALLOC": "arena"})
    assert keep_freed_memory({"ATTNLAB_MALLOC": "default"}) in (True, False)  # leaves the process as it is
