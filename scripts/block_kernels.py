"""Kernels of one perf workload, one backend, one steady-state call: what explain() and the
profiler see, for reading a block's GPU time against inductor's (issue #11).

    python scripts/block_kernels.py layernorm_train_f32 explain     # nvFuser's segments and schedulers
    python scripts/block_kernels.py layernorm_train_f32 inductor    # torch.profiler kernel table
    python scripts/block_kernels.py layernorm_train_f32 nvf_bookend
    python scripts/block_kernels.py bert_train_bf16_small nvf_aten_glue    # any perf backend
    python scripts/block_kernels.py convnext_fwd_bf16_small nvf_bookend:ops  # ATen ops behind kernels

One mode per process: nvFuser's profiler and torch.profiler cannot share one (CUPTI).
BLOCK_KERNELS_REBUILDS=1 also prints the regions whose output layouts the first run fixed.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dynamo_nvf  # noqa: E402,F401  (registers the backend)
from perf.backends import get_backend  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402


def kernel_table(fn, inst) -> None:
    for _ in range(3):
        inst.call(fn)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        inst.call(fn)
        torch.cuda.synchronize()
    rows = collections.OrderedDict()
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name[:110]
        count, us = rows.get(name, (0, 0.0))
        rows[name] = (count + 1, us + e.device_time)
    total = sum(us for _, us in rows.values())
    print(f"{'us':>9} {'n':>3}  kernel")
    for name, (count, us) in rows.items():
        print(f"{us:9.1f} {count:3d}  {name}")
    print(f"{total:9.1f} {sum(c for c, _ in rows.values()):3d}  TOTAL")


def op_table(fn, inst) -> None:
    """Which ATen op launched each non-nvFuser kernel, with input shapes: finds eager glue kernels."""
    for _ in range(3):
        inst.call(fn)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                                record_shapes=True) as prof:
        inst.call(fn)
        torch.cuda.synchronize()
    print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_device_time_total", row_limit=45,
                                                             max_name_column_width=60, max_shapes_column_width=90))


class _RebuildLines(logging.Filter):
    """Passes dynamo_nvf's log lines about first-run layout rebuilds and per-call copies."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return any(k in text for k in ("rebuild", "copied per call", "written by the kernel"))


def main(name: str, mode: str) -> None:
    if os.environ.get("BLOCK_KERNELS_REBUILDS"):  # print the regions whose layouts the first run fixed
        handler = logging.StreamHandler(sys.stdout)
        handler.addFilter(_RebuildLines())
        logging.getLogger("dynamo_nvf").addHandler(handler)
        logging.getLogger("dynamo_nvf").setLevel(logging.DEBUG)
    inst = REGISTRY[name].instantiate("cuda" if torch.cuda.is_available() else "cpu", tiny=not torch.cuda.is_available())
    if mode == "explain":
        print(dynamo_nvf.explain(inst.fn, *inst.inputs, profiler="nvfuser"))
        return
    backend, _, what = mode.partition(":")
    fn = get_backend(backend).wrap(inst.fn)  # any perf backend (nvf_aten_glue, inductor_ro, ...)
    (op_table if what == "ops" else kernel_table)(fn, inst)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("workload", help="a perf workload (python -m perf --list)")
    parser.add_argument("mode", help="explain, or a perf backend (its kernel table), or BACKEND:ops (ATen ops behind kernels)")
    args = parser.parse_args()
    main(args.workload, args.mode)
