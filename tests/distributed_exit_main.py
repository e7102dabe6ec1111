"""Run by torchrun from tests/test_gpu_distributed.py: a few bf16 DDP steps of the LLaMA-style perf
model (one block) with nvf_bookend, then the process ends as a user's script often does, with the
compiled model alive and the process group left open. Prints "steps ok" when the steps ran on nvFuser."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dynamo_nvf import STATS  # noqa: E402
from perf.distributed import init_distributed, model_spec  # noqa: E402
from perf.models import build_model, model_inputs  # noqa: E402
from perf.parallel import wrap  # noqa: E402

device = init_distributed("cuda", 120)
spec = model_spec("llama", "layers=1")
torch.manual_seed(0)
model = build_model(spec, "large", True, device, torch.float32, False)
wrapped = wrap(model, "ddp", "nvf_bookend", device, True)
optimizer = torch.optim.AdamW(wrapped.params_module.parameters(), lr=1e-3)
inputs = model_inputs(spec, "large", True, device, torch.float32, False)
for _ in range(4):
    with wrapped.autocast():
        loss = wrapped.step_module(*inputs)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
torch.cuda.synchronize()
if STATS.nvfuser_calls > 0 and STATS.fallbacks == 0 and torch.isfinite(loss).item():
    print("steps ok", flush=True)
