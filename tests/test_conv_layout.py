"""conv_layout: a ResNet-style net (conv-BN-ReLU-conv-BN-add-ReLU blocks) runs its convolutions
channels-last in inference, forward and backward graphs (with and without CUDA graphs): the graph's
input image is converted once, every convolution reads channels-last activations, the forward's saved
activations stay channels-last and the backward reads them so, and only the outputs whose layout
changed get one copy back to eager's strides. Values, output strides and input/weight-gradient strides
match eager. Inductor's heuristics leave grouped, channel-shrinking and all-small convolutions NCHW;
a view the new layout cannot take reads a copy in the layout it was traced for. On the GPU a training step runs no cuDNN layout
conversion (nchwToNhwc / nhwcToNchw)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamo_nvf import nvf as nvf_env
from dynamo_nvf.backend import recording
from helpers import (assert_as_close_as_eager, assert_same, assert_same_layout, check_fresh_inputs, check_inference,
                     clone_inputs, compile_fn)

PLAN = {"plan_cpu_as_cuda": True, "strict": True}
GRAPHS = {**PLAN, "cuda_graphs": True}
C = 80  # more than 64 channels: inductor's heuristics leave nets of only small convolutions NCHW
BLOCKS = 2


def _bn(y, w, b):
    return F.batch_norm(y, None, None, w, b, training=True)


def resnet(x, *params, bn=True):
    """A stem (conv-BN-ReLU) and BLOCKS basic blocks (conv-BN-ReLU-conv-BN-add-ReLU)."""
    norm = _bn if bn else (lambda y, w, b: y * w[:, None, None] + b[:, None, None])
    w, g, b = params[:3]
    y = torch.relu(norm(F.conv2d(x, w, padding=1), g, b))
    for i in range(BLOCKS):
        wa, ga, ba, wb, gb, bb = params[3 + 6 * i: 9 + 6 * i]
        z = torch.relu(norm(F.conv2d(y, wa, padding=1), ga, ba))
        y = torch.relu(norm(F.conv2d(z, wb, padding=1), gb, bb) + y)
    return y


def resnet_no_bn(x, *params):
    return resnet(x, *params, bn=False)


def resnet_pool(x, *params):
    """ResNet's stem: conv-BN-ReLU and a 3x3 max pool of stride 2, then the blocks."""
    w, g, b = params[:3]
    y = F.max_pool2d(torch.relu(_bn(F.conv2d(x, w, padding=1), g, b)), 3, 2, 1)
    for i in range(BLOCKS):
        wa, ga, ba, wb, gb, bb = params[3 + 6 * i: 9 + 6 * i]
        z = torch.relu(_bn(F.conv2d(y, wa, padding=1), ga, ba))
        y = torch.relu(_bn(F.conv2d(z, wb, padding=1), gb, bb) + y)
    return y


def _inputs(batch=2, hw=8, c=C, device="cpu", dtype=torch.float32):
    def r(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, device=device) * scale + shift).to(dtype)

    out = [r(batch, 3, hw, hw), r(c, 3, 3, 3, scale=0.2), r(c, scale=0.1, shift=1.0), r(c, scale=0.1)]
    for _ in range(2 * BLOCKS):
        out += [r(c, c, 3, 3, scale=(2.0 / (9 * c)) ** 0.5), r(c, scale=0.1, shift=1.0), r(c, scale=0.1)]
    return out


def _notes(plan):
    return [n for n in plan.rewrites if n.startswith("channels-last convolutions")]


def _convs(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"
            and n.target in (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default)]


def _is_channels_last(node):
    return node.meta["val"].is_contiguous(memory_format=torch.channels_last)


def _layout_copies(plan):
    """Clones into a memory format, wherever they run (regions or ATen)."""
    codes = [plan.code] + [r.fx_code for r in plan.regions]
    return sum(line.count("torch.ops.aten.clone.default") for code in codes for line in code.splitlines()
               if "memory_format" in line)


