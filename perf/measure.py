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
* ``host_us``       host cost per call on tiny inputs (:func:`host_time`): batches of calls
                    back to back timed with perf_counter, the synchronize and the garbage
                    collector outside the timed span; the best batch mean (interference only
                    ever adds time), ``host_us_median`` the median batch.  Uses a fresh
                    compile for the tiny shapes (``host_compile_s``) so the main graph is
                    never recompiled to dynamic shapes.  Measured after the pair's profile,
                    which is why CUPTI is torn down at the end of every profile (see
                    "One host metric" below).
* ``peak_mem_mb``   torch.cuda.max_memory_allocated over one call after
                    reset_peak_memory_stats (inputs and parameters included, the L2
                    flush buffer freed first); ``peak_extra_mb`` is above what was
                    allocated before the call.
* ``bytes_moved``, ``achieved_gbps``, ``roofline_frac``  for workloads that declare their
                    minimum traffic: bandwidth as a fraction of a device copy measured
                    in the same run.

Model workloads (``timing == "step"``, :mod:`perf.models`) get what a user sees instead:

* ``step_ms``       wall time per step in steady state, host included: N steps back to back,
                    then one synchronize, (end - start) / N; the best of a few batches
                    (``step_ms_median`` the median).  This is the headline: GPU time alone
                    hides a host-bound step.  CUDA-graph backends call
                    ``torch.compiler.cudagraph_mark_step_begin()`` before every step.
* ``enqueue_ms``    host time per step: the same batches, time until the last step call
                    returned (before the synchronize) / N; best batch (``enqueue_ms_median``).
                    Batches are short (``model_batch_s``), so the CUDA launch queue rarely
                    fills; if it does, a GPU-bound step's enqueue time is its GPU time.
* ``kernel_ms``     summed CUDA kernel + memcpy/memset time per step (torch.profiler), with
                    ``kernels`` and ``memops`` per step.
* ``nvfuser_calls`` nvFuser executions per step (``dynamo_nvf.STATS`` delta over the timed
                    steps; None for backends that are not dynamo_nvf).
* ``compile_s``, ``peak_mem_mb`` as above.

One host metric (part 4 of issue #10).  perf's ``host_us`` and scripts/host_latency.py used to
disagree (gelu_views, nvf_bookend against inductor: 107 against 64 us in perf on an H100, 28.9
against 52.6 us in the script on an H200).  Both time back-to-back calls with perf_counter and
keep the synchronize outside; what differed:

1. process state: perf had run torch.profiler (for kernel counts) before every host
   measurement but the first, the script never does.  Kineto does not finalize CUPTI when a
   profile ends unless ``TEARDOWN_CUPTI=1`` (pytorch issue 144455), so every later CUDA API call
   of the process pays CUPTI's callback cost, and a call that makes more CUDA API calls (an
   nvFuser execute: launch, allocation, stream/device queries) pays more than one Triton launch.
   This is the one difference found that can make perf's numbers *higher*, and more so for
   nvFuser: the likely cause, not yet confirmed on a GPU (``scripts/host_latency.py --only
   cupti`` measures it: the same callables before a profile, after one with teardown, after
   one without).
2. statistic: perf took the best of 20 batches of 100 calls, the script the median of 7
   batches of 2000 (with the garbage collector on and 200 warm-up calls): both would make the
   script's number the higher one, the opposite of what was seen.
3. program: the script timed sigmoid(x) * 2 + 1 on 16x16, perf gelu_views on 16x64 (one region,
   one kernel each); not a 3.7x difference.

