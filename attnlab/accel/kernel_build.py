"""How attnlab's C++ kernels (``csrc/``: `attnlab.accel.few_row_gemm`, `attnlab.accel.int8_gemm`) are built,
loaded, checked and refused.

A kernel is built on first use, not at install time, so that an install needs no compiler:

- ``torch.utils.cpp_extension.load`` compiles the file (with the headers beside it) with ``-O3 -mavx2 -mfma``,
  and with ``-fopenmp`` when the process already runs GNU OpenMP (PyTorch's wheels bring ``libgomp.so.1``):
  the library then shares PyTorch's threads instead of starting a second pool. The compiler is ``$CXX``
  (default ``c++``), as cpp_extension takes it; ``ninja`` (a dependency of the package) drives the build;
- into a directory of ``$ATTNLAB_CACHE/kernels`` (default ``$XDG_CACHE_HOME/attnlab/kernels`` or
  ``~/.cache/attnlab/kernels``, and ``$TMPDIR/attnlab-<uid>/kernels`` where that cannot be created) named by a
  hash of the sources, the flags, the compiler and PyTorch's version; cpp_extension's lock file keeps
  concurrent processes from building it twice at once; a directory that another user may write to is refused;
- loaded with ``torch.ops.load_library``: the file registers its custom ops, ``torch.ops.attnlab.*``
  (``TORCH_LIBRARY_FRAGMENT``), which ``torch.compile`` and ``torch.export`` see through the fake
  implementations registered in Python;
- then checked: its version op, and its products on random data against PyTorch's in float64.

A library that fails any of it is not used; where the check fails after its ops were registered, its build
directory is removed, so that the next process builds it anew (a process registers an op once). The reason
is a string (`load_library`), and a warning says it once where the user can mend it (`warn_unless_loaded`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import stat
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils import cpp_extension

from attnlab.cpu import cpu_flags

__all__ = [
    "NOT_THIS_CPU", "cache_dir", "check_version", "load_library", "register_fakes_once", "switched_off",
    "warn_unless_loaded",
]  # fmt: skip

NOT_THIS_CPU = "the CPU is not x86-64 with AVX2 and FMA (or /proc/cpuinfo cannot be read)"
FLAGS = ("-O3", "-mavx2", "-mfma")
_FAKES: set[str] = set()  # the ops whose fake implementations are registered
_FAKE_LIBRARY = torch.library.Library("attnlab", "FRAGMENT")  # holds those registrations for the process
_LOADED: dict[str, Path] = {}  # library name -> the build directory this process loaded it from


def _temporary_cache() -> Path:
    return Path(tempfile.gettempdir()) / f"attnlab-{os.getuid()}"


def cache_dir() -> Path:
    """Where the kernels are built (see the module docstring); not created here."""
    root = os.environ.get("ATTNLAB_CACHE")
    if root:
        return Path(root) / "kernels"
    xdg = os.environ.get("XDG_CACHE_HOME")
    if not xdg:
        try:
            xdg = str(Path.home() / ".cache")
        except RuntimeError:  # no HOME and no passwd entry (a container's arbitrary uid)
            return _temporary_cache() / "kernels"
    return Path(xdg) / "attnlab" / "kernels"


def _gnu_openmp_loaded() -> bool:
    """Whether this process has GNU OpenMP mapped (PyTorch's own ``libgomp``): only then is ``-fopenmp``
    safe, since the library's ``libgomp.so.1`` resolves to the copy already loaded."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return any("libgomp" in line for line in f)
    except OSError:
        return False


def _private_dir(path: Path) -> None:
    """Create ``path`` (mode 0700) and refuse it if another user owns it or may write to it: a library
    loaded from there runs as this process."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError(f"{path} is owned by uid {st.st_uid} or writable by others (mode {oct(st.st_mode)})")


def _usable_cache_dir() -> Path:
    """`cache_dir`, created private, or a private directory in the temporary one where the home cache cannot
    be used (read-only home, no home); OSError where neither can (or where ``$ATTNLAB_CACHE``'s cannot)."""
    out_dir = cache_dir()
    try:
        _private_dir(out_dir)
    except OSError as e:
        if os.environ.get("ATTNLAB_CACHE"):
            raise  # the directory the user named: say so rather than build elsewhere
        # each level checked: another user could have made the first in the shared temporary directory
        fallback = _temporary_cache() / "kernels"
        try:
            _private_dir(fallback.parent)
            _private_dir(fallback)
        except OSError as e2:
            raise OSError(f"{e}; and {e2}") from e2
        out_dir = fallback
    return out_dir


def _build_dir(source: Path, stem: str, compiler: str, flags: list[str]) -> Path:
    """The private directory ``source`` is built in: ``stem`` and a hash of the file, the headers beside it
    (the files it includes), the flags, the compiler and PyTorch's version."""
    text = source.read_bytes()
    for header in sorted(source.parent.glob("*.h")):
        text += header.read_bytes()
    text += " ".join([compiler, *flags, torch.__version__]).encode()
    path = _usable_cache_dir() / f"{stem}-{hashlib.sha256(text).hexdigest()[:20]}"
    _private_dir(path)
    return path


def _ninja_path() -> str | None:
    """The PATH under which ``ninja`` runs: unchanged where it is on it, else with the directory of this
    Python's scripts (the ``ninja`` package installed in a virtual environment that is not activated)."""
    path = os.environ.get("PATH", "")
    if shutil.which("ninja", path=path):
        return path
    scripts = str(Path(sys.executable).parent)
    return scripts + os.pathsep + path if shutil.which("ninja", path=scripts) else None


def _compile(source: Path, name: str, build: Path, flags: list[str], openmp: bool, again: bool) -> None:
    """The library built from ``source`` in ``build`` (or found built there), loaded. ``again``: the build
    directory emptied first (the library there failed to load)."""
    if again:
        for old in build.iterdir():
            if old.is_file():
                old.unlink()
    path = _ninja_path()
    if path is None:
        raise RuntimeError("ninja is not on PATH (pip install ninja)")
    previous = os.environ.get("PATH")
    os.environ["PATH"] = path  # cpp_extension runs `ninja` by name
    try:
        cpp_extension.load(
            name=name,
            sources=[str(source)],
            extra_cflags=flags,
            extra_ldflags=["-fopenmp"] if openmp else [],
            build_directory=str(build),
            is_python_module=False,
        )
    finally:
        if previous is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = previous


def switched_off(switch: str) -> bool:
    """Whether the environment variable ``switch`` turns the kernel off (0, off, false or no)."""
    return os.environ.get(switch, "auto").lower() in ("0", "off", "false", "no")


def load_library(
    source: Path, switch: str, check: Callable[[], object], variant: str = "", extra_flags: tuple = ()
):
    """``check()`` after ``source`` was built (or found in the cache) for this CPU and process and loaded --
    the kernel's checked ops -- or the reason there is none (a string): the switch ``$switch`` is off, the CPU
    is not x86-64 with AVX2 and FMA, no compiler, a failed build, another build of it already loaded in this
    process, or ``check`` raised. A library that fails to load is built once more; one whose check fails
    has its build directory removed (see the module doc). Shared by the kernels in ``csrc/``. ``variant``
    names a second build of the file (with ``extra_flags``: say ``-DATTNLAB_VNNI``), whose ops carry that
    suffix (``int8_gemm_vnni``)."""
    if switched_off(switch):
        return f"{switch}=off"
    if platform.machine().lower() not in ("x86_64", "amd64") or not {"avx2", "fma"} <= cpu_flags():
        return NOT_THIS_CPU
    cxx = shlex.split(os.environ.get("CXX", "c++")) or ["c++"]  # CXX may carry a launcher: "ccache g++"
    found = shutil.which(cxx[0])
    if found is None:
        return f"no C++ compiler: {cxx[0]!r} is not on PATH (install g++)"
    # -fopenmp only with GCC, whose libgomp.so.1 is the copy PyTorch loaded; clang's would bring libomp, a
    # second OpenMP runtime in the process
    openmp = _gnu_openmp_loaded() and "clang" not in Path(shutil.which(cxx[-1]) or cxx[-1]).resolve().name
    flags = [*FLAGS, *extra_flags, "-fopenmp"] if openmp else [*FLAGS, *extra_flags]
    stem = source.stem + variant
    name = f"attnlab_{stem}"
    try:
        build = _build_dir(source, stem, " ".join([found, *cxx[1:]]), flags)
        loaded = _LOADED.get(name)
        if loaded is None and hasattr(torch.ops.attnlab, f"{stem}_version"):
            loaded = "a library loaded before"
        if loaded is not None and loaded != build:  # its ops again: the process would abort
            return (f"another build of the kernel is loaded in this process ({loaded}): its ops are "
                    "registered once a process")  # fmt: skip
        if loaded is None:
            try:
                _compile(source, name, build, flags, openmp, again=False)
            except OSError:  # a cached build that does not load (nothing registered): once more
                _compile(source, name, build, flags, openmp, again=True)
            _LOADED[name] = build
    except Exception as e:  # noqa: BLE001 - whatever fails here, products fall back to PyTorch's
        return f"the kernel failed to build or load: {str(e).strip()[-800:]}"
    try:
        return check()
    except Exception as e:  # noqa: BLE001
        shutil.rmtree(build, ignore_errors=True)
        return f"the kernel failed its check: {e}"


def check_version(name: str, version: int) -> None:
    """ValueError unless the loaded ``torch.ops.attnlab.{name}_version()`` returns ``version`` (a build of
    other ops' meaning)."""
    found = getattr(torch.ops.attnlab, f"{name}_version")()
    if found != version:
        raise ValueError(f"its ops are version {found}, expected {version}")


def register_fakes_once(fakes: dict[str, Callable]) -> None:
    """``torch.library.register_fake`` for each ``torch.ops.attnlab`` op named (once a process: the ops exist
    only once their library is loaded)."""
    for name, fake in fakes.items():
        if name not in _FAKES:
            torch.library.register_fake(f"attnlab::{name}", fake, lib=_FAKE_LIBRARY)
            _FAKES.add(name)


def warn_unless_loaded(got, what: str, cost: str, switch: str, category: type[Warning]):
    """``got`` (a `load_library` result), after a warning (stacklevel for a caller's caller) where it is
    a reason the user can mend (a compiler, a cache directory): none for the switch or the CPU."""
    if isinstance(got, str) and not got.startswith(switch) and got != NOT_THIS_CPU:
        warnings.warn(
            f"attnlab: {what} is not used ({got}); PyTorch's products are used instead, {cost}. It is "
            f"built into {cache_dir()} (ATTNLAB_CACHE moves it); {switch}=off silences this.",
            category,
            stacklevel=4,
        )
    return got
