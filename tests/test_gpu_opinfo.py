"""OpInfo sweep on the GPU: PyTorch's own samples through nvf_bookend, compared with eager.

It takes the OpInfos whose aten ops reach the support table (lowered or decomposed into lowered ops),
runs a few samples per dtype (f32, bf16, f16, and int64/int32/bool where the op takes them) forward,
and f32 backward for differentiable ops, and writes an ops x dtypes table: pass (matched, ran on
nvFuser), fallback (matched, ran in eager), fail (differed, or raised where eager did not). The test
fails on any `fail`.

Size it to one GPU call with environment variables:
  NVF_OPINFO_SAMPLES   samples per op and dtype (default 2)
  NVF_OPINFO_SHARD     "i/n": run every n-th op starting at i (default "0/1")
  NVF_OPINFO_BUDGET_S  stop starting new ops after this many seconds (default 300); the table says
                       how many were not run
  NVF_OPINFO_REPORT    path for the table (default: printed only)
Needs expecttest (torch.testing._internal imports it); on the GPU machine carry its wheel.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest
import torch
import torch._dynamo

from dynamo_nvf import nvf as nvf_env

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not nvf_env.nvfuser_available(), reason=f"needs CUDA and nvFuser: {nvf_env.unavailable_reason()}"),
]

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2)}
EXTRA_OPS = {"nn.functional.layer_norm", "nn.functional.rms_norm", "nn.functional.group_norm",
             "nn.functional.softmin", "nn.functional.logsigmoid", "nn.functional.tanhshrink"}


def select_ops():
    """OpInfos whose aten op is lowered or decomposed into lowered ops."""
    from torch.testing._internal.common_methods_invocations import op_db

    from dynamo_nvf.decompositions import DECOMPOSED_OPS
    from dynamo_nvf.ops.registry import LOWERINGS

    names = set()
    for target in list(LOWERINGS) + list(DECOMPOSED_OPS):
        packet = getattr(target, "overloadpacket", target)
        names.add(getattr(packet, "__name__", "").lstrip("_"))
    return [op for op in op_db
            if op.name.split(".")[-1].lstrip("_") in names or (op.aten_name or "").lstrip("_") in names
            or op.name in EXTRA_OPS]


def _flat(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat(v)]
    return []


def _close(actual, expected) -> str:
    """'' when the outputs match at the tolerance of each output's dtype (an int op may return
    floats, e.g. masked.var; integers and bools must match exactly)."""
    a, e = _flat(actual), _flat(expected)
    if len(a) != len(e):
        return f"{len(a)} outputs, eager has {len(e)}"
    for x, y in zip(a, e):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{x.dtype}{list(x.shape)} vs eager {y.dtype}{list(y.shape)}"
        rtol, atol = TOL.get(y.dtype, (1e-7, 1e-7) if y.dtype.is_floating_point else (0.0, 0.0))
        try:
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
        except AssertionError as exc:
            return str(exc).splitlines()[0]
    return ""


def _fresh(value):
    """A copy of a sample's (nested) arguments: eager and the compiled function each get their own, so an
    op that updates an argument in place (batch_norm's running statistics) leaves the other's alone."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _run_case(op, dtype, samples, backward):
    """Returns (status, detail) for one op and dtype."""
    from dynamo_nvf.backend import recording
    from dynamo_nvf.runtime.stats import STATS

    planned = ran = False
    why = ""
    for sample in samples:
        eager_args, eager_kwargs = _fresh((sample.input, *sample.args)), _fresh(dict(sample.kwargs))
        args, kwargs = _fresh((sample.input, *sample.args)), _fresh(dict(sample.kwargs))

        def fn(*a):
            return op.op(*a, **kwargs)

        try:
            expected = op.op(*eager_args, **eager_kwargs)
        except Exception:
            continue
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="nvf_bookend", options={"min_region_size": 1})
        before = STATS.snapshot()
        try:
            with recording() as rec:
                actual = compiled(*args)
                grads = None
                if backward:
                    outs = [t for t in _flat(actual) if t.requires_grad and t.dtype.is_floating_point]
                    ins = [t for t in _flat(args) if isinstance(t, torch.Tensor) and t.requires_grad]
                    if outs and ins:
                        grads = torch.autograd.grad([o.sum() for o in outs], ins, allow_unused=True)
        except Exception as exc:
            return "fail", f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        planned |= any(p.regions for p in rec.plans)
        after = STATS.snapshot()
        ran |= after["nvfuser_calls"] > before["nvfuser_calls"]
        if after["fallbacks"] > before["fallbacks"]:
            ran = False
            why = next((r.executor_reason for p in rec.plans for r in p.regions if r.executor == "eager"), "")
        problem = _close(actual, expected)
        if not problem:  # arguments updated in place are updated as eager updates them
            problem = _close([*args, *kwargs.values()], [*eager_args, *eager_kwargs.values()])
            problem = f"arguments after the call: {problem}" if problem else ""
        if not problem and grads is not None:
            outs = [t for t in _flat(expected) if t.requires_grad and t.dtype.is_floating_point]
            ins = [t for t in _flat(eager_args) if isinstance(t, torch.Tensor) and t.requires_grad]
            expected_grads = torch.autograd.grad([o.sum() for o in outs], ins, allow_unused=True)
            problem = _close([g for g in grads if g is not None], [g for g in expected_grads if g is not None])
            problem = f"backward: {problem}" if problem else ""
        if problem:
            return "fail", problem[:200]
    if not planned:
        return "no region", ""
    return ("pass", "") if ran else ("fallback", why[:200] or "ran in eager")


