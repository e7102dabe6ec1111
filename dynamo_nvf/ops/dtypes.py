"""The one map between torch dtypes and nvFuser DataType names.

Names, not enum values, so that the map (and every capability check built on it) works on machines
without nvFuser. Only dtypes whose lowering is exercised are listed: int8, uint8, int16 and complex
stay in eager.
"""

from __future__ import annotations

from typing import Any

import torch

#: torch dtype -> name of the `nvfuser_direct.DataType` member.
NVF_DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float64: "Double",
    torch.float32: "Float",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.int64: "Int",
    torch.int32: "Int32",
    torch.bool: "Bool",
}

SUPPORTED_DTYPES: frozenset[torch.dtype] = frozenset(NVF_DTYPE_NAMES)

LOW_PRECISION_FLOATS: frozenset[torch.dtype] = frozenset({torch.float16, torch.bfloat16})


def nvf_dtype(nvf: Any, dtype: torch.dtype) -> Any:
    """The `nvfuser_direct.DataType` for a torch dtype (`nvf` is the nvfuser_direct module)."""
    return getattr(nvf.DataType, NVF_DTYPE_NAMES[dtype])


def python_scalar_dtype_name(value: Any) -> str:
    """nvFuser DataType name of a Python scalar: bool, int or float."""
    if isinstance(value, bool):
        return "Bool"
    if isinstance(value, int):
        return "Int"
    return "Double"
