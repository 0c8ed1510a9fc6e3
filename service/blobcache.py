"""A per-worker LRU of blob bytes. Blobs are immutable (named by their sha256), so a cached
copy never goes stale; small cubins are then served without touching the disk."""

from __future__ import annotations

from collections import OrderedDict


class BlobCache:
    def __init__(self, max_bytes: int, max_item_bytes: int):
        self.max_bytes, self.max_item_bytes = max_bytes, max_item_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0

    def get(self, sha: str) -> bytes | None:
        data = self._items.get(sha)
        if data is not None:
            self._items.move_to_end(sha)
        return data

    def put(self, sha: str, data: bytes) -> None:
        if len(data) > self.max_item_bytes or sha in self._items:
            return
        self._items[sha] = data
        self._bytes += len(data)
        while self._bytes > self.max_bytes and self._items:
            _, old = self._items.popitem(last=False)
            self._bytes -= len(old)
