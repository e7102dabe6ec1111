"""Why regions of a perf workload fell back on the GPU (to eager, or to pieces after nvFuser failed the
whole region: runtime/split_region.py): for each one, the error, its inputs
(shape, stride, dtype), its FX code and nvFuser's definition, for a bug report or a fix.

Usage: python scripts/fallback_repro.py WORKLOAD [WORKLOAD ...] [--option NAME=JSON ...] [--calls N]
(perf workload names; options go to the backend, e.g. --option lean_views=false; --calls past warm-up
reaches what only steady calls do, such as direct launch)
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dynamo_nvf  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402


def main(names: list[str], options: dict, calls: int = 2) -> None:
    for name in names:
        torch._dynamo.reset()
        inst = REGISTRY[name].instantiate("cuda")
        fault = None
        with warnings.catch_warnings(record=True) as caught, dynamo_nvf.recording() as rec:
            warnings.simplefilter("always")
            fn = torch.compile(inst.fn, backend="nvf_bookend", options=options)
            try:
                for _ in range(calls):
                    inst.call(fn)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001  (a kernel fault: report what led to it)
                fault = exc
        for w in caught:
            if "dynamo_nvf" in str(w.message):
                print(f"warning: {str(w.message)[:600]}")
        if fault is not None:  # run with CUDA_LAUNCH_BLOCKING=1 to see the faulting kernel's region
            print(f"## {name}: FAULT {type(fault).__name__}: {str(fault)[:400]}")
            frames = [ln for ln in traceback.format_exception(fault) if "eval_with_key" in ln or "dynamo_nvf" in ln]
            print("fault traceback (graph and dynamo_nvf frames):\n" + "".join(frames[-12:]))
            for plan in rec.plans:
                print(f"### plan {plan.kind} graph {plan.graph_id}:\n{plan.code}")
                for region in plan.regions:
                    outs = ", ".join(f"{t.name}{t.shape}/{t.stride}" for t in region.outputs)
                    ins = ", ".join(f"{t.name}{t.shape}/{t.stride}" for t in region.inputs)
                    print(f"  {region.name} [{region.executor}] in: {ins}\n      out: {outs}")
        failed = [(p, r) for p in rec.plans for r in p.regions if r.executor in ("eager", "pieces")]
        split = sum(r.executor == "pieces" for _, r in failed)
        print(f"## {name}: {sum(len(p.regions) for p in rec.plans)} regions, {len(failed) - split} in eager, "
              f"{split} as pieces")
        for plan, region in failed:
            print(f"\n### {plan.kind} graph {plan.graph_id}, {region.name}: {region.executor_reason}")
            for piece in region.pieces:
                print(f"  piece {piece.name}: {piece.executor} {piece.executor_reason[:200]}")
            for t in region.inputs:
                print(f"  in  {t.name}: {t.dtype}{t.shape} stride {t.stride}")
            for t in region.outputs:
                print(f"  out {t.name}: {t.dtype}{t.shape} stride {t.stride}")
            print("FX code:\n" + (region.fx_code or "").rstrip())
            print("fusion definition:\n" + (region.definition or "(none)").rstrip())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+", help="perf workload names")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=JSON",
                        help="a backend option, e.g. lean_views=false (repeatable)")
    parser.add_argument("--calls", type=int, default=2, help="calls of each workload (default 2)")
    args = parser.parse_args()
    main(args.workloads, {k: json.loads(v) for k, _, v in (o.partition("=") for o in args.option)}, args.calls)