def _train(fn, inputs, options):
    """Compiled and eager forward and backward: (plans, graph modules, outputs and input grads of each)."""
    compiled = compile_fn(fn, options)
    comp, eager = clone_inputs(inputs, requires_grad=True), clone_inputs(inputs, requires_grad=True)
    with recording() as rec:
        out_c, out_e = compiled(*comp), fn(*eager)
        grad = torch.randn_like(out_e)
        grads_c = torch.autograd.grad(out_c, comp, grad)
        grads_e = torch.autograd.grad(out_e, eager, grad)
    return rec, (out_c, grads_c), (out_e, grads_e)


@pytest.mark.parametrize("options", [PLAN, GRAPHS], ids=["plain", "cuda_graphs"])
def test_inference_runs_convolutions_channels_last(options):
    inputs = _inputs()
    with recording() as rec:
        (plan,) = check_inference(resnet, inputs, options)
    assert _notes(plan) == ["channels-last convolutions: 5 convolution(s) run channels-last; 1 activation(s) "
                            "converted, 1 output(s) given eager's strides back"], plan.rewrites
    (gm,) = rec.graph_modules
    convs = _convs(gm)
    assert len(convs) == 5 and all(_is_channels_last(c.args[0]) and _is_channels_last(c) for c in convs)
    weights = 5 if options.get("cuda_graphs") else 0  # conv_weight_layout converts them under CUDA graphs
    assert _layout_copies(plan) == 2 + weights, (plan.code, [r.fx_code for r in plan.regions])
    check_fresh_inputs(compile_fn(resnet, options), resnet, _inputs)


@pytest.mark.parametrize("options", [PLAN, GRAPHS], ids=["plain", "cuda_graphs"])
def test_training_saves_channels_last_activations_and_restores_eager_strides(options):
    torch.manual_seed(0)
    rec, (out_c, grads_c), (out_e, grads_e) = _train(resnet, _inputs(), options)
    assert_same(out_c, out_e)
    for a, e in zip(grads_c, grads_e):  # the image's and every weight's gradient: eager's strides
        assert_same(a, e, rtol=1e-4, atol=1e-4)
    plans = {p.kind: p for p in rec.plans}
    assert _notes(plans["forward"]) == [
        "channels-last convolutions: 5 convolution(s) run channels-last; 1 activation(s) converted, 1 output(s) "
        "given eager's strides back; 10 saved tensor(s) stay channels-last"], plans["forward"].rewrites
    # The backward reads the saved activations channels-last: only the output gradient is converted,
    # and the image's gradient and the five weights' gradients get eager's strides back.
    assert _notes(plans["backward"]) == [
        "channels-last convolutions: 5 convolution(s) run channels-last; 1 activation(s) converted, "
        "6 output(s) given eager's strides back"], plans["backward"].rewrites
    gms = {p.kind: gm for p, gm in zip(rec.plans, rec.graph_modules)}
    for kind in ("forward", "backward"):
        convs = _convs(gms[kind])
        assert len(convs) == 5, kind
        for conv in convs:
            reads = conv.args[:2] if kind == "backward" else conv.args[:1]
            assert all(_is_channels_last(a) for a in reads), (kind, conv.name)
    saved = [n for n in gms["backward"].graph.nodes if n.op == "placeholder" and n.meta["val"].dim() == 4
             and not n.name.startswith(("tangents", "primals"))]
    assert len(saved) >= 5 and all(_is_channels_last(n) for n in saved), saved


@pytest.mark.parametrize("options", [PLAN, GRAPHS], ids=["plain", "cuda_graphs"])
def test_a_max_pools_backward_follows_its_gradients_layout(options):
    """The pool's backward reads a stand-in of its input's sizes (traced NCHW): it takes the gradient's
    channels-last layout, so ATen runs the NHWC kernel and the stem's convolution backward reads the
    pool's gradient as it comes, without a conversion."""
    torch.manual_seed(0)
    rec, (out_c, grads_c), (out_e, grads_e) = _train(resnet_pool, _inputs(), options)
    assert_same(out_c, out_e)
    for a, e in zip(grads_c, grads_e):
        assert_same(a, e, rtol=1e-4, atol=1e-4)
    plans = {p.kind: p for p in rec.plans}
    gms = {p.kind: gm for p, gm in zip(rec.plans, rec.graph_modules)}
    (pool,) = gms["backward"].graph.find_nodes(op="call_function",
                                               target=torch.ops.aten.max_pool2d_with_indices_backward.default)
    assert pool.args[1].target is torch.ops.aten.empty_strided.default
    assert _is_channels_last(pool.args[0]) and _is_channels_last(pool.args[1]) and _is_channels_last(pool)
    assert _notes(plans["backward"]) == [
        "channels-last convolutions: 5 convolution(s) run channels-last; 1 activation(s) converted, "
        "6 output(s) given eager's strides back"], plans["backward"].rewrites


