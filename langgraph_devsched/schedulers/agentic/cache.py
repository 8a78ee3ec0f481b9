"""The agentic scheduler's decision cache: a fingerprint per situation, drift invalidation.

A decision is reused while the step's fingerprint (batch shape, declared hints, a
device-state bucket, the monitor's hints about these tools, its epoch and drift flag) is
unchanged and no estimate of the batch's tools drifted (mean ``run_ms`` moved by more than
the tolerance, or its status changed). A failed consultation is cached too, as a failure
answered by the fallback for a number of steps before the model is asked again, and so is
an answer the guard vetoed (a veto, not a failure: the policy's mapping runs meanwhile).

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch
>>> occurrences(Batch.of([("a", "ocr", ToolDeviceSpec()), ("b", "ocr", ToolDeviceSpec())]))
[('ocr', 0), ('ocr', 1)]
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.agentic.constraints import AgenticCause
from langgraph_devsched.schedulers.agentic.exploration import Veto
from langgraph_devsched.schedulers.agentic.observations import observations_data
from langgraph_devsched.schedulers.base import Batch
from langgraph_devsched.schedulers.base import SchedulerView as View

BUSY_UTILIZATION = 0.1
VRAM_BUCKETS = 10

Key = tuple[Any, ...]
Estimates = dict[tuple[Any, ...], tuple[float, str]]


@dataclass
class Entry:
    """A cached outcome for one fingerprint: options and causes by (tool, occurrence)."""

    options: dict[tuple[str, int], DeviceOption]
    causes: dict[tuple[str, int], AgenticCause]
    reason: str
    estimates: Estimates
    failure: AgenticCause | None = None
    hits_left: int = 0
    detail: str = ""
    fallback_mapping: bool = False
    """The options are the fallback policy's own (a pick of its mapping): on reuse they are
    held to the hard rules but not VRAM-fitted again (its twin weighed the VRAM)."""
    gpus: dict[tuple[str, int], int] = field(default_factory=dict)
    """The GPU the answer named per (tool, occurrence), on a machine with several GPUs;
    carried to the new call ids like the options (one left out: the default rule)."""
    veto: Veto | None = None
    """The model's answer was vetoed by the guard (``options`` empty): the fallback policy
    decides, for ``hits_left`` steps, as after a failure."""

    @property
    def provisional(self) -> bool:
        """A failure or a veto: reused ``hits_left`` more times, then the model is asked
        again (a drift does not end it sooner)."""
        return self.failure is not None or self.veto is not None


def occurrences(batch: Batch) -> list[tuple[str, int]]:
    """Each call's (tool, k-th call of that tool): how a decision maps onto a new batch."""
    seen: dict[str, int] = {}
    out = []
    for call in batch.calls:
        k = seen.get(call.tool, 0)
        seen[call.tool] = k + 1
        out.append((call.tool, k))
    return out


def fingerprint(batch: Batch, view: View) -> tuple[Key, dict[str, Any]]:
    """The key under which a decision for ``batch`` in ``view`` is reused, and the
    observations as data. With several GPUs the device bucket is each GPU's."""
    obs = observations_data(view.observations)
    tools = set(batch.shape)
    specs = tuple(
        (c.tool, json.dumps(c.spec.model_dump(mode="json"), sort_keys=True))
        for c in sorted(batch.calls, key=lambda c: c.tool)
    )
    d = view.device
    free = 0
    if d.gpu_available and d.vram_budget_mb > 0:
        left = max(0.0, d.vram_budget_mb - d.vram_used_mb)
        free = int(VRAM_BUCKETS * left / d.vram_budget_mb)
    device: tuple[Any, ...] = (d.gpu_available, free, d.gpu_utilization >= BUSY_UTILIZATION)
    if len(d.devices) > 1:  # several GPUs: each one's bucket (the flat fields are GPU 0's)
        device = (d.gpu_available, tuple(
            (g.index, int(VRAM_BUCKETS * max(0.0, g.budget_mb - g.used_mb) / g.budget_mb)
             if g.budget_mb > 0 else 0, g.utilization >= BUSY_UTILIZATION)
            for g in d.devices))
    hints = tuple(
        sorted(
            json.dumps([h.get(k) for k in ("kind", "tools", "devices", "option", "context")])
            for h in obs.get("hints", ())
            if isinstance(h, Mapping) and tools & set(h.get("tools") or ())
        )
    )
    epoch = (obs.get("epoch"), bool(obs.get("drift")))
    return (batch.shape, specs, device, hints, epoch), obs


def estimates(obs: Mapping[str, Any], tools: Collection[str]) -> Estimates:
    """Mean ``run_ms`` and status per (tool, option, context) of ``tools``."""
    out = {}
    for e in obs.get("estimates", ()):
        if isinstance(e, Mapping) and e.get("tool") in tools:
            key = (e.get("tool"), e.get("option"), e.get("context"))
            out[key] = (float(e.get("run_ms") or 0.0), str(e.get("status", "")))
    return out


class DecisionCache:
    """Entries by fingerprint, least recently used dropped past ``size``; thread-safe."""

    def __init__(self, size: int, drift_tolerance: float) -> None:
        self.size = size
        self.drift_tolerance = drift_tolerance
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._lock = threading.Lock()

    def _drifted(self, entry: Entry, now: Estimates) -> bool:
        for key, (mean, status) in entry.estimates.items():
            if key not in now:
                continue
            new_mean, new_status = now[key]
            if new_status != status:
                return True
            if abs(new_mean - mean) > self.drift_tolerance * max(abs(mean), 1e-9):
                return True
        return False

    def lookup(self, key: Key, now: Estimates) -> Entry | None:
        """The entry to reuse for ``key``, or None (missing, drifted, or retry due)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if not entry.provisional and self._drifted(entry, now):
                del self._entries[key]
                return None
            if entry.provisional:
                entry.hits_left -= 1
                if entry.hits_left < 0:
                    del self._entries[key]
                    return None
            self._entries.move_to_end(key)
            return entry

    def store(self, key: Key, entry: Entry) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
