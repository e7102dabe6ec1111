"""Optional access to nvFuser (`nvfuser_direct`) and CUDA: the package works without either."""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import Optional

import torch

log = logging.getLogger("dynamo_nvf")


@functools.lru_cache(maxsize=None)
def _import_nvfuser() -> tuple[Optional[ModuleType], str]:
    try:
        import nvfuser_direct  # noqa: F401
    except Exception as exc:  # ImportError, or a broken binary install
        return None, f"nvfuser_direct could not be imported ({type(exc).__name__}: {exc})"
    return nvfuser_direct, ""


def nvfuser_module() -> Optional[ModuleType]:
    """The `nvfuser_direct` module, or None where it cannot be imported."""
    return _import_nvfuser()[0]


def nvfuser_version() -> Optional[str]:
    mod = nvfuser_module()
    return None if mod is None else str(getattr(mod, "__version__", "unknown"))


@functools.lru_cache(maxsize=None)
def unavailable_reason() -> str:
    """Why regions cannot run on nvFuser here ('' when they can)."""
    if not torch.cuda.is_available():
        return "CUDA is not available"
    mod, why = _import_nvfuser()
    if mod is None:
        return why
    return ""


def nvfuser_available() -> bool:
    return unavailable_reason() == ""


_logged_unavailable = False


def log_unavailable_once() -> None:
    """Says once per process that every region runs eagerly, and why."""
    global _logged_unavailable
    if not _logged_unavailable:
        _logged_unavailable = True
        log.warning("dynamo_nvf: nvFuser regions run in eager PyTorch: %s", unavailable_reason())
