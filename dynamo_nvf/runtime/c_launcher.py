"""Builds direct launch's C launcher (`launcher.c`) once per machine and loads it.

Why built here and not shipped compiled: the package stays pure Python (one wheel for every
platform), and the source uses only Python's C API, so any C compiler builds it in well under a
second, the way Triton builds its own launchers. The shared object is cached under
`$DYNAMO_NVF_CACHE_DIR` (default `~/.cache/dynamo_nvf`), keyed by the source, the Python version and
the platform. Without a compiler or Python's headers, `load()` raises `LauncherUnavailable` with
the reason; direct launch is then not used and regions run through `fec.execute` (explain() says so).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Optional

log = logging.getLogger("dynamo_nvf")

SOURCE = Path(__file__).with_name("launcher.c")
MODULE_NAME = "dynamo_nvf._nvf_launcher"  # PyInit__nvf_launcher in launcher.c


class LauncherUnavailable(RuntimeError):
    """The C launcher cannot be built or loaded here; the message says why."""


_lock = threading.Lock()
_module: Optional[ModuleType] = None
_failure: Optional[str] = None


def cache_dir() -> Path:
    configured = os.environ.get("DYNAMO_NVF_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dynamo_nvf"


def _compiler() -> Optional[str]:
    configured = os.environ.get("CC")
    if configured:
        return configured
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _build(target: Path, compiler: str, include: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        command = [*compiler.split(), "-O2", "-shared", "-fPIC", "-I", include, str(SOURCE), "-o", str(built)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except OSError as exc:
            raise LauncherUnavailable(f"the C compiler {compiler!r} cannot run: {exc}") from exc
        if done.returncode != 0:
            raise LauncherUnavailable(f"compiling {SOURCE.name} failed: {(done.stderr or done.stdout).strip()[:300]}")
        os.replace(built, target)  # atomic: another process may be building the same file


def load() -> ModuleType:
    """The loaded `_nvf_launcher` module, built on first use; LauncherUnavailable where it cannot be."""
    global _module, _failure
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        if _failure is not None:
            raise LauncherUnavailable(_failure)
        try:
            _module = _load()
        except Exception as exc:  # noqa: BLE001 - any failure means no C launcher, never a broken program
            _failure = str(exc) if isinstance(exc, LauncherUnavailable) else f"{type(exc).__name__}: {exc}"
            log.info("dynamo_nvf: direct launch is off, its C launcher is unavailable: %s", _failure)
            raise LauncherUnavailable(_failure) from exc
        return _module


def _load() -> ModuleType:
    include = sysconfig.get_paths().get("include", "")
    if not include or not os.path.exists(os.path.join(include, "Python.h")):
        raise LauncherUnavailable(f"Python's C headers are missing (no Python.h under {include!r})")
    compiler = _compiler()
    if compiler is None:
        raise LauncherUnavailable("no C compiler (cc, gcc or clang; or set CC)")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + sys.version.encode() + sysconfig.get_platform().encode()).hexdigest()[:16]
    target = cache_dir() / f"nvf_launcher_{key}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    if not target.exists():
        _build(target, compiler, include)
        log.info("dynamo_nvf: built the C launcher %s", target)
    spec = importlib.util.spec_from_file_location(MODULE_NAME, target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reset_for_tests() -> None:
    """Forget a loaded module or a recorded failure (tests that point the cache or CC elsewhere)."""
    global _module, _failure
    with _lock:
        _module, _failure = None, None
