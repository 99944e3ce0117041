"""The engine plugins' small caches of what they make per object (a codec's stop tables, a
tokenizer's string table): bounded, shared by threads, keyed by the object's identity.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

_Value = TypeVar("_Value")


class IdentityCache(Generic[_Value]):
    """At most ``most`` values, each made once per object and key and dropped least recently used
    first; an entry is the object's only while that object lives (it holds the object, so a new
    one at a freed address never gets it).
    """

    def __init__(self, most: int) -> None:
        self._most = most
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, Hashable], tuple[object, _Value]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, owner: object, key: Hashable, make: Callable[[], _Value]) -> _Value:
        """The value kept for ``owner`` and ``key``, else ``make()`` kept (made outside the lock:
        two threads may both make it, and the later one is kept).
        """
        at = (id(owner), key)
        with self._lock:
            entry = self._entries.get(at)
            if entry is not None and entry[0] is owner:
                self._entries.move_to_end(at)
                return entry[1]
        value = make()
        with self._lock:
            self._entries[at] = (owner, value)
            while len(self._entries) > self._most:
                self._entries.popitem(last=False)
        return value
