"""Many back-to-back steps of one perf workload, as a training loop runs them (no sync between steps):
does any backend fault? A device-side assert kills the CUDA context, so run one case per process.

    python scripts/graph_steps_repro.py llama_train_bf16_small nvf_cudagraphs --steps 300
    python scripts/graph_steps_repro.py llama_train_bf16_small inductor_ro,nvf_cudagraphs --rounds 3 --steps 200
    python scripts/graph_steps_repro.py llama_train_bf16_small nvf_cudagraphs --option fuse_embedding=false

Several backends run in one process in alternating batches, as perf.interleave runs them (their CUDA
graphs then share cudagraph trees' manager). Prints one line per batch and `OK` or `FAULT ...`. After
every batch each instance's inputs and parameters (which a step never changes: no optimizer) are
compared with copies taken before the first step: `CHANGED ...` names a tensor that something wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from perf.backends import Backend, _nvf, get_backend  # noqa: E402
from perf.measure import backend_step  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload")
    parser.add_argument("backends", help="comma-separated perf backends")
    parser.add_argument("--steps", type=int, default=200, help="steps per batch, no sync inside a batch")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--option", action="append", default=[], help="NAME=JSON for the nvf backends")
    parser.add_argument("--log", default="", help="dynamo_nvf's log level on stdout (INFO, DEBUG)")
    args = parser.parse_args()
    if args.log:
        import logging

        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logging.getLogger("dynamo_nvf").addHandler(handler)
        logging.getLogger("dynamo_nvf").setLevel(args.log)
    options = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.option)}
    steps, watched = {}, {}
    for name in args.backends.split(","):
        backend = get_backend(name)
        if options and backend.nvf:
            merged = dict(options, cuda_graphs=True) if backend.cuda_graphs else dict(options)
            backend = Backend(name, _nvf(merged), backend.description, cuda_graphs=backend.cuda_graphs, nvf=True)
        inst = REGISTRY[args.workload].instantiate("cuda")
        module = getattr(inst.fn, "__self__", inst.fn)
        tensors = [(f"input {i}", t) for i, t in enumerate(inst.inputs) if isinstance(t, torch.Tensor)]
        if isinstance(module, torch.nn.Module):
            tensors += [(f"parameter {n}", p.data) for n, p in module.named_parameters()]
        tensors += [(f"grad-tracked {i}", t.data) for i, t in enumerate(inst.grads)]
        watched[name] = [(label, t, t.detach().clone()) for label, t in tensors]
        steps[name] = backend_step(backend, inst)
        for _ in range(6):
            steps[name]()
        torch.cuda.synchronize()
        print(f"{name}: compiled and warmed up", flush=True)
    try:
        for r in range(args.rounds):
            for name, step in steps.items():
                for _ in range(args.steps):
                    step()
                torch.cuda.synchronize()
                print(f"round {r} {name}: {args.steps} steps OK", flush=True)
                for owner, tensors in watched.items():
                    for label, tensor, copy in tensors:
                        if not torch.equal(tensor, copy):
                            print(f"CHANGED after round {r} {name}: {owner}'s {label} "
                                  f"({(tensor != copy).sum().item()} elements differ)", flush=True)
                            copy.copy_(tensor)
    except Exception as exc:  # noqa: BLE001  (report the fault and its batch)
        print(f"FAULT in round {r} {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", flush=True)
        return 1
    print("OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
