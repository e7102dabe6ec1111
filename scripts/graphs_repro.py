"""A perf workload under nvf_cudagraphs, after (or without) its nvf_bookend run in the same process,
with full tracebacks: the repro of "storage data ptrs are not allocated in pool" (convnext_train,
pair 25 of gpu_evidence mode abort, H100, 2026-11-23).

    python scripts/graphs_repro.py convnext_train_bf16_small nvf_bookend,nvf_cudagraphs
"""

from __future__ import annotations

import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dynamo_nvf  # noqa: E402,F401
from perf.backends import get_backend, reset_compile_state  # noqa: E402
from perf.workloads import REGISTRY  # noqa: E402


def main(name: str, backends: str, steps: int = 6) -> int:
    failed = 0
    for backend_name in backends.split(","):
        reset_compile_state()  # as perf does between pairs
        backend = get_backend(backend_name)
        inst = REGISTRY[name].instantiate("cuda")
        fn = backend.wrap(inst.fn)
        try:
            for _ in range(steps):
                if backend.cuda_graphs:
                    torch.compiler.cudagraph_mark_step_begin()
                inst.call(fn)
            torch.cuda.synchronize()
            print(f"{name} / {backend_name}: {steps} steps ok", flush=True)
        except Exception:  # noqa: BLE001
            failed += 1
            print(f"{name} / {backend_name}: FAILED", flush=True)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
