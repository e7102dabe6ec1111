"""Where cudagraph trees' "storage data ptrs are not allocated in pool" comes from, and whether the
graph's results still match eager's (the convnext_train failure of 2026-11-23).

    python scripts/pool_diag.py convnext_train_bf16_small nvf_cudagraphs

Prints, for every failing pool check: which check (before or after a warm-up run), and for each
pointer it names the segment holding it (pool id, block start or interior, block state) and the region
outputs that had that storage. Then compares the last step's loss and gradients with eager's.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dynamo_nvf  # noqa: E402,F401
import torch._inductor.cudagraph_trees as trees  # noqa: E402
from dynamo_nvf.runtime import region as region_module  # noqa: E402
from perf.backends import get_backend  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402

RECORDS: dict[int, list[str]] = {}  # storage data ptr -> "region out i (first-call?)"
CALLS = {"n": 0}
_call = region_module.RegionRuntime.__call__


def _traced(self, *args):
    first = self._fast is None and not self._by_descriptor
    out = _call(self, *args)
    CALLS["n"] += 1
    for i, o in enumerate(out if isinstance(out, (list, tuple)) else [out]):
        if isinstance(o, torch.Tensor) and o.is_cuda and o.numel():
            ptr = o.untyped_storage().data_ptr()
            RECORDS.setdefault(ptr, []).append(
                f"{self.plan.name} out {i} {tuple(o.shape)} {o.dtype} call#{CALLS['n']}"
                f"{' FIRST' if first else ''} executor={self.plan.executor} fixups={len(self._fast.fixups) if self._fast else '-'}")
    return out


region_module.RegionRuntime.__call__ = _traced
_check = trees.check_memory_pool


def _diag_check(device, pool_id, live):
    try:
        _check(device, pool_id, live)
    except Exception as exc:  # noqa: BLE001
        print("=== pool check failed:", str(exc)[:160], flush=True)
        print("".join(traceback.format_stack(limit=6)[:-1]), flush=True)
        ptrs = {s.data_ptr() for s in live if s()}
        segments = torch.cuda.memory_snapshot()
        starts = {}
        for seg in segments:
            addr = seg["address"]
            for block in seg["blocks"]:
                starts[addr] = (seg.get("segment_pool_id"), block["state"], block["size"], seg["address"], seg["total_size"])
                addr += block["size"]
        bad = [p for p in ptrs if not (p in starts and tuple(starts[p][0]) == tuple(pool_id)
                                        and starts[p][1] == "active_allocated")]
        print(f"{len(bad)} of {len(ptrs)} live storages not at an allocated block start in pool {pool_id}")
        for p in sorted(bad)[:60]:
            where = starts.get(p)
            if where is None:
                inside = [s for s in segments if s["address"] <= p < s["address"] + s["total_size"]]
                where = (f"interior of segment pool={inside[0].get('segment_pool_id')} "
                         f"seg={inside[0]['address']:#x}+{p - inside[0]['address']}") if inside else "in no segment"
            print(f"  {p:#x}: {where} | {RECORDS.get(p, ['not a region output'])[-3:]}")
        raise


trees.check_memory_pool = _diag_check


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / (b.float().norm() + 1e-12))


def main(name: str, backend_name: str, steps: int = 6) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    backend = get_backend(backend_name)
    inst = REGISTRY[name].instantiate("cuda", seed=0)
    fn = backend.wrap(inst.fn)
    for _ in range(steps):
        if backend.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        out = inst.call(fn)
    torch.cuda.synchronize()
    got_loss = out.detach().float().clone()
    got = [None if t.grad is None else t.grad.detach().clone() for t in inst.grads]
    ref_inst = REGISTRY[name].instantiate("cuda", seed=0)
    ref_loss = ref_inst.call().detach().float()
    worst = max((_rel(g, t.grad) if g is not None and t.grad is not None else float(g is not t.grad)
                 for g, t in zip(got, ref_inst.grads)), default=0.0)
    print(f"{name} / {backend_name}: {steps} steps; loss {got_loss.item():.5g} vs eager {ref_loss.item():.5g}; "
          f"worst grad rel. error {worst:.2e} over {len(got)} grads (a rough check: perf.grad_check is the real one); "
          f"region calls {CALLS['n']}")
    return 0 if worst < 5e-2 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 6))
