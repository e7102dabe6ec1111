"""The backend under torch.distributed, on the CPU over gloo (regions run eagerly here).

* Collectives (functional collectives, c10d, DTensor, FSDP2's buffer ops) stay in PyTorch with the
  communication reason, and no region straddles a collective: a traced function with an all-gather,
  an all-reduce and a reduce-scatter, in a process group of one.
* The launcher `perf.distributed` under torchrun with two processes: DDP (graphs split by Dynamo's
  DDPOptimizer), FSDP2 with compiled blocks and FSDP2 with the whole model compiled; the losses of
  every step match eager's under the same wrapper, nothing falls back.
* The launcher in one process with bf16 (autocast under DDP, MixedPrecisionPolicy under FSDP2).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

import dynamo_nvf
from dynamo_nvf.ops.registry import COMMUNICATION, deliberate_eager_reason
from dynamo_nvf.plan import GraphPlan
from helpers import check_training, env_with_repo

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def process_group_of_one():
    """A gloo process group of this process alone, destroyed afterwards."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------ the table


def test_communication_ops_are_deliberately_eager():
    import torch.distributed.fsdp  # noqa: F401  (defines torch.ops.fsdp.*)
    import torch.distributed.tensor  # noqa: F401  (defines torch.ops._dtensor.*)

    communication = [
        torch.ops._c10d_functional.all_gather_into_tensor.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        torch.ops._c10d_functional.all_reduce.default,
        torch.ops._c10d_functional.wait_tensor.default,
        torch.ops._c10d_functional.all_reduce,  # a packet
        torch.ops._c10d_functional_autograd.all_gather_into_tensor.default,
        torch.ops.c10d_functional.all_reduce.default,
        torch.ops.c10d.allreduce_.default,
        torch.ops._dtensor.shard_dim_alltoall.default,
        torch.ops.fsdp.all_gather_copy_in.default,
        torch.ops.fsdp.split_with_sizes_copy.default,
        torch.ops.fsdp.chunk_cat.default,
    ]
    for op in communication:
        assert deliberate_eager_reason(op) == COMMUNICATION, op
    for op in (torch.ops.aten.add.Tensor, torch.ops.prims.convert_element_type.default, torch.add, len):
        assert deliberate_eager_reason(op) is None, op
    assert deliberate_eager_reason(torch.ops.aten.mm.default) != COMMUNICATION  # a matmul, for another reason


# ------------------------------------------------------------------------------------ traced collectives


def _collective_step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Compute on both sides of an all-gather, an all-reduce and a reduce-scatter; the last sum also
    reads `h`, from before every collective, which would tempt a region across them."""
    group = dist.group.WORLD
    h = torch.tanh(x * w) + 1
    g = funcol.all_gather_single_autograd(h, 0, group) if hasattr(funcol, "all_gather_single_autograd") \
        else funcol.all_gather_tensor_autograd(h, 0, group)
    r = funcol.all_reduce(g * 2 + 1, "sum", group)
    y = torch.relu(r + g.sin()) * w
    rs = funcol.reduce_scatter_single_autograd if hasattr(funcol, "reduce_scatter_single_autograd") \
        else funcol.reduce_scatter_tensor_autograd
    s = rs(y, "sum", 0, group)
    return (s.exp() + h).sum(-1)


def _related(plan: GraphPlan, start: str, forward: bool) -> set[str]:
    """Names of the nodes reachable from `start` along the plan's edges (users or producers)."""
    inputs = {n.name: n.inputs for n in plan.nodes}
    users: dict[str, list[str]] = {}
    for name, ins in inputs.items():
        for i in ins:
            users.setdefault(i, []).append(name)
    seen: set[str] = set()
    frontier = [start]
    while frontier:
        node = frontier.pop()
        for nxt in (users.get(node, []) if forward else inputs.get(node, [])):
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return seen


def _is_collective(op: str) -> bool:
    return op.startswith("_c10d_functional.")


