"""`LruTable`: a dict with a size bound that forgets the least recently used entry first.

Every table a scheduler keeps per batch shape or per tool is one of these, so months of
serving new shapes never grow memory without bound.

>>> t = LruTable[str, int](2)
>>> t["a"], t["b"] = 1, 2
>>> t.get("a")  # a is now the most recent
1
>>> t["c"] = 3  # over the bound: b (least recently used) goes
>>> sorted(t), t.evicted
(['a', 'c'], 1)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LruTable(Generic[K, V]):
    """At most ``maxsize`` entries; reading or writing an entry makes it the most recent."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self.evicted = 0
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, default: V | None = None) -> V | None:
        value = self._data.get(key)
        if value is None:
            return default
        self._data.move_to_end(key)
        return value

    def setdefault_with(self, key: K, make: Callable[[], V]) -> V:
        """The entry for ``key``, made by ``make()`` (and stored) when missing."""
        value = self.get(key)
        if value is None:
            value = make()
            self[key] = value
        return value

    def __getitem__(self, key: K) -> V:
        value = self._data[key]
        self._data.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)
            self.evicted += 1

    def pop(self, key: K, default: V | None = None) -> V | None:
        return self._data.pop(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._data))

    def values(self) -> list[V]:
        return list(self._data.values())
