"""Process-wide cache of fusion definitions shared by regions with equal fusion keys.

A region's own cache (RegionRuntime) maps input descriptions to definitions; before building one it
asks this cache for the same (fusion key, input description), so identical regions (the layers of a
model, a block in forward and backward, a graph compiled again) compile their fusion once. Bounded
(LRU); only definitions that built without error are shared.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable, Optional

from dynamo_nvf.runtime.stats import STATS


class SharedFusions:
    """An LRU map (fusion key, input description) -> a region runtime's cache entry."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Optional[Any]:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            STATS.fusions_reused += 1
        return entry

    def put(self, key: Hashable, entry: Any) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


SHARED_FUSIONS = SharedFusions()
