"""dynamo_nvf: a torch.compile backend (`backend="nvf_bookend"`) that runs aten regions on nvFuser.

Importing the package registers the backend; the `torch_dynamo_backends` entry point does the same
without an import.
"""

from __future__ import annotations

from dynamo_nvf.backend import nvf_bookend, plan_graph, recording
from dynamo_nvf.reporting import Report, explain
from dynamo_nvf.runtime.stats import STATS
from dynamo_nvf.settings import Settings

__all__ = ["nvf_bookend", "explain", "Report", "Settings", "STATS", "plan_graph", "recording"]
__version__ = "0.1.0"


def _register() -> None:
    from torch._dynamo.backends import registry

    if "nvf_bookend" not in registry._COMPILER_FNS:
        registry.register_backend(name="nvf_bookend")(nvf_bookend)


_register()
