"""Host cost of a lone GELU between matmuls: an nvFuser region call against ATen's gelu (issue #10).

    python scripts/lone_op_host.py [--layers 8] [--rounds 21] [--steps 100]

A chain of `layers` x (matmul, GELU) in bf16 at a small size (host-bound), compiled with
lone_composites_eager off (each GELU a region of its own) and on (each GELU ATen's kernel), and run
eagerly. Rounds alternate the three; it prints the min and median step time per variant, and the
same for one bare `aten.gelu` against one bare region call (the RegionRuntime of the compiled graph).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dynamo_nvf  # noqa: E402,F401
from dynamo_nvf.backend import recording  # noqa: E402


class Chain(torch.nn.Module):
    def __init__(self, layers: int, d: int) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(d, d, device="cuda", dtype=torch.bfloat16) / d ** 0.5,
                                requires_grad=False) for _ in range(layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w in self.weights:
            x = torch.nn.functional.gelu(x @ w)
        return x


def _time(fn, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Chain(args.layers, args.d)
    x = torch.randn(64, args.d, device="cuda", dtype=torch.bfloat16)
    variants = {"eager": lambda: model(x)}
    regions = {}
    for name, on in (("regions (option off)", False), ("aten gelu (option on)", True)):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="nvf_bookend", options={"lone_composites_eager": on})
        with recording() as rec:
            compiled(x)
        plan = rec.plans[-1]
        print(f"{name}: {len(plan.regions)} regions; rewrites {plan.rewrites}")
        for _ in range(20):
            compiled(x)
        variants[name] = (lambda c: (lambda: c(x)))(compiled)
        regions[name] = rec.graph_modules[-1]
    # One region call and one aten.gelu alone.
    gm = regions["regions (option off)"]
    runtime = next(n.target for n in gm.graph.nodes if n.op == "call_function"
                   and type(n.target).__name__ == "RegionRuntime")
    h = x @ model.weights[0]
    variants["one region call"] = lambda: runtime(h)
    variants["one aten.gelu"] = lambda: torch.ops.aten.gelu.default(h)
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(_time(variants[name], args.steps))
    print(f"{'variant':28s} {'min us':>9s} {'median us':>10s}")
    for name, ts in times.items():
        print(f"{name:28s} {min(ts):9.1f} {statistics.median(ts):10.1f}")


if __name__ == "__main__":
    main()
