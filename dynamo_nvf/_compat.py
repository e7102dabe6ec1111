"""Small shims over torch APIs that moved between the versions we support (2.10 to 2.13)."""

from __future__ import annotations

from typing import Any

from torch.fx.experimental import symbolic_shapes as _ss

_hint = getattr(_ss, "optimization_hint", None) or getattr(_ss, "hint_int", None)


def hint_int(value: Any) -> int:
    """The example value of a size (an int, or a SymInt's hint) without adding a guard."""
    if isinstance(value, int):
        return value
    if _hint is not None:
        return int(_hint(value))
    return int(value.node.hint)
