"""Runs one explain() scenario on the GPU and prints its report as JSON on the last line.

Run in a subprocess by tests/test_gpu_explain.py: nvFuser's profiler and torch.profiler cannot share
one process (CUPTI takes one subscriber), so each scenario gets a process of its own.
Usage: python tests/gpu_explain_runs.py {seed001|seed001_torch_profiler|default_then_user_profiler|gpt_block|
       llama|llama_train|channels_last_layer_norm}
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root, for perf/

import dynamo_nvf  # noqa: E402
import programs  # noqa: E402


def seed001_inputs():
    torch.manual_seed(0)
    return [1.0, 2.0, 3.0, 4.0] + [torch.randn(16, 512, 4096, device="cuda") for _ in range(3)]


def main(scenario: str) -> None:
    if scenario == "seed001":
        report = dynamo_nvf.explain(programs.seed001_bias_gelu_backward, *seed001_inputs(), profiler="nvfuser",
                                    scheduled_ir=True)
    elif scenario == "seed001_torch_profiler":
        report = dynamo_nvf.explain(programs.seed001_bias_gelu_backward, *seed001_inputs(), profiler="torch")
    elif scenario == "default_then_user_profiler":
        # explain() with its defaults, then the user's own torch.profiler in the same process: the
        # user's profile must still see every kernel (nvFuser's profiler would have kept CUPTI).
        inputs = seed001_inputs()
        report = dynamo_nvf.explain(programs.seed001_bias_gelu_backward, *inputs)
        compiled = torch.compile(programs.seed001_bias_gelu_backward, backend="nvf_bookend")
        compiled(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            compiled(*inputs)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        report.user_profiler_nvfuser_kernels = sum("nvfuser" in n for n in names)
    elif scenario == "gpt_block":
        torch.manual_seed(0)
        model = programs.TransformerBlock(256, 8).cuda()
        x = torch.randn(4, 128, 256, device="cuda", requires_grad=True)
        report = dynamo_nvf.explain(model, x, profiler="nvfuser")
    elif scenario in ("llama", "llama_train"):
        # Segments and schedulers of every region of perf's LLaMA-style model (bf16, small batch):
        # read beside scripts/host_latency.py's per-region host times.
        from perf.workloads import REGISTRY

        wl = REGISTRY["llama_fwd_bf16_small" if scenario == "llama" else "llama_train_bf16_small"]
        inst = wl.instantiate("cuda")
        report = dynamo_nvf.explain(inst.fn, *inst.inputs, profiler="nvfuser")
    elif scenario == "channels_last_layer_norm":
        # ConvNeXt's LayerNorm region: a channels-last convolution output plus its bias, permuted to
        # NHWC and normalised over C, in bf16.
        torch.manual_seed(0)
        x = torch.randn(2, 96, 56, 56, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        bias, w, b = (torch.randn(96, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        report = dynamo_nvf.explain(programs.bias_permute_layer_norm, x, bias, w, b, profiler="nvfuser",
                                    options={"strict": True})
        out = programs.bias_permute_layer_norm(x, bias, w, b)
        compiled = torch.compile(programs.bias_permute_layer_norm, backend="nvf_bookend", options={"strict": True})
        got = compiled(x, bias, w, b)
        torch.testing.assert_close(got, out, rtol=1e-2, atol=2e-2)
        assert got.stride() == out.stride(), (got.stride(), out.stride())
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    print(report)
    result = report.to_dict()
    if hasattr(report, "user_profiler_nvfuser_kernels"):
        result["user_profiler_nvfuser_kernels"] = report.user_profiler_nvfuser_kernels
    result["svg"] = [str(report.graph_svg(i)) for i in range(len(report.graphs))]
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