Kept: perf's method (:func:`host_time`: best batch mean of short batches, GC off, synchronize
outside, plus the median for the spread), now the only one (the script imports it), and
measured in a clean process state: ``TEARDOWN_CUPTI=1`` is set before the first profile
(unless the caller set it), and in a model pair every host-inclusive timing runs before the
profiler (a block pair's host_us needs its own tiny compile, so it comes after the profile).  A *host floor* (one tiny eager op, :func:`host_floor_us`) is measured at the start
and the end of every run; the report warns when it grew, which is how a process-state drift
like the CUPTI one shows.  Host numbers are gated only with a generous threshold and a
minimum delta (:mod:`perf.baseline`).

A failure is recorded, never raised: ``error`` holds the first failure (the pair then
has no numbers past it) and ``errors`` maps phase -> message for every failed phase.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, replace
from typing import Callable, Optional, Sequence

import torch

from .backends import Backend, get_backend, mark_step, reset_compile_state
from .figures import geomean
from .gpu_turn import gpu_turn
from .workloads import REGISTRY, Instance, Workload

Progress = Callable[[str], None]

METRIC_KEYS = (
    "compile_s",
    "gpu_us",
    "gpu_us_min",
    "kernels",
    "memops",
    "kernel_us",
    "host_us",
    "host_us_median",
    "host_compile_s",
    "step_ms",
    "step_ms_median",
    "enqueue_ms",
    "enqueue_ms_median",
    "steps_per_batch",
    "kernel_ms",
    "nvfuser_calls",
    "fallbacks",
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
    # model workloads (timing "step"): steps back to back per batch, sized to last about
    # model_batch_s (within [model_min_steps, model_max_steps]); step_ms is the best batch
    model_warmup: int = 5  # after the first call; a CUDA-graph backend records on step 2
    model_batches: int = 5
    model_batch_s: float = 0.1
    model_min_steps: int = 3
    model_max_steps: int = 50
    model_profile_steps: int = 2
    cupti_teardown: bool = True  # set TEARDOWN_CUPTI=1 (unless set) so a profile leaves no CUPTI behind

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
    model_warmup=3,
    model_batches=3,
    model_batch_s=0.05,
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


def device_sync() -> Callable[[], None]:
    """torch.cuda.synchronize where CUDA is available, else a no-op (CPU callables in tests)."""
    return torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)


def _cleanup() -> None:
    """Free the last pair's graphs (dynamo caches, reference cycles) and cached GPU memory."""
    reset_compile_state()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _cleanup_into(rec: dict) -> None:
    """:func:`_cleanup`, with a failure recorded in the pair's record (phase "cleanup") rather than
    raised out of a ``finally`` over it.  The cleanup synchronizes first, so an asynchronous kernel
    fault of the pair surfaces here; CUDA errors are sticky, so the record is marked
    ``device_lost`` and the run stops after this pair (see :meth:`Runner.run`)."""
    try:
        _cleanup()
    except Exception as exc:  # noqa: BLE001
        _fail(rec, "cleanup", exc)
        rec["device_lost"] = True


def mean_time_us(step: Callable[[], object], calls: int, warmup: int) -> float:
    """Mean CUDA-event time of `calls` back-to-back calls in microseconds, after `warmup` calls: one
    event pair around them all (a kernel's steady throughput, for the scripts' microbenchmarks)."""
    for _ in range(warmup):
        step()
    _sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        step()
    end.record()
    _sync()
    return start.elapsed_time(end) / calls * 1000


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


def hide_host_sleep_cycles(step: Callable[[], object]) -> int:
    """Spin-kernel cycles that outlast the host's enqueue of one call of `step`: 1.5 of its
    synchronized wall time plus 20 us, at most 100 ms (gpu_us's spin)."""
    return sleep_cycles_for(min(1.5 * wall_us_per_call(step) + 20.0, 100_000.0))


def wall_us_per_call(step: Callable[[], object], calls: int = 3) -> float:
    """Synchronized wall time per call: an upper bound of both its host and GPU time."""
    _sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    _sync()
    return (time.perf_counter() - t0) / calls * 1e6


def first_call_then_warmup(step: Callable[[], object], warmup: int) -> float:
    """Seconds of the first call (compile included, synchronized), then `warmup` more calls."""
    first_s = wall_us_per_call(step, calls=1) * 1e-6
    for _ in range(warmup):
        step()
    return first_s


def backend_step(be: Backend, inst) -> Callable[[], object]:
    """One step of workload instance `inst` under backend `be`: `be` wraps (compiles lazily) the
    instance's callable; a CUDA-graph backend marks a new step before each call."""
    fn = be.wrap(inst.fn)
    if be.cuda_graphs:
        mark = mark_step(be)
        return lambda: (mark(), inst.call(fn))[1]
    return lambda: inst.call(fn)


def is_device_event(evt) -> bool:
    """A kernel or memory operation on the GPU; not a user annotation (a `record_function` range such
    as "Optimizer.step#AdamW.step" or "DistributedDataParallel.forward", which the profiler also puts
    on the GPU timeline, spanning every kernel launched inside it)."""
    dt = getattr(evt, "device_type", None)
    return dt is not None and dt == torch.autograd.DeviceType.CUDA and not getattr(evt, "is_user_annotation", False)


def _is_memop(evt) -> bool:
    kind = str(getattr(evt, "activity_type", "") or "").lower()
    if "memcpy" in kind or "memset" in kind:
        return True
    name = evt.name.lower()
    return name.startswith("memcpy") or name.startswith("memset")


def _device_counts(prof) -> tuple[int, int, float]:
    """(kernels, memops, device us) of a finished torch.profiler profile."""
    kernels = memops = 0
    dev_us = 0.0
    for evt in prof.events():
        if not is_device_event(evt):
            continue
        if _is_memop(evt):
            memops += 1
        else:
            kernels += 1
        dev_us += evt.time_range.elapsed_us()
    return kernels, memops, dev_us


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
    kernels, memops, dev_us = _device_counts(prof)
    return kernels / iters, memops / iters, dev_us / iters


#: How the ATen ops that launch GPU work are grouped (substrings of the op name, first match wins).
ATEN_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sdpa", ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")),
    ("conv", ("conv",)),
    ("matmul", ("::mm", "addmm", "bmm", "matmul", "linear", "_scaled_mm", "addbmm", "addmv", "::mv")),
)


