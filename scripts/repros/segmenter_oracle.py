"""What nvFuser's `schedule.find_compatible_schedulers` says of each region before it runs, against
what its segmenter then did (issue #11's segmenter-aware planning), and norm backwards too wide for one
kernel planned three ways.

* `norms`: LayerNorm and RMSNorm forward + backward over [R, D] (R above the cut's row limit),
  f32 and bf16, planned `whole` (nvFuser segments as it likes), `default` (ask_segmenter: the column
  sums behind a `segment_set` where nvFuser has no one-kernel schedule) and `cut` (the column sums a
  region of their own: split_norm_backward_rows at any row count); GPU kernel time of a step
  (torch.profiler sums), kernels per step, and inductor's. (Session 25's first run had a `segset`
  variant instead of `default`: segment_norm_backward's row limit lifted; a plain LayerNorm's column
  sums read no row reduction, so it marked nothing and measured as `whole`.)
* `notes NAME...`: perf workloads; the segmenter notes planning wrote, with and without graphs.
* `workload NAME...`: perf workloads; per region, the query's answer (one-kernel schedulers, or none:
  nvFuser will segment) and the segments nvFuser ran (kernels' segment ids in explain()).

Each region is queried on its first build, with its real inputs, on the definition as lowered
(nvFuser's pre-segmentation passes have not run on it yet); the query's wall time is printed too.

    python scripts/repros/segmenter_oracle.py norms [layer_norm] [rms_norm]
    python scripts/repros/segmenter_oracle.py workload bert_train_bf16_small llama_train_bf16_small
    python scripts/repros/segmenter_oracle.py notes bert_train_bf16_small   # planning's segmenter notes
"""

from __future__ import annotations

import functools
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import dynamo_nvf  # noqa: E402
from dynamo_nvf.backend import nvf_bookend  # noqa: E402
from dynamo_nvf.runtime.region import RegionRuntime  # noqa: E402
from kernel_timing import kernel_us  # noqa: E402

QUERIES: dict[str, tuple[list[str], float]] = {}


def _hook() -> None:
    import nvfuser_direct as nvf

    original = RegionRuntime._build

    def build(self, args):
        entry = original(self, args)
        if entry.fd is not None:
            start = time.perf_counter()
            try:
                found = [str(s).split(".")[-1] for s in nvf.schedule.find_compatible_schedulers(entry.fd.fusion, list(args))]
            except Exception as exc:  # noqa: BLE001
                found = [f"error: {type(exc).__name__}: {str(exc)[:120]}"]
            QUERIES[self.profile_label] = (found, (time.perf_counter() - start) * 1e3)
        return entry

    RegionRuntime._build = build


def _regions(report) -> list[tuple[str, str, int, list[str], float]]:
    """(graph kind, region label, segments run, schedulers, kernel us) per region of explain()'s run."""
    from dynamo_nvf.plan import region_label

    rows = []
    for g in report.graphs:
        for r in g.regions:
            kernels = r.kernels or []
            segments = len({k.segment_id for k in kernels}) if kernels else (r.segments or 0)
            rows.append((g.kind, region_label(g, r), segments, [k.scheduler for k in kernels],
                         sum(k.time_ms for k in kernels) * 1e3))
    return rows


def _print_regions(report) -> None:
    for kind, name, segments, schedulers, us in _regions(report):
        found, ms = QUERIES.get(name, (None, 0.0))
        answer = "not queried" if found is None else ("none: will segment" if not found else ",".join(found))
        print(f"   {kind:9s} {name.rsplit(' ', 1)[-1]:14s} ran {segments} segment(s) [{','.join(schedulers)}] {us:.1f} us | "
              f"query: {answer} ({ms:.2f} ms)")


