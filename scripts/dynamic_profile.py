"""A zoo HF model's inference as a server sees it, per backend: compiled once, run at the zoo's three
sequence lengths (shortest first), the step time at each (host included; 5 warm-up steps, then 20
timed), then torch.profiler's top GPU kernels and host ops at the last length. Backends run one after
another in one process, so their numbers compare side by side.

    python scripts/dynamic_profile.py qwen2 nvf_bookend nvf_fec_execute inductor

Why: the zoo's dynamic-shape steps (`python -m perf --tag zoo`) give one ratio per length; this says
whether a loss is host time (the same GPU time, a slower step) or kernels (which ones).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from perf.backends import get_backend, reset_compile_state  # noqa: E402
from perf.zoo import build_model, dynamic_lengths, model_inputs, read_list  # noqa: E402


def profile(entry, backend_name: str, steps: int, top: int) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    reset_compile_state()
    torch.manual_seed(0)
    model = build_model(entry, "cuda", train=False)
    for p in model.parameters():
        p.requires_grad_(False)
    compiled = get_backend(backend_name).wrap(model)
    inputs = ()
    for length in dynamic_lengths(entry):
        inputs = model_inputs(entry, "cuda", False, length)
        with torch.no_grad():
            for _ in range(5):
                compiled(*inputs)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(steps):
                compiled(*inputs)
            torch.cuda.synchronize()
        print(f"{backend_name} length {length}: step {(time.perf_counter() - start) / steps * 1e3:.3f} ms", flush=True)
    calls = 5
    with torch_profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof, torch.no_grad():
        for _ in range(calls):
            compiled(*inputs)
        torch.cuda.synchronize()
    events = prof.key_averages()
    gpu = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA),
                 key=lambda e: -e.self_device_time_total)
    print(f"{backend_name}: GPU us per step {sum(e.self_device_time_total for e in gpu) / calls:.0f}, "
          f"kernels per step {sum(e.count for e in gpu) / calls:.0f}")
    for e in gpu[:top]:
        print(f"   {e.self_device_time_total / calls:8.1f} us  x{e.count / calls:5.1f}  {e.key[:110]}")
    host = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CPU),
                  key=lambda e: -e.self_cpu_time_total)
    for e in host[:top]:
        print(f"   host {e.self_cpu_time_total / calls:8.1f} us  x{e.count / calls:5.1f}  {e.key[:100]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a zoo hf model name (perf/zoo_models.txt), e.g. qwen2")
    parser.add_argument("backends", nargs="+", help="perf backends, e.g. nvf_bookend inductor")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    entry = next(e for e in read_list() if e.suite == "hf" and e.name == args.model)
    for name in args.backends:
        profile(entry, name, args.steps, args.top)


if __name__ == "__main__":
    main()