def aten_category(name: str) -> str:
    """"sdpa", "conv", "matmul" or "other" for an ``aten::`` op name."""
    for category, keys in ATEN_CATEGORIES:
        if any(k in name for k in keys):
            return category
    return "other"


def profile_ops(step: Callable[[], object], iters: int, top: int = 20) -> tuple[float, float, float, dict]:
    """:func:`profile_counts` plus the ATen ops that launched GPU work, from one profile with CPU
    activity: ``aten_ops`` [[op, category, us per step, calls per step]] ranked by the GPU time of the
    kernels each launched itself (self device time; the rest of the ``top``), and ``aten_ms`` {category:
    ms per step} with ``fused``: kernel time launched outside any ATen op (Triton, nvFuser)."""
    from torch.profiler import ProfilerActivity, profile

    _sync()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                step()
            _sync()
    kernels, memops, dev_us = _device_counts(prof)
    rows = []
    for avg in prof.key_averages():
        if not avg.key.startswith("aten::"):
            continue
        self_us = getattr(avg, "self_device_time_total", None)
        if self_us is None:
            self_us = getattr(avg, "self_cuda_time_total", 0.0)
        if self_us and self_us > 0:
            rows.append([avg.key, aten_category(avg.key), self_us / iters, avg.count / iters])
    rows.sort(key=lambda r: -r[2])
    per_cat = {c: 0.0 for c in ("matmul", "conv", "sdpa", "other")}
    for _, cat, us, _ in rows:
        per_cat[cat] += us / 1e3
    per_cat["fused"] = max(0.0, dev_us / iters / 1e3 - sum(per_cat.values()))
    return kernels / iters, memops / iters, dev_us / iters, {"aten_ops": rows[:top], "aten_ms": per_cat}


