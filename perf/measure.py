"""Timing of one (workload, backend) pair on a CUDA device.

Every number comes from one fresh compile: ``torch._dynamo.reset()`` runs before each
pair so no backend reuses another's graphs.  Metrics (keys of a result record):

* ``compile_s``     wall time of the first call, synchronized (compile + first run).
* ``gpu_us``        median CUDA-event time per call after warm-up: device time, host
                    overhead excluded.  Before each timed call the L2 is flushed (every
                    call starts cold, as in a real network) and a spin kernel
                    (torch.cuda._sleep) as long as one whole call keeps the GPU busy
                    while the host enqueues the call, so a host-bound call is not timed
                    as its launch latency.  ``gpu_us_min`` is the fastest call.
* ``kernels``, ``memops``, ``kernel_us``  from torch.profiler: GPU kernels per call,
                    memcpy/memset operations per call, summed kernel+memop time per call.
* ``host_us``       host cost per call on tiny inputs: N calls back to back timed with
                    perf_counter, the synchronize left outside the timed span; the best
                    of a few such batches (interference only ever adds time).  Uses a
                    fresh compile for the tiny shapes (``host_compile_s``) so the main
                    graph is never recompiled to dynamic shapes.
* ``peak_mem_mb``   torch.cuda.max_memory_allocated over one call after
                    reset_peak_memory_stats (inputs and parameters included, the L2
                    flush buffer freed first); ``peak_extra_mb`` is above what was
                    allocated before the call.
* ``bytes_moved``, ``achieved_gbps``, ``roofline_frac``  for workloads that declare their
                    minimum traffic: bandwidth as a fraction of a device copy measured
                    in the same run.

A failure is recorded, never raised: ``error`` holds the first failure (the pair then
has no numbers past it) and ``errors`` maps phase -> message for every failed phase.
"""

from __future__ import annotations

import gc
import statistics
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, replace
from typing import Callable, Optional, Sequence

import torch

from .backends import Backend, get_backend, reset_compile_state
from .workloads import REGISTRY, Workload

Progress = Callable[[str], None]

METRIC_KEYS = (
    "compile_s",
    "gpu_us",
    "gpu_us_min",
    "kernels",
    "memops",
    "kernel_us",
    "host_us",
    "host_compile_s",
    "peak_mem_mb",
    "peak_extra_mb",
    "bytes_moved",
    "achieved_gbps",
    "roofline_frac",
)


@dataclass(frozen=True)
class MeasureConfig:
    """Iteration counts; compile time dominates a run, so these stay modest."""

    warmup: int = 10
    iters: int = 50
    profile_iters: int = 5
    host_warmup: int = 50
    host_iters: int = 2000
    host_repeats: int = 20  # host_us is the best of this many batches of host_iters/host_repeats calls
    host: bool = True
    profile: bool = True
    flush_l2: bool = True
    flush_mib: int = 256
    hide_host: bool = True  # spin the GPU before each timed call (see gpu_us above)
    roofline_mib: int = 512  # size of each of src and dst in the copy roofline
    remeasure_repeats: int = 3

    def to_json(self) -> dict:
        return asdict(self)


DEFAULT_CONFIG = MeasureConfig()
QUICK_CONFIG = MeasureConfig(
    warmup=3,
    iters=20,
    profile_iters=3,
    host_warmup=10,
    host_iters=300,
    host_repeats=10,
    roofline_mib=256,
    remeasure_repeats=2,
)


def empty_record() -> dict:
    """A result record with every metric absent; the JSON schema of one cell."""
    rec: dict = {k: None for k in METRIC_KEYS}
    rec["error"] = None
    rec["errors"] = {}
    return rec


def format_error(exc: BaseException, limit: int = 400) -> str:
    """One line, short enough for a table footnote."""
    msg = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _fail(rec: dict, phase: str, exc: BaseException) -> None:
    msg = format_error(exc)
    rec["errors"][phase] = msg
    if rec["error"] is None:
        rec["error"] = f"[{phase}] {msg}"
        rec["traceback"] = traceback.format_exc()[-4000:]


def _sync() -> None:
    torch.cuda.synchronize()


def _cleanup() -> None:
    """Free the last pair's graphs (dynamo caches, reference cycles) and cached GPU memory."""
    reset_compile_state()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def event_times_us(
    step: Callable[[], object], iters: int, flush: Optional[torch.Tensor], sleep_cycles: int = 0
) -> list[float]:
    """Per-call CUDA-event times in microseconds (one event pair around each call).

    ``flush`` is zeroed and ``sleep_cycles`` of spinning are queued before each call,
    both outside the timed span.
    """
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        if flush is not None:
            flush.zero_()  # evict the L2
        if sleep_cycles > 0:
            torch.cuda._sleep(sleep_cycles)  # the host gets ahead of the GPU
        starts[i].record()
        step()
        ends[i].record()
    _sync()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


_CYCLES_PER_US: Optional[float] = None


