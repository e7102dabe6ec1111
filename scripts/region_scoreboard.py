"""Each nvFuser region of a perf workload, timed alone on its own recorded inputs: nvFuser's kernels
against inductor compiling the same region graph, and eager; for the regions nvFuser loses, the same
definition under nvFuser's enable/disable options. For reading issue #11's per-kernel gap (which
region loses, by how much, with which launch configuration, and whether any nvFuser option moves it).

    python scripts/region_scoreboard.py llama_train_bf16_small [--dump DIR] [--calls 40]

The nvFuser column compiles each region as the runtime does (a `*` marks fast math); options swept
on a losing region add to those. GPU time per call is torch.profiler's kernel time (memsets and fills included) over `--calls` calls,
each call launched alone (the host is slower than these kernels), so it is each kernel's own latency.
Inductor's code goes to stderr with `TORCH_LOGS=output_code`. Each region's scratch memory (what a call
allocates beyond its outputs, freed before it returns) is listed beside inductor's for the same graph.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from typing import Any, Callable, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import dynamo_nvf  # noqa: E402,F401
from dynamo_nvf import nvf as nvf_env  # noqa: E402
from dynamo_nvf.lowering import build_fusion  # noqa: E402
from dynamo_nvf.runtime import direct_launch  # noqa: E402
from dynamo_nvf.runtime.region import RegionRuntime  # noqa: E402
from perf.backends import get_backend  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402

#: nvFuser options tried on a losing region: name -> (enable options, disable options).
OPTION_SETS: dict[str, tuple[list[str], list[str]]] = {
    "fast_math": (["fast_math"], []),
    "no_magic_zero": ([], ["magic_zero"]),
    "tma_inner_persistent": (["tma_inner_persistent"], []),
    "ws_normalization": (["ws_normalization"], []),
    "tma_pointwise": (["tma_pointwise"], []),
    "tma_reduction": (["tma_reduction"], []),
    "no_welford_vectorization": ([], ["welford_vectorization"]),
    "io_to_lower_precision": (["io_to_lower_precision"], []),
    "no_resize_scheduler": ([], ["resize_scheduler"]),
}


def cuda_kernels(call: Callable[[], Any], iters: int) -> list[Any]:
    """The CUDA kernel events of `iters` calls of `call` (after 3 warm-up calls), in launch order."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            call()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]

def _same_layout_copy(t: Any) -> Any:
    """A copy of a tensor argument with its sizes, strides and storage offset (so its alignment)."""
    if not isinstance(t, torch.Tensor):
        return t
    storage = t.detach().untyped_storage()
    fresh = torch.empty(storage.nbytes(), dtype=torch.uint8, device=t.device)
    fresh.copy_(torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage))
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(fresh.untyped_storage(), t.storage_offset(),
                                                               t.size(), t.stride())


def record_regions() -> list[tuple[str, Any, list, list[str]]]:
    """Patches RegionRuntime._build so each region's first build records (label, graph, inputs, the
    nvFuser enable options the runtime compiles it with)."""
    seen: list[tuple[str, Any, list, list[str]]] = []
    original = RegionRuntime._build

    def recording(self, args):
        seen.append((self.profile_label, self.eager, [_same_layout_copy(a) for a in args],
                     list(self._enable_options)))
        return original(self, args)

    RegionRuntime._build = recording
    return seen


def kernel_time(call: Callable[[], Any], calls: int) -> tuple[float, float, list[str]]:
    """(GPU µs per call, kernels per call, each kernel name of one call with its count and µs per
    call) under torch.profiler."""
    events = cuda_kernels(call, calls)
    names = collections.Counter(e.name for e in events)
    spent: dict[str, float] = collections.defaultdict(float)
    for e in events:
        spent[e.name] += e.device_time
    return (sum(e.device_time for e in events) / calls, len(events) / calls,
            [f"{n[:90]} x{c / calls:g} {spent[n] / calls:.1f}us" for n, c in names.items()])


