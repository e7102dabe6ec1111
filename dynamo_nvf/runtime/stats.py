"""Process-wide counters of the runtime, for tests and explain(): did regions really run on nvFuser?"""

from __future__ import annotations

import collections
from dataclasses import asdict, dataclass


@dataclass
class RuntimeStats:
    nvfuser_calls: int = 0
    eager_calls: int = 0
    fusions_built: int = 0
    #: definitions taken from another region with the same fusion key instead of being built
    fusions_reused: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    evictions: int = 0
    fallbacks: int = 0
    #: regions that run as pieces after an nvFuser error on the whole (runtime/split_region.py)
    split_regions: int = 0
    #: regions that run as their stages' pieces because no single nvFuser scheduler takes them whole
    stage_split_regions: int = 0
    #: nvFuser calls launched by runtime/direct_launch.py instead of fec.execute (part of nvfuser_calls)
    direct_launches: int = 0

    def reset(self) -> None:
        for name in asdict(self):
            setattr(self, name, 0)

    def snapshot(self) -> dict[str, int]:
        return asdict(self)


STATS = RuntimeStats()

#: Why each fallback counted in `STATS.fallbacks` happened ("region (its ops): nvFuser's error"),
#: oldest first, the last `MAX_FALLBACK_REASONS` kept: what a report names beside the count.
MAX_FALLBACK_REASONS = 64
FALLBACK_REASONS: "collections.deque[str]" = collections.deque(maxlen=MAX_FALLBACK_REASONS)


def record_fallback(reason: str) -> None:
    """One region (or its pieces) gone to eager for good: counted, with its reason."""
    STATS.fallbacks += 1
    FALLBACK_REASONS.append(reason)


def fallback_reasons(since: int) -> list[str]:
    """The reasons of the fallbacks counted after `STATS.fallbacks` was `since` (as many as kept)."""
    new = STATS.fallbacks - since
    return list(FALLBACK_REASONS)[-new:] if new > 0 else []
