"""Environment header stored with every result file, so numbers are never read without context."""

from __future__ import annotations

import datetime as _dt
import importlib
import platform
import shutil
import socket
import subprocess
import sys
from typing import Optional

import torch


def _run(cmd: list[str], timeout: float = 10.0) -> Optional[str]:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)
    except Exception:  # noqa: BLE001  (absent tool / not a repo: the field stays None)
        return None
    text = out.stdout.strip()
    return text or None


def _module_version(module: str, dists: tuple[str, ...] = ()) -> Optional[str]:
    """__version__ of an importable module, else its distribution version, else None."""
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001
        if isinstance(exc, ImportError) and getattr(exc, "name", None) == module:
            return None
        return f"import failed: {type(exc).__name__}: {exc}"[:200]
    version = getattr(mod, "__version__", None)
    if version:
        return str(version)
    from importlib import metadata

    for dist in dists or (module,):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def _dist_version(dist: str) -> Optional[str]:
    """Installed version of a distribution without importing it (transformers takes seconds)."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def nvidia_driver() -> Optional[str]:
    """Display driver version from nvidia-smi (torch does not expose it)."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def collect_env() -> dict:
    """GPU, driver, library versions, host and date; missing facts are None."""
    from dynamo_nvf import nvf

    nvf.disable_nvfuser_options()  # before this process's first import of nvfuser_direct, as the backend's
    env: dict = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "gpu": None,
        "gpu_count": 0,
        "gpu_capability": None,
        "driver": None,
        "nvfuser_direct": _module_version("nvfuser_direct", ("nvfuser_direct", "nvfuser-direct", "nvfuser")),
        "dynamo_nvf": _module_version("dynamo_nvf", ("dynamo_nvf", "dynamo-nvf")),
        "git_commit": _run(["git", "rev-parse", "--short", "HEAD"]),
        "git_dirty": None,
        "transformers": _dist_version("transformers"),  # the model tier's extra workloads
        "timm": _dist_version("timm"),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "argv": sys.argv[1:],
    }
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    if env["git_commit"] is not None:
        env["git_dirty"] = bool(status)
    if env["cuda_available"]:
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpu_count"] = torch.cuda.device_count()
        major, minor = torch.cuda.get_device_capability(0)
        env["gpu_capability"] = f"{major}.{minor}"
        env["driver"] = nvidia_driver()
    return env


ENV_ORDER = (
    "date",
    "hostname",
    "gpu",
    "gpu_capability",
    "driver",
    "cuda_runtime",
    "torch",
    "nvfuser_direct",
    "dynamo_nvf",
    "python",
    "git_commit",
)


def format_env(env: dict) -> str:
    """The header printed before the tables: the important keys first, one per line."""
    keys = list(ENV_ORDER) + [k for k in env if k not in ENV_ORDER and k != "argv"]
    width = max(len(k) for k in keys)
    return "\n".join(f"{k:<{width}} : {env.get(k)}" for k in keys if k in env)
