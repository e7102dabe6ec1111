"""GPU tests of runtime/direct_launch.py: steady calls of one-kernel static regions launch nvFuser's
kernel through the C launcher (runtime/launcher.c), with the same bits as fec.execute, eager's strides,
and one kernel per region (plus a memset per zeroed work buffer); what cannot be launched directly stays
on fec.execute and says why. Each check a call makes gets a case that would fail without it: a slice
at a varying offset (alignment), two grid reductions in one kernel (every zeroed semaphore), a call
from a fresh thread (the kernels' context), an input on the second GPU (its device and stream)."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from dynamo_nvf.runtime import direct_launch
from dynamo_nvf.runtime.stats import STATS

from helpers import assert_as_close_as_eager, assert_same, assert_same_layout, check_training, compile_fn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason=f"needs CUDA and nvFuser: {nvf_env.unavailable_reason()}"),
]

DEV = "cuda"
STEADY = 4  # calls: the direct launcher is built on the third
ON = {"min_region_size": 1}  # direct_launch is on by default


def _bias_gelu(x, b):
    return F.gelu(x + b, approximate="tanh") * 2.0


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b) + 1.0


def _softmax(x):
    return torch.softmax(x * 0.5, dim=-1)


CASES = {
    "bias_gelu_bf16": (_bias_gelu, lambda: (torch.randn(512, 768, device=DEV, dtype=torch.bfloat16),
                                            torch.randn(768, device=DEV, dtype=torch.bfloat16))),
    "layer_norm_bf16": (_layer_norm, lambda: (torch.randn(512, 768, device=DEV, dtype=torch.bfloat16),
                                              torch.randn(768, device=DEV, dtype=torch.bfloat16),
                                              torch.randn(768, device=DEV, dtype=torch.bfloat16))),
    "layer_norm_f32_wide": (_layer_norm, lambda: (torch.randn(64, 4096, device=DEV),
                                                  torch.randn(4096, device=DEV), torch.randn(4096, device=DEV))),
    "softmax_f32": (_softmax, lambda: (torch.randn(256, 1000, device=DEV),)),
    "transposed_input_f32": (lambda x: torch.relu(x.t()) * 3.0, lambda: (torch.randn(384, 256, device=DEV),)),
}


def _steady(fn, inputs, options):
    compiled = compile_fn(fn, options)
    with torch.no_grad(), recording() as rec:
        for _ in range(STEADY):
            out = compiled(*inputs)
    return compiled, out, rec.plans


def _regions(plans):
    return [r for p in plans for r in p.regions]


def _kernel_names(fn, *args):
    torch.cuda.synchronize()
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("case", sorted(CASES))
def test_direct_launch_matches_fec_execute_bit_for_bit(case):
    fn, make = CASES[case]
    inputs, fresh = make(), make()  # fresh: the launcher's pointers are per call, sizes and strides not
    fec_fn, _, fec_plans = _steady(fn, inputs, {"min_region_size": 1, "direct_launch": False})
    assert all(r.launch == "" for r in _regions(fec_plans))
    reference = fec_fn(*fresh)

    STATS.reset()
    direct_fn, _, plans = _steady(fn, inputs, ON)  # (compiling resets Dynamo: fec_fn is done)
    launches = [r.launch for r in _regions(plans)]
    assert launches and all(launch.startswith("direct") for launch in launches), launches
    assert STATS.direct_launches >= 1 and STATS.fallbacks == 0, STATS.snapshot()

    got = direct_fn(*fresh)
    with torch.no_grad():
        expected = fn(*fresh)
    assert_same(got, expected)
    assert_same_layout(got, expected)
    assert torch.equal(got, reference), (got - reference).abs().max()

    launched = STATS.direct_launches
    names = _kernel_names(direct_fn, *fresh)
    assert STATS.direct_launches == launched + 1
    assert len([n for n in names if "nvfuser" in n]) == 1, names


def test_grid_reduction_launches_directly_with_fresh_zeroed_work_buffers_per_call():
    x = torch.randn(1 << 22, device=DEV)
    fn = lambda t: (t * t).sum()  # noqa: E731  (one value out of 4M: a grid reduction's work buffers)
    compiled, out, plans = _steady(fn, (x,), ON)
    torch.testing.assert_close(out, fn(x), rtol=1e-4, atol=1e-2)
    (region,) = _regions(plans)
    assert region.launch.startswith("direct") and "work buffer" in region.launch, region.launch
    before = STATS.direct_launches
    with torch.no_grad():  # as _steady ran it (grad mode on would recompile)
        for _ in range(5):  # a semaphore left nonzero by the last call would hang or corrupt the next
            fresh = torch.randn(1 << 22, device=DEV)
            torch.testing.assert_close(compiled(fresh), fn(fresh), rtol=1e-4, atol=1e-2)
    assert STATS.direct_launches == before + 5


def test_a_segmented_region_launches_its_kernels_directly_in_order():
    def fn(t):  # reductions over both axes of one tensor; rows too long for one persistent kernel
        y = torch.relu(t) * 3.0
        return y.sum(0), y.sum(1)

    x = torch.randn(1024, 65536, device=DEV)
    compiled, out, plans = _steady(fn, (x,), ON)
    (region,) = _regions(plans)
    assert region.launch.startswith("direct (") and "kernels:" in region.launch, region.launch
    before = STATS.direct_launches
    with torch.no_grad():
        for _ in range(3):
            fresh = torch.randn(1024, 65536, device=DEV)
            for got, want in zip(compiled(fresh), fn(fresh)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)
                assert got.stride() == want.stride()
    assert STATS.direct_launches == before + 3


def test_a_region_whose_kernels_take_scalar_arguments_launches_directly():
    """ConvNeXt's head: the last residual, a mean over the spatial axes and a LayerNorm, channels last.
    nvFuser's kernels for it take a host-evaluated extent (`nvfuser_index_t`), kept as built."""
    def fn(x, y, g, w, b):
        z = x + (g * y).permute(0, 3, 1, 2)
        return F.layer_norm(z.mean((2, 3)), (z.shape[1],), w, b)

    def make():
        c = 192
        x = torch.randn(2, 28, 28, c, device=DEV, dtype=torch.bfloat16).permute(0, 3, 1, 2)
        return (x, torch.randn(2, 28, 28, c, device=DEV, dtype=torch.bfloat16),
                *(torch.randn(c, device=DEV, dtype=torch.bfloat16) for _ in range(3)))

    # In NHWC order (channels_last_regions) nvFuser's kernels for this region take no scalar argument.
    compiled, out, plans = _steady(fn, make(), {**ON, "channels_last_regions": False})
    launches = [r.launch for r in _regions(plans)]
    assert any("scalar argument" in launch for launch in launches), launches
    assert all(launch.startswith("direct") for launch in launches), launches
    before = STATS.direct_launches
    with torch.no_grad():
        for _ in range(3):
            fresh = make()
            got, want = compiled(*fresh), fn(*fresh)
            # A bf16 mean over 784 values feeds a normalisation: eager rounds the mean to bf16 and
            # nvFuser keeps it in f32, so the two differ by whole ulps; judge both against f64.
            assert_as_close_as_eager(got, want, fn(*(t.double() for t in fresh)))
            assert_same_layout(got, want)
    assert STATS.direct_launches >= before + 3