def test_opinfo_sweep():
    pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest (carry its wheel)")
    from tabulate import tabulate

    samples_per = int(os.environ.get("NVF_OPINFO_SAMPLES", "2"))
    shard, shards = (int(v) for v in os.environ.get("NVF_OPINFO_SHARD", "0/1").split("/"))
    budget = float(os.environ.get("NVF_OPINFO_BUDGET_S", "300"))
    ops = select_ops()[shard::shards]
    start = time.monotonic()
    rows, failures, fallbacks, not_run = [], [], [], 0
    counts: Counter = Counter()
    samples_run = 0
    for op in ops:
        if time.monotonic() - start > budget:
            not_run += 1
            continue
        supported = op.supported_dtypes("cuda")
        row = [op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")]
        for dtype in DTYPES:
            if dtype not in supported:
                row.append("")
                continue
            backward = dtype == torch.float32 and op.supports_autograd
            try:  # spread over the generator's list: its first samples are often 0-dim edge cases
                every = list(op.sample_inputs("cuda", dtype, requires_grad=backward))
                samples = every[:: max(1, len(every) // samples_per)][:samples_per]
            except Exception:
                row.append("")
                continue
            samples_run += len(samples)
            status, detail = _run_case(op, dtype, samples, backward)
            counts[status] += 1
            row.append(status)
            if status == "fail":
                failures.append((row[0], str(dtype), detail))
            elif status == "fallback":
                fallbacks.append((row[0], str(dtype), detail))
        rows.append(row)
    table = tabulate(rows, headers=["op"] + [str(d).replace("torch.", "") for d in DTYPES], tablefmt="github")
    summary = (f"OpInfo sweep: {len(rows)} ops run ({not_run} not run within {budget:.0f} s), {samples_run} samples; "
               + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    text = summary + "\n\n" + table + "\n\nfailures:\n" + "\n".join(f"- {o} {d}: {m}" for o, d, m in failures)
    path = os.environ.get("NVF_OPINFO_REPORT")
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
        with open(path + ".json", "w") as f:  # scripts/merge_opinfo.py joins the shards' files
            json.dump({"headers": ["op"] + [str(d).replace("torch.", "") for d in DTYPES], "rows": rows,
                       "counts": dict(counts), "failures": failures, "fallbacks": fallbacks, "not_run": not_run,
                       "samples_run": samples_run, "budget_s": budget, "shard": f"{shard}/{shards}",
                       "samples_per_case": samples_per}, f)
    print(text)
    assert not failures, f"{len(failures)} failing op/dtype pairs:\n" + "\n".join(f"{o} {d}: {m}" for o, d, m in failures)
