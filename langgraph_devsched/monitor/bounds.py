"""How much the monitor keeps: caps on every table, and the sizes to check them against.

Every table of `MonitorState` is bounded, per tool or per batch shape and in total. When a cap
is exceeded the least recently updated entry goes (each table's order is its recency). The
defaults suit a server running for weeks: at most 1024 tools, 64 (option, context) estimates a
tool and 8192 in all, 1024 batch shapes (their latest step and probe budget) and, for outcomes,
32 placements a shape and 4096 in all, a few tens of MB at the very most.

>>> limits = MonitorLimits(max_stats_per_tool=8)
>>> limits.max_stats_per_tool, limits.max_stats
(8, 8192)
>>> MonitorLimits(max_tools=0)
Traceback (most recent call last):
...
ValueError: MonitorLimits.max_tools must be a positive int, got 0
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class MonitorLimits:
    """Caps on the monitor's tables (all positive)."""

    max_tools: int = 1024
    """Tools whose declared facts and largest VRAM reservation are kept; evicting a tool
    drops its estimates too."""
    max_stats_per_tool: int = 64
    """(option, load context) estimates kept per tool."""
    max_stats: int = 8192
    """(tool, option, load context) estimates kept in all."""
    max_shapes: int = 1024
    """Batch shapes whose latest step (the hints' base) and probe budget are kept; evicting a
    shape drops its outcomes too."""
    max_outcomes_per_shape: int = 32
    """Executed placements kept per batch shape."""
    max_outcomes: int = 4096
    """Executed (shape, placement) outcomes kept in all."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"MonitorLimits.{f.name} must be a positive int, got {value!r}"
                )


@dataclass(frozen=True)
class MonitorSizes:
    """How full the monitor's tables are (compare with `MonitorLimits`)."""

    tools: int
    vram_seen: int
    stats: int
    stats_per_tool: int
    """The most estimates any one tool has."""
    shapes: int
    probe_budgets: int
    outcomes: int
    outcomes_per_shape: int
    """The most outcomes any one shape has."""
