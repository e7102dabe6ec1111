"""Ops left to PyTorch on purpose, with the reason explain() shows for each: the one table.

The partitioner asks it (through `ops.registry.unsupported_reason`) before anything else: these are
not gaps but choices. A library kernel beats a generated one (cuBLAS matmuls, cuDNN convolutions, the fused SDPA kernels
that passes/attention.py rewrites attention into), or the op is communication: collectives are
launched and awaited by their process group (NCCL, gloo) on its own streams, and a region must never
hold one or straddle its wait; FSDP2's buffer ops (copy-in, chunk-cat, split-copy) belong to its
all-gathers and reduce-scatters. Keys are op namespaces (every op in them) or overload packet names,
so an op one torch version lacks costs nothing.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

COMMUNICATION = "communication: collectives and their waits stay in PyTorch"
MATMUL = "matmul: runs in ATen (cuBLAS)"
CONVOLUTION = "convolution: runs in ATen (cuDNN); its bias and the ops around it join regions"


def _attention(kernel: str) -> str:
    return f"attention: runs in ATen's fused SDPA kernel ({kernel})"


#: Op namespace ("c10d") or overload packet name ("aten.mm") -> why it runs in PyTorch.
DELIBERATE_EAGER: dict[str, str] = {
    **{namespace: COMMUNICATION for namespace in (
        "_c10d_functional", "_c10d_functional_autograd",
        "c10d_functional",  # the legacy functional collectives
        "c10d", "_dtensor", "fsdp", "symm_mem",
    )},
    **{f"aten.{name}": MATMUL for name in ("mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "_scaled_mm")},
    **{f"aten.{name}": CONVOLUTION for name in ("convolution", "convolution_backward", "cudnn_convolution",
                                                "cudnn_convolution_transpose", "_convolution")},
    **{f"aten._scaled_dot_product_{name}{suffix}": _attention(kernel)
       for name, kernel in (("flash_attention", "flash"), ("efficient_attention", "memory-efficient"),
                            ("cudnn_attention", "cuDNN"), ("flash_attention_for_cpu", "CPU flash"),
                            ("fused_attention_overrideable", "device backend"))
       for suffix in ("", "_backward")},
    **{f"aten._{name}_attention_{side}": _attention(kernel)
       for name, kernel in (("flash", "flash"), ("efficient", "memory-efficient"))
       for side in ("forward", "backward")},
}


def deliberate_eager_reason(target: Any) -> Optional[str]:
    """Why an op stays in PyTorch on purpose, or None."""
    if not isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return None
    packet = getattr(target, "overloadpacket", target)
    qualified = getattr(packet, "_qualified_op_name", "")  # "aten::mm"
    namespace, _, name = qualified.partition("::")
    return DELIBERATE_EAGER.get(f"{namespace}.{name}") or DELIBERATE_EAGER.get(namespace)