NORM_VARIANTS = {
    "whole": {"split_norm_backward_rows": 0, "segment_norm_backward": False},  # nvFuser segments as it likes
    "default": {},  # ask_segmenter: behind a segment_set where nvFuser has no one-kernel schedule
    "cut": {"split_norm_backward_rows": 1 << 40},  # the column sums in a region of their own
}


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def rms_norm(x, w, b):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def norms(which: list[str]) -> None:
    for fn in (f for f in (layer_norm, rms_norm) if not which or f.__name__ in which):
        for dtype in (torch.float32, torch.bfloat16):
            for rows, cols in ((8192, 4096), (8192, 8192), (4096, 16384), (2048, 32768)):
                torch.manual_seed(0)
                x = torch.randn(rows, cols, device="cuda", dtype=dtype, requires_grad=True)
                w = torch.randn(cols, device="cuda", dtype=dtype, requires_grad=True)
                b = torch.randn(cols, device="cuda", dtype=dtype, requires_grad=True)
                g = torch.randn(rows, cols, device="cuda", dtype=dtype)
                print(f"{fn.__name__} {str(dtype)[6:]} [{rows}, {cols}]")

                def step(compiled):
                    for t in (x, w, b):
                        t.grad = None
                    compiled(x, w, b).backward(g)

                for variant, options in NORM_VARIANTS.items():
                    torch._dynamo.reset()
                    QUERIES.clear()
                    report = dynamo_nvf.explain(fn, x, w, b, options=options, profiler="torch")
                    torch._dynamo.reset()
                    compiled = torch.compile(fn, backend=functools.partial(nvf_bookend, options=options))
                    us, kernels = kernel_us(lambda: step(compiled), 10)
                    print(f"  {variant:7s} {us:9.1f} us, {kernels} kernels per step")
                    _print_regions(report)
                    for graph in report.graphs:
                        for note in graph.rewrites:
                            if note.startswith(("segmenter", "segment boundary")):
                                print(f"     {graph.kind}: {note}")
                torch._dynamo.reset()
                compiled = torch.compile(fn, backend="inductor")
                us, kernels = kernel_us(lambda: step(compiled), 10)
                print(f"  inductor {us:8.1f} us, {kernels} kernels per step", flush=True)


def notes(names: list[str]) -> None:
    """Planning's segmenter notes per perf workload (explain() without profiling), without and with graphs."""
    from perf.workloads import REGISTRY

    import logging

    class Echo(logging.Handler):
        def emit(self, record):
            if "segmenter" in record.getMessage():
                print("   log:", record.getMessage()[:400])

    logger = logging.getLogger("dynamo_nvf")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Echo())
    for name in names:
        for options in ({}, {"cuda_graphs": True}):
            torch._dynamo.reset()
            inst = REGISTRY[name].instantiate("cuda")
            try:
                report = dynamo_nvf.explain(inst.fn, *inst.inputs, options=options, profiler="none")
            except Exception as exc:  # noqa: BLE001 - explain's run of this fn, not planning
                print(f"{name} {options}: explain failed: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            found = [f"{g.kind}: {n}" for g in report.graphs for n in g.rewrites if n.startswith("segmenter")]
            print(f"{name} {options}: {len(found)} segmenter note(s)", *found, sep="\n   ", flush=True)


def workloads(names: list[str]) -> None:
    from perf.workloads import REGISTRY

    for name in names:
        torch._dynamo.reset()
        QUERIES.clear()
        inst = REGISTRY[name].instantiate("cuda")
        report = dynamo_nvf.explain(inst.fn, *inst.inputs, profiler="torch")
        rows = _regions(report)
        agree = sum(1 for _, n, seg, _, _ in rows if n in QUERIES and (seg > 1) == (not QUERIES[n][0]))
        queried = sum(1 for _, n, _, _, _ in rows if n in QUERIES)
        print(f"{name}: {len(rows)} regions, {queried} queried, the query right about segmenting in {agree}, "
              f"{sum(ms for _, ms in QUERIES.values()):.1f} ms in queries", flush=True)
        _print_regions(report)


if __name__ == "__main__":
    _hook()
    if sys.argv[1] == "norms":
        norms(sys.argv[2:])
    elif sys.argv[1] == "notes":
        notes(sys.argv[2:])
    else:
        workloads(sys.argv[2:])
    from dynamo_nvf.segmenter import SegmenterOracle

    print(f"planning's questions used {'meta' if SegmenterOracle._meta_inputs else 'CUDA' if SegmenterOracle._meta_inputs is False else 'no'} inputs")
