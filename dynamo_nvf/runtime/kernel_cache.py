"""Compiled nvFuser kernels kept across processes (the `kernel_cache` option).

What nvFuser 0.2.36 offers: its Python API (`nvfuser_direct`) has no fusion-cache serialization (it
left with the legacy bindings, Fuser #5917). What remains is `kernel_db`, an on-disk map from a
generated kernel's text and NVRTC options (GPU arch included) to its cubin: a new process still
segments, schedules and generates code, but skips NVRTC, the largest part of a fusion's compile.

kernel_db is unsafe to share: it reads its directory once at open, names new files by its own entry
count (two processes overwrite each other's `kernel_N.cubin`), and its key leaves out nvFuser's and
CUDA's versions. So each process gets a private copy:

- the root holds one folder per (nvFuser version, CUDA version, GPU): a cache from another version
  or GPU is never looked at;
- a process copies the newest valid snapshot of its folder into a private work folder and points
  kernel_db there (TMPDIR during its first compile: kernel_db opens `$TMPDIR/nvfuser_kernel_db`);
- at exit, if it compiled new kernels, it publishes its folder as a new snapshot by an atomic rename,
  and the oldest snapshots are removed past two or past the size cap;
- a snapshot is checked before use (manifest, CSV header and lines, every file present); a bad one
  is skipped with one warning.

kernel_db's lookup can race with a concurrent insert inside nvFuser's parallel segment compile, so
first runs that use the cache compile their segments one after another.

What this cache can save, from nvFuser's own trace of a first BERT-style training step (H100,
nvfuser_direct 0.2.36, scripts/nvf_trace.py, 2026-11-23): of 20.5 s in 13 compiling calls, NVRTC
took 7.3 s (5.3 s of it on the compile pool's threads), segmentation 7.3 s (SegmentCandidateFinder
on the 6 regions nvFuser could not schedule whole: 3309 checkCanSchedule calls, 4.6 s), scheduling
the inner-outer persistent norm backwards 1.8 s and lowering 1.6 s. Only the NVRTC part is cached
here; segmentation and scheduling run again in every process, which is why a warm start took
0.69-1.01x of a cold one (earlier measurements, same GPU). Regions that nvFuser schedules whole
skip the segmenter entirely.

Region by region (H100, 2026-11-24, `scripts/compile_times.py --regions`, nvFuser's profiler on the
first call of a fresh process), LLaMA-style training step: 25.0 s first call, 17.5 s of it in 16
fusions' first runs, 13.1 s of that in their kernels' own compiles; the 9 segmented regions took
13.9 s (0.9-2.0 s each), the 7 single-kernel ones 0.3-0.6 s each. nvFuser's trace of the same step
(15.4 s in compiling calls): segmentation 7.6 s (3032 checkCanSchedule calls, 5.6 s), NVRTC 4.0 s.
BERT-style: 19.9 s in 13 fusions; its four inner-outer persistent norm backwards took 2.7-3.8 s each
(1.4-2.4 s of kernel compile); with `segment_norm_backward` (their column sums in kernels of their
own) 15.6 s. The rest of a first call (Dynamo, aot_autograd, planning, cuBLAS and cuDNN start-up,
eager ops) was about 7.5 s, already 0.3x of the cold call: with nothing but NVRTC's output kept
across processes, a warm start cannot reach 0.3x of a cold one, and nvFuser's bindings hold the GIL
through a compile, so fusions cannot compile side by side in one process.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import shutil
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

log = logging.getLogger("dynamo_nvf")

DB_DIR = "nvfuser_kernel_db"
DB_FILE = "db.csv"
DB_HEADER = "kernel_signature,compile_args,kernel_code_file,cubin_file"
#: kernel_db's own line format (kernel_db.cpp): signature, NVRTC args, .cu file, .cubin file.
_DB_LINE = re.compile(r"^([\w-]+),([\w \+\-\=]+),([\w\-/]+\.cu),([\w\-/]+\.cubin)$")
MANIFEST = "manifest.json"
FORMAT = 1
KEEP_SNAPSHOTS = 2
#: A snapshot being staged for longer than this belongs to a process that died while publishing.
STALE_SECONDS = 3600

#: Options for a first run that may compile: use the DB, and compile segments serially (see above).
ENABLE_OPTIONS = ["kernel_db"]
DISABLE_OPTIONS = ["parallel_compile"]


def default_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dynamo_nvf" / "kernels"


@dataclass(frozen=True)
class CacheKey:
    """What a compiled kernel depends on beyond kernel_db's own key."""

    nvfuser: str
    cuda: str
    device: str

    def folder(self) -> str:
        text = f"nvfuser-{self.nvfuser}_cuda-{self.cuda}_{self.device}"
        return re.sub(r"[^\w.+-]", "_", text)

    def manifest(self) -> dict:
        return {"format": FORMAT, "nvfuser": self.nvfuser, "cuda": self.cuda, "device": self.device}


