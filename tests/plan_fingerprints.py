"""Deterministic fingerprints of the plans dynamo_nvf makes for perf/'s workloads, planned on the CPU.

The model tier of perf/models.py (`--tag model`: each model's inference in bf16 and f32 and its
training step in bf16) and the training block workloads of perf/workloads.py are compiled at tiny
shapes with `plan_cpu_as_cuda=True`, with and without `cuda_graphs`, and each GraphPlan is reduced to what planning decided: the graph's kind,
its regions (nodes and ops in order, trimmed leading and trailing nodes, kept nodes, boundaries,
fast math), its eager nodes with their reasons, its rewrite notes, and a hash of the code of the
compiled graph (region calls and the views between them). Graph ids and times are left out (they
differ from run to run).

tests/test_plans_golden.py compares them with tests/data/plans_golden.json. After a change that is
meant to change plans, regenerate the golden from the repository root and review its diff:

    python3 -m tests.plan_fingerprints --update
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

import torch
import torch._dynamo

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "plans_golden.json"

#: Numbers in notes that measure time, not decisions (a segmenter's "... 12 ms").
_TIMES = re.compile(r"\d+(\.\d+)? ?(ms|us|s)\b")


def _decisions(items: list[Any]) -> list[list[str]]:
    return [[d.node, d.op, d.action, d.reason] for d in items]


def fingerprint(plan: Any) -> dict[str, Any]:
    """What planning decided for one graph, without ids, times or anything else run-dependent."""
    return {
        "kind": plan.kind,
        "planning_error": plan.planning_error,
        "rewrites": [_TIMES.sub("<time>", r) for r in plan.rewrites],
        "regions": [
            {
                "name": r.name,
                "nodes": list(r.nodes),
                "ops": list(r.ops),
                "leading": _decisions(r.leading),
                "trailing": _decisions(r.trailing),
                "kept": _decisions(r.kept),
                "boundary": list(r.boundary),
                "fast_math": r.fast_math,
                "fusion_key": r.fusion_key,
            }
            for r in plan.regions
        ],
        "eager": [[n.name, n.op, n.reason] for n in plan.eager_nodes],
        "decisions": _decisions(plan.decisions),
        "code_sha1": hashlib.sha1(plan.code.encode()).hexdigest()[:16],
    }


def cases() -> Iterator[tuple[str, Any]]:
    """(name, workload) of every workload planned: the model tier, then the training blocks (the
    forward blocks' plans are parts of the training ones' forward graphs)."""
    from perf.workloads import REGISTRY, select

    for wl in select(tags=["model"]):
        yield wl.name, wl
    for name, wl in REGISTRY.items():
        if "block" in wl.tags and wl.kind == "train":
            yield name, wl


def plan_workload(wl: Any, cuda_graphs: bool) -> list[dict[str, Any]]:
    """Compiles one workload at tiny shapes on the CPU and runs one step; its plans' fingerprints."""
    import dynamo_nvf

    torch._dynamo.reset()
    inst = wl.instantiate("cpu", tiny=True)
    options = {"plan_cpu_as_cuda": True, "cuda_graphs": cuda_graphs}
    with dynamo_nvf.recording() as recorder:
        inst.call(torch.compile(inst.fn, backend="nvf_bookend", options=options))
    torch._dynamo.reset()
    return [fingerprint(p) for p in recorder.plans]


def case_names() -> list[str]:
    """Keys of the golden: each workload, without and with CUDA graphs."""
    return [f"{name}{suffix}" for name, _ in cases() for suffix in ("", " cuda_graphs")]


def plan_case(case: str) -> list[dict[str, Any]]:
    """The fingerprints of one key of `case_names()`."""
    from perf.workloads import REGISTRY

    name, _, graphs = case.partition(" ")
    return plan_workload(REGISTRY[name], cuda_graphs=graphs == "cuda_graphs")


def all_fingerprints() -> dict[str, list[dict[str, Any]]]:
    return {case: plan_case(case) for case in case_names()}


def dumps(fingerprints: dict[str, Any]) -> str:
    return json.dumps(fingerprints, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help=f"write {GOLDEN.relative_to(REPO)}")
    args = parser.parse_args(argv)
    text = dumps(all_fingerprints())
    if args.update:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
        print(f"wrote {GOLDEN.relative_to(REPO)}")
        return 0
    same = GOLDEN.exists() and GOLDEN.read_text() == text
    print("plans equal the golden" if same else "plans differ from the golden (--update writes them)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