def scratch_mib(call: Callable[[], Any]) -> float:
    """MiB a call allocates beyond what it returns (freed before it returns: nvFuser's intermediates
    between segments and its work buffers, inductor's temporaries): what the region adds to a step's
    peak memory above its inputs and outputs."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out = call()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()
    del out
    return extra / 2**20


def nvf_call(nvf, graph, args, enable: Sequence[str] = (), disable: Sequence[str] = ()) -> tuple[Any, Any, Callable]:
    fd = build_fusion(nvf, graph, args).fd
    first = fd.execute(list(args), _enable_options=list(enable), _disable_options=list(disable))
    return fd, first, (lambda: fd.execute(list(args), _enable_options=list(enable), _disable_options=list(disable)))


def max_diff(a: Sequence[Any], b: Sequence[Any]) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.is_floating_point():
            worst = max(worst, (x.float() - y.float()).abs().max().item() if x.numel() else 0.0)
    return worst


def launches(fd, args) -> list[str]:
    try:
        captured = direct_launch.captured_launches(fd.fec, list(args), torch.device("cuda"))
    except Exception as exc:  # only for reading
        return [f"(launches unread: {str(exc)[:120]})"]
    out = []
    for step in captured.steps:
        if isinstance(step, direct_launch.KernelLaunch):
            c = step.config
            out.append(f"{step.name[:60]} grid {c.grid} block {c.block} smem {c.dynamic_smem}")
        else:
            out.append("(zeroing)")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--margin-us", type=float, default=0.15, help="sweep options where nvFuser loses by more")
    parser.add_argument("--dump", default="", help="folder for losing regions' CUDA source and heuristics")
    parser.add_argument("--json", default="")
    parser.add_argument("--sweep", default="", help="comma-separated option names (default: all)")
    args = parser.parse_args(argv)
    nvf = nvf_env.nvfuser_module()
    seen = record_regions()
    inst = REGISTRY[args.workload].instantiate("cuda")
    fn = get_backend("nvf_bookend").wrap(inst.fn)
    for _ in range(2):
        inst.call(fn)
    torch.cuda.synchronize()
    rows, definitions = [], set()
    for label, graph, region_args, runtime_options in seen:
        row: dict = {"region": label, "runtime_options": runtime_options, "inputs": [_layout(a) for a in region_args]}
        try:
            fd, nvf_out, call = nvf_call(nvf, graph, region_args, runtime_options)
        except Exception as exc:
            row["error"] = str(exc)[:200]
            rows.append(row)
            continue
        if repr(fd) in definitions:
            continue
        definitions.add(repr(fd))
        row["nvf_us"], row["nvf_kernels"], row["nvf_names"] = kernel_time(call, args.calls)
        row["nvf_scratch_mib"] = scratch_mib(call)
        row["launches"] = launches(fd, region_args)
        try:
            compiled = torch._inductor.compile(graph, list(region_args))
            try:
                compiled(*region_args)
                ind_call = lambda: compiled(*region_args)  # noqa: E731
            except TypeError:
                ind_call = lambda: compiled(list(region_args))  # noqa: E731
            row["inductor_us"], row["inductor_kernels"], row["inductor_names"] = kernel_time(ind_call, args.calls)
            row["inductor_scratch_mib"] = scratch_mib(ind_call)
        except Exception as exc:
            row["inductor_error"] = str(exc)[:200]
        row["eager_us"], row["eager_kernels"], _ = kernel_time(lambda: graph(*region_args), args.calls)
        loses = row.get("inductor_us") is not None and row["nvf_us"] > row["inductor_us"] + args.margin_us
        if loses:
            row["options"] = {}
            wanted = set(args.sweep.split(",")) if args.sweep else set(OPTION_SETS)
            for name, (enable, disable) in OPTION_SETS.items():
                if name not in wanted:
                    continue
                try:
                    _, out, ocall = nvf_call(nvf, graph, region_args, [*runtime_options, *enable], disable)
                    us, n, _ = kernel_time(ocall, args.calls)
                    row["options"][name] = {"us": us, "kernels": n, "max_diff": max_diff(out, nvf_out)}
                except Exception as exc:
                    row["options"][name] = {"error": str(exc).splitlines()[0][:160] if str(exc) else repr(exc)}
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
                safe = label.replace(" ", "_")
                with open(os.path.join(args.dump, f"{safe}.txt"), "w") as f:
                    f.write(graph.code + "\n\n" + repr(fd) + "\n\n")
                    f.write("\n".join(row["launches"]) + "\n\n")
                    try:
                        f.write(fd.fec.get_cuda_kernel(list(region_args)))
                    except Exception as exc:
                        f.write(f"(no source: {exc})")
        rows.append(row)
        print(_line(row), flush=True)
    nvf_total = sum(r.get("nvf_us", 0.0) for r in rows)
    ind_total = sum(r.get("inductor_us", 0.0) for r in rows if "inductor_us" in r)
    nvf_with_ind = sum(r.get("nvf_us", 0.0) for r in rows if "inductor_us" in r)
    print(f"TOTAL nvf {nvf_total:.1f} us over {len(rows)} regions; where inductor compiled: nvf {nvf_with_ind:.1f} "
          f"against inductor {ind_total:.1f} us")
    scratch = sorted(((r.get("nvf_scratch_mib", 0.0), r["region"]) for r in rows), reverse=True)[:5]
    print("largest nvFuser scratch (MiB): " + ", ".join(f"{label} {mib:.1f}" for mib, label in scratch))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def _layout(value: Any) -> str:
    """An argument as shape/strides/dtype (what nvFuser's schedulers see), or its repr."""
    if not isinstance(value, torch.Tensor):
        return repr(value)
    return f"{list(value.shape)}/{list(value.stride())}/{str(value.dtype).replace('torch.', '')}"


def _line(row: dict) -> str:
    head = (f"{row['region'][:44]:44s}{'*' if row.get('runtime_options') else ' '}nvf {row.get('nvf_us', 0):6.2f}us/{row.get('nvf_kernels', 0):.0f}k "
            f"ind {row.get('inductor_us', float('nan')):6.2f}us/{row.get('inductor_kernels', 0):.0f}k "
            f"eager {row.get('eager_us', 0):6.2f}us/{row.get('eager_kernels', 0):.0f}k")
    lines = [head, "    inputs: " + " ".join(row.get("inputs", []))]
    if "nvf_scratch_mib" in row:
        lines.append(f"    scratch MiB (allocated beyond the outputs): nvf {row['nvf_scratch_mib']:.1f} "
                     f"ind {row.get('inductor_scratch_mib', float('nan')):.1f}")
    lines += [f"    nvf: {n}" for n in row.get("nvf_names", [])]
    lines += [f"    launch: {n}" for n in row.get("launches", [])]
    lines += [f"    ind: {n}" for n in row.get("inductor_names", [])]
    for name, o in (row.get("options") or {}).items():
        lines.append(f"    option {name}: " + (f"{o['us']:.2f}us/{o['kernels']:.0f}k diff {o['max_diff']:.2g}"
                                               if "us" in o else o["error"]))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