@dataclass(frozen=True)
class HostTiming:
    """Host time per call: ``per_call_us`` is the best batch mean, ``median_us`` the median batch."""

    per_call_us: float
    median_us: float
    batches: int
    calls_per_batch: int

    @property
    def spread(self) -> float:
        """median / best - 1: how much a typical batch lost to interference."""
        return self.median_us / self.per_call_us - 1.0 if self.per_call_us > 0 else 0.0


def host_time(
    step: Callable[[], object],
    *,
    batches: int = 20,
    calls_per_batch: int = 100,
    warmup: int = 50,
    sync: Optional[Callable[[], None]] = None,
    clock: Callable[[], float] = time.perf_counter,
) -> HostTiming:
    """THE host-time measurement of this project (perf and scripts/host_latency.py use it).

    ``warmup`` calls, then ``batches`` batches of ``calls_per_batch`` calls back to back; each
    batch starts after a synchronize (an empty launch queue) and its span ends when the last
    call returns, so the synchronize is outside it; the garbage collector is off during the
    batches.  Short batches keep the launch queue from filling (a full queue would make a call
    wait for the GPU).  The best batch mean is the number (interference only ever adds time).
    """
    sync = device_sync() if sync is None else sync
    for _ in range(warmup):
        step()
    n = max(1, calls_per_batch)
    samples = [(t1 - t0) / n * 1e6 for t0, t1, _ in timed_batches(step, batches, n, sync, clock)]
    return HostTiming(min(samples), statistics.median(samples), len(samples), n)


def timed_batches(step: Callable[[], object], batches: int, calls: int, sync: Callable[[], None],
                  clock: Callable[[], float]) -> list[tuple[float, float, float]]:
    """(start, last call returned, synchronized) of each batch of `calls` back-to-back calls: each
    batch starts synchronized (an empty launch queue); the garbage collector is off throughout."""
    spans: list[tuple[float, float, float]] = []
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for _ in range(max(1, batches)):
            sync()
            t0 = clock()
            for _ in range(calls):
                step()
            t1 = clock()
            sync()
            spans.append((t0, t1, clock()))
    finally:
        if gc_was_on:
            gc.enable()
    return spans


def host_floor_us(batches: int = 10, calls_per_batch: int = 200) -> float:
    """Host time of one tiny eager CUDA op (an in-place add on one element): the process's floor.

    Measured at the start and the end of a run; if it grew, something in the process (e.g. CUPTI
    left attached by a profile) taxes every later host measurement.
    """
    x = torch.zeros(1, device="cuda")
    return host_time(lambda: x.add_(1.0), batches=batches, calls_per_batch=calls_per_batch, warmup=50).per_call_us


def ensure_cupti_teardown() -> str:
    """Ask Kineto to finalize CUPTI at the end of every torch.profiler session.

    Without it (Kineto's default) CUPTI stays attached after the first profile and every later
    CUDA API call of the process pays for its callbacks, which taxes host timings taken after a
    profile.  An explicit setting by the caller wins (``TEARDOWN_CUPTI=0`` turns this off, e.g.
    if a CUDA/CUPTI version crashes re-initialising CUPTI with CUDA graphs).  Returns the value.
    """
    return os.environ.setdefault("TEARDOWN_CUPTI", "1")


@dataclass(frozen=True)
class StepTiming:
    """Per-step numbers of :func:`step_timing`, in milliseconds."""

    step_ms: float
    step_ms_median: float
    enqueue_ms: float
    enqueue_ms_median: float
    batches: int
    steps_per_batch: int


def summarize_steps(batch_spans: Sequence[tuple[float, float, float]], steps: int) -> StepTiming:
    """(start, last call returned, synchronized end) of each batch, in seconds -> StepTiming."""
    if not batch_spans or steps < 1:
        raise ValueError("need at least one batch of at least one step")
    walls = [(end - start) / steps * 1e3 for start, _, end in batch_spans]
    enqueues = [(returned - start) / steps * 1e3 for start, returned, _ in batch_spans]
    return StepTiming(min(walls), statistics.median(walls), min(enqueues), statistics.median(enqueues),
                      len(batch_spans), steps)


