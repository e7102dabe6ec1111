"""perf.grad_check: the gradient bound used to judge backends against eager on model workloads."""

import torch

from perf import grad_check


def test_bound_passes_rounding_noise_and_fails_a_wrong_gradient():
    torch.manual_seed(0)
    ref = [torch.randn(64, dtype=torch.float32)]
    eager = [ref[0].to(torch.bfloat16).float()]  # eager's own bf16 rounding
    noisy = [ref[0].to(torch.bfloat16).float() + 1e-3 * torch.randn(64)]
    wrong = [ref[0] * 1.1]
    names = ["g"]
    assert all(c.ok for c in grad_check.compare(ref, eager, noisy, torch.bfloat16, names))
    (check,) = grad_check.compare(ref, eager, wrong, torch.bfloat16, names)
    assert not check.ok and check.backend_err > check.limit


def test_cancelling_gradient_is_judged_against_eager_noise():
    """A gradient that cancels to ~0 (a bias ahead of a norm): a large relative error that eager shares passes."""
    ref = [torch.full((8,), 1e-9)]
    eager = [torch.full((8,), 3e-7)]
    got = [torch.full((8,), -4e-7)]
    (check,) = grad_check.compare(ref, eager, got, torch.bfloat16, ["bias"])
    assert check.ok
    (check,) = grad_check.compare(ref, eager, [torch.full((8,), 5e-6)], torch.bfloat16, ["bias"])
    assert not check.ok


def test_missing_gradient_fails():
    (check,) = grad_check.compare([torch.ones(2)], [torch.ones(2)], [None], torch.float32, ["w"])
    assert not check.ok


def test_eager_backend_passes_on_a_tiny_model_on_the_cpu():
    lines = []
    assert grad_check.check_workload("gpt_train_f32_small", ["eager"], steps=1, report=lines.append,
                                     device="cpu", tiny=True)
    assert "within bound" in lines[0]


def test_a_backend_with_wrong_gradients_fails_on_the_cpu(monkeypatch):
    """A backend whose loss is scaled by 1.1 (every gradient 10% off) is caught, with the tensors named."""
    import perf.backends
    from perf.backends import get_backend

    eager = get_backend("eager")

    class Scaled:
        cuda_graphs = False

        def wrap(self, fn):
            compiled = eager.wrap(fn)
            return lambda *args: compiled(*args) * 1.1

    monkeypatch.setattr(perf.backends, "get_backend", lambda name: Scaled() if name == "scaled" else get_backend(name))
    lines = []
    assert not grad_check.check_workload("gpt_train_f32_small", ["scaled"], steps=1, report=lines.append,
                                         device="cpu", tiny=True)
    assert "FAIL grad" in "\n".join(lines)


def test_a_missing_gradient_that_eager_has_fails():
    (check,) = grad_check.compare([None], [torch.ones(2)], [None], torch.float32, ["w"])
    assert not check.ok
