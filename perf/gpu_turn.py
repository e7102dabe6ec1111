"""Turns on a shared GPU: several workload processes per GPU compile at once, measure one at a time.

A zoo workload spends most of its time compiling (CPU) and a few seconds timing and profiling (GPU).
``--per-gpu K`` (perf/isolate.py) runs K workload processes on each GPU; each gets the path of its
GPU's lock file in ``PERF_GPU_LOCK``, and everything that times or profiles the GPU, or fills it
(the fp64 references), runs inside :func:`gpu_turn`, which holds that file's exclusive lock.  So
timings see one process's kernels, while the other processes' compiles overlap with them.  Without
the variable (one process per GPU, or a plain run) :func:`gpu_turn` does nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Iterator

LOCK_ENV = "PERF_GPU_LOCK"

#: Whether this process holds its turn now.
_holding = {"now": False}


@contextlib.contextmanager
def gpu_turn() -> Iterator[None]:
    """Holds this process's GPU exclusively while the block runs (no-op without ``PERF_GPU_LOCK``);
    re-entrant within a process."""
    path = os.environ.get(LOCK_ENV)
    if not path or _holding["now"]:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _holding["now"] = True
        try:
            yield
        finally:
            _holding["now"] = False
            fcntl.flock(handle, fcntl.LOCK_UN)
