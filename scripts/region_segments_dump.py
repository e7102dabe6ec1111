"""Each segmented region of a perf workload, with what nvFuser made of it: the region's FX code, its
nvFuser definition, the segments' schedulers and kernel times, and nvFuser's segmented-fusion dump
(which expressions went into which segment). For reading a region against nvFuser's segmenter
(issue #11).

    python scripts/region_segments_dump.py convnext_train_bf16_small [--options '{}'] > dump.txt
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import dynamo_nvf  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload")
    parser.add_argument("--options", default="{}")
    parser.add_argument("--ir-chars", type=int, default=12000, help="scheduled IR kept per region")
    args = parser.parse_args()
    inst = REGISTRY[args.workload].instantiate("cuda")
    report = dynamo_nvf.explain(inst.fn, *inst.inputs, options=json.loads(args.options), profiler="nvfuser",
                                scheduled_ir=True)
    for plan in report.graphs:
        for region in plan.regions:
            kernels = region.kernels or []
            line = (f"== {plan.kind} {region.name}: segments {region.segments}, "
                    + ", ".join(f"{k.scheduler} {k.time_ms * 1e3:.1f}us" for k in kernels))
            print(line)
            if (region.segments or 0) > 1:
                print(region.fx_code)
                print(region.definition or "(no definition)")
                ir = region.scheduled_ir or ""
                print(ir[: args.ir_chars])
                print()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
