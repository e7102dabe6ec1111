"""Process-wide cache of fusion definitions shared by regions with equal fusion keys.

A region's own cache (RegionRuntime) maps input descriptions to definitions; before building one it
asks this cache for the same (fusion key, input description), so identical regions (the layers of a
model, a block in forward and backward, a graph compiled again) compile their fusion once. Bounded
(LRU); only definitions that built without error are shared.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Hashable, Optional

from dynamo_nvf.runtime.stats import STATS


class SharedFusions:
    """An LRU map (fusion key, input description) -> a region runtime's cache entry."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        # Forward and backward run on different threads (autograd's); misses only, so uncontended.
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Optional[Any]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                STATS.fusions_reused += 1
            return entry

    def put(self, key: Hashable, entry: Any) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def discard(self, entry: Any) -> None:
        """Forgets every key of `entry` (a definition found bad on its first run)."""
        with self._lock:
            for key in [k for k, e in self._entries.items() if e is entry]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


SHARED_FUSIONS = SharedFusions()
