"""`CensoredTimes`: what a cancelled run says about its side: it takes at least that long.

A hedged call's loser cancelled at its bound (`langgraph_devsched.hedging`) is no latency
sample: its side took *at least* its run time. The monitor keeps, per (tool, side), the
largest such lower bound and how many runs were cut; a complete measurement of the side
later is an ordinary sample (the estimate tables), which this table never overrides.
Bounded: the ``max_tools`` most recently noted tools.

>>> t = CensoredTimes(2)
>>> t.note("asr", "cpu", 120.0); t.note("asr", "cpu", 90.0)
>>> t.at_least("asr", "cpu"), t.count("asr", "cpu"), t.at_least("asr", "gpu")
(120.0, 2, None)
"""

from __future__ import annotations

import threading

from langgraph_devsched.schedulers.lru import LruTable


class CensoredTimes:
    """Per (tool, side): the largest lower bound on its run time and the cut runs' count."""

    def __init__(self, max_tools: int = 1024) -> None:
        self._table: LruTable[str, dict[str, tuple[float, int]]] = LruTable(max_tools)
        self._lock = threading.Lock()

    def note(self, tool: str, side: str, at_least_ms: float) -> None:
        """One run of ``tool`` on ``side`` cut after ``at_least_ms``."""
        with self._lock:
            sides = self._table.setdefault_with(tool, dict)
            ms, n = sides.get(side, (0.0, 0))
            sides[side] = (max(ms, at_least_ms), n + 1)

    def at_least(self, tool: str, side: str) -> float | None:
        """The largest lower bound noted for ``tool`` on ``side``, or None."""
        with self._lock:
            found = self._table.get(tool)
            return found[side][0] if found and side in found else None

    def count(self, tool: str, side: str) -> int:
        """How many runs of ``tool`` on ``side`` were cut."""
        with self._lock:
            found = self._table.get(tool)
            return found[side][1] if found and side in found else 0

    def __len__(self) -> int:
        return len(self._table)
