"""dynamo_nvf: a torch.compile backend (`backend="nvf_bookend"`) that runs aten regions on nvFuser.

Importing the package registers the backend (the `torch_dynamo_backends` entry point does the same
without an import) and the "dynamo_nvf" log with torch's logging (`TORCH_LOGS="+dynamo_nvf"`).
"""

from __future__ import annotations

from dynamo_nvf.backend import nvf_bookend, plan_graph, recording
from dynamo_nvf.logs import register_with_torch_logging
from dynamo_nvf.reporting import Report, explain
from dynamo_nvf.runtime.stats import STATS
from dynamo_nvf.settings import Settings

__all__ = ["nvf_bookend", "explain", "Report", "Settings", "STATS", "plan_graph", "recording"]
__version__ = "0.1.0"


def _register() -> None:
    """Registers the backend by name unless the installed entry point will (Dynamo loads it lazily,
    and a second registration of the same name is an error)."""
    from torch._dynamo.backends import registry

    discover = getattr(registry, "_discover_entrypoint_backends", None)
    if discover is not None:
        discover()
    if "nvf_bookend" in registry._COMPILER_FNS or registry._BACKENDS.get("nvf_bookend") is not None:
        return
    registry.register_backend(name="nvf_bookend")(nvf_bookend)


register_with_torch_logging()
_register()
