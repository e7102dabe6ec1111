"""Each workload in its own process (``--isolate S``), several at once, one per GPU (``--gpus N``).

A model that crashes the process (a segfault in a compiler, a CUDA fault that poisons the context)
or hangs must cost only its own row: every workload runs as ``python -m perf --only NAME ...`` in a
new process group, killed (the group, compile workers included) after ``S`` seconds.  A child's
checkpoint file keeps the pairs it finished; each pair it did not finish gets an error record that
says why: ``[process] killed by SIGSEGV``, ``[process] timed out after 900 s``, or the exit status.
Each child gets an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR``, unless set), so inductor's
first call is a cold compile, as nvFuser's is (dynamo_nvf's kernel cache is off by default).
With ``--gpus N`` N workers take workloads from one queue, each child seeing one GPU
(``CUDA_VISIBLE_DEVICES``), so a 4-GPU machine runs four models at a time.  ``--per-gpu K`` runs K
workers per GPU: their compiles (CPU) overlap, while their timings, profiles and references take
turns on the GPU (perf/gpu_turn.py); each child's inductor gets its share of the CPUs for compile
workers.  The children's files are joined into one document, as ``--report`` joins shards.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

#: Measurement flags passed on to every child (argparse dest -> flag; booleans are switches).
_PASSED_ON = (("iters", "--iters"), ("warmup", "--warmup"), ("profile_iters", "--profile-iters"),
              ("host_iters", "--host-iters"), ("no_host", "--no-host"), ("no_profile", "--no-profile"),
              ("no_l2_flush", "--no-l2-flush"), ("with_launch_gaps", "--with-launch-gaps"), ("quick", "--quick"))


def child_command(args, workload: str, backends: Sequence[str], json_path: Path) -> list[str]:
    """``python -m perf`` measuring one workload with the parent's backends and settings."""
    cmd = [sys.executable, "-m", "perf", "--only", workload, "--backends", ",".join(backends), "--json", str(json_path)]
    for dest, flag in _PASSED_ON:
        value = getattr(args, dest, None)
        if value is True:
            cmd.append(flag)
        elif value not in (None, False):
            cmd += [flag, str(value)]
    return cmd


def describe_exit(returncode: Optional[int], timed_out: bool, timeout_s: float) -> str:
    """Why a child's missing pairs are missing, for their error records."""
    if timed_out:
        return f"[process] timed out after {timeout_s:g} s (process group killed)"
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"[process] killed by {name}"
    if returncode == 3:
        return "[process] not run: the CUDA context was lost in an earlier pair of this process"
    return f"[process] exited with status {returncode} before this pair"


#: Seconds a workload's process may run when ``--isolate`` gives no limit (``--gpus``, ``--per-gpu``).
DEFAULT_TIMEOUT_S = 900.0

#: Process groups of the children running now (``kill_children`` ends them).
_RUNNING: set[int] = set()


def kill_children() -> None:
    """Kills every running child's process group: a parent stopped by a signal leaves no child
    holding the GPU (each runs in a session of its own, so it would outlive the parent)."""
    for pgid in list(_RUNNING):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_children_on_sigterm() -> None:
    """From now on a SIGTERM (`timeout`'s) kills the running children, then exits 143."""
    def stop(signum: int, frame: object) -> None:
        kill_children()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def run_child(cmd: list[str], timeout_s: float, log_path: Path, env: dict) -> tuple[Optional[int], bool]:
    """(return code, timed out); the child runs in its own process group, killed whole on timeout."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _RUNNING.add(proc.pid)
        try:
            return proc.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return proc.returncode, True
        finally:
            _RUNNING.discard(proc.pid)


def merge(docs: Sequence[dict], failures: dict[str, str], workloads: Sequence, backends: Sequence[str],
          config: dict) -> dict:
    """One document from the children's documents; a pair a child did not record gets its
    workload's failure (or "not run" when its child never started)."""
    from .measure import empty_record
    from .report import make_document

    results: dict = {}
    env: dict = {}
    roofline = None
    for doc in docs:
        env = env or dict(doc.get("env") or {})
        roofline = roofline or doc.get("roofline")
        results.update(doc.get("results") or {})
    for wl in workloads:
        why = failures.get(wl.name)
        if why is None:
            continue
        row = results.setdefault(wl.name, {})
        for be in backends:
            if be not in row:
                rec = empty_record()
                rec["error"] = why
                rec["errors"] = {"process": why}
                row[be] = rec
    return make_document(env=env, config=config, backends=backends, workloads={w.name: w.meta() for w in workloads},
                         results=results, roofline=roofline)


def worker_slots(gpus: int, per_gpu: int) -> list[tuple[Optional[int], int]]:
    """(GPU index or None: the visible GPUs as they are, worker number on it) of every worker."""
    gpu_ids: list[Optional[int]] = list(range(gpus)) if gpus > 1 else [None]
    return [(g, k) for k in range(per_gpu) for g in gpu_ids]


def visible_gpus(environ: dict) -> Optional[list[str]]:
    """The devices CUDA_VISIBLE_DEVICES lists, up to the first it would not accept (CUDA stops reading
    there); None where it is not set."""
    if "CUDA_VISIBLE_DEVICES" not in environ:
        return None
    devices = []
    for entry in (d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",")):
        if not entry or entry.startswith("-"):
            break
        devices.append(entry)
    return devices


