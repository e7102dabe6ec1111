"""2-D average pools become the mean over their window's taps, and their gradients the taps run
backwards (dynamo_nvf/pool_windows.py): views, pads, slices and concatenations that the region around
them takes in, where ATen would run its own pooling kernels between regions (PoolFormer's token
mixer, `avg_pool2d(x, 3, 1, 1, count_include_pad=False) - x`, in every block; DenseNet's 2x2
transition pools)."""

from __future__ import annotations

import torch
from torch.fx import GraphModule

from dynamo_nvf.passes import add_note
from dynamo_nvf.passes.max_pool_taps import traced_taps
from dynamo_nvf.pool_windows import avg_pool2d_grad, avg_pool2d_values

aten = torch.ops.aten


def avg_pool_as_taps(gm: GraphModule, plan_cpu_as_cuda: bool) -> GraphModule:
    """Each `avg_pool2d` and `avg_pool2d_backward` that `avg_pool2d_values` / `avg_pool2d_grad`
    take, as the traced ops of that function."""
    rewrites = 0
    targets = (aten.avg_pool2d.default, aten.avg_pool2d_backward.default)
    for pool in [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets]:
        backward = pool.target is aten.avg_pool2d_backward.default
        inputs = list(pool.args[:2] if backward else pool.args[:1])
        args, kwargs = tuple(pool.args[len(inputs):]), dict(pool.kwargs)
        taps = avg_pool2d_grad if backward else avg_pool2d_values
        out = traced_taps(gm, pool, lambda *ts: taps(*ts, *args, **kwargs, any_device=plan_cpu_as_cuda), inputs)
        if out is None:
            continue
        pool.replace_all_uses_with(out)
        gm.graph.erase_node(pool)
        rewrites += 1
    if rewrites:
        add_note(gm, f"average pool: {rewrites} pool(s) or pool gradient(s) as sums over their window's taps "
                     "(views, pads, slices and concatenations a region takes in)")
        gm.graph.lint()
        gm.recompile()
    return gm