def sleep_cycles_for(us: float) -> int:
    """Spin-kernel cycles lasting about ``us`` microseconds (calibrated once per process)."""
    global _CYCLES_PER_US
    if not hasattr(torch.cuda, "_sleep") or us <= 0:
        return 0
    if _CYCLES_PER_US is None:
        probe = 2_000_000
        torch.cuda._sleep(probe)  # warm the clocks
        _sync()
        taken = statistics.median(event_times_us(lambda: torch.cuda._sleep(probe), 5, None))
        _CYCLES_PER_US = probe / max(taken, 1e-3)
    return int(us * _CYCLES_PER_US)


def wall_us_per_call(step: Callable[[], object], calls: int = 3) -> float:
    """Synchronized wall time per call: an upper bound of both its host and GPU time."""
    _sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    _sync()
    return (time.perf_counter() - t0) / calls * 1e6


def _is_device_event(evt) -> bool:
    dt = getattr(evt, "device_type", None)
    return dt is not None and dt == torch.autograd.DeviceType.CUDA


def _is_memop(evt) -> bool:
    kind = str(getattr(evt, "activity_type", "") or "").lower()
    if "memcpy" in kind or "memset" in kind:
        return True
    name = evt.name.lower()
    return name.startswith("memcpy") or name.startswith("memset")


