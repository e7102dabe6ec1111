"""nvFuser's segments per region of one perf workload under several option sets, each in a fresh
process (so first-call and compile times are cold for the process): which regions nvFuser segmented,
with which schedulers, and what the first call cost. For judging planning rules against nvFuser's
segmenter (issues #11 and #12).

    python scripts/segments.py bert_train_bf16_small '{}' '{"unflatten_reductions": true}'
    python scripts/segments.py convnext_train_bf16_small '{}' --regions   # every region, not only segmented

One line per option set with the totals, then (with --regions, or for segmented regions) one line
per region: graph, region, segments, schedulers, first run ms, fallback.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(name: str, options: dict) -> dict:
    sys.path.insert(0, ROOT)
    import warnings

    import torch

    import dynamo_nvf
    from perf.workloads import REGISTRY

    inst = REGISTRY[name].instantiate("cuda" if torch.cuda.is_available() else "cpu",
                                      tiny=not torch.cuda.is_available())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = dynamo_nvf.explain(inst.fn, *inst.inputs, options=options, profiler="nvfuser")
    d = report.to_dict()
    regions = []
    for g in d["graphs"]:
        for r in g["regions"]:
            kernels = r.get("kernels") or []
            regions.append({
                "graph": g["kind"], "name": r["name"], "segments": r.get("segments"),
                "schedulers": [k["scheduler"] for k in kernels],
                "gpu_us": round(sum(k["time_ms"] for k in kernels) * 1e3, 1),
                "first_run_ms": r.get("first_run_ms"), "executor": r.get("executor"),
                "reason": (r.get("executor_reason") or "")[:160], "fusion_reused": r.get("fusion_reused"),
            })
    totals = d.get("totals", {})
    return {"options": options, "first_call_ms": totals.get("first_call_ms") or 0.0, "totals": totals,
            "warnings": [str(w.message)[:200] for w in caught if "dynamo_nvf" in str(w.message)],
            "regions": regions}


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        print("SEGMENTS_JSON " + json.dumps(child(argv[1], json.loads(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("workload", help="a perf workload (python -m perf --list)")
    parser.add_argument("option_sets", nargs="*", default=["{}"], help="JSON objects of dynamo_nvf options, one run each")
    parser.add_argument("--regions", action="store_true", help="every region, not only the segmented ones")
    args = parser.parse_args(argv)
    name, option_sets, all_regions = args.workload, args.option_sets, args.regions
    for text in option_sets:
        proc = subprocess.run([sys.executable, __file__, "--child", name, text], capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("SEGMENTS_JSON ")), None)
        if line is None:
            print(f"{name} {text}: child failed rc={proc.returncode}\n{proc.stderr[-3000:]}")
            continue
        result = json.loads(line[len("SEGMENTS_JSON "):])
        regions = result["regions"]
        segmented = [r for r in regions if (r["segments"] or 0) > 1]
        eager = [r for r in regions if r["executor"] != "nvfuser"]
        kernels = sum(len(r["schedulers"]) for r in regions)
        compile_ms = sum(r["first_run_ms"] or 0 for r in regions)
        gpu_us = sum(r["gpu_us"] for r in regions)
        print(f"{name} options={text}: first call {result['first_call_ms']:.0f} ms, nvFuser first runs "
              f"{compile_ms:.0f} ms, {len(regions)} regions, {len(segmented)} segmented, {len(eager)} not on "
              f"nvFuser, {kernels} nvFuser kernels, {gpu_us:.1f} us in them (profiled call)")
        for r in regions if all_regions else segmented + eager:
            print(f"   {r['graph']:9s} {r['name']:15s} seg={r['segments']} {','.join(r['schedulers'])} "
                  f"{r['gpu_us']}us first={r['first_run_ms']}ms {r['executor']} {r['reason']}")
        for w in result["warnings"]:
            print(f"   warning: {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
