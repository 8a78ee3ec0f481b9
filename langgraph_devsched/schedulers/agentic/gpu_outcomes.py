"""Executed mappings with their GPUs, on a machine with several: the agentic scheduler's own.

The monitor keeps each executed placement as (tool, option) pairs: it does not say which GPU
a call ran on, so two runs of one mapping on different GPUs are one outcome there. On a
machine with several GPUs the agentic scheduler keeps its own outcomes from what it
observes (`GpuOutcomes.record`, every step it is fed): each call's option spelled on the
GPU it ran on (``gpu_now@1``, `gpu_choice.spell`), the mean makespan and the count, in the
monitor's outcome form, so `observations.outcomes_of`, the past_outcomes tool and
`guard.measured_guard` read them as they read the monitor's. They live as long as the
scheduler (not persisted with the monitor's state).

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.records import CallRecord, StepRecord
>>> from langgraph_devsched.schedulers.base import Batch
>>> batch = Batch.of([("a", "ocr", ToolDeviceSpec()), ("b", "asr", ToolDeviceSpec())])
>>> kept = GpuOutcomes()
>>> kept.record(StepRecord((CallRecord("a", "ocr", "gpu_now", "cuda:1", None, 0, 80, 0, 0),
...     CallRecord("b", "asr", "cpu", "cpu", None, 0, 100, 0, 0)), 100.0))
>>> kept.rows(batch)
[{'shape': ('asr', 'ocr'), 'placement': (('asr', 'cpu'), ('ocr', 'gpu_now@1')), \
'makespan_ms': 100.0, 'count': 1}]
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any

from langgraph_devsched.gpus import gpu_index
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.agentic.gpu_choice import spell
from langgraph_devsched.schedulers.base import Batch

MAX_KEPT = 512
"""Executed mappings kept at most (least recently run dropped first)."""

Placement = tuple[tuple[str, str], ...]


class GpuOutcomes:
    """Mean makespan and count per (shape, placement with GPUs); thread-safe, bounded."""

    def __init__(self, size: int = MAX_KEPT) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[tuple[str, ...], Placement], tuple[float, int]] = (
            OrderedDict())
        self._lock = threading.Lock()

    def record(self, record: StepRecord) -> None:
        """Take one executed step: each call's option on the GPU it ran on (a GPU option
        that ran elsewhere, e.g. fell back to the CPU, is kept without an index)."""
        calls = record.calls
        if not calls or not all(math.isfinite(x) for x in (
                record.makespan_ms, *(c.end_ms for c in calls), *(c.start_ms for c in calls))):
            return  # an empty step has no shape, a non-finite time no outcome
        shape = tuple(sorted(c.tool for c in calls))
        placement = tuple(sorted((c.tool, spell(c.option, gpu_index(c.device))) for c in calls))
        key = (shape, placement)
        with self._lock:
            mean, n = self._kept.pop(key, (0.0, 0))
            self._kept[key] = (mean + (record.makespan_ms - mean) / (n + 1), n + 1)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def rows(self, batch: Batch) -> list[dict[str, Any]]:
        """The executed mappings of ``batch``'s shape, in the monitor's outcome form."""
        shape = batch.shape
        with self._lock:
            return [{"shape": s, "placement": p, "makespan_ms": mean, "count": n}
                    for (s, p), (mean, n) in self._kept.items() if s == shape]

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
