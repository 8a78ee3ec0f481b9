"""The monitor's tables: bounded, indexed writes and reads over one `MonitorState`.

`Tables` is the only writer of a monitor's state. Each write moves the entry to the end of its
table (so a table's order is its recency) and evicts from the front past the caps of
`MonitorLimits`. It keeps indexes beside the state (estimates per tool, outcomes per shape,
shapes per set of tools, the mean spread) so that reads cost what one tool or one shape holds,
never the whole history.

>>> from langgraph_devsched.monitor.state import KeyStats, MonitorState
>>> t = Tables(MonitorState(), MonitorLimits(max_stats_per_tool=2))
>>> for ctx in ("gpu0-cpu0-low-idle", "gpu1-cpu0-low-idle", "gpu2-cpu0-low-idle"):
...     t.put_stat("ocr", "cpu", ctx, KeyStats(device="cpu"))
>>> [context for _, context, _ in t.stats_of("ocr")]  # the oldest went
['gpu1-cpu0-low-idle', 'gpu2-cpu0-low-idle']
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from itertools import combinations
from typing import Any

from langgraph_devsched.monitor.bounds import MonitorLimits, MonitorSizes
from langgraph_devsched.monitor.keys import (
    Placement,
    Shape,
    outcome_key,
    parse_outcome_key,
    parse_shape,
    parse_stats_key,
    probe_key,
    stats_key,
)
from langgraph_devsched.monitor.state import (
    KeyStats,
    LastStep,
    MonitorState,
    OutcomeStats,
    ToolFacts,
)
from langgraph_devsched.options import DeviceOption

_BACKGROUNDS = ("idle", "busy")
_RESUM_EVERY = 4096


def _touch(table: dict[str, Any], key: str, value: Any) -> bool:
    """Put ``value`` at the end of ``table``; True if ``key`` is new."""
    new = table.pop(key, None) is None
    table[key] = value
    return new


def _keep_newest(table: dict[str, Any], n: int) -> None:
    for key in list(table)[: max(0, len(table) - n)]:
        del table[key]


class Tables:
    """Bounded tables of one `MonitorState`, with the indexes that make reads cheap.

    The state is trimmed to ``limits`` on construction (a loaded file is bounded the same
    way as a live monitor)."""

    def __init__(self, state: MonitorState, limits: MonitorLimits) -> None:
        self.state = state
        self.limits = limits
        self._tool_stats: dict[str, dict[str, tuple[DeviceOption, str]]] = {}
        self._stat_tool: dict[str, str] = {}
        self._sorted: dict[str, list[tuple[DeviceOption, str, str]]] = {}
        self._shape_outcomes: dict[str, dict[str, Placement]] = {}
        self._outcome_shape: dict[str, str] = {}
        self._shape_tools: dict[str, Shape] = {}
        self._toolset_shapes: dict[frozenset[str], dict[str, None]] = {}
        self._cv: dict[str, float] = {}
        self._cv_sum = 0.0
        self._cv_writes = 0
        self._trim()
        for key, ks in state.stats.items():
            tool, option, context = parse_stats_key(key)
            self._index_stat(key, tool, option, context, ks)
        for shape in state.last:
            self._index_shape(shape)
        for key in state.outcomes:
            placement = parse_outcome_key(key)[1]
            shape = key.partition("|")[0]
            self._index_shape(shape)
            self._shape_outcomes.setdefault(shape, {})[key] = placement
            self._outcome_shape[key] = shape

    # -- writes ------------------------------------------------------------------------------

    def put_tool(self, tool: str, facts: ToolFacts) -> None:
        _touch(self.state.tools, tool, facts)
        while len(self.state.tools) > self.limits.max_tools:
            self._evict_tool(next(iter(self.state.tools)))

    def put_vram(self, tool: str, mb: float) -> None:
        seen = self.state.vram_seen_mb.get(tool, 0.0)
        _touch(self.state.vram_seen_mb, tool, max(seen, mb))
        while len(self.state.vram_seen_mb) > self.limits.max_tools:
            del self.state.vram_seen_mb[next(iter(self.state.vram_seen_mb))]

    def put_load(self, tool: str, side: str, ms: float) -> None:
        """The largest time seen a call of ``tool`` waited for its model to load on ``side``
        (bounded: two sides of at most ``max_tools`` tools)."""
        key = f"{tool}|{side}"
        _touch(self.state.load_seen_ms, key, max(self.state.load_seen_ms.get(key, 0.0), ms))
        while len(self.state.load_seen_ms) > 2 * self.limits.max_tools:
            del self.state.load_seen_ms[next(iter(self.state.load_seen_ms))]

    def put_stat(self, tool: str, option: DeviceOption, context: str, ks: KeyStats) -> None:
        key = stats_key(tool, option, context)
        if _touch(self.state.stats, key, ks):
            self._index_stat(key, tool, option, context, ks)
        else:
            _touch(self._tool_stats[tool], key, (option, context))
            self._set_cv(key, ks)
        per_tool = self._tool_stats[tool]
        while len(per_tool) > self.limits.max_stats_per_tool:
            self._evict_stat(next(iter(per_tool)))
        while len(self.state.stats) > self.limits.max_stats:
            self._evict_stat(next(iter(self.state.stats)))

    def put_outcome(self, shape: str, placement: str, out: OutcomeStats) -> None:
        key = outcome_key(shape, placement)
        if _touch(self.state.outcomes, key, out):
            self._index_shape(shape)
            self._shape_outcomes.setdefault(shape, {})[key] = parse_outcome_key(key)[1]
            self._outcome_shape[key] = shape
        else:
            per = self._shape_outcomes[shape]
            _touch(per, key, per[key])
        per_shape = self._shape_outcomes[shape]
        while len(per_shape) > self.limits.max_outcomes_per_shape:
            self._evict_outcome(next(iter(per_shape)))
        while len(self.state.outcomes) > self.limits.max_outcomes:
            self._evict_outcome(next(iter(self.state.outcomes)))

    def put_last(self, last: LastStep) -> None:
        if _touch(self.state.last, last.shape, last):
            self._index_shape(last.shape)
        self.state.last_shape = last.shape
        while len(self.state.last) > self.limits.max_shapes:
            self._evict_shape(next(iter(self.state.last)))

    def add_probe(self, shape: str, bg: str) -> None:
        key = probe_key(shape, bg)
        _touch(self.state.probes_used, key, self.state.probes_used.get(key, 0) + 1)
        while len(self.state.probes_used) > 2 * self.limits.max_shapes:
            del self.state.probes_used[next(iter(self.state.probes_used))]

    # -- reads -------------------------------------------------------------------------------

    def get_stat(self, tool: str, option: str, context: str) -> KeyStats | None:
        return self.state.stats.get(stats_key(tool, option, context))

    def stats_of(self, tool: str) -> Iterator[tuple[DeviceOption, str, KeyStats]]:
        """``(option, context, stats)`` of ``tool``, sorted by option and context."""
        rows = self._sorted.get(tool)
        if rows is None:
            per = self._tool_stats.get(tool, {})
            rows = sorted((option, context, key) for key, (option, context) in per.items())
            self._sorted[tool] = rows
        stats = self.state.stats
        return ((option, context, stats[key]) for option, context, key in rows)

    def tools_with_stats(self) -> list[str]:
        return sorted(self._tool_stats)

    def placements_of(self, shape: str) -> Iterator[tuple[Placement, OutcomeStats]]:
        """The executed placements of one shape key and their outcomes."""
        outcomes = self.state.outcomes
        for key, placement in self._shape_outcomes.get(shape, {}).items():
            yield placement, outcomes[key]

    def shapes_within(self, tools: Collection[str] | None) -> list[tuple[Shape, str]]:
        """``(tools, key)`` of every shape with outcomes made only of ``tools`` (all if None),
        sorted."""
        if tools is None:
            keys: Collection[str] = self._shape_outcomes
        else:
            wanted = frozenset(tools)
            if 2 ** len(wanted) > 4 * len(self._toolset_shapes):
                keys = [s for s in self._shape_outcomes if set(self._shape_tools[s]) <= wanted]
            else:
                found: dict[str, None] = {}
                for n in range(1, len(wanted) + 1):
                    for subset in combinations(sorted(wanted), n):
                        found.update(self._toolset_shapes.get(frozenset(subset), {}))
                keys = [s for s in found if s in self._shape_outcomes]
        return sorted((self._shape_tools[s], s) for s in keys)

    def probes_used(self, shape: str, bg: str) -> int:
        return self.state.probes_used.get(probe_key(shape, bg), 0)

    def noise(self) -> float:
        """Mean relative spread of the estimates with two samples or more (0 if none)."""
        return self._cv_sum / len(self._cv) if self._cv else 0.0

    def sizes(self) -> MonitorSizes:
        st = self.state
        return MonitorSizes(
            tools=len(st.tools), vram_seen=len(st.vram_seen_mb), stats=len(st.stats),
            stats_per_tool=max((len(v) for v in self._tool_stats.values()), default=0),
            shapes=len(st.last), probe_budgets=len(st.probes_used), outcomes=len(st.outcomes),
            outcomes_per_shape=max((len(v) for v in self._shape_outcomes.values()), default=0),
        )

    # -- bookkeeping -------------------------------------------------------------------------

    def _index_stat(
        self, key: str, tool: str, option: DeviceOption, context: str, ks: KeyStats
    ) -> None:
        self._tool_stats.setdefault(tool, {})[key] = (option, context)
        self._stat_tool[key] = tool
        self._sorted.pop(tool, None)
        self._set_cv(key, ks)

    def _index_shape(self, shape: str) -> None:
        if shape not in self._shape_tools:
            tools = parse_shape(shape)
            self._shape_tools[shape] = tools
            self._toolset_shapes.setdefault(frozenset(tools), {})[shape] = None

    def _set_cv(self, key: str, ks: KeyStats) -> None:
        old = self._cv.pop(key, None)
        if old is not None:
            self._cv_sum -= old
        if ks.run.count >= 2:
            self._cv[key] = ks.run.cv
            self._cv_sum += ks.run.cv
        self._cv_writes += 1
        if self._cv_writes >= _RESUM_EVERY:  # keep the running sum exact
            self._cv_writes = 0
            self._cv_sum = math.fsum(self._cv.values())

    def _evict_stat(self, key: str) -> None:
        del self.state.stats[key]
        tool = self._stat_tool.pop(key)
        per = self._tool_stats[tool]
        del per[key]
        if not per:
            del self._tool_stats[tool]
        self._sorted.pop(tool, None)
        old = self._cv.pop(key, None)
        if old is not None:
            self._cv_sum -= old

    def _evict_tool(self, tool: str) -> None:
        del self.state.tools[tool]
        self.state.vram_seen_mb.pop(tool, None)
        for side in ("gpu", "cpu"):
            self.state.load_seen_ms.pop(f"{tool}|{side}", None)
        for key in list(self._tool_stats.get(tool, ())):
            self._evict_stat(key)

    def _evict_outcome(self, key: str) -> None:
        del self.state.outcomes[key]
        shape = self._outcome_shape.pop(key)
        per = self._shape_outcomes[shape]
        del per[key]
        if not per:
            del self._shape_outcomes[shape]
            self._forget_shape(shape)

    def _evict_shape(self, shape: str) -> None:
        del self.state.last[shape]
        for bg in _BACKGROUNDS:
            self.state.probes_used.pop(probe_key(shape, bg), None)
        for key in list(self._shape_outcomes.get(shape, ())):
            self._evict_outcome(key)
        self._forget_shape(shape)

    def _forget_shape(self, shape: str) -> None:
        if shape in self.state.last or shape in self._shape_outcomes:
            return
        tools = self._shape_tools.pop(shape, None)
        if tools is not None:
            group = self._toolset_shapes[frozenset(tools)]
            group.pop(shape, None)
            if not group:
                del self._toolset_shapes[frozenset(tools)]

    def _trim(self) -> None:
        """Bound a loaded state like a live one: keep the newest entries within the caps."""
        st, lim = self.state, self.limits
        _keep_newest(st.tools, lim.max_tools)
        _keep_newest(st.vram_seen_mb, lim.max_tools)
        _keep_newest(st.load_seen_ms, 2 * lim.max_tools)
        _keep_newest(st.last, lim.max_shapes)
        _keep_newest(st.probes_used, 2 * lim.max_shapes)
        st.stats = _keep_newest_grouped(
            st.stats, lambda k: parse_stats_key(k)[0], lim.max_stats_per_tool, lim.max_stats)
        st.outcomes = _keep_newest_grouped(
            st.outcomes, lambda k: k.partition("|")[0], lim.max_outcomes_per_shape,
            lim.max_outcomes)


def _keep_newest_grouped(
    table: dict[str, Any], group_of: Any, per_group: int, total: int
) -> dict[str, Any]:
    if len(table) <= per_group and len(table) <= total:
        return table
    counts: dict[str, int] = {}
    kept: list[str] = []
    for key in reversed(table):
        group = group_of(key)
        if counts.get(group, 0) < per_group and len(kept) < total:
            counts[group] = counts.get(group, 0) + 1
            kept.append(key)
    return {key: table[key] for key in reversed(kept)}
