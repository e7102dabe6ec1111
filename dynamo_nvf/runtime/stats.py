"""Process-wide counters of the runtime, for tests and explain(): did regions really run on nvFuser?"""

from __future__ import annotations

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
