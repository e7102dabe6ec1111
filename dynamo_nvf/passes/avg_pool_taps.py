"""2-D average pools become the mean over their window's taps (dynamo_nvf/pool_windows.py): views,
pads and slices that the region around them takes in, where ATen would run its own pooling kernel
between regions (PoolFormer's token mixer, `avg_pool2d(x, 3, 1, 1, count_include_pad=False) - x`,
twelve and more of them per step; ResNet-D's 2x2 shortcut pools). Forward and inference graphs; the
backward's `avg_pool2d_backward` stays ATen's."""

from __future__ import annotations

import logging

import torch
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.max_pool_taps import inline_taps
from dynamo_nvf.pool_windows import avg_pool2d_values

log = logging.getLogger("dynamo_nvf")
aten = torch.ops.aten


def avg_pool_as_taps(gm: GraphModule, plan_cpu_as_cuda: bool) -> GraphModule:
    """Each `avg_pool2d` that `avg_pool2d_values` takes, as the traced ops of that function."""
    rewrites = 0
    for pool in list(gm.graph.find_nodes(op="call_function", target=aten.avg_pool2d.default)):
        x = pool.args[0]
        val = x.meta.get("val") if hasattr(x, "meta") else None
        if not isinstance(val, torch.Tensor) or getattr(val, "fake_mode", None) is None:
            continue
        args = tuple(pool.args[1:])
        kwargs = dict(pool.kwargs)
        if avg_pool2d_values(val, *args, **kwargs, any_device=plan_cpu_as_cuda) is None:
            continue

        def values(t: torch.Tensor) -> torch.Tensor:
            out = avg_pool2d_values(t, *args, **kwargs, any_device=plan_cpu_as_cuda)
            assert out is not None
            return out

        with val.fake_mode:
            try:
                sub = make_fx(values)(val)
            except Exception:  # noqa: BLE001 - a rewrite it cannot trace is not made
                log.debug("dynamo_nvf: average pool %s not traced as taps", pool.name, exc_info=True)
                continue
        out = inline_taps(gm, sub, [x], pool)
        pool.replace_all_uses_with(out)
        gm.graph.erase_node(pool)
        rewrites += 1
    if rewrites:
        add_note(gm, f"average pool: {rewrites} pool(s) as the mean over their window's taps (views, pads and "
                     "slices a region takes in)")
        gm.graph.lint()
        gm.recompile()
    return gm
