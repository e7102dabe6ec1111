"""The on-disk kernel cache's bookkeeping (CPU): private copies, versioned folders, sound snapshots,
atomic publishing, pruning. nvFuser's kernel_db itself runs only on the GPU
(tests/test_gpu_kernel_cache.py); here its files are written by hand in its format."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from dynamo_nvf import Settings
from dynamo_nvf.runtime import kernel_cache as kc

KEY = kc.CacheKey(nvfuser="0.2.36+git7e04d26", cuda="13.0", device="NVIDIA H200-sm90")


def _write_kernels(db: Path, count: int, start: int = 0) -> None:
    """Appends kernels the way kernel_db does: .cu, .cubin and a CSV line each."""
    db.mkdir(parents=True, exist_ok=True)
    csv = db / kc.DB_FILE
    if not csv.exists():
        csv.write_text(kc.DB_HEADER + "\n")
    for n in range(start, start + count):
        (db / f"kernel_{n}.cu").write_text(f"__global__ void nvfuser_pointwise_f0_c1_r0_g{n}() {{}}")
        (db / f"kernel_{n}.cubin").write_bytes(b"\x7fELF" + bytes([n]))
        with csv.open("a") as f:
            f.write(f"nvfuser_pointwise_f0_c1_r0_g{n},--std=c++17 --gpu-architecture=sm_90a -default-device,"
                    f"kernel_{n}.cu,kernel_{n}.cubin\n")


def _process(root: Path, key: kc.CacheKey = KEY) -> kc.KernelCache:
    cache = kc.KernelCache(root, key, max_bytes=2**30)
    cache.prepare()
    return cache


def test_first_process_starts_empty_and_publishes_what_it_compiled(tmp_path):
    first = _process(tmp_path)
    assert first.loaded_from is None and first.start_entries == 0 and (first.db).is_dir()
    _write_kernels(first.db, 3)
    snapshot = first.publish()
    assert snapshot is not None and kc.snapshot_problem(snapshot, KEY) is None
    assert json.loads((snapshot / kc.MANIFEST).read_text())["nvfuser"] == KEY.nvfuser
    assert not first.work.exists()  # the private copy is gone
    second = _process(tmp_path)
    assert second.loaded_from == snapshot and second.start_entries == 3
    assert (second.db / "kernel_2.cubin").read_bytes() == b"\x7fELF\x02"
    assert second.publish() is None  # nothing new compiled: nothing published
    assert len(list((tmp_path / KEY.folder() / "snapshots").iterdir())) == 1


def test_another_nvfuser_version_or_gpu_never_sees_the_cache(tmp_path):
    first = _process(tmp_path)
    _write_kernels(first.db, 2)
    first.publish()
    for other in (kc.CacheKey("0.2.37", KEY.cuda, KEY.device), kc.CacheKey(KEY.nvfuser, "12.8", KEY.device),
                  kc.CacheKey(KEY.nvfuser, KEY.cuda, "NVIDIA H100 80GB HBM3-sm90")):
        cache = _process(tmp_path, other)
        assert cache.loaded_from is None and cache.start_entries == 0
        assert cache.folder != first.folder


def test_a_snapshot_from_another_version_placed_by_hand_is_ignored_with_a_warning(tmp_path):
    stranger = kc.KernelCache(tmp_path, kc.CacheKey("9.9.9", KEY.cuda, KEY.device), 2**30)
    stranger.prepare()
    _write_kernels(stranger.db, 1)
    published = stranger.publish()
    target = tmp_path / KEY.folder() / "snapshots" / published.name
    target.parent.mkdir(parents=True)
    os.rename(published, target)
    with pytest.warns(RuntimeWarning, match="is ignored: made for"):
        cache = _process(tmp_path)
    assert cache.loaded_from is None and cache.start_entries == 0


@pytest.mark.parametrize("damage", ["header", "line", "missing_cubin", "empty_cubin", "manifest"])
def test_a_corrupt_snapshot_is_ignored_with_one_warning_and_an_older_one_used(tmp_path, damage):
    good = _process(tmp_path)
    _write_kernels(good.db, 2)
    older = good.publish()
    newer_process = _process(tmp_path)
    _write_kernels(newer_process.db, 1, start=2)
    newer = newer_process.publish()
    assert newer.name > older.name
    db = newer / kc.DB_DIR
    if damage == "header":
        (db / kc.DB_FILE).write_text("garbage\n")
    elif damage == "line":
        with (db / kc.DB_FILE).open("a") as f:
            f.write("not,a,kernel line\n")
    elif damage == "missing_cubin":
        (db / "kernel_1.cubin").unlink()
    elif damage == "empty_cubin":
        (db / "kernel_1.cubin").write_bytes(b"")
    else:
        (newer / kc.MANIFEST).write_text("{not json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = _process(tmp_path)
    ignored = [w for w in caught if "is ignored" in str(w.message)]
    assert len(ignored) == 1 and newer.name in str(ignored[0].message)
    assert cache.loaded_from == older and cache.start_entries == 2


def test_old_snapshots_are_pruned(tmp_path):
    names = []
    for i in range(4):
        cache = _process(tmp_path)
        _write_kernels(cache.db, 1, start=cache.start_entries)
        names.append(cache.publish().name)
    kept = sorted(p.name for p in (tmp_path / KEY.folder() / "snapshots").iterdir())
    assert kept == sorted(names[-kc.KEEP_SNAPSHOTS:])
    tiny = kc.KernelCache(tmp_path, KEY, max_bytes=1)  # a cap below one snapshot keeps only the newest
    tiny.prune()
    assert [p.name for p in (tmp_path / KEY.folder() / "snapshots").iterdir()] == [names[-1]]


def test_kernel_db_is_pointed_at_the_private_folder_during_every_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", "/somewhere/else")
    cache = _process(tmp_path)
    for _ in range(2):  # kernel_db opens on the first compile that reaches NVRTC, whichever run that is
        with cache.opening():
            assert os.environ["TMPDIR"] == str(cache.work)  # kernel_db opens $TMPDIR/nvfuser_kernel_db
        assert os.environ["TMPDIR"] == "/somewhere/else"


def test_leftovers_of_dead_processes_are_removed(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    folder = tmp_path / KEY.folder()
    dead_work = folder / "work" / f"{dead_pid}-abcd1234"
    live_work = folder / "work" / f"{os.getpid()}-live0000"
    stale = folder / "snapshots" / ".20000101T000000-000000000-1"
    for path in (dead_work, live_work, stale):
        path.mkdir(parents=True)
    os.utime(stale, (0, 0))
    cache = _process(tmp_path)
    assert not dead_work.exists() and not stale.exists()
    assert live_work.exists() and cache.work.exists()


def test_activation_without_a_gpu_warns_once_and_leaves_the_cache_off(monkeypatch, tmp_path):
    monkeypatch.setattr(kc, "_ACTIVE", None)
    monkeypatch.setattr(kc, "_FAILED", False)
    with pytest.warns(RuntimeWarning, match="kernel cache disabled"):
        assert kc.activate(str(tmp_path), 64) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kc.activate(str(tmp_path), 64) is None


def test_kernel_cache_options():
    s = Settings.from_options({"kernel_cache": True, "kernel_cache_dir": "/tmp/k", "kernel_cache_max_mb": 64})
    assert s.kernel_cache and s.kernel_cache_dir == "/tmp/k" and s.kernel_cache_max_mb == 64
    with pytest.raises(TypeError, match="takes a str"):
        Settings.from_options({"kernel_cache_dir": 3})
    assert kc.default_root().parts[-2:] == ("dynamo_nvf", "kernels")