def test_collectives_stay_eager_and_no_region_straddles_a_wait(process_group_of_one):
    x, w = torch.randn(8, 16), torch.randn(16)
    plans = check_training(_collective_step, [x, w], {"plan_cpu_as_cuda": True})
    assert {p.kind for p in plans} == {"forward", "backward"}
    for plan in plans:
        collectives = [n for n in plan.nodes if _is_collective(n.op)]
        waits = [n for n in collectives if n.op.startswith("_c10d_functional.wait_tensor")]
        # forward: all-gather, all-reduce, reduce-scatter; backward: their gradients
        assert len(waits) == 3 and len(collectives) == 6, [n.op for n in collectives]
        for node in collectives:
            assert node.region is None and node.reason == COMMUNICATION, (node.name, node.region, node.reason)
        regions = {n.region for n in plan.nodes if n.region is not None}
        assert len(regions) >= 2
        for wait in waits:
            (launch,) = wait.inputs
            before = _related(plan, launch, forward=False)
            after = _related(plan, wait.name, forward=True)
            for region in regions:
                members = {n.name for n in plan.nodes if n.region == region}
                assert not (members & before and members & after), (plan.kind, wait.name, region)
    forward = next(p for p in plans if p.kind == "forward")
    first_wait = next(n for n in forward.nodes if n.op.startswith("_c10d_functional.wait_tensor"))
    feeding = _related(forward, first_wait.inputs[0], forward=False)
    fed = _related(forward, first_wait.name, forward=True)
    assert any(n.region is not None for n in forward.nodes if n.name in feeding)
    assert any(n.region is not None for n in forward.nodes if n.name in fed)


def test_explain_shows_collectives_with_the_communication_reason(process_group_of_one):
    report = dynamo_nvf.explain(_collective_step, torch.randn(8, 16), torch.randn(16))
    text = str(report)
    assert "_c10d_functional.all_gather_into_tensor" in text and COMMUNICATION in text
    eager = [n for g in report.to_dict()["graphs"] for n in g["eager_nodes"] if _is_collective(n["op"])]
    assert eager and all(n["reason"] == COMMUNICATION for n in eager)


# ------------------------------------------------------------------------------------ the launcher's parts


def test_blocks_and_config_overrides():
    from perf.distributed import model_spec
    from perf.models import MODELS, build_model
    from perf.parallel import blocks

    spec = model_spec("llama", "vocab=8192,layers=3")
    assert spec.tiny.vocab == 8192 and spec.config.layers == 3 and MODELS["llama"].tiny.vocab == 64
    model = build_model(spec, "small", True, "cpu", torch.float32, tiny=True)
    assert [type(b).__name__ for b in blocks(model)] == ["LlamaBlock"] * 3
    for name, block_class in (("gpt", "PreNormBlock"), ("bert", "PostNormBlock"), ("vit", "PreNormBlock"),
                              ("convnext", "ConvNeXtBlock"), ("resnet", "ResNetBlock")):
        found = blocks(build_model(MODELS[name], "small", True, "cpu", torch.float32, tiny=True))
        assert found and {type(b).__name__ for b in found} == {block_class}
    with pytest.raises(SystemExit):
        model_spec("llama", "nonsense=1")


def test_compare_losses_and_failures():
    from perf.distributed import add_comparisons, compare_losses, failures

    same = compare_losses([2.0, 1.5], [2.0, 1.5], 1e-4, 1e-4)
    assert same == {"loss_max_abs_diff": 0.0, "loss_max_rel_diff": 0.0, "losses_match": True}
    off = compare_losses([2.0, 1.6], [2.0, 1.5], 1e-4, 1e-4)
    assert not off["losses_match"] and off["loss_max_abs_diff"] == pytest.approx(0.1)
    assert not compare_losses([2.0, float("nan")], [2.0, 1.5], 1.0, 1.0)["losses_match"]
    records = [
        {"wrapper": "ddp", "backend": "eager", "losses": [2.0, 1.5], "step_ms": 10.0, "error": None},
        {"wrapper": "ddp", "backend": "inductor", "losses": [2.0, 1.5], "step_ms": 8.0, "error": None},
        {"wrapper": "ddp", "backend": "nvf_bookend", "losses": [2.0, 1.6], "step_ms": 6.0, "error": None,
         "fallbacks": 1, "planning_errors": 0, "communication_in_regions": 0},
        {"wrapper": "fsdp2", "backend": "nvf_bookend", "error": "RuntimeError: boom"},
        {"wrapper": "ddp", "backend": "inductor_ro", "losses": [2.0, 1.5], "step_ms": 4.0, "error": None},
        {"wrapper": "ddp", "backend": "nvf_cudagraphs", "losses": [2.0, 1.5], "step_ms": 5.0, "error": None,
         "fallbacks": 0, "planning_errors": 0, "communication_in_regions": 0},
    ]
    add_comparisons(records, 1e-4, 1e-4)
    assert records[2]["step_vs_inductor"] == pytest.approx(0.75) and records[2]["losses_match"] is False
    assert records[1]["losses_match"] is True and "step_vs_inductor" not in records[1]
    # CUDA graphs against CUDA graphs: nvf_cudagraphs over inductor_ro, inductor_ro over inductor
    assert records[5]["step_vs_inductor"] == pytest.approx(1.25) and records[5]["losses_match"] is True
    assert records[4]["step_vs_inductor"] == pytest.approx(0.5)
    problems = failures(records)
    assert len(problems) == 3 and "fallbacks = 1" in problems[1] and "boom" in problems[2]
    # another backend's drift from eager shows, but --check gates the nvf backends only
    records[1].update(losses_match=False, loss_max_abs_diff=0.04)
    assert failures(records) == problems