def slot_env(base: dict, gpu: Optional[int], per_gpu: int, workers: int, lock_dir: Path) -> dict:
    """A worker's environment: its GPU, and with several workers per GPU that GPU's turn lock and
    an even share of the CPUs for inductor's compile workers (unless set)."""
    from .gpu_turn import LOCK_ENV

    env = dict(base)
    device = "0"
    if gpu is not None:
        # The gpu-th of the GPUs this process sees: under CUDA_VISIBLE_DEVICES=2,3, worker 0 gets 2.
        visible = visible_gpus(base)
        if visible is not None and gpu >= len(visible):
            raise ValueError(f"--gpus asks for GPU {gpu + 1} of the {len(visible)} that "
                             f"CUDA_VISIBLE_DEVICES={base['CUDA_VISIBLE_DEVICES']!r} lists")
        device = env["CUDA_VISIBLE_DEVICES"] = visible[gpu] if visible is not None else str(gpu)
    if per_gpu > 1:  # one turn lock per physical GPU, named by the device it runs on
        env[LOCK_ENV] = str(lock_dir / f"gpu{device}.lock")
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    return env


@dataclass
class ChildRun:
    """One finished child: its item, exit, time, files and GPU."""

    name: str
    code: Optional[int]
    timed_out: bool
    took: float
    out: Path
    log: Path
    gpu: Optional[int]

    def log_tail(self, lines: int = 5) -> list[str]:
        return self.log.read_text(errors="replace").strip().splitlines()[-lines:] if self.log.exists() else []


def run_children(items: Sequence[tuple[str, float]], command: Callable[[str, Path], list[str]], *,
                 timeout_s: float, gpus: int, per_gpu: int = 1, deadline: Optional[float] = None,
                 progress: Callable[[str], None] = print, on_done: Callable[[ChildRun], None]) -> None:
    """Runs one child per item (name, cost), ``gpus`` x ``per_gpu`` at a time, longest first; each
    writes ``command(name, out)``'s output file, and ``on_done`` gets each finished child (called
    under one lock). Every child gets an empty inductor cache unless one is set, so inductor's
    first call is cold, as nvFuser's is. With a ``deadline`` (time.monotonic()) an item starts only
    if the seconds per unit of cost so far predict it ends in time."""
    todo: "queue.Queue" = queue.Queue()
    for item in sorted(items, key=lambda it: -it[1]):  # longest first: the last ones fill the gaps
        todo.put(item)
    lock = threading.Lock()
    spent = {"s": 0.0, "cost": 0.0}
    tmp = Path(tempfile.mkdtemp(prefix="perf-isolate-"))
    slots = worker_slots(gpus, per_gpu)

    def worker(gpu: Optional[int], env: dict) -> None:
        while True:
            try:
                name, cost = todo.get_nowait()
            except queue.Empty:
                return
            with lock:
                rate = spent["s"] / spent["cost"] if spent["cost"] else 0.0
            if deadline is not None and time.monotonic() + cost * rate > deadline:  # rate: one worker's
                progress(f"time budget: {name} not started")
                continue
            out, log = tmp / f"{name}.json", tmp / f"{name}.log"
            child_env = dict(env)
            if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:  # inductor's first call cold, as nvFuser's is
                child_env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / f"{name}.inductor-cache")
            t0 = time.monotonic()
            code, timed_out = run_child(command(name, out), timeout_s, log, child_env)
            took = time.monotonic() - t0
            with lock:
                spent["s"] += took
                spent["cost"] += cost
                on_done(ChildRun(name, code, timed_out, took, out, log, gpu))

    threads = [threading.Thread(target=worker, args=(g, slot_env(dict(os.environ), g, per_gpu, len(slots), tmp)),
                                daemon=True) for g, _ in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_isolated(args, workloads: Sequence, backends: Sequence[str], config: dict, *, timeout_s: float, gpus: int,
                 per_gpu: int = 1, deadline: Optional[float] = None, progress: Callable[[str], None] = print,
                 on_update: Optional[Callable[[dict], None]] = None) -> dict:
    """Measures ``workloads`` one process each, ``gpus`` x ``per_gpu`` at a time (gpus 1: the visible
    GPUs as they are); returns the joined document.  With a ``deadline`` (time.monotonic()) a
    workload starts only if the seconds per unit of cost so far predict it ends in time; those left
    are absent."""
    from .report import load_document

    docs: list[dict] = []
    failures: dict[str, str] = {}

    def snapshot() -> dict:
        return merge(docs, failures, workloads, backends, config)

    def done(run: ChildRun) -> None:
        doc = None
        if run.out.exists():
            try:
                doc = load_document(run.out)
            except Exception:  # noqa: BLE001  (a file cut off by the kill)
                doc = None
        if doc is not None:
            docs.append(doc)
        if run.timed_out or run.code != 0 or doc is None:
            failures[run.name] = describe_exit(run.code, run.timed_out, timeout_s)
        where = f"GPU {run.gpu}: " if run.gpu is not None else ""
        status = "ok" if run.name not in failures else failures[run.name]
        progress(f"{where}{run.name}: {status} ({run.took:.0f} s; log {run.log})")
        if run.name in failures:
            for line in run.log_tail():
                progress(f"    | {line[:300]}")
        if on_update is not None:
            on_update(snapshot())

    run_children([(wl.name, wl.cost) for wl in workloads],
                 lambda name, out: child_command(args, name, backends, out),
                 timeout_s=timeout_s, gpus=gpus, per_gpu=per_gpu, deadline=deadline, progress=progress, on_done=done)
    return snapshot()