def test_a_dynamic_shape_region_with_size_inputs_launches_directly_at_each_length():
    """A dynamic-shape graph hands its region the symbolic sizes of a view as integer inputs: each
    length gets a launcher keyed by them, replaying the scalar kernel arguments computed from them,
    and every call matches eager."""
    def fn(x, b):
        y = (x + b).view(x.shape[0] * x.shape[1], x.shape[2])
        return F.gelu(y, approximate="tanh") * 2.0

    compiled = torch.compile(fn, backend="nvf_bookend", options=ON, dynamic=True)
    before = 0
    with torch.no_grad(), recording() as rec:
        for round, length in enumerate((64, 96, 64)):
            if round == 2:  # both lengths have their launchers now: every call launches directly
                before = STATS.direct_launches
            for _ in range(STEADY):
                x = torch.randn(4, length, 256, device=DEV, dtype=torch.bfloat16)
                b = torch.randn(256, device=DEV, dtype=torch.bfloat16)
                got, want = compiled(x, b), fn(x, b)
                assert_same(got, want)
    runtimes = [n.target for gm in rec.graph_modules for n in gm.graph.nodes if hasattr(n.target, "_integer_inputs")]
    sized = [r for r in runtimes if r._integer_inputs]
    assert sized, [r.plan.name for r in runtimes]  # the view's sizes reach the region as integers
    assert all(r.plan.launch.startswith("direct per set of input sizes: 2") for r in sized), \
        [r.plan.launch for r in sized]
    assert STATS.direct_launches - before >= STEADY * len(sized)