def current_key() -> CacheKey:
    """The key of this process: nvFuser's version, CUDA's, and the GPU with its compute capability."""
    import torch

    from dynamo_nvf import nvf as nvf_env

    major, minor = torch.cuda.get_device_capability()
    device = f"{torch.cuda.get_device_name()}-sm{major}{minor}"
    return CacheKey(str(nvf_env.nvfuser_version()), str(torch.version.cuda), device)


def snapshot_problem(snapshot: Path, key: CacheKey) -> Optional[str]:
    """Why `snapshot` must not be used, or None when it is sound and made for `key`."""
    try:
        manifest = json.loads((snapshot / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        return f"unreadable manifest ({type(exc).__name__})"
    if manifest != key.manifest():
        return f"made for {manifest}, not {key.manifest()}"
    return db_problem(snapshot / DB_DIR)


def db_problem(db: Path) -> Optional[str]:
    """Why a kernel_db folder is unsound (bad CSV, a missing or empty file), or None."""
    try:
        lines = (db / DB_FILE).read_text().splitlines()
    except OSError as exc:
        return f"no {DB_FILE} ({type(exc).__name__})"
    if not lines or lines[0] != DB_HEADER:
        return f"{DB_FILE} has a bad header"
    for line in lines[1:]:
        match = _DB_LINE.match(line)
        if match is None:
            return f"{DB_FILE} has a bad line: {line[:80]!r}"
        for name in (match.group(3), match.group(4)):
            path = db / name
            if not path.is_file() or path.stat().st_size == 0:
                return f"{name} is missing or empty"
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def entries(db: Path) -> int:
    """Kernels recorded in a kernel_db folder."""
    try:
        return max(0, len((db / DB_FILE).read_text().splitlines()) - 1)
    except OSError:
        return 0


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class KernelCache:
    """One process's view of the cache: its private kernel_db folder and the snapshots it came from."""

    def __init__(self, root: Path, key: CacheKey, max_bytes: int) -> None:
        self.root = Path(root)
        self.key = key
        self.max_bytes = max_bytes
        self.folder = self.root / key.folder()
        self.snapshots = self.folder / "snapshots"
        self.work = self.folder / "work" / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.db = self.work / DB_DIR
        self.loaded_from: Optional[Path] = None
        self.start_entries = 0

    # -- start ----------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Copies the newest sound snapshot into the private folder (an empty one if none), after
        removing what processes that died without publishing left behind."""
        self._remove_leftovers()
        self.work.mkdir(parents=True, exist_ok=True)
        for snapshot in self._snapshots_newest_first():
            problem = snapshot_problem(snapshot, self.key)
            if problem is None:
                shutil.copytree(snapshot / DB_DIR, self.db)
                self.loaded_from = snapshot
                break
            warnings.warn(f"dynamo_nvf: kernel cache snapshot {snapshot} is ignored: {problem}",
                          RuntimeWarning, stacklevel=2)
        self.db.mkdir(exist_ok=True)
        self.start_entries = entries(self.db)
        log.info("dynamo_nvf: kernel cache %s: %d kernel(s) from %s", self.work, self.start_entries,
                 self.loaded_from or "no snapshot")

    def _remove_leftovers(self) -> None:
        """Private folders of processes no longer alive (killed before their atexit ran) and
        snapshot staging folders older than STALE_SECONDS."""
        work = self.folder / "work"
        if work.is_dir():
            for path in work.iterdir():
                pid = path.name.split("-", 1)[0]
                if pid.isdigit() and not _alive(int(pid)):
                    shutil.rmtree(path, ignore_errors=True)
        if self.snapshots.is_dir():
            for path in self.snapshots.iterdir():
                if path.name.startswith(".") and time.time() - path.stat().st_mtime > STALE_SECONDS:
                    shutil.rmtree(path, ignore_errors=True)

    def _snapshots_newest_first(self) -> list[Path]:
        if not self.snapshots.is_dir():
            return []
        found = [p for p in self.snapshots.iterdir() if p.is_dir() and not p.name.startswith(".")]
        return sorted(found, key=lambda p: p.name, reverse=True)

    @contextlib.contextmanager
    def opening(self) -> Iterator[None]:
        """Around every compile that uses kernel_db: it opens `$TMPDIR/nvfuser_kernel_db` on the first
        compile that reaches NVRTC, which need not be the first run (a run may compile no kernel, or
        fail first), and it must never open the shared default folder."""
        saved = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = str(self.work)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved

    # -- end ------------------------------------------------------------------------------------
    def publish(self) -> Optional[Path]:
        """Publishes the private folder as a snapshot if it gained kernels; prunes old snapshots."""
        try:
            if entries(self.db) <= self.start_entries or db_problem(self.db) is not None:
                return None
            self.snapshots.mkdir(parents=True, exist_ok=True)
            now = time.time_ns()  # one reading: seconds and nanoseconds of two readings can disorder names
            name = f"{time.strftime('%Y%m%dT%H%M%S', time.localtime(now // 10**9))}-{now % 10**9:09d}-{os.getpid()}"
            staging = self.snapshots / f".{name}"
            shutil.copytree(self.db, staging / DB_DIR)
            (staging / MANIFEST).write_text(json.dumps(self.key.manifest()))
            final = self.snapshots / name
            os.rename(staging, final)  # atomic: readers see a whole snapshot or none
            self.prune()
            return final
        except OSError as exc:
            log.warning("dynamo_nvf: kernel cache not saved: %s", exc)
            return None
        finally:
            shutil.rmtree(self.work, ignore_errors=True)

    def prune(self) -> None:
        """Keeps the newest KEEP_SNAPSHOTS snapshots, fewer if they pass `max_bytes` together."""
        total = 0
        for index, snapshot in enumerate(self._snapshots_newest_first()):
            total += _size(snapshot)
            if index >= KEEP_SNAPSHOTS or (index > 0 and total > self.max_bytes):
                shutil.rmtree(snapshot, ignore_errors=True)


_ACTIVE: Optional[KernelCache] = None
_FAILED = False


def activate(root: str, max_mb: int) -> Optional[KernelCache]:
    """The process's kernel cache, prepared on first use (None when it cannot be: no CUDA, a bad
    folder; said once). Later calls return the same cache whatever folder they name."""
    global _ACTIVE, _FAILED
    if _ACTIVE is not None or _FAILED:
        return _ACTIVE
    try:
        cache = KernelCache(Path(root) if root else default_root(), current_key(), max_mb * 2**20)
        cache.prepare()
    except Exception as exc:  # the cache is an optimisation: never let it break a program
        _FAILED = True
        warnings.warn(f"dynamo_nvf: kernel cache disabled: {type(exc).__name__}: {exc}", RuntimeWarning,
                      stacklevel=2)
        return None
    atexit.register(cache.publish)
    _ACTIVE = cache
    return cache
