"""A ResNet-style net (a 7x7 stride-2 stem, max pool, three stages of two basic blocks, conv-BN-ReLU-
conv-BN-add-ReLU, 64/128/256 channels, a pooled linear head), bf16, batch 32, 112 px: a training step
(forward and backward) and an inference call, nvFuser's plan with the conv layout plan
(`channels_last_convs`, passes/conv_layout.py) and without it, against eager and inductor.

Printed per variant: GPU kernel time per call (profiler medians, 20 calls), kernels per call, cuDNN's
layout conversions per call (nchwToNhwc, nhwcToNchw kernels) and the output's largest error against
eager. Issue 42 measured 146 nchwToNhwc and 66 nhwcToNchw per ResNet-50 bf16 training step (H100).

    python scripts/repros/conv_layout.py [train|infer] [--graphs] [--kernels]
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import dynamo_nvf  # noqa: E402,F401
from kernel_timing import cuda_kernels, kernel_us  # noqa: E402

nn = torch.nn
B, IMG = 32, 112


class Basic(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2)):
            blocks += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean((2, 3)))


def main() -> None:
    train = "infer" not in sys.argv[1:]
    graphs = "--graphs" in sys.argv[1:]
    torch.manual_seed(0)
    model = Net().cuda().to(torch.bfloat16)
    if not train:
        model.eval()
    x = torch.randn(B, 3, IMG, IMG, device="cuda", dtype=torch.bfloat16)
    mode = "reduce-overhead" if graphs else None
    variants = {
        "eager": model,
        "nvf": torch.compile(model, backend="nvf_bookend", options={"strict": True}, mode=mode),
        "nvf nchw": torch.compile(model, backend="nvf_bookend", mode=mode,
                                  options={"strict": True, "channels_last_convs": False}),
        "inductor": torch.compile(model, mode=mode),
    }

    def step(fn):
        def call():
            if train:
                out = fn(x)
                out.float().sum().backward()
                return out
            with torch.no_grad():
                return fn(x)
        return call

    with torch.no_grad():
        want = model(x).float()
    for label, fn in variants.items():
        call = step(fn)
        err = (call().detach().float() - want).abs().max().item()
        us, kernels = kernel_us(call, 20)
        names = [e.name for e in cuda_kernels(call, 1)]
        conversions = sum("nchwToNhwc" in n or "nhwcToNchw" in n for n in names)
        print(f"{'train' if train else 'infer'} {'graphs' if graphs else 'plain':6s} {label:9s} {us:9.1f} us  "
              f"{kernels:4d} kernels  {conversions:3d} layout conversions  max err {err:.2e}")
        if "--kernels" in sys.argv[1:]:
            for e in cuda_kernels(call, 1):
                print(f"      {e.device_time:8.1f}  {e.name[:110]}")


if __name__ == "__main__":
    main()