def steps_per_batch(step_s: float, target_s: float, lo: int, hi: int) -> int:
    """Steps that make a batch last about ``target_s`` given one step's wall time, in [lo, hi]."""
    if step_s <= 0 or not math.isfinite(step_s):
        return hi
    return max(lo, min(hi, math.ceil(target_s / step_s)))


def step_timing(
    step: Callable[[], object],
    *,
    batches: int,
    steps: int,
    sync: Optional[Callable[[], None]] = None,
    clock: Callable[[], float] = time.perf_counter,
) -> StepTiming:
    """Step time as a user sees it: ``batches`` batches of ``steps`` steps back to back.

    Each batch starts synchronized; its enqueue span ends when the last step call returns, its
    wall span after the synchronize that follows (so it holds the GPU tail of the batch).  GC is
    off during the batches, as in :func:`host_time`.
    """
    sync = device_sync() if sync is None else sync
    return summarize_steps(timed_batches(step, batches, steps, sync, clock), steps)


def dynamo_nvf_stat(field: str) -> Optional[int]:
    """dynamo_nvf.STATS.<field> (nvfuser_calls, fallbacks), or None when dynamo_nvf was never
    imported (no nvf backend)."""
    mod = sys.modules.get("dynamo_nvf")
    stats = getattr(mod, "STATS", None) if mod is not None else None
    return getattr(stats, field, None)


def dynamo_nvf_fallback_reasons(since: int) -> list[str]:
    """Why each region counted in dynamo_nvf.STATS.fallbacks after it was `since` went to eager
    (its name, ops and nvFuser's error); [] when dynamo_nvf was never imported."""
    stats = sys.modules.get("dynamo_nvf.runtime.stats")
    return stats.fallback_reasons(since) if stats is not None else []


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


def _step_through(be: Backend, inst: Instance, compiled: Callable) -> Callable[[], object]:
    """A step of `inst` through an already wrapped callable (the dynamic-shape run keeps one)."""
    if be.cuda_graphs:
        mark = mark_step(be)
        return lambda: (mark(), inst.call(compiled))[1]
    return lambda: inst.call(compiled)


