"""Asks nvFuser, while a graph is planned, whether it could run a region as one kernel, and how long
the region and its alternatives take on the GPU.

`nvfuser_direct.schedule.find_compatible_schedulers(fusion, inputs)` lists the schedulers that take a
whole fusion for given inputs; an empty list means nvFuser's segmenter will cut it into several
kernels at boundaries of its own choosing. Planning (passes/split_reductions.py) asks this of norm
backwards too large for its row rules; where nvFuser would segment, it times the whole region and
the two regions of its own cut (`gpu_us`: compiled and run on random inputs) and keeps the faster.

The question is asked of the region as lowered, before nvFuser's pre-segmentation passes, with
inputs that have the traced values' sizes, strides and dtypes (meta tensors where nvFuser takes them,
else uninitialised CUDA memory). On an H100 (nvfuser_direct 0.2.36, 2026-11-25,
scripts/repros/segmenter_oracle.py at commit 2828583) it takes 10-350 ms per region, so answers are kept per fusion key
(a model's identical layers ask once), and only regions a rule would act on are asked. The answer
agreed with the segments nvFuser then ran for the norm backwards asked about (one inner_outer_persistent
kernel up to [4096, 16384], none at [2048, 32768] except a bf16 RMSNorm's); for other regions it is
less reliable (pre-segmentation passes change them). The runtime asks it too, on a region's first call,
where option split_by_stage would run a region of column reductions as pieces (runtime/region.py). A timing
compiles the region (a second compile where the runtime later builds the same one): seconds of
compile time, paid only where nvFuser would segment.
"""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Iterator, Optional, Sequence

import torch
from torch.fx import GraphModule

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf._compat import hint_int
from dynamo_nvf.passes.fusion_key import region_fusion_key
from dynamo_nvf.settings import Settings

log = logging.getLogger("dynamo_nvf")

#: Share of the GPU's free memory that real inputs for one question may take (where meta tensors
#: are refused, and for timing); a larger region is not asked.
_MAX_FREE_SHARE = 0.25
#: Calls timed per region after two warm-up calls, all behind one spin kernel that hides the host.
_TIMED_CALLS = 5
#: Cycles of that spin (~1 ms on an H100): longer than the host takes to enqueue the timed calls.
_SPIN_CYCLES = 2_000_000


