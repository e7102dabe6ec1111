"""Do a backend's loss and gradients match eager's on a perf workload? (issue #10: "outputs and
gradients match eager", under CUDA graphs too).

A plain relative error misleads on real models: some gradients are sums that cancel to almost
nothing (a conv bias ahead of a LayerNorm, weights behind ConvNeXt's 1e-6 layer scale), and there
eager's own bf16 result is mostly rounding noise. So each gradient is judged against a reference in
higher precision (f64 for f32 workloads, f32 for bf16 ones), and a backend may be off the reference
by at most `factor` times eager's own error in the workload's dtype, plus `floor` times the
reference's norm:

    |g_backend - g_ref| <= factor * |g_eager - g_ref| + floor * |g_ref|

    python -m perf.grad_check convnext_train_bf16_small nvf_bookend,nvf_cudagraphs
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

#: Relative floor per workload dtype: what two correct implementations may differ by at least.
FLOORS = {torch.float32: 1e-5, torch.bfloat16: 1e-3, torch.float16: 1e-3}
FACTOR = 4.0


@dataclass
class TensorCheck:
    name: str
    ref_norm: float
    eager_err: float
    backend_err: float
    limit: float

    @property
    def ok(self) -> bool:
        return self.backend_err <= self.limit


def _reference_step(inst, dtype: torch.dtype):
    """The instance's step in higher precision: (loss, grads), on copies of its module and inputs."""
    high = torch.float64 if dtype == torch.float32 else torch.float32
    if not isinstance(inst.fn, torch.nn.Module):
        raise ValueError("the reference step needs a workload whose callable is a module (a model workload)")
    dropouts = [m for m in inst.fn.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0]
    if dropouts and inst.fn.training:
        raise ValueError("a model with active dropout draws other masks in each run: no reference to compare with")
    fn = copy.deepcopy(inst.fn).to(high)
    inputs = [t.detach().to(high).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor)
              and t.is_floating_point() else t for t in inst.inputs]
    leaves = list(fn.parameters()) + [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    loss = fn(*inputs)
    loss.backward()
    return loss.detach(), [t.grad for t in leaves]


def _grads(inst) -> list[Optional[torch.Tensor]]:
    return [None if t.grad is None else t.grad.detach().clone() for t in inst.grads]


def compare(ref: Sequence[Optional[torch.Tensor]], eager: Sequence[Optional[torch.Tensor]],
            got: Sequence[Optional[torch.Tensor]], dtype: torch.dtype, names: Sequence[str],
            factor: float = FACTOR) -> list[TensorCheck]:
    """One TensorCheck per tensor (see the module docstring for the bound)."""
    floor = FLOORS.get(dtype, 1e-3)
    checks = []
    for name, r, e, g in zip(names, ref, eager, got):
        if r is None and g is None and e is None:
            continue
        if r is None or g is None or e is None:
            checks.append(TensorCheck(name, 0.0, 0.0, float("inf"), 0.0))
            continue
        r64 = r.double()
        ref_norm = float(r64.norm())
        eager_err = float((e.double() - r64).norm())
        backend_err = float((g.double() - r64).norm())
        checks.append(TensorCheck(name, ref_norm, eager_err, backend_err, factor * eager_err + floor * ref_norm))
    return checks


def check_workload(name: str, backend_names: Sequence[str], steps: int = 3,
                   report: Callable[[str], None] = print, device: str = "cuda", tiny: bool = False,
                   show_regions: bool = False) -> bool:
    """True when every backend's loss and gradients on `name` pass (after `steps` steps each)."""
    from dynamo_nvf.backend import recording
    from perf.backends import get_backend, reset_compile_state
    from perf.measure import backend_step
    from perf.workloads import REGISTRY

    if steps < 1:
        raise ValueError("steps must be at least 1")
    workload = REGISTRY[name]
    dtype = workload.dtype
    base = workload.instantiate(device, tiny=tiny, seed=0)
    if not base.backward:
        raise ValueError(f"{name} is not a training workload")
    ref_loss, ref_grads = _reference_step(base, dtype)
    eager_loss = base.call().detach()
    eager_grads = _grads(base)
    names = [f"grad {i} {tuple(t.shape)}" for i, t in enumerate(base.grads)]
    all_ok = True
    for backend_name in backend_names:
        reset_compile_state()
        inst = workload.instantiate(device, tiny=tiny, seed=0)
        backend = get_backend(backend_name)
        step = backend_step(backend, inst)
        # cudagraph trees warm up on call 1 and record on call 2: replays start at call 3.
        with recording() as recorder:
            for _ in range(max(steps, 3) if backend.cuda_graphs else steps):
                loss = step()
        if device != "cpu":
            torch.cuda.synchronize()
        loss = loss.detach().clone()
        checks = compare([ref_loss], [eager_loss], [loss], dtype, ["loss"])
        checks += compare(ref_grads, eager_grads, _grads(inst), dtype, names)
        bad = [c for c in checks if not c.ok]
        worst = max(checks, key=lambda c: c.backend_err / max(c.limit, 1e-300))
        report(f"{name} / {backend_name}: {len(checks) - len(bad)}/{len(checks)} tensors within bound; worst "
               f"{worst.name}: err {worst.backend_err:.3g} (eager's {worst.eager_err:.3g}, limit {worst.limit:.3g}, "
               f"|ref| {worst.ref_norm:.3g})")
        for c in bad[:10]:
            report(f"   FAIL {c.name}: err {c.backend_err:.3g}, eager's {c.eager_err:.3g}, limit {c.limit:.3g}, "
                   f"|ref| {c.ref_norm:.3g}")
        all_ok &= not bad
        for plan in recorder.plans:
            for region in plan.regions:
                reason = region.executor_reason or ""
                if region.executor == "eager" and "nvFuser" in reason:
                    report(f"   region fell back: {plan.kind} {region.name}: {reason[:300]}")
                    if show_regions:
                        report(region.fx_code)
                        report(region.definition or "(no definition)")
    return all_ok


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", help="comma-separated training workloads")
    parser.add_argument("backends", help="comma-separated perf backends")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="the workloads' tiny configs")
    parser.add_argument("--show-regions", action="store_true",
                        help="print the FX code and nvFuser definition of each region that fell back")
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ok = True
    for name in args.workloads.split(","):
        ok &= check_workload(name, args.backends.split(","), args.steps, device=device,
                             tiny=args.tiny or device == "cpu", show_regions=args.show_regions)
    print("grad check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
