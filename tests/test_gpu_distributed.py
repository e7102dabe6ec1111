"""Two GPUs: training steps under DDP and FSDP2 with nvf_bookend (and DDP with CUDA graphs) match
eager's, and run on nvFuser.

Launches `torchrun --nproc-per-node 2 -m perf.distributed` (NCCL) on the LLaMA-style perf model in
f32 and reads its JSON: at every step the loss is within tolerance of eager's under the same
wrapper, nothing falls back or fails to plan, every region runs on nvFuser, and no collective is
inside a region. No timing is asserted (the launcher prints step times; see README, Multi-GPU).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from dynamo_nvf import nvf as nvf_env
from helpers import REPO, env_with_repo

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser"),
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices"),
]

WRAPPERS = ("ddp", "fsdp2", "fsdp2-model")


def _launch(tmp_path, model: str, wrappers: tuple[str, ...], backend: str) -> dict:
    """Runs perf.distributed on two GPUs (f32, 8 steps, --check); its runs by (wrapper, backend)."""
    out = tmp_path / "distributed.json"
    # The machine's NCCL settings (NCCL_NVLS_ENABLE=0 and the like) are passed on unchanged.
    env = env_with_repo()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "perf.distributed", "--model", model, "--wrappers", ",".join(wrappers),
           "--backends", f"eager,{backend}", "--steps", "8", "--warmup", "3", "--dtype", "f32",
           "--json", str(out), "--check", "--timeout", "240"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    assert doc["world_size"] == 2 and doc["dist_backend"] == "nccl" and doc["problems"] == []
    return {(r["wrapper"], r["backend"]): r for r in doc["runs"]}


def _check_nvf(runs: dict, wrappers: tuple[str, ...], backend: str) -> None:
    for wrapper in wrappers:
        nvf, eager = runs[(wrapper, backend)], runs[(wrapper, "eager")]
        assert nvf["error"] is None and eager["error"] is None
        assert nvf["losses_match"] is True, (wrapper, nvf["losses"], eager["losses"])
        assert nvf["fallbacks"] == 0 and nvf["planning_errors"] == 0, wrapper
        assert nvf["communication_in_regions"] == 0
        assert nvf["regions"] > 0 and nvf["nvfuser_calls"] > 0, wrapper
        if backend == "nvf_cudagraphs":  # every graph replays; regions ran on nvFuser while recording
            assert nvf["cuda_graphs_refused"] == [], nvf["cuda_graphs_refused"]
            assert nvf["cuda_graphs_captured"] == sum(nvf["graphs"].values()), wrapper
        else:
            assert nvf["nvfuser_calls_per_step"] > 0, wrapper
        assert nvf["eager_region_calls_per_step"] == 0, wrapper
        assert nvf["peak_mem_mib"] > 0
    assert runs[("ddp", backend)]["graphs"]["forward"] >= 2  # DDPOptimizer split it


def test_ddp_and_fsdp2_training_matches_eager_on_nvfuser(tmp_path):
    _check_nvf(_launch(tmp_path, "llama", WRAPPERS, "nvf_bookend"), WRAPPERS, "nvf_bookend")


def test_ddp_training_with_cuda_graphs_matches_eager_on_nvfuser(tmp_path):
    """DDP with CUDA graphs (options={"cuda_graphs": True}): each piece DDPOptimizer splits off
    replays as a CUDA graph, the all-reduces run from autograd hooks between them."""
    _check_nvf(_launch(tmp_path, "llama", ("ddp",), "nvf_cudagraphs"), ("ddp",), "nvf_cudagraphs")


def test_a_ddp_training_process_ends_cleanly_with_its_model_alive():
    """Under torchrun's environment nvFuser's multi-device Communicator, left on, set up a TCPStore
    and NCCL groups of its own and tore them down at interpreter exit: the LLaMA-style DDP step's
    processes ended in heap corruption ("corrupted size vs. prev_size", SIGABRT or SIGSEGV) after
    their last line, four runs in four. The backend turns it off (nvf.DISABLED_NVFUSER_OPTIONS)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(REPO / "tests" / "distributed_exit_main.py")]
    env = dict(env_with_repo(), PYTHONFAULTHANDLER="1")
    for inherited in ("NVFUSER_DISABLE", "PYTORCH_NVFUSER_DISABLE"):  # each rank must set it itself
        env.pop(inherited, None)
    for _ in range(2):
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-4000:]
        assert proc.stdout.count("steps ok") == 2, output[-4000:]
        assert "Fatal Python error" not in output and "corrupted" not in output, output[-4000:]


def test_regions_run_on_the_gpu_of_their_tensors():
    """One process, tensors on cuda:1 while cuda:0 is current (as on rank 1 without set_device): a
    region with inputs runs on nvFuser on cuda:1; a region of factory ops alone (which nvFuser would
    run on cuda:0) runs eagerly; outputs stay on cuda:1 and match eager."""
    from dynamo_nvf import STATS
    from helpers import assert_same, compile_fn
    from dynamo_nvf.backend import recording

    def f(x):
        y = torch.relu(x) * 2 + 1  # a region with a tensor input
        c = torch.full((4, 8), 2.0, device=x.device) * 3 + 1  # a region without one
        return y, c

    x = torch.randn(4, 8, device="cuda:1")
    compiled = compile_fn(f, {"strict": True})  # strict: a fallback would raise
    before = STATS.snapshot()
    with torch.no_grad(), recording() as rec:
        y, c = compiled(x)
        expected = f(x)
    assert y.device == c.device == torch.device("cuda:1")
    assert_same((y, c), expected)
    (plan,) = rec.plans
    executors = sorted((r.executor, r.executor_reason) for r in plan.regions)
    assert len(executors) == 2, executors
    assert executors[0][0] == "eager" and "cuda:0" in executors[0][1]
    assert executors[1][0] == "nvfuser"
    assert STATS.nvfuser_calls > before["nvfuser_calls"] and STATS.fallbacks == before["fallbacks"]