@pytest.mark.parametrize("workload", ["llama_train_bf16_small", "bert_train_bf16_small"])
def test_training_steps_with_direct_launch_keep_every_launcher_and_gradient_right(workload):
    """Found on an H100, 2026-11-24: in LLaMA-style backward regions whose inputs share a pointer, a
    work buffer took an output's slot; the launcher's check run wrote an f32 intermediate past a bf16
    output (outputs differ, and beside other models an illegal address or a corrupted token-id
    tensor). Five steps: the launchers are built on the third and run on the fourth and fifth, whose
    gradients are checked."""
    from perf import grad_check

    lines: list[str] = []
    with recording() as rec:
        ok = grad_check.check_workload(workload, ["nvf_bookend"], steps=5, report=lines.append)
    assert ok, "\n".join(lines)
    launches = [r.launch for r in _regions(rec.plans)]
    assert not [launch for launch in launches if "differ" in launch], launches
    assert sum(launch.startswith("direct") for launch in launches) >= len(launches) - 3, launches


def test_training_with_direct_launch_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.LayerNorm(512), torch.nn.GELU(),
                                torch.nn.Linear(512, 256)).to(DEV)
    x = torch.randn(128, 256, device=DEV)
    compiled = compile_fn(model, ON)
    for _ in range(STEADY):  # past the build of every region's launcher
        compiled(x).sum().backward()
    assert STATS.direct_launches > 0, STATS.snapshot()
    check_training(model, [torch.randn(128, 256, device=DEV)], ON, params=list(model.parameters()))


