"""Cached answers of the read API (list, detail, select), keyed on the registry's generation.

Those answers change only when a variant is published, re-signed, yanked or unyanked; each
of those bumps the registry's generation counter, <home>/generation (registry/generation.py).
Every worker reads the counter per request (one small file read: no thread, no database
connection) and serves an answer computed under the same generation from memory. The file
is in the home folder because every worker and host of one registry shares that folder
already (the blobs live there). A publish from any worker, or from `import-bundle`, is seen
by all of them on their next request.
"""

from __future__ import annotations

from collections import OrderedDict

from cubinforge.registry.generation import Generation  # noqa: F401  (re-exported)


class ReadCache:
    """An LRU of (generation, status, headers, body) per request key, bounded in entries and bytes."""

    def __init__(self, max_entries: int = 4096, max_bytes: int = 64 << 20, max_item_bytes: int = 2 << 20):
        self.max_entries, self.max_bytes, self.max_item_bytes = max_entries, max_bytes, max_item_bytes
        self._items: OrderedDict[tuple, tuple[bytes, int, list, bytes]] = OrderedDict()
        self._bytes = 0

    def get(self, key: tuple, generation: bytes):
        hit = self._items.get(key)
        if hit is None or hit[0] != generation:
            return None
        self._items.move_to_end(key)
        return hit

    def put(self, key: tuple, generation: bytes, status: int, headers: list, body: bytes) -> None:
        if len(body) > self.max_item_bytes:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= len(old[3])
        self._items[key] = (generation, status, headers, body)
        self._bytes += len(body)
        while self._items and (len(self._items) > self.max_entries or self._bytes > self.max_bytes):
            _, ev = self._items.popitem(last=False)
            self._bytes -= len(ev[3])
