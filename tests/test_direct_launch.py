"""CPU tests of runtime/direct_launch.py's planning: which kernels it takes, the strides it bakes in,
the entry kernel's source, and when the runtime never tries (GPU tests: test_gpu_direct_launch.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dynamo_nvf.runtime import direct_launch as dl
from dynamo_nvf.runtime.region import RegionRuntime
from dynamo_nvf.settings import Settings

KERNEL = """__global__ void nvfuser_inner_persistent_f0_c1_r0_g1(Tensor<__bfloat, 2, 2> T0, Tensor<float, 1, 1> T1, Tensor<__bfloat, 2, 2> T7) {
  alignas(16) extern __shared__ char array[];
  nvfuser_index_t i0 = ((nvfuser_index_t)threadIdx.x) + 96 * ((nvfuser_index_t)blockIdx.x);
  float f1 = (float) T1[i0 % T0.logical_size[1]];
  T7[i0] = T0[i0 * T0.alloc_stride[0]];
}
"""


def test_signature_of_plain_tensor_kernel():
    name, params = dl.parse_signature(KERNEL)
    assert name == "nvfuser_inner_persistent_f0_c1_r0_g1"
    assert params == [dl.TensorParam("__bfloat", 2, 2, "T0"), dl.TensorParam("float", 1, 1, "T1"),
                      dl.TensorParam("__bfloat", 2, 2, "T7")]


@pytest.mark.parametrize("code, why", [
    (KERNEL.replace("Tensor<float, 1, 1> T1", "nvfuser_index_t i5"), "not a tensor"),
    (KERNEL.replace("Tensor<float, 1, 1> T1", "Tensor<int64_t, 1, 1> T1, Tensor<int64_t, 1, 1> T9"), None),
    (KERNEL.replace("Tensor<float, 1, 1> T1", "CpuScalarTensor<float> T1"), "not a tensor"),
    (KERNEL.replace("__global__ void ", "__global__ void __launch_bounds__(/*maxThreadsPerBlock=*/256, "
                    "/*minBlocksPerMultiprocessor=*/1) "), "warp-specialized"),
    (KERNEL + KERNEL.replace("g1(", "g2("), "2 kernels"),
])
def test_kernels_it_does_not_take(code, why):
    if why is None:  # parses, but build() refuses a parameter count that is not inputs + outputs
        assert len(dl.parse_signature(code)[1]) == 4
        return
    with pytest.raises(dl.NotDirect, match=why):
        dl.parse_signature(code)


def test_strides_only_matter_where_the_kernel_reads_them():
    _, (t0, t1, t7) = dl.parse_signature(KERNEL)
    assert dl.reads_strides(KERNEL, "T0") and not dl.reads_strides(KERNEL, "T1") and not dl.reads_strides(KERNEL, "T7")
    # read strides come in allocation order: the dims sorted outermost first
    assert dl.alloc_strides(KERNEL, t0, (384, 256), (1, 384)) == [384, 1]
    assert dl.alloc_strides(KERNEL, t0, (4, 8), (8, 1)) == [8, 1]
    with pytest.raises(dl.NotDirect, match="ambiguous"):
        dl.alloc_strides(KERNEL, t0, (1, 8), (8, 8))
    # unread strides are passed as they are
    assert dl.alloc_strides(KERNEL, t7, (1, 8), (8, 8)) == [8, 8]
    # a struct handed whole to a helper may have its strides read
    assert dl.reads_strides("  helper(T3, 1);", "T3")


def test_launch_config_from_the_profiler_strings():
    profile = SimpleNamespace(grid_str="[512, 1, 1]", block_str="[96, 2, 1]", shared_mem_str="[1024, 16]", registers=40)
    assert dl.launch_config(profile) == dl.LaunchConfig((512, 1, 1), (96, 2, 1), 1024, 40)
    with pytest.raises(dl.NotDirect):
        dl.launch_config(SimpleNamespace(grid_str="?", block_str="[1, 1, 1]", shared_mem_str="[0, 0]", registers=1))


def test_entry_source_wraps_the_kernel_with_constant_structs():
    name, params = dl.parse_signature(KERNEL)
    structured = "namespace nvf {\n// preamble\n}\nnamespace nvf {\n" + KERNEL + "}\n"
    source = dl.entry_source(structured, name, params, [[512, 768], [768], [512, 768]],
                             [[768, 1], [1], [768, 1]], (96, 2, 1))
    assert f"__device__ __forceinline__ void {name}(" in source and f"__global__ void {name}(" not in source
    assert f'extern "C" __global__ void {name}{dl.ENTRY_SUFFIX}(void* p0, void* p1, void* p2)' in source
    assert "a0.logical_size[1] = 768;" in source and "a1.alloc_stride[0] = 1;" in source
    assert f"  {name}(a0, a1, a2);" in source
    # a 2-D block is launched as 192 threads and rebuilt, x fastest
    assert "#define threadIdx (nvfd_thread_idx())" in source and "t % 96u" in source
    flat = dl.entry_source(structured, name, params, [[512, 768], [768], [512, 768]],
                           [[768, 1], [1], [768, 1]], (128, 1, 1))
    assert "#define threadIdx" not in flat


def test_nvrtc_options_are_nvfusers_for_the_arch():
    options = dl.nvrtc_options(9, 0, 40)
    assert "--gpu-architecture=sm_90a" in options and "--fmad=true" in options and "--maxrregcount=40" in options
    assert "--gpu-architecture=sm_80" in dl.nvrtc_options(8, 0, 255)
    assert not any(o.startswith("--maxrregcount") for o in dl.nvrtc_options(8, 0, 255))


def test_settings_turn_it_off_under_cuda_graphs():
    assert Settings().launches_directly()
    assert not Settings(cuda_graphs=True).launches_directly()
    assert not Settings(direct_launch=False).launches_directly()
    assert not Settings.from_options({"direct_launch": False}).launches_directly()
    assert not Settings().with_mode("reduce-overhead").launches_directly()


def _runtime(fn, settings, *example):
    from torch.fx.experimental.proxy_tensor import make_fx

    from dynamo_nvf.plan import RegionPlan

    gm = make_fx(fn)(*example)
    for node in gm.graph.nodes:  # make_fx records `val` on each node, as aot_autograd does
        assert node.op != "placeholder" or "val" in node.meta
    return RegionRuntime(gm, RegionPlan(id=0, name="nvf_region_0", ops=[], nodes=[]), settings)


def test_runtime_tries_only_static_non_random_regions_without_graphs():
    x = torch.randn(4, 8)
    double = lambda t: (t * 2,)  # noqa: E731  (a region returns a tuple)
    assert _runtime(double, Settings(), x)._direct_countdown == 2
    assert _runtime(double, Settings(cuda_graphs=True), x)._direct_countdown == 0
    assert _runtime(double, Settings(direct_launch=False), x)._direct_countdown == 0
    assert _runtime(lambda t: (torch.rand_like(t) * t,), Settings(), x)._direct_countdown == 0


def test_without_nvfuser_a_region_never_builds_a_launcher():
    x = torch.randn(4, 8)
    runtime = _runtime(lambda t: (t * 2,), Settings(), x)
    for _ in range(4):
        torch.testing.assert_close(runtime(x)[0], x * 2)
    assert runtime._direct is None and runtime.plan.launch == ""