def test_modules_with_running_statistics_match_eager():
    """nn.Conv2d / nn.BatchNorm2d (running statistics updated in the graph) in training and eval."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, C, 3, padding=1, bias=False),
                                            torch.nn.BatchNorm2d(C), torch.nn.ReLU())
            self.body = torch.nn.Sequential(torch.nn.Conv2d(C, C, 3, padding=1, bias=False),
                                            torch.nn.BatchNorm2d(C), torch.nn.ReLU(),
                                            torch.nn.Conv2d(C, C, 3, padding=1, bias=False),
                                            torch.nn.BatchNorm2d(C))
            self.fc = torch.nn.Linear(C, 10)

        def forward(self, x):
            y = self.stem(x)
            y = torch.relu(self.body(y) + y)
            return self.fc(y.mean((2, 3))), y

    eager = Net()
    model = Net()
    model.load_state_dict(eager.state_dict())
    compiled = compile_fn(model, PLAN)
    x = torch.randn(2, 3, 8, 8)
    with recording() as rec:
        out_c, out_e = compiled(x), eager(x)
        assert_same(out_c, out_e, rtol=1e-4, atol=1e-4)
        (out_c[0].sum() + out_c[1].sum()).backward()
        (out_e[0].sum() + out_e[1].sum()).backward()
    assert all(_notes(p) for p in rec.plans), [p.rewrites for p in rec.plans]
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert_same(p.grad, q.grad, rtol=1e-4, atol=1e-4), name
    for b, c in zip(model.buffers(), eager.buffers()):
        assert_same(b, c, rtol=1e-5, atol=1e-5)
    model.eval(), eager.eval()
    with torch.no_grad():
        assert_same(compiled(x), eager(x), rtol=1e-4, atol=1e-4)


def test_option_off_keeps_nchw():
    (plan,) = check_inference(resnet, _inputs(), {**PLAN, "channels_last_convs": False})
    assert not _notes(plan) and _layout_copies(plan) == 0, plan.rewrites


def test_inductors_heuristics_keep_nchw():
    """Training graphs: a grouped convolution (more than one channel per group), one that halves its
    channels with a 3x3 kernel, or only convolutions of 64 channels or fewer. Inference: grouped
    convolutions' flops outweigh (channels-last measured 1.36x slower for them)."""
    def grouped(x, w0, w1):
        return F.conv2d(F.conv2d(x, w0, padding=1), w1, padding=1, groups=2)

    def shrinking(x, w0, w1):
        return F.conv2d(torch.relu(F.conv2d(x, w0, padding=1)), w1, padding=1)

    cases = {
        "grouped": (grouped, [torch.randn(2, 3, 8, 8), torch.randn(C, 3, 3, 3), torch.randn(C, C // 2, 3, 3)]),
        "shrinking": (shrinking, [torch.randn(2, 3, 8, 8), torch.randn(2 * C, 3, 3, 3), torch.randn(C, 2 * C, 3, 3)]),
        "small": (shrinking, [torch.randn(2, 3, 8, 8), torch.randn(16, 3, 3, 3), torch.randn(16, 16, 3, 3)]),
    }
    for name, (fn, inputs) in cases.items():
        rec, (out_c, grads_c), (out_e, grads_e) = _train(fn, inputs, PLAN)
        assert not any(_notes(p) for p in rec.plans), (name, [p.rewrites for p in rec.plans])
        assert_same(out_c, out_e, rtol=1e-4, atol=1e-4)

    def grouped_only(x, w):
        return F.conv2d(x, w, padding=1, groups=4)

    (plan,) = check_inference(grouped_only, [torch.randn(2, C, 8, 8), torch.randn(C, C // 4, 3, 3)], PLAN)
    assert not _notes(plan), plan.rewrites


def test_a_view_the_new_layout_cannot_take_reads_a_copy_in_the_traced_layout():
    def flattened(*args):
        y = resnet(*args)
        return y.view(y.shape[0], -1) * 2.0  # a view of NCHW memory; channels-last would need a copy

    (plan,) = check_inference(flattened, _inputs(), PLAN)
    assert _notes(plan) and _layout_copies(plan) == 2, plan.rewrites  # the image's, and the view's


class StdConv(torch.nn.Conv2d):
    """BiT's weight-standardised convolution: its weight viewed [1, out, in * k * k] for a BatchNorm
    over each filter, so its backward views the weight's gradient, which cuDNN writes channels-last
    from a channels-last input."""

    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True,
                         momentum=0.0, eps=1e-6).reshape_as(self.weight)
        return F.conv2d(x, w, None, self.stride, self.padding)


def _std_conv_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(StdConv(8, C, 3, padding=1, bias=False), torch.nn.GroupNorm(4, C), torch.nn.ReLU(),
                               StdConv(C, C, 3, padding=1, bias=False), torch.nn.GroupNorm(4, C), torch.nn.ReLU())


def test_a_weight_standardised_net_trains_channels_last():
    """The backward's view of a weight gradient reads a copy in the traced layout; before, adopting
    the forward's channels-last saved tensors failed there and the backward ran ops traced NCHW on
    channels-last inputs (a RuntimeError from that view)."""
    from helpers import check_training

    m = _std_conv_net()
    plans = check_training(m, [torch.randn(2, 8, 16, 16)], PLAN, params=list(m.parameters()), atol=1e-4)
    assert all(_notes(p) for p in plans), [p.rewrites for p in plans]
    backward = next(p for p in plans if p.kind == "backward")
    views = [n.name for n in backward.nodes if n.op == "aten.view.default" and "clone" in " ".join(n.inputs)]
    assert len(views) == 2 and _notes(backward), (views, backward.code)  # each weight gradient's view


def test_inputs_that_cannot_take_the_forwards_layout_are_copied_back(monkeypatch):
    """Where the backward cannot take its inputs' new layout (no copy for the view here), they are
    copied into the layout it was traced for: the backward runs NCHW and matches eager."""
    from dynamo_nvf.passes import conv_layout
    from helpers import check_training

    monkeypatch.setattr(conv_layout, "_view_copy", lambda *args: None)
    m = _std_conv_net()
    plans = check_training(m, [torch.randn(2, 8, 16, 16)], {"plan_cpu_as_cuda": True}, params=list(m.parameters()),
                           atol=1e-4)
    backward = next(p for p in plans if p.kind == "backward")
    assert _layout_copies(backward) == 4 and not _notes(backward), backward.code  # the saved activations


def test_conv_outputs_returned_as_they_are_get_eager_strides():
    """Two graph outputs (a block's output and a conv output): each copied back once."""
    def two(x, *params):
        y = resnet(x, *params)
        return y, F.conv2d(y, params[3], padding=1)

    (plan,) = check_inference(two, _inputs(), PLAN)
    assert _notes(plan) and "2 output(s) given eager's strides back" in _notes(plan)[0], plan.rewrites
    check_fresh_inputs(compile_fn(two, PLAN), two, _inputs)


_GPU = pytest.mark.skipif(not nvf_env.nvfuser_available(), reason="needs CUDA and nvFuser")


def _training_step_kernels(fn, inputs, options):
    """Kernel names of one steady-state forward + backward step of `compile_fn(fn, options)`."""
    compiled = compile_fn(fn, options)
    args = clone_inputs(inputs, requires_grad=True)
    for _ in range(5):  # compile, direct launch's checking calls, CUDA graphs' warm-up and record
        out = compiled(*args)
        torch.autograd.grad(out, args, torch.ones_like(out))
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out = compiled(*args)
        grads = torch.autograd.grad(out, args, torch.ones_like(out))
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA], out, grads


@pytest.mark.gpu
@_GPU
@pytest.mark.parametrize("fn", [resnet, resnet_no_bn, resnet_pool], ids=["bn", "no_bn", "pool"])
@pytest.mark.parametrize("options", [{"strict": True}, {"strict": True, "cuda_graphs": True}],
                         ids=["plain", "cuda_graphs"])
def test_gpu_training_step_has_no_cudnn_layout_conversions(fn, options):
    torch.manual_seed(0)
    dtype = torch.bfloat16
    inputs = _inputs(batch=16, hw=28, c=128, device="cuda", dtype=dtype)
    names, out, grads = _training_step_kernels(fn, inputs, options)
    assert any("nvfuser" in n for n in names), names
    conversions = [n for n in names if "nchwToNhwc" in n or "nhwcToNchw" in n]
    assert not conversions, conversions
    assert not [n for n in names if "max_pool_backward_nchw" in n], names  # the pool's backward runs NHWC
    eager_args = clone_inputs(inputs, requires_grad=True)
    want = fn(*eager_args)
    want_grads = torch.autograd.grad(want, eager_args, torch.ones_like(want))
    ref_args = [x.detach().double().requires_grad_() for x in inputs]  # cuDNN's sums: judged against f64
    ref = fn(*ref_args)
    ref_grads = torch.autograd.grad(ref, ref_args, torch.ones_like(ref))
    assert_same_layout(out, want)
    assert_as_close_as_eager(out, want, ref)
    for a, e, x in zip(grads, want_grads, ref_grads):  # the image's and the weights': eager's strides too
        assert_same_layout(a, e)
        assert_as_close_as_eager(a, e, x)


@pytest.mark.gpu
@_GPU
def test_gpu_nchw_training_step_has_cudnn_layout_conversions():
    """The premise of the test above: with the plan off, cuDNN converts this net's activations."""
    inputs = _inputs(batch=16, hw=28, c=128, device="cuda", dtype=torch.bfloat16)
    names, _, _ = _training_step_kernels(resnet_no_bn, inputs, {"strict": True, "channels_last_convs": False})
    assert any("nchwToNhwc" in n or "nhwcToNchw" in n for n in names), names


@pytest.mark.gpu
@_GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_inference_matches_eager(dtype):
    """Fresh inputs each call; cuDNN picks other algorithms per layout (TF32 or bf16 tensor-op sums in
    other orders), so values are judged against an f64 reference as eager's are."""
    torch.manual_seed(0)
    compiled = compile_fn(resnet, {"strict": True})
    for _ in range(2):
        inputs = _inputs(batch=8, hw=28, c=128, device="cuda", dtype=dtype)
        with torch.no_grad():
            out, want = compiled(*inputs), resnet(*inputs)
            ref = resnet(*[x.double() for x in inputs])
        assert_same_layout(out, want)
        assert_as_close_as_eager(out, want, ref)


def test_cuda_convolution_gradients_take_cudnns_layout():
    """Where this torch's meta function says contiguous, a CUDA convolution_backward's gradients are
    planned channels-last as cuDNN writes them when its input is; an NCHW input keeps them NCHW."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx import Graph

    from dynamo_nvf.passes.conv_layout import _cudnn_grad_layout

    with FakeTensorMode():
        nchw = torch.empty(2, 8, 4, 4, device="cuda")
        nhwc = torch.empty_strided((2, 8, 4, 4), (128, 1, 32, 8), device="cuda")
        weight = torch.empty(16, 8, 3, 3, device="cuda")
        grads = (torch.empty(2, 8, 4, 4, device="cuda"), torch.empty(16, 8, 3, 3, device="cuda"), None)
    for x, want in ((nhwc, True), (nchw, False)):
        graph = Graph()
        args = [graph.placeholder(name) for name in ("g", "x", "w")]
        for node, val in zip(args, (nchw, x, weight)):
            node.meta["val"] = val
        conv = graph.call_function(torch.ops.aten.convolution_backward.default,
                                   (*args, [16], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]))
        grad_input, grad_weight, _ = _cudnn_grad_layout(conv, grads)
        assert grad_input.is_contiguous(memory_format=torch.channels_last) == want
        assert grad_weight.is_contiguous(memory_format=torch.channels_last) == want
        assert grad_weight.is_contiguous() != want
