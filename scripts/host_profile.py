"""Where a steady-state step's host time goes, per backend: cProfile over many calls of one perf
workload, the functions with the most own time (issue #10: a host-bound step, graphs or not).

    python scripts/host_profile.py llama_fwd_bf16_small nvf_cudagraphs inductor_ro

Each backend compiles fresh; its table lists own and cumulative microseconds per step.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from perf.backends import get_backend, reset_compile_state  # noqa: E402
from perf.measure import backend_step, device_sync  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402


def profile(workload: str, backend_name: str, steps: int, top: int, by_cumulative: bool = False) -> None:
    reset_compile_state()
    backend = get_backend(backend_name)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    step = backend_step(backend, REGISTRY[workload].instantiate(device, tiny=device == "cpu"))

    sync = device_sync()
    for _ in range(10):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    wall_us = (time.perf_counter() - start) / steps * 1e6
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    profiler.disable()
    sync()
    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, name), (_, calls, own, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((own / steps * 1e6, cum / steps * 1e6, calls / steps, f"{os.path.basename(path)}:{line}:{name}"))
    rows.sort(key=(lambda r: r[1]) if by_cumulative else None, reverse=True)
    print(f"== {workload} / {backend_name}: {wall_us:.1f} us per step unprofiled, "
          f"{sum(r[0] for r in rows):.1f} us own time per step profiled")
    print(f"{'own us':>8} {'cum us':>9} {'calls':>6}  function")
    for own, cum, calls, where in rows[:top]:
        print(f"{own:8.1f} {cum:9.1f} {calls:6.1f}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload")
    parser.add_argument("backends", nargs="+")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--cumulative", action="store_true", help="sort by cumulative time (call tree) instead of own")
    args = parser.parse_args()
    for name in args.backends:
        profile(args.workload, name, args.steps, args.top, args.cumulative)


if __name__ == "__main__":
    main()