def profile_counts(step: Callable[[], object], iters: int) -> tuple[float, float, float]:
    """(kernels, memops, device us) per call, from CUDA activity in torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    _sync()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Profiler clears events at the end of each cycle"
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                step()
            _sync()
    kernels = memops = 0
    dev_us = 0.0
    for evt in prof.events():
        if not _is_device_event(evt):
            continue
        if _is_memop(evt):
            memops += 1
        else:
            kernels += 1
        dev_us += evt.time_range.elapsed_us()
    return kernels / iters, memops / iters, dev_us / iters


def host_time_us(step: Callable[[], object], iters: int, repeats: int) -> float:
    """Best batch mean of the host time per call; sync and GC stay outside the timed span."""
    per_batch = max(1, iters // max(1, repeats))
    samples: list[float] = []
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for _ in range(max(1, repeats)):
            _sync()
            t0 = time.perf_counter()
            for _ in range(per_batch):
                step()
            t1 = time.perf_counter()
            _sync()
            samples.append((t1 - t0) / per_batch * 1e6)
    finally:
        if gc_was_on:
            gc.enable()
    return min(samples)


def copy_roofline(mib: int, iters: int = 20) -> dict:
    """Bandwidth of ``dst.copy_(src)`` (bytes read + written per second), the roofline."""
    n = mib * 2**20 // 4
    bufs = [torch.empty(n, dtype=torch.float32, device="cuda") for _ in range(2)]  # src, dst

    def copy() -> None:
        bufs[1].copy_(bufs[0])

    for _ in range(3):
        copy()
    med = statistics.median(event_times_us(copy, iters, None))
    moved = 2 * n * 4
    bufs.clear()
    _cleanup()
    return {"copy_bytes": moved, "copy_us": med, "bytes_per_s": moved / (med * 1e-6)}


class Runner:
    """Measures workloads x backends on the current CUDA device."""

    def __init__(self, config: MeasureConfig = DEFAULT_CONFIG, progress: Optional[Progress] = None):
        self.config = config
        self.progress = progress or (lambda _msg: None)
        self.roofline: Optional[dict] = None
        self._flush: Optional[torch.Tensor] = None

    # -- helpers -----------------------------------------------------------------
    def _flush_buffer(self) -> Optional[torch.Tensor]:
        if not self.config.flush_l2:
            return None
        if self._flush is None:
            self._flush = torch.empty(self.config.flush_mib * 2**20, dtype=torch.int8, device="cuda")
        return self._flush

    def _sleep_for(self, step: Callable[[], object]) -> int:
        """Spin long enough that the host enqueues a whole call before the GPU reaches it."""
        if not self.config.hide_host:
            return 0
        return sleep_cycles_for(min(1.5 * wall_us_per_call(step) + 20.0, 100_000.0))

    def measure_roofline(self) -> dict:
        """Copy bandwidth for this run; failures are recorded, not raised."""
        try:
            self.roofline = copy_roofline(self.config.roofline_mib)
        except Exception as exc:  # noqa: BLE001  (recorded in the results)
            self.roofline = {"error": format_error(exc)}
        return self.roofline

    def _compiled(self, wl: Workload, be: Backend, tiny: bool):
        reset_compile_state()
        inst = wl.instantiate("cuda", tiny=tiny)
        fn = be.wrap(inst.fn)
        return inst, (lambda: inst.call(fn))

    # -- one pair ----------------------------------------------------------------
    def measure(self, wl: Workload, be: Backend) -> dict:
        """All metrics of one (workload, backend) pair; never raises for workload failures."""
        cfg = self.config
        rec = empty_record()
        inst = step = None
        try:
            try:
                inst, step = self._compiled(wl, be, tiny=False)
                rec["compile_s"] = wall_us_per_call(step, calls=1) * 1e-6  # the first call: compile included
                for _ in range(cfg.warmup):
                    step()
                times = event_times_us(step, cfg.iters, self._flush_buffer(), self._sleep_for(step))
                rec["gpu_us"] = statistics.median(times)
                rec["gpu_us_min"] = min(times)
            except Exception as exc:  # noqa: BLE001
                _fail(rec, "run", exc)
                return rec

            if wl.bytes_moved is not None:
                try:
                    moved = int(wl.bytes_moved(inst.inputs))
                    rec["bytes_moved"] = moved
                    bw = moved / (rec["gpu_us"] * 1e-6)
                    rec["achieved_gbps"] = bw / 1e9
                    roof = (self.roofline or {}).get("bytes_per_s")
                    rec["roofline_frac"] = bw / roof if roof else None
                except Exception as exc:  # noqa: BLE001
                    _fail(rec, "bandwidth", exc)

            if cfg.profile:
                try:
                    rec["kernels"], rec["memops"], rec["kernel_us"] = profile_counts(step, cfg.profile_iters)
                except Exception as exc:  # noqa: BLE001
                    _fail(rec, "profile", exc)

            try:
                self._flush = None  # not part of the workload's footprint
                _sync()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                step()
                _sync()
                peak = torch.cuda.max_memory_allocated()
                rec["peak_mem_mb"] = peak / 2**20
                rec["peak_extra_mb"] = max(0, peak - before) / 2**20
            except Exception as exc:  # noqa: BLE001
                _fail(rec, "memory", exc)
        finally:
            del inst, step
            if rec["error"] or not cfg.host:
                _cleanup()

        if cfg.host:
            self._measure_host(wl, be, rec)
        return rec

    def _measure_host(self, wl: Workload, be: Backend, rec: dict) -> None:
        cfg = self.config
        tiny = step = None
        try:
            tiny, step = self._compiled(wl, be, tiny=True)
            rec["host_compile_s"] = wall_us_per_call(step, calls=1) * 1e-6
            for _ in range(cfg.host_warmup):
                step()
            rec["host_us"] = host_time_us(step, cfg.host_iters, cfg.host_repeats)
        except Exception as exc:  # noqa: BLE001
            _fail(rec, "host", exc)
        finally:
            del tiny, step
            _cleanup()  # the pair is done

    def remeasure(self, workload: str, backend: str, repeats: int) -> list[float]:
        """Fresh compile, then ``repeats`` independent GPU-time medians (for the baseline check)."""
        cfg = self.config
        inst = step = None
        try:
            inst, step = self._compiled(REGISTRY[workload], get_backend(backend), tiny=False)
            for _ in range(cfg.warmup + 1):
                step()
            sleep = self._sleep_for(step)
            return [
                statistics.median(event_times_us(step, cfg.iters, self._flush_buffer(), sleep))
                for _ in range(repeats)
            ]
        except Exception:  # noqa: BLE001  (an empty list tells the caller it failed)
            return []
        finally:
            del inst, step
            _cleanup()

    # -- everything --------------------------------------------------------------
    def run(self, workloads: Sequence[Workload], backends: Sequence[str]) -> dict[str, dict[str, dict]]:
        """results[workload][backend] = record, in the given orders."""
        bes = [get_backend(b) for b in backends]
        if self.roofline is None:
            self.measure_roofline()
        results: dict[str, dict[str, dict]] = {}
        total = len(workloads) * len(bes)
        i = 0
        try:
            for wl in workloads:
                results[wl.name] = {}
                for be in bes:
                    i += 1
                    t0 = time.perf_counter()
                    rec = self.measure(wl, be)
                    results[wl.name][be.name] = rec
                    self.progress(_progress_line(i, total, wl.name, be.name, rec, time.perf_counter() - t0))
                    # A full collection over torch/inductor's heap costs ~0.3 s and ran 3x a
                    # pair; freezing what survives a pair keeps later ones to new objects.
                    gc.freeze()
        finally:
            gc.unfreeze()
            reset_compile_state()
        return results


def _progress_line(i: int, total: int, wl: str, be: str, rec: dict, wall: float) -> str:
    if rec["error"]:
        what = "ERROR " + rec["error"][:120]
    else:
        parts = [f"gpu {rec['gpu_us']:.1f}us"]
        if rec["kernels"] is not None:
            parts.append(f"{rec['kernels']:g} kernels")
        if rec["host_us"] is not None:
            parts.append(f"host {rec['host_us']:.1f}us")
        parts.append(f"compile {rec['compile_s']:.2f}s")
        if rec["errors"]:
            parts.append("errors in " + ",".join(rec["errors"]))
        what = ", ".join(parts)
    return f"[{i}/{total}] {wl} / {be}: {what} ({wall:.1f}s)"


def with_overrides(config: MeasureConfig, **overrides) -> MeasureConfig:
    """``config`` with CLI overrides applied (None values ignored)."""
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})
