"""attnlab.cpu: the model, vendor and flags read from /proc/cpuinfo (faked here), empty where unreadable."""

from __future__ import annotations

import pytest

import attnlab.cpu as cpu


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    real_open = open
    monkeypatch.setattr(cpu, "open", lambda path, *a, **k: real_open(info, *a, **k), raising=False)
    cpu._first_processor.cache_clear()
    yield info
    cpu._first_processor.cache_clear()


def test_model_vendor_and_flags_of_the_first_processor(cpuinfo):
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R14\n"
        "flags\t\t: fpu avx2 avx512f\n\n"
        "processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Intel Xeon\nflags\t\t: amx_int8\n"
    )
    assert cpu.cpu_vendor() == "AuthenticAMD" and cpu.cpu_model() == "AMD EPYC 9R14"
    assert cpu.cpu_flags() == frozenset({"fpu", "avx2", "avx512f"})


def test_missing_fields_and_unreadable_file_are_empty(cpuinfo, monkeypatch):
    cpuinfo.write_text("processor\t: 0\n")
    monkeypatch.setattr(cpu.platform, "processor", lambda: "")
    assert cpu.cpu_vendor() == "" and cpu.cpu_flags() == frozenset() and cpu.cpu_model() == "CPU"

    def missing(*_a, **_k):
        raise FileNotFoundError("/proc/cpuinfo")

    monkeypatch.setattr(cpu, "open", missing, raising=False)
    cpu._first_processor.cache_clear()
    assert cpu.cpu_vendor() == "" and cpu.cpu_flags() == frozenset()
