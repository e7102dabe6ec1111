"""explain() on the GPU: nvFuser's segments, schedulers and times, checked against torch.profiler.

Each scenario runs in its own process (see gpu_explain_runs.py: one CUPTI subscriber per process).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from dynamo_nvf import nvf as nvf_env

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason=f"needs CUDA and nvFuser: {nvf_env.unavailable_reason()}"),
]

SCRIPT = os.path.join(os.path.dirname(__file__), "gpu_explain_runs.py")


def run_scenario(name: str) -> dict:
    proc = subprocess.run([sys.executable, SCRIPT, name], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(proc.stdout)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_seed001_segments_agree_with_torch_profiler():
    report = run_scenario("seed001")
    (graph,) = report["graphs"]
    (region,) = graph["regions"]
    assert region["executor"] == "nvfuser"
    assert region["profile_source"] == "nvfuser_direct.PythonProfiler"
    # The sum over dims 0 and 1 shares the region with the pointwise chain, as in the seed.
    assert "aten.sum.dim_IntList" in region["ops"]
    launched = [k for k in region["kernels"] if k["name"]]
    schedulers = sorted(k["scheduler"] for k in launched)
    assert len(launched) == region["launched_kernels"] == 2, region["kernels"]
    assert any("reduction" in s for s in schedulers) and any("pointwise" in s for s in schedulers), schedulers
    assert all(k["time_ms"] > 0 for k in launched)
    assert region["scheduled_ir"] and not region["scheduled_ir"].startswith("unavailable")
    # The picture shows the region's segments: one chip per segment, scheduler and kernel on hover.
    (svg,) = report["svg"]
    groups = list(ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}g"))
    (segments,) = [g for g in groups if g.get("class") == "segments"]
    assert segments.get("data-count") == str(len(region["kernels"]))
    chips = ["".join(g.find("{http://www.w3.org/2000/svg}title").itertext()) for g in groups if g.get("class") == "segment"]
    assert len(chips) == len(region["kernels"])
    for kernel in launched:
        assert any(kernel["name"] in chip and kernel["scheduler"] in chip for chip in chips), (kernel, chips)

    seen_by_torch = run_scenario("seed001_torch_profiler")
    assert seen_by_torch["totals"]["kernels_nvfuser_torch_profiler"] == len(launched)
    assert seen_by_torch["totals"]["kernels_eager"] == 0, seen_by_torch["eager_kernels"]
    # Under torch.profiler the region lists the same kernels, read from its own profiled range.
    (torch_region,) = seen_by_torch["graphs"][0]["regions"]
    assert torch_region["profile_source"].startswith("torch.profiler"), torch_region["profile_source"]
    assert sorted(k["scheduler"] for k in torch_region["kernels"]) == schedulers, torch_region["kernels"]
    assert sorted(k["segment_id"] for k in torch_region["kernels"]) == sorted(k["segment_id"] for k in launched)
    assert all(k["time_ms"] > 0 for k in torch_region["kernels"])


def test_explain_by_default_leaves_torch_profiler_working():
    """The default profiler is torch.profiler: each region lists its kernels, and the user's own
    torch.profiler afterwards in the same process still sees nvFuser's kernels."""
    report = run_scenario("default_then_user_profiler")
    (region,) = report["graphs"][0]["regions"]
    assert region["profile_source"].startswith("torch.profiler")
    assert len(region["kernels"]) == report["totals"]["kernels_nvfuser_torch_profiler"] == 2, (
        region["kernels"], report["eager_kernels"])
    assert report["user_profiler_nvfuser_kernels"] == 2


def test_gpt_block_forward_and_backward():
    report = run_scenario("gpt_block")
    assert [g["kind"] for g in report["graphs"]] == ["forward", "backward"]
    regions = [r for g in report["graphs"] for r in g["regions"]]
    assert regions and all(r["executor"] == "nvfuser" for r in regions), [r["executor_reason"] for r in regions]
    assert all(r["segments"] and len(r["kernels"]) == r["segments"] for r in regions)
    assert report["totals"]["kernels_nvfuser_profiled"] == sum(r["launched_kernels"] for r in regions) > 0


def _cast_round_trips(definition: str) -> list[str]:
    """Lines of a printed definition that cast to Float a value that was itself cast to BFloat16."""
    casts = dict(re.findall(r"(tv\d+) = fd\.ops\.cast\((tv\d+), dtype=DataType\.BFloat16\)", definition))
    return [line for line in definition.splitlines()
            if (m := re.search(r"fd\.ops\.cast\((tv\d+), dtype=DataType\.Float\)", line)) and m.group(1) in casts]


def test_channels_last_layer_norm_region_is_one_kernel_without_a_cast_round_trip():
    """ConvNeXt's LayerNorm region is one kernel, and its bf16 output is not cast bf16 -> f32 -> bf16
    on its way out: nvFuser made that chain a kernel-less host segment (27.2 against 20.0 us of host
    time per call, H100, scripts/nvfuser_repros/kernelless_output_segments.py). The scenario checks values and strides."""
    report = run_scenario("channels_last_layer_norm")
    (graph,) = report["graphs"]
    (region,) = graph["regions"]
    assert region["executor"] == "nvfuser"
    launched = [k for k in region["kernels"] if k["name"]]
    assert [k["scheduler"] for k in launched] == ["inner_persistent"], region["kernels"]
    assert region["definition"] and not _cast_round_trips(region["definition"]), region["definition"]
