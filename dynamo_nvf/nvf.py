"""Optional access to nvFuser (`nvfuser_direct`) and CUDA: the package works without either."""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType
from typing import Optional

import torch

log = logging.getLogger("dynamo_nvf")


#: nvFuser's options that this backend turns off in its process (``NVFUSER_DISABLE``), read by nvFuser
#: once, at its first question. ``multidevice``: every fusion here runs on one device, and nvFuser's
#: multi-device Communicator, under torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK), opens a
#: TCPStore of its own, sets the current device to LOCAL_RANK and, at interpreter exit, joins a barrier
#: over NCCL groups it creates then; torchrun's LLaMA-style DDP step ended in heap corruption there.
DISABLED_NVFUSER_OPTIONS = ("multidevice",)


def _split_options(setting: str) -> list[str]:
    """An nvFuser option list split at its top-level commas: ``a,b(x,y)`` is ``a`` and ``b(x,y)``."""
    tokens, depth, start = [], 0, 0
    for i, char in enumerate(setting + ","):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            token = setting[start:i].strip()
            if token:
                tokens.append(token)
            start = i + 1
    return tokens


def disable_nvfuser_options(environ: "os._Environ[str] | dict[str, str]" = os.environ) -> None:
    """Adds DISABLED_NVFUSER_OPTIONS to ``NVFUSER_DISABLE``, keeping what the user set there.

    nvFuser reads ``NVFUSER_DISABLE`` and, only where that is unset, the older
    ``PYTORCH_NVFUSER_DISABLE``: a setting made in the older name is carried into the new one."""
    setting = environ.get("NVFUSER_DISABLE")
    if setting is None:
        setting = environ.get("PYTORCH_NVFUSER_DISABLE", "")
    current = _split_options(setting)
    names = {token.split("(")[0].strip() for token in current}
    environ["NVFUSER_DISABLE"] = ",".join(current + [o for o in DISABLED_NVFUSER_OPTIONS if o not in names])


@functools.lru_cache(maxsize=None)
def _import_nvfuser() -> tuple[Optional[ModuleType], str]:
    disable_nvfuser_options()
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