def test_batch_norm_training_regions_launch_directly_and_match_eager():
    """A channels-last BatchNorm's backward recomputes its statistics next to the gradient sums: a grid
    Welford whose counts are a work buffer of nvFuser's index type. Such regions launch directly too."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, padding=1, bias=False), torch.nn.BatchNorm2d(64),
                                torch.nn.SiLU(), torch.nn.Conv2d(64, 64, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(64), torch.nn.SiLU()).to(DEV, memory_format=torch.channels_last)
    x = torch.randn(32, 32, 56, 56, device=DEV).to(memory_format=torch.channels_last)
    compiled = compile_fn(model, ON)
    with recording() as rec:
        for _ in range(STEADY):
            compiled(x).sum().backward()
    launches = [r.launch for r in _regions(rec.plans)]
    assert not [launch for launch in launches if "unknown dtype" in launch], launches
    assert any(launch.startswith("direct") and "work buffer" in launch
               for p in rec.plans if p.kind == "backward" for launch in (r.launch for r in p.regions)), launches

    # Fresh input, steady (directly launched) step against eager's. f32 convolutions, not TF32; the
    # gradients sum 100K terms per element that cancel (BatchNorm's backward), so their tolerance
    # scales with each gradient's largest element.
    fresh = torch.randn(32, 32, 56, 56, device=DEV).to(memory_format=torch.channels_last)
    results = []
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        for fn in (compiled, model):
            model.zero_grad()
            inp = fresh.clone().requires_grad_()
            out = fn(inp)
            out.sum().backward()
            results.append([out.detach(), inp.grad] + [p.grad.clone() for p in model.parameters()])
    for got, expected in zip(*results):
        assert_same_layout(got, expected)
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-4 * float(expected.abs().max()) + 1e-5)


def test_off_switch_and_cuda_graphs_never_launch_directly():
    fn, make = CASES["bias_gelu_bf16"]
    inputs = make()
    STATS.reset()
    _steady(fn, inputs, {"min_region_size": 1, "direct_launch": False})
    _steady(fn, inputs, {**ON, "cuda_graphs": True})
    assert STATS.direct_launches == 0, STATS.snapshot()


def test_launcher_refuses_other_layouts_and_misaligned_pointers():
    nvf = nvf_env.nvfuser_module()
    x = torch.randn(256, 384, device=DEV)
    with nvf.FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=nvf.DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.relu(t0), fd.define_scalar(3.0)))
    outputs = fd.execute([x])
    kernel = direct_launch.build(fd.fec, [x], outputs)
    y = torch.randn(256, 384, device=DEV)
    (got,) = kernel([y])
    assert torch.equal(got, torch.relu(y) * 3.0)
    assert kernel([torch.randn(384, 256, device=DEV).t()]) is None  # other strides
    storage = torch.randn(256 * 384 + 1, device=DEV)
    assert kernel([storage[1:].view(256, 384)]) is None  # 4-byte aligned, built for 16


def _fusion(nvf, dtype):
    """relu(x) * 3 over a 2-D tensor, as a FusionDefinition run once (its executor cache compiled)."""
    with nvf.FusionDefinition() as fd:
        t0 = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dtype)
        x = t0 if dtype == nvf.DataType.Float else fd.ops.cast(t0, dtype=nvf.DataType.Float)  # no bf16 relu
        out = fd.ops.mul(fd.ops.relu(x), fd.define_scalar(3.0))
        fd.add_output(out if dtype == nvf.DataType.Float else fd.ops.cast(out, dtype=dtype))
    return fd


def _run_in_thread(fn):
    """fn() on a new thread (whose first CUDA work it is); its result, or what it raised."""
    result = {}

    def target():
        try:
            result["value"] = fn()
            torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            result["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=300)
    assert not thread.is_alive(), "the call hung"
    if "error" in result:
        raise result["error"]
    return result["value"]


def _poison_allocator():
    """Returns blocks full of 0xFF to the caching allocator, so that a work buffer the launcher
    allocates next holds garbage unless it is zeroed (a semaphore left so hangs or miscounts)."""
    junk = [torch.full((n,), 255, dtype=torch.uint8, device=DEV) for n in (512, 2048, 16384, 1 << 20) for _ in range(16)]
    del junk


def test_a_slice_less_aligned_than_the_build_declines_instead_of_faulting():
    """Built on a bf16 slice 4 elements in (8-byte aligned: nvFuser vectorises 4 bf16 per access), a
    call on a slice 1, 2 or 3 elements in (2 or 4 bytes) would fault with a misaligned address, a
    sticky CUDA error; the launcher declines it, and a call 8 or 16 bytes aligned launches."""
    nvf = nvf_env.nvfuser_module()
    n = 512 * 768
    storage = torch.randn(n + 64, device=DEV, dtype=torch.bfloat16)
    at = lambda offset: storage[offset:offset + n].view(512, 768)  # noqa: E731
    assert direct_launch.pointer_alignment(at(4).data_ptr()) == 8
    fd = _fusion(nvf, nvf.DataType.BFloat16)
    outputs = fd.execute([at(4)])
    kernel = direct_launch.build(fd.fec, [at(4)], outputs)
    for offset in (1, 2, 3, 5, 6, 7, 9, 10):
        assert kernel([at(offset)]) is None, offset
        assert "less aligned" in kernel.last_decline
    for offset in (0, 4, 8, 12):
        (got,) = kernel([at(offset)])
        assert torch.equal(got, torch.relu(at(offset)) * 3.0), offset
    torch.cuda.synchronize()  # no CUDA error, sticky or not
    assert kernel.launches == 1 + 4  # the build's own check run, then the aligned calls


def test_a_compiled_region_fed_slices_at_varying_offsets_matches_eager():
    storage = torch.randn(512 * 768 + 64, device=DEV, dtype=torch.bfloat16)
    bias = torch.randn(768, device=DEV, dtype=torch.bfloat16)
    at = lambda offset: storage[offset:offset + 512 * 768].view(512, 768)  # noqa: E731
    compiled, _, plans = _steady(_bias_gelu, (at(4), bias), ON)
    assert any(r.launch.startswith("direct") for r in _regions(plans)), [r.launch for r in _regions(plans)]
    with torch.no_grad(), recording() as rec:
        for offset in (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 4, 1):
            got = compiled(at(offset), bias)
            want = _bias_gelu(at(offset), bias)
            assert_same(got, want)
    torch.cuda.synchronize()
    launches = [r.launch for r in _regions(plans + rec.plans)]
    assert not [launch for launch in launches if "failed" in launch], launches


def test_two_grid_reductions_in_one_region_match_eager_call_after_call():
    """A sum and a max of one [1 << 24] tensor: grid reductions whose semaphores nvFuser slices out of
    one zeroed allocation; each must be zeroed before every call, whatever memory it gets."""
    def fn(t):
        return t.sum(), t.amax()

    def make(i):
        t = torch.rand(1 << 24, device=DEV)
        t[(i * 7919) % (1 << 24)] = 2.0 + i  # the maximum moves and grows call by call
        return t

    compiled, _, plans = _steady(fn, (make(0),), ON)
    regions = _regions(plans)
    launches = [r.launch for r in regions]
    assert launches and all(launch.startswith("direct") and "zeroed range" in launch for launch in launches), launches
    before = STATS.direct_launches
    with torch.no_grad():
        for i in range(1, 21):
            fresh = make(i)
            _poison_allocator()
            total, peak = compiled(fresh)
            assert peak.item() == 2.0 + i
            torch.testing.assert_close(total.double(), fresh.double().sum(), rtol=1e-4, atol=0)
    assert STATS.direct_launches == before + 20 * len(regions)


def test_the_launcher_called_from_a_fresh_thread_launches_in_the_kernels_context():
    nvf = nvf_env.nvfuser_module()
    x = torch.randn(256, 384, device=DEV)
    fd = _fusion(nvf, nvf.DataType.Float)
    outputs = fd.execute([x])  # compiles: fd.fec exists from here on
    kernel = direct_launch.build(fd.fec, [x], outputs)
    y = torch.randn(256, 384, device=DEV)
    got = _run_in_thread(lambda: kernel([y]))
    assert got is not None, kernel.last_decline
    assert torch.equal(got[0], torch.relu(y) * 3.0)


def test_a_compiled_function_first_called_on_a_fresh_thread_launches_directly():
    fn, make = CASES["layer_norm_bf16"]
    compiled, _, plans = _steady(fn, make(), ON)
    fresh = make()
    before = STATS.direct_launches

    def call():
        with torch.no_grad():
            return compiled(*fresh)

    got = _run_in_thread(call)
    with torch.no_grad():
        assert_same(got, fn(*fresh))
    assert STATS.direct_launches == before + 1
    launches = [r.launch for r in _regions(plans)]
    assert all(launch.startswith("direct") and "failed" not in launch for launch in launches), launches


needs_two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


@needs_two_gpus
def test_the_launcher_of_a_second_gpu_fusion_launches_there_while_the_first_is_current():
    nvf = nvf_env.nvfuser_module()
    second = torch.device("cuda", 1)
    x = torch.randn(256, 384, device=second)
    fd = _fusion(nvf, nvf.DataType.Float)
    outputs = fd.execute([x])  # compiles: fd.fec exists from here on
    kernel = direct_launch.build(fd.fec, [x], outputs)
    assert torch.cuda.current_device() == 0
    y = torch.randn(256, 384, device=second)
    (got,) = kernel([y])
    assert got.device == second and torch.equal(got, torch.relu(y) * 3.0)
    assert torch.cuda.current_device() == 0  # the caller's device is current again
    assert kernel([torch.randn(256, 384, device=DEV)]) is None and "another device" in kernel.last_decline
    got = _run_in_thread(lambda: kernel([y]))  # a fresh thread, its current device 0
    assert got is not None and torch.equal(got[0], torch.relu(y) * 3.0)
    torch.cuda.synchronize(second)


@needs_two_gpus
def test_a_region_on_the_second_gpu_launches_directly_on_its_stream():
    second = torch.device("cuda", 1)
    make = lambda: (torch.randn(512, 768, device=second, dtype=torch.bfloat16),  # noqa: E731
                    torch.randn(768, device=second, dtype=torch.bfloat16))
    compiled, _, plans = _steady(_bias_gelu, make(), ON)
    launches = [r.launch for r in _regions(plans)]
    assert launches and all(launch.startswith("direct") for launch in launches), launches
    before = STATS.direct_launches
    stream = torch.cuda.Stream(second)
    with torch.no_grad():
        for _ in range(3):
            fresh = make()
            got = compiled(*fresh)
            assert got.device == second and torch.cuda.current_device() == 0
            assert_same(got, _bias_gelu(*fresh))
        with torch.cuda.stream(stream):  # the second GPU's current stream is the launcher's
            fresh = make()
            got = compiled(*fresh)
        stream.synchronize()
        assert_same(got, _bias_gelu(*fresh))
    assert STATS.direct_launches == before + 4