class SegmenterOracle:
    """What planning asks nvFuser (passes/split_reductions.Oracle); answers are kept per fusion key for
    the process, so a model's identical layers, or a recompile, ask once."""

    _schedulers: dict[str, Optional[tuple[str, ...]]] = {}
    _gpu_us: dict[str, Optional[float]] = {}
    _meta_inputs: Optional[bool] = None  # whether nvFuser took meta tensors (tried once per process)

    def __init__(self) -> None:
        self._nvf = nvf_env.nvfuser_module()  # imported once, after the process's nvFuser options are set
        if self._nvf is None:
            raise ImportError(nvf_env.unavailable_reason() or "nvfuser_direct could not be imported")
        self.asked = 0
        self.spent_ms = 0.0

    def schedulers(self, region: GraphModule) -> Optional[tuple[str, ...]]:
        return self._cached(self._schedulers, region, self._ask, "one-kernel schedulers")

    def gpu_us(self, region: GraphModule) -> Optional[float]:
        return self._cached(self._gpu_us, region, self._time, "GPU us per call")

    def _cached(self, answers: dict[str, Any], region: GraphModule, work: Any, what: str) -> Any:
        """`work(region)`, once per fusion key for the process, its time counted as spent."""
        key = region_fusion_key(region)
        if key not in answers:
            with self._spending():
                answers[key] = work(region)
            log.debug("segmenter: region %s: %s %s", key, what, answers[key])
        return answers[key]

    @contextlib.contextmanager
    def _spending(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.asked += 1
            self.spent_ms += (time.perf_counter() - start) * 1e3

    def _ask(self, region: GraphModule) -> Optional[tuple[str, ...]]:
        from dynamo_nvf.lowering import build_fusion

        vals = _input_vals(region)
        for meta in ((True, False) if SegmenterOracle._meta_inputs is None
                     else (SegmenterOracle._meta_inputs,)):
            args = _example_inputs(vals, "meta" if meta else "empty")
            if args is None:
                return None
            try:
                fd = build_fusion(self._nvf, region, args).fd
                found = self._nvf.schedule.find_compatible_schedulers(fd.fusion, list(args))
            except Exception as exc:  # noqa: BLE001 - a question nobody can answer is not an error
                log.debug("segmenter: question failed (%s inputs): %s", "meta" if meta else "CUDA", exc)
                continue
            SegmenterOracle._meta_inputs = meta
            return tuple(str(s).rsplit(".", 1)[-1] for s in found)
        return None

    def _time(self, region: GraphModule) -> Optional[float]:
        """GPU us per call of the region's fusion on random inputs of its traced sizes: compiled and
        warmed up first, then `_TIMED_CALLS` calls queued behind a spin kernel, between CUDA events."""
        from dynamo_nvf.lowering import build_fusion

        if torch.cuda.is_current_stream_capturing():  # a compile inside a user's capture: launch nothing
            return None
        args = _example_inputs(_input_vals(region), "random")
        if args is None:
            return None
        try:
            fd = build_fusion(self._nvf, region, args).fd
            for _ in range(2):
                fd.execute(args)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(_SPIN_CYCLES)
            start.record()
            for _ in range(_TIMED_CALLS):
                fd.execute(args)
            end.record()
            end.synchronize()
        except Exception as exc:  # noqa: BLE001
            log.debug("segmenter: timing failed: %s", exc)
            return None
        return start.elapsed_time(end) * 1e3 / _TIMED_CALLS


def _input_vals(region: GraphModule) -> list[Any]:
    return [n.meta.get("val") for n in region.graph.nodes if n.op == "placeholder"]


def _example_inputs(vals: Sequence[Any], kind: str) -> Optional[list[Any]]:
    """Inputs with the traced values' sizes, strides and dtypes, or None where one cannot be made:
    `kind` "meta" (no memory), "empty" (uninitialised CUDA memory) or "random" (normal floats, zero
    integers, for timing)."""
    args: list[Any] = []
    total = 0
    for val in vals:
        if isinstance(val, torch.Tensor):
            try:
                sizes = [hint_int(s) for s in val.shape]
                strides = [hint_int(s) for s in val.stride()]
            except Exception:  # noqa: BLE001 - a size without a hint
                return None
            if val.device.type == "cpu":  # a CPU scalar
                args.append(torch.zeros(sizes, dtype=val.dtype))
                continue
            if val.device.type != "cuda":
                return None
            if kind == "meta":
                args.append(torch.empty_strided(sizes, strides, dtype=val.dtype, device="meta"))
                continue
            elements = 0 if 0 in sizes else 1 + sum((n - 1) * st for n, st in zip(sizes, strides))
            total += elements * val.element_size()
            if total > _MAX_FREE_SHARE * torch.cuda.mem_get_info(val.device)[0]:
                return None
            base = torch.empty(elements, dtype=val.dtype, device=val.device)  # filled whole: strides may overlap
            if kind == "random":
                base.normal_() if base.is_floating_point() else base.zero_()
            args.append(base.as_strided(sizes, strides))
        elif isinstance(val, (bool, int, float)):
            args.append(val)
        elif isinstance(val, torch.SymInt):
            args.append(hint_int(val))
        else:
            return None
    return args


def oracle_for(settings: Settings) -> Optional[SegmenterOracle]:
    """The oracle planning may ask under these settings, or None (off, planning a CPU machine's graph,
    no nvFuser or no GPU)."""
    if not settings.ask_segmenter or settings.plan_cpu_as_cuda:
        return None
    if not nvf_env.nvfuser_available() or not torch.cuda.is_available():
        return None
    try:
        return SegmenterOracle()
    except Exception as exc:  # noqa: BLE001
        log.debug("segmenter: no oracle: %s", exc)
        return None