class Runner:
    """Measures workloads x backends on the current CUDA device."""

    def __init__(self, config: MeasureConfig = DEFAULT_CONFIG, progress: Optional[Progress] = None):
        self.config = config
        self.progress = progress or (lambda _msg: None)
        self.roofline: Optional[dict] = None
        self.host_floor: dict = {}
        self.clock: Callable[[], float] = time.monotonic  # what a run's deadline is read on
        self._flush: Optional[torch.Tensor] = None
        #: "workload/backend" of the pair after which the CUDA context was lost (the run stopped), or None.
        self.device_lost: Optional[str] = None
        if config.cupti_teardown:
            ensure_cupti_teardown()

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
        return hide_host_sleep_cycles(step)

    def measure_roofline(self) -> dict:
        """Copy bandwidth for this run; failures are recorded, not raised."""
        try:
            self.roofline = copy_roofline(self.config.roofline_mib)
        except Exception as exc:  # noqa: BLE001  (recorded in the results)
            self.roofline = {"error": format_error(exc)}
        return self.roofline

    def measure_host_floor(self, when: str) -> None:
        """The host floor (:func:`host_floor_us`) at ``when`` ("start" / "end") of the run."""
        try:
            self.host_floor[f"{when}_us"] = host_floor_us()
        except Exception as exc:  # noqa: BLE001
            self.host_floor[f"{when}_error"] = format_error(exc)

    def _compiled(self, wl: Workload, be: Backend, tiny: bool):
        reset_compile_state()
        inst = wl.instantiate("cuda", tiny=tiny)
        return inst, backend_step(be, inst)

    def _peak_memory(self, step: Callable[[], object], rec: dict) -> None:
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

    # -- one pair ----------------------------------------------------------------
    def measure(self, wl: Workload, be: Backend) -> dict:
        """All metrics of one (workload, backend) pair; never raises for workload failures."""
        if wl.measure is not None:
            return wl.measure(self, wl, be)
        if wl.timing == "step":
            return self.measure_steps(wl, be)
        cfg = self.config
        rec = empty_record()
        inst = step = None
        try:
            try:
                inst, step = self._compiled(wl, be, tiny=False)
                rec["compile_s"] = first_call_then_warmup(step, cfg.warmup)
                with gpu_turn():
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

            with gpu_turn():
                if cfg.profile:
                    try:
                        rec["kernels"], rec["memops"], rec["kernel_us"] = profile_counts(step, cfg.profile_iters)
                    except Exception as exc:  # noqa: BLE001
                        _fail(rec, "profile", exc)
                self._peak_memory(step, rec)
        finally:
            del inst, step
            if rec["error"] or not cfg.host:
                _cleanup_into(rec)

        if cfg.host and not rec.get("device_lost"):
            self._measure_host(wl, be, rec)
        return rec

    def _measure_host(self, wl: Workload, be: Backend, rec: dict) -> None:
        cfg = self.config
        tiny = step = None
        try:
            tiny, step = self._compiled(wl, be, tiny=True)
            rec["host_compile_s"] = wall_us_per_call(step, calls=1) * 1e-6
            per_batch = max(1, cfg.host_iters // max(1, cfg.host_repeats))
            timing = host_time(step, batches=cfg.host_repeats, calls_per_batch=per_batch, warmup=cfg.host_warmup)
            rec["host_us"] = timing.per_call_us
            rec["host_us_median"] = timing.median_us
        except Exception as exc:  # noqa: BLE001
            _fail(rec, "host", exc)
        finally:
            del tiny, step
            _cleanup_into(rec)  # the pair is done

    def measure_lengths(self, be: Backend, build: Callable[[], torch.nn.Module],
                        inputs_at: Callable[[int], tuple], lengths: Sequence[int]) -> dict:
        """One compiled model, inference at each of `lengths` in turn (the shortest first, as a
        server warms up): per length the first call's seconds, the graphs Dynamo compiled for it (0:
        no recompile) and the step time; ``recompiles`` is the graphs compiled after the first
        length, ``step_ms`` the geomean over the lengths."""
        from torch._dynamo.utils import counters

        rec = empty_record()
        model = step = None
        try:
            reset_compile_state()
            torch.manual_seed(0)
            model = build()
            for p in model.parameters():
                p.requires_grad_(False)
            firsts, graphs, steps = [], [], []
            compiled = be.wrap(model)
            for length in lengths:
                torch.manual_seed(1)
                inst = Instance(fn=model, inputs=inputs_at(length))
                step = _step_through(be, inst, compiled)
                before = int(counters["stats"]["unique_graphs"])
                firsts.append(first_call_then_warmup(step, self.config.model_warmup))
                graphs.append(int(counters["stats"]["unique_graphs"]) - before)
                with gpu_turn():
                    steps.append(self._step_timing(step).step_ms)
            rec.update(dyn_lengths=list(lengths), dyn_first_s=firsts, dyn_graphs=graphs, dyn_step_ms=steps,
                       recompiles=sum(graphs[1:]), compile_s=firsts[0],
                       step_ms=geomean(steps))
        except Exception as exc:  # noqa: BLE001
            _fail(rec, "run", exc)
        finally:
            del model, step
            _cleanup_into(rec)
        return rec

    def _step_timing(self, step: Callable[[], object]) -> StepTiming:
        cfg = self.config
        one = wall_us_per_call(step, calls=2) * 1e-6
        n = steps_per_batch(one, cfg.model_batch_s, cfg.model_min_steps, cfg.model_max_steps)
        return step_timing(step, batches=cfg.model_batches, steps=n)

    def _time_steps(self, wl: Workload, be: Backend, step: Callable[[], object], rec: dict) -> None:
        """Step timing with nvFuser calls counted, peak memory, then (last, so no host timing of the
        pair runs after it) torch.profiler; one GPU turn (perf/gpu_turn.py)."""
        cfg = self.config
        try:
            before = dynamo_nvf_stat("nvfuser_calls") if be.nvf else None
            timing = self._step_timing(step)
            after = dynamo_nvf_stat("nvfuser_calls") if be.nvf else None
        except Exception as exc:  # noqa: BLE001
            _fail(rec, "run", exc)
            return
        rec.update(
            step_ms=timing.step_ms,
            step_ms_median=timing.step_ms_median,
            enqueue_ms=timing.enqueue_ms,
            enqueue_ms_median=timing.enqueue_ms_median,
            steps_per_batch=timing.steps_per_batch,
        )
        if before is not None and after is not None:
            rec["nvfuser_calls"] = (after - before) / (timing.batches * timing.steps_per_batch)

        self._peak_memory(step, rec)

        if cfg.profile:
            try:
                if wl.aten_ops:
                    kernels, memops, dev_us, ops = profile_ops(step, cfg.model_profile_steps)
                    rec.update(ops)
                else:
                    kernels, memops, dev_us = profile_counts(step, cfg.model_profile_steps)
                rec.update(kernels=kernels, memops=memops, kernel_ms=dev_us / 1e3)
            except Exception as exc:  # noqa: BLE001
                _fail(rec, "profile", exc)

    def measure_steps(self, wl: Workload, be: Backend) -> dict:
        """A model pair: first call, warm-up, step/enqueue timing with nvFuser calls counted, peak
        memory, then (last, so no host timing of the pair runs after it) torch.profiler."""
        cfg = self.config
        rec = empty_record()
        inst = step = None
        fell_back = (dynamo_nvf_stat("fallbacks") or 0) if be.nvf else None
        try:
            try:
                inst, step = self._compiled(wl, be, tiny=False)
                if wl.check is not None:
                    rec["compile_s"], checked = wl.check(inst, step)
                    rec.update(checked)
                    for _ in range(cfg.model_warmup):
                        step()
                else:
                    rec["compile_s"] = first_call_then_warmup(step, cfg.model_warmup)
            except Exception as exc:  # noqa: BLE001
                _fail(rec, "run", exc)
                return rec
            with gpu_turn():
                self._time_steps(wl, be, step, rec)
            if fell_back is not None:  # regions that went to eager for good (an nvFuser error), and why
                rec["fallbacks"] = (dynamo_nvf_stat("fallbacks") or 0) - fell_back
                if rec["fallbacks"]:
                    rec["fallback_reasons"] = dynamo_nvf_fallback_reasons(fell_back)
        finally:
            del inst, step
            _cleanup_into(rec)
        return rec

    def remeasure(self, workload: str, backend: str, repeats: int, metric: str = "gpu_us") -> list[float]:
        """Fresh compile, then ``repeats`` independent measurements of ``metric`` (GPU-time medians,
        or best-batch step times for ``step_ms``), for the baseline check."""
        cfg = self.config
        inst = step = None
        try:
            inst, step = self._compiled(REGISTRY[workload], get_backend(backend), tiny=False)
            if metric == "step_ms":
                for _ in range(cfg.model_warmup + 1):
                    step()
                return [self._step_timing(step).step_ms for _ in range(repeats)]
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
    def run(
        self,
        workloads: Sequence[Workload],
        backends: Sequence[str],
        on_pair: Optional[Callable[[dict], None]] = None,
        deadline: Optional[float] = None,
    ) -> dict[str, dict[str, dict]]:
        """results[workload][backend] = record, in the given orders.

        ``on_pair(results)`` runs after every pair (the CLI writes a checkpoint, so a run killed by
        a time limit keeps what it measured).  With a ``deadline`` (a time.monotonic() value) a
        workload starts only if it is predicted to finish by then (its cost times the seconds per
        unit of cost so far), so every workload is either complete or absent; those not run are
        left out of the results (and listed as missing by the report).
        """
        bes = [get_backend(b) for b in backends]
        if self.roofline is None and any(w.timing == "gpu" for w in workloads):
            self.measure_roofline()
        if "start_us" not in self.host_floor:
            self.measure_host_floor("start")
        results: dict[str, dict[str, dict]] = {}
        total = len(workloads) * len(bes)
        i = 0
        spent, cost_done = 0.0, 0.0
        try:
            for wl in workloads:
                predicted = wl.cost * spent / cost_done if cost_done else 0.0
                if deadline is not None and self.clock() + predicted > deadline:
                    left = [w.name for w in workloads if w.name not in results]
                    self.progress(f"time budget: {len(left)} workload(s) not started: {','.join(left)}")
                    return results
                started = self.clock()
                for be in bes:
                    i += 1
                    t0 = time.perf_counter()
                    rec = self.measure(wl, be)
                    results.setdefault(wl.name, {})[be.name] = rec
                    self.progress(_progress_line(i, total, wl.name, be.name, rec, time.perf_counter() - t0))
                    if on_pair is not None:
                        on_pair(results)
                    if rec.get("device_lost"):
                        self.device_lost = f"{wl.name}/{be.name}"
                        self.progress(f"CUDA context lost in {self.device_lost} ({rec['errors'].get('cleanup', '')[:200]}); "
                                      f"stopping: the {total - i} later pair(s) need a fresh process")
                        return results
                    # A full collection over torch/inductor's heap costs ~0.3 s and ran 3x a
                    # pair; freezing what survives a pair keeps later ones to new objects.
                    gc.freeze()
                spent += self.clock() - started
                cost_done += wl.cost
        finally:
            gc.unfreeze()
            if self.device_lost is None:
                reset_compile_state()
                self.measure_host_floor("end")
        return results


def _progress_line(i: int, total: int, wl: str, be: str, rec: dict, wall: float) -> str:
    if rec["error"]:
        what = "ERROR " + rec["error"][:120]
    else:
        parts = []
        if rec.get("gpu_us") is not None:
            parts.append(f"gpu {rec['gpu_us']:.1f}us")
        if rec.get("step_ms") is not None:
            parts.append(f"step {rec['step_ms']:.3f}ms (median +{_pct(rec['step_ms_median'], rec['step_ms'])})")
        if rec.get("enqueue_ms") is not None:
            parts.append(f"enqueue {rec['enqueue_ms']:.3f}ms")
        if rec["kernels"] is not None:
            parts.append(f"{rec['kernels']:g} kernels")
        if rec.get("nvfuser_calls") is not None:
            parts.append(f"{rec['nvfuser_calls']:g} nvFuser calls")
        if rec["host_us"] is not None:
            parts.append(f"host {rec['host_us']:.1f}us (median +{_pct(rec['host_us_median'], rec['host_us'])})")
        if rec.get("compile_s") is not None:
            parts.append(f"compile {rec['compile_s']:.2f}s")
        if rec["errors"]:
            parts.append("errors in " + ",".join(rec["errors"]))
        what = ", ".join(parts)
    return f"[{i}/{total}] {wl} / {be}: {what} ({wall:.1f}s)"


def _pct(median: Optional[float], best: Optional[float]) -> str:
    if median is None or not best:
        return "?"
    return f"{(median / best - 1) * 100:.0f}%"


def with_overrides(config: MeasureConfig, **overrides) -> MeasureConfig:
    """``config`` with CLI overrides applied (None values ignored)."""
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})
