"""The package's log, `logging.getLogger("dynamo_nvf")`, made one of torch's logs.

Then `TORCH_LOGS="dynamo_nvf"` (INFO: one line per compiled graph), `TORCH_LOGS="+dynamo_nvf"`
(DEBUG: every plan) and `torch._logging.set_logs(modules={"dynamo_nvf": level})` work as they do for
inductor's log, with torch's handler and format.
"""

from __future__ import annotations

import logging
import os

LOG_NAME = "dynamo_nvf"

log = logging.getLogger(LOG_NAME)


def _named_in_torch_logs(setting: str) -> bool:
    names = (name.strip().lstrip("+-") for name in setting.split(","))
    return any(name == LOG_NAME or name.startswith(LOG_NAME + ".") for name in names)


def register_with_torch_logging() -> bool:
    """Registers the log's name with torch's logging; False where torch's private API refuses.

    torch reads TORCH_LOGS once, when it is imported, before this package can register. A name it
    does not know but can import is taken as a module: torch imports this package, registers
    "dynamo_nvf" itself and sets the logger's level and handler. A registration from here while
    torch reads the setting would make torch also file the name as a child of itself, and a later
    `set_logs` would then leave the logger propagating to the root logger as well (every line twice
    under a root handler); so when TORCH_LOGS names it, registering is left to torch.
    """
    if _named_in_torch_logs(os.environ.get("TORCH_LOGS", "")):
        return True
    try:
        from torch._logging import _internal

        if not _internal.log_registry.is_log(LOG_NAME):
            _internal.register_log(LOG_NAME, LOG_NAME)
    except Exception as exc:  # a private API of torch: its absence must not break the import
        log.debug("dynamo_nvf: not registered with torch's logging (%s: %s)", type(exc).__name__, exc)
        return False
    return True
