"""First-call (compile) time per model workload, each in a fresh process, on the GPU.

For every workload: inductor with an empty inductor cache (cold), nvf_bookend with its default
options (no kernel cache: what a user gets), nvf_bookend with an empty kernel cache (cold; the
cache compiles segments one after another), then nvf_bookend again in a new process with the kernel
cache the cold run left (warm). Prints one table with the ratios issue #12 asks for: nvf default /
inductor cold (<= 1.0) and nvf warm / nvf cold (<= 0.3), plus where nvf's cold first call went (explain()'s split is not used here: the
numbers come from the backend's plans, recorded in the child process).

Usage: python scripts/compile_times.py [--only llama_fwd_bf16_small,...] [--json out.json]
A child run: python scripts/compile_times.py --child WORKLOAD BACKEND [--cache DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [f"{m}_{k}" for m in ("llama", "gpt", "bert", "vit", "convnext")
           for k in ("fwd_bf16_small", "train_bf16_small")]


def child(workload: str, backend: str, cache: str, device: str, regions_out: str = "") -> None:
    """One first call, synchronized; prints a JSON line. `device="cpu"` is a smoke run (tiny shapes,
    regions planned as for CUDA and run eagerly, no kernel cache). With `regions_out`, the first call
    runs under nvFuser's profiler (each kernel's compile time) and each region's compile is written
    there as a table: where nvFuser's share of the first call goes, region by region."""
    sys.path.insert(0, str(ROOT))
    import torch

    import dynamo_nvf
    from perf.workloads import REGISTRY

    cpu = device == "cpu"
    inst = REGISTRY[workload].instantiate(device, tiny=cpu)
    if cpu:
        options = {"plan_cpu_as_cuda": True}
    elif backend == "nvf_default":  # what a user gets: no kernel cache, nvFuser's parallel segment compile
        options = {}
    else:
        options = {"kernel_cache": True, "kernel_cache_dir": cache}
    if backend == "inductor":
        fn = torch.compile(inst.fn)
    elif backend not in ("nvf_default", "nvf_bookend") and not cpu:  # any other perf backend, as perf runs it
        from perf.backends import get_backend

        fn = get_backend(backend).wrap(inst.fn)
    else:
        fn = torch.compile(inst.fn, backend="nvf_bookend", options=options)

    def sync() -> None:
        if not cpu:
            torch.cuda.synchronize()

    sync()
    from dynamo_nvf.runtime.region import PROFILING

    with dynamo_nvf.recording() as rec, (PROFILING.on() if regions_out else contextlib.nullcontext()):
        start = time.perf_counter()
        inst.call(fn)
        sync()
        first = time.perf_counter() - start
    regions = [r for p in rec.plans for r in p.regions]
    compiled = regions + [piece for r in regions for piece in r.pieces]  # pieces compile on their own
    if regions_out:
        Path(regions_out).write_text(region_table(rec.plans))
    split = {
        "planning_s": sum(p.planning_ms or 0.0 for p in rec.plans) / 1e3,
        "definitions_s": sum(r.build_ms or 0.0 for r in compiled) / 1e3,
        "nvfuser_compile_s": sum(r.first_run_ms or 0.0 for r in compiled) / 1e3,
    }
    print("RESULT " + json.dumps({"workload": workload, "backend": backend, "first_call_s": first,
                                  "regions": len(regions), "distinct_fusions": len({r.fusion_key for r in regions}),
                                  "fusions_built": dynamo_nvf.STATS.fusions_built,
                                  "fusions_reused": dynamo_nvf.STATS.fusions_reused, **split}))


def region_table(plans) -> str:
    """Each region's (and piece's) first run (compile) against its kernels' own compile times, slowest first."""
    from tabulate import tabulate

    rows = []
    for plan in plans:
        for r in (r for region in plan.regions for r in (region, *region.pieces)):
            kernels = r.launched_kernels
            rows.append([f"{plan.kind[:3]}{plan.graph_id}", r.name, "reused" if r.fusion_reused else "built",
                         len(r.compute_ops), r.segments, len(kernels),
                         round(r.first_run_ms or 0.0), round(sum(k.compile_time_ms for k in r.kernels)),
                         " ".join(sorted({k.scheduler for k in kernels}))[:60]])
    rows.sort(key=lambda row: -row[6])
    total = ["total", "", "", "", "", sum(row[5] for row in rows), sum(row[6] for row in rows),
             sum(row[7] for row in rows), ""]
    return tabulate(rows + [total], headers=["graph", "region", "fusion", "ops", "segments", "kernels",
                                             "first run ms", "kernel compile ms", "schedulers"]) + "\n"


def run_child(workload: str, backend: str, cache: str, inductor_cache: str, device: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": inductor_cache, "PYTHONUNBUFFERED": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", workload, backend, "--cache", cache,
                          "--device", device],
                         capture_output=True, text=True, env=env, timeout=600)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        return {"workload": workload, "backend": backend, "error": out.stderr[-500:]}
    return json.loads(line[len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=2, metavar=("WORKLOAD", "BACKEND"))
    parser.add_argument("--cache", default="")
    parser.add_argument("--only", default=",".join(DEFAULT))
    parser.add_argument("--json", default="")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself")
    parser.add_argument("--backends", default="inductor,nvf_bookend")
    parser.add_argument("--regions", default="", metavar="FILE",
                        help="with --child: profile the first call and write each region's compile to FILE")
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.cache, args.device, args.regions)
        return
    rows = []
    print(f"{'workload':28s} {'inductor cold s':>15s} {'nvf default s':>13s} {'nvf cold s':>10s} {'nvf warm s':>10s} "
          f"{'default/ind':>11s} {'warm/cold':>9s}  nvf default split (plan/defs/nvfuser s), fusions built/reused")
    for workload in args.only.split(","):
        with tempfile.TemporaryDirectory() as kernels, tempfile.TemporaryDirectory() as inductor_cache:
            ind = (run_child(workload, "inductor", kernels, inductor_cache, args.device)
                   if "inductor" in args.backends else {"first_call_s": float("nan"), "backend": "inductor"})
            default = run_child(workload, "nvf_default", kernels, inductor_cache, args.device)
            cold = run_child(workload, "nvf_bookend", kernels, inductor_cache, args.device)
            warm = run_child(workload, "nvf_bookend", kernels, inductor_cache, args.device)
        rows.append({"inductor": ind, "nvf_default": default, "nvf_cold": cold, "nvf_warm": warm})
        if any("error" in r for r in (ind, default, cold, warm)):
            errors = "; ".join(f"{r['backend']}: {r['error'][-200:]}" for r in (ind, default, cold, warm) if "error" in r)
            print(f"{workload:28s} ERROR {errors}")
            continue
        print(f"{workload:28s} {ind['first_call_s']:15.2f} {default['first_call_s']:13.2f} {cold['first_call_s']:10.2f} "
              f"{warm['first_call_s']:10.2f} {default['first_call_s'] / ind['first_call_s']:11.2f} "
              f"{warm['first_call_s'] / cold['first_call_s']:9.2f}  "
              f"{default['planning_s']:.2f}/{default['definitions_s']:.2f}/{default['nvfuser_compile_s']:.2f}, "
              f"{default['fusions_built']}/{default['fusions_reused']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
