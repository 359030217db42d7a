"""What the CPU is, read once from Linux's ``/proc/cpuinfo``: its model name, vendor and feature flags.

Kernel and layout choices that depend on the machine read these (`attnlab.accel.onednn_linear`: MKL or oneDNN;
`attnlab.accel.linear`: the few-row decoding layouts; `attnlab.inference.quantize`: the int8 engine and
activation range); outputs that name the machine they measured on read `cpu_model`. Where the file cannot be
read (not Linux) the vendor and flags are empty and the callers fall back to their portable choice.
"""

from __future__ import annotations

import platform
from functools import cache

__all__ = ["cpu_flags", "cpu_model", "cpu_vendor"]


@cache
def _first_processor() -> dict[str, str]:
    """``key: value`` lines of the first processor's block of ``/proc/cpuinfo``; empty if unreadable."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break  # every processor's block repeats the first's vendor and flags
                    continue
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_vendor() -> str:
    """``GenuineIntel``, ``AuthenticAMD``, ... (``vendor_id``); ``""`` where it cannot be read."""
    return _first_processor().get("vendor_id", "")


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``avx512f``, ``amx_int8``, ...); empty where they cannot be read."""
    return frozenset(_first_processor().get("flags", "").split())


def cpu_model() -> str:
    """The CPU's model in words (``model name``, e.g. ``AMD EPYC 9R14``); else what `platform.processor`
    says, else ``"CPU"``."""
    return _first_processor().get("model name") or platform.processor() or "CPU"
