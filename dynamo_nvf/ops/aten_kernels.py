"""Ops left to ATen's own kernels on purpose, with the reason explain() shows for each.

The partitioner asks this table (through `ops.registry.unsupported_reason`) for an op without an
nvFuser lowering before calling it unsupported: these are not gaps but choices, because a library
kernel (cuBLAS, flash attention) beats a generated one. Keyed by overload packet name, so an op that
one torch version lacks costs nothing.
"""

from __future__ import annotations

from typing import Any, Optional

_MATMUL = "matmul: runs in ATen (cuBLAS)"


def _attention(kernel: str) -> str:
    return f"attention: runs in ATen's fused SDPA kernel ({kernel})"


#: Overload packet name -> why it runs in ATen.
ATEN_KERNEL_REASONS: dict[str, str] = {
    **{f"aten.{name}": _MATMUL for name in ("mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "_scaled_mm")},
    **{f"aten._scaled_dot_product_{name}{suffix}": _attention(kernel)
       for name, kernel in (("flash_attention", "flash"), ("efficient_attention", "memory-efficient"),
                            ("cudnn_attention", "cuDNN"), ("flash_attention_for_cpu", "CPU flash"),
                            ("fused_attention_overrideable", "device backend"))
       for suffix in ("", "_backward")},
    **{f"aten._{name}_attention_{side}": _attention(kernel)
       for name, kernel in (("flash", "flash"), ("efficient", "memory-efficient"))
       for side in ("forward", "backward")},
    "aten._safe_softmax": "attention: softmax of SDPA's math fallback (ATen's _safe_softmax)",
}


def aten_kernel_reason(target: Any) -> Optional[str]:
    """The reason `target` runs in ATen by design, or None."""
    packet = getattr(target, "overloadpacket", None)
    return None if packet is None else ATEN_KERNEL_REASONS.get(str(packet))