def test_launcher_arguments():
    from perf.distributed import parse_args

    args = parse_args(["--wrappers", "ddp, fsdp2-model", "--dtype", "f32", "--nvf-options", '{"bookend": false}'])
    assert args.wrappers == ["ddp", "fsdp2-model"] and args.backends == ["eager", "inductor", "nvf_bookend"]
    assert (args.rtol, args.atol) == (1e-4, 1e-4) and args.nvf_options == {"bookend": False}
    assert (parse_args(["--dtype", "bf16"]).rtol, parse_args(["--rtol", "0.5"]).rtol) == (1e-2, 0.5)
    for bad in (["--wrappers", "fsdp1"], ["--backends", "eager,tvm"], ["--steps", "3", "--warmup", "3"],
                ["--bucket-cap-mb", "0.5"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_cuda_graph_backends_compile_with_reduce_overhead():
    from perf.distributed import parse_args
    from perf.parallel import compile_kwargs

    assert parse_args(["--backends", "inductor_ro,nvf_cudagraphs"]).backends == ["inductor_ro", "nvf_cudagraphs"]
    assert compile_kwargs("inductor", "cuda") == {"backend": "inductor"}
    assert compile_kwargs("inductor_ro", "cuda") == {"backend": "inductor", "mode": "reduce-overhead"}
    assert compile_kwargs("nvf_bookend", "cuda", {"bookend": False}) == {
        "backend": "nvf_bookend", "options": {"bookend": False}}
    assert compile_kwargs("nvf_cudagraphs", "cpu", {"bookend": False}) == {
        "backend": "nvf_bookend", "options": {"bookend": False, "plan_cpu_as_cuda": True, "cuda_graphs": True}}


def _launcher_json(path: Path) -> dict:
    doc = json.loads(path.read_text())
    return {(r["wrapper"], r["backend"]): r for r in doc["runs"]}, doc


def _check_nvf_run(run: dict, eager: dict, rtol: float) -> None:
    assert run["error"] is None and eager["error"] is None
    assert run["losses_match"] is True, (run["losses"], eager["losses"])
    assert run["loss_max_rel_diff"] <= rtol
    assert run["losses"][-1] < run["losses"][0]  # it trains (one fixed batch per rank)
    assert run["fallbacks"] == 0 and run["planning_errors"] == 0
    assert run["communication_in_regions"] == 0
    assert run["regions"] > 0 and run["graphs"].get("forward", 0) >= 1 and run["graphs"].get("backward", 0) >= 1
    # on a CPU every region runs eagerly: they are counted as such, never as nvFuser calls
    assert run["nvfuser_calls_per_step"] == 0 and run["eager_region_calls_per_step"] > 0
    assert run["direct_launches_per_step"] == 0


def test_launcher_two_processes_ddp_and_fsdp2_over_gloo(tmp_path):
    out = tmp_path / "distributed.json"
    env = dict(env_with_repo(), OMP_NUM_THREADS="1")
    # vocab 8192 makes the embedding and the head 1 MiB each, so DDP's 1 MiB buckets split the graph.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "perf.distributed", "--device", "cpu", "--tiny", "--model", "llama", "--config", "vocab=8192",
           "--bucket-cap-mb", "1", "--wrappers", "ddp,fsdp2,fsdp2-model", "--backends", "eager,nvf_bookend",
           "--steps", "3", "--warmup", "1", "--dtype", "f32", "--json", str(out), "--check", "--timeout", "120"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs, doc = _launcher_json(out)
    assert doc["world_size"] == 2 and doc["dist_backend"] == "gloo" and doc["problems"] == []
    for wrapper in ("ddp", "fsdp2", "fsdp2-model"):
        _check_nvf_run(runs[(wrapper, "nvf_bookend")], runs[(wrapper, "eager")], rtol=1e-5)
    # Dynamo's DDPOptimizer split the DDP graph at a bucket boundary: several graphs, each planned
    assert runs[("ddp", "nvf_bookend")]["graphs"]["forward"] >= 2
    assert "| ddp " in proc.stdout and "nvf_bookend" in proc.stdout


@pytest.mark.parametrize("model", ["gpt", "resnet"])
def test_launcher_one_process_bf16(tmp_path, model):
    """bf16 under both wrappers; the ResNet-style model's BatchNorm keeps f32 parameters under FSDP2's
    bf16 policy (its f32 running statistics and ATen's kernels need them)."""
    from perf.distributed import main

    assert not dist.is_initialized()
    out = tmp_path / "bf16.json"
    rc = main(["--device", "cpu", "--tiny", "--model", model, "--wrappers", "ddp,fsdp2",
               "--backends", "eager,nvf_bookend", "--steps", "3", "--warmup", "1", "--dtype", "bf16",
               "--json", str(out), "--check"])
    assert rc == 0 and not dist.is_initialized()
    runs, doc = _launcher_json(out)
    assert doc["world_size"] == 1
    assert runs[("ddp", "nvf_bookend")]["precision"] == "bf16 autocast, f32 parameters"
    assert "MixedPrecisionPolicy(param_dtype=bf16" in runs[("fsdp2", "nvf_bookend")]["precision"]
    for wrapper in ("ddp", "fsdp2"):
        _check_nvf_run(runs[(wrapper, "nvf_bookend")], runs[(wrapper, "eager")], rtol=1e-2)


def test_interleaved_runs_train_as_runs_one_after_another(tmp_path):
    """--interleave: every backend's model under a wrapper at once, their steps alternating. Each run
    trains exactly as alone (same losses, step for step), and its plans and counters are its own."""
    from perf.distributed import main

    common = ["--device", "cpu", "--tiny", "--model", "llama", "--wrappers", "ddp,fsdp2", "--backends",
              "eager,nvf_bookend", "--steps", "3", "--warmup", "1", "--dtype", "f32", "--check"]
    assert main(common + ["--json", str(tmp_path / "apart.json")]) == 0
    assert main(common + ["--interleave", "--json", str(tmp_path / "together.json")]) == 0
    apart, _ = _launcher_json(tmp_path / "apart.json")
    together, doc = _launcher_json(tmp_path / "together.json")
    assert sorted(together) == sorted(apart) and doc["problems"] == []
    for key, run in together.items():
        assert run["losses"] == apart[key]["losses"], key
        assert len(run["step_ms_each"]) == 3 and run["peak_mem_mib"] is None
    for wrapper in ("ddp", "fsdp2"):
        nvf, alone = together[(wrapper, "nvf_bookend")], apart[(wrapper, "nvf_bookend")]
        _check_nvf_run(nvf, together[(wrapper, "eager")], rtol=1e-5)
        for figure in ("graphs", "regions", "eager_region_calls_per_step", "nvfuser_calls", "fallbacks"):
            assert nvf[figure] == alone[figure], (wrapper, figure)


# ------------------------------------------------------------------------------------ one GPU per rank


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() < 2,
                    reason="a fake cuda:1 tensor needs a second GPU where CUDA is initialised")
def test_regions_without_cuda_inputs_stay_eager_off_gpu_0():
    """nvFuser runs a fusion with no CUDA tensor input on cuda:0; on rank 1's GPU such a region must
    run eagerly, and a definition whose outputs land on another GPU falls back."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dynamo_nvf.runtime.region import _runs_on_nvfuser, _validate_devices, device_reason, home_device

    with FakeTensorMode():
        on0, on1 = torch.empty(4, device="cuda:0"), torch.empty(4, device="cuda:1")
    cpu_scalar = torch.tensor(2.0)
    graph = torch.fx.Graph()
    graph.output((graph.placeholder("a"),))
    region = torch.fx.GraphModule(nn.Module(), graph)
    out = next(n for n in graph.nodes if n.op == "output")
    out.args[0][0].meta["val"] = on1
    home = home_device(region)
    assert home == torch.device("cuda:1")
    assert "cuda:0" in device_reason([cpu_scalar, 3], home)
    assert device_reason([], home) != ""
    assert device_reason([on1, cpu_scalar], home) == ""
    assert device_reason([cpu_scalar], torch.device("cuda:0")) == ""
    assert device_reason([cpu_scalar], None) == ""
    # Outputs on the CPU (a plan made as for CUDA on CPU tensors): a region without CUDA inputs stays
    # eager there too, on a machine that has a GPU.
    out.args[0][0].meta["val"] = torch.empty(4)
    assert home_device(region) == torch.device("cpu")
    assert "belong on cpu" in _runs_on_nvfuser([], torch.device("cpu"))
    assert "belong on cpu" in _runs_on_nvfuser([cpu_scalar], torch.device("cpu"))
    assert _runs_on_nvfuser([cpu_scalar], home) == ""
    out.args[0][0].meta["val"] = 3
    assert home_device(region) is None
    _validate_devices([on1], home)
    with pytest.raises(RuntimeError, match="output 1 is on cuda:0"):
        _validate_devices([on1, on0], home)
    _validate_devices([on0], None)


def test_launcher_reports_a_failed_run_and_goes_on(tmp_path, monkeypatch):
    import perf.distributed as launcher

    real_wrap = launcher.wrap

    def wrap(model, wrapper, backend, *args, **kwargs):
        if backend == "nvf_bookend":
            raise RuntimeError("no such luck")
        return real_wrap(model, wrapper, backend, *args, **kwargs)

    monkeypatch.setattr(launcher, "wrap", wrap)
    out = tmp_path / "failed.json"
    argv = ["--device", "cpu", "--tiny", "--wrappers", "ddp", "--backends", "nvf_bookend,eager", "--steps", "2",
            "--warmup", "1", "--dtype", "f32", "--json", str(out)]
    assert launcher.main(argv) == 0
    assert launcher.main(argv + ["--check"]) == 1
    runs, doc = _launcher_json(out)
    assert runs[("ddp", "nvf_bookend")]["error"] == "RuntimeError: no such luck"
    assert runs[("ddp", "eager")]["error"] is None and len(runs[("ddp", "eager")]["losses"]) == 2
    assert doc["problems"] == ["ddp/nvf_bookend: RuntimeError: no such luck"]


def test_kernel_overlap_measures_nccl_time_beside_compute():
    from perf.distributed import kernel_overlap

    kernels = [("gemm", 0.0, 100.0), ("ncclDevKernel_AllReduce", 50.0, 150.0), ("nvfuser_pointwise", 140.0, 160.0),
               ("ncclDevKernel_AllReduce", 200.0, 240.0)]
    found = kernel_overlap(kernels, steps=2)
    # compute runs over [0, 100] and [140, 160]: 120 us; NCCL 140 us, of which 50 + 10 beside compute
    assert found["kernel_ms_per_step"] == pytest.approx(0.060)
    assert found["nccl_ms_per_step"] == pytest.approx(0.070)
    assert found["nccl_overlap"] == pytest.approx(60 / 140)
    assert kernel_overlap([("gemm", 0.0, 1.0)], steps=1)["nccl_overlap"] is None


def test_top_kernels_ranks_kernels_by_time_per_step():
    from perf.distributed import top_kernels

    kernels = [("gemm", 0.0, 3000.0), ("relu", 3000.0, 3500.0), ("gemm", 4000.0, 7000.0), ("relu", 7000.0, 8000.0)]
    assert top_kernels(kernels, steps=2) == [["gemm", 3.0, 1.0], ["relu", 0.75, 1.0]]
    assert top_kernels(kernels, steps=1, count=1) == [["gemm", 6.0, 2.0]]
