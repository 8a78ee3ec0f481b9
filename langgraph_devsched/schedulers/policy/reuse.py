"""Decision reuse: take the last decision of a batch again while none of its inputs moved.

A decision is made from the calls' hints, the telemetry and the latency evidence about the
batch's tools. `ChangeDetector` sees every executed step (a scheduler's ``observe``) and
gives each tool that a decision read (`ChangeDetector.watch`; a tool only ever run in
forced steps costs nothing) a *version* that moves only when a sample of it is surprising: its
(option, device, GPU peers) key is new or barely sampled, or the sample lies more than
``sigmas`` standard deviations (at least ``floor`` of the mean) from that key's running
mean. It also counts each tool's samples: the noise band of an estimate narrows as its
samples grow, so a decision is also made again once the batch's tools have twice the samples
they had when it was made. `reusable` then says whether a remembered decision still stands:
same hints, same telemetry bucket (`telemetry_bucket`: also the warm models), same tool
versions, fewer than twice the samples, not a probe, not refreshed for too long. The tables
are `LruTable`\\ s.

>>> from langgraph_devsched.records import CallRecord, StepRecord
>>> det = ChangeDetector()
>>> det.watch(["ocr"])  # a decision reads its evidence
>>> def step(ms):
...     call = CallRecord("c", "ocr", "cpu", "cpu", None, start_ms=0, end_ms=ms,
...                       vram_reserved_mb=0, gpu_peers=0)
...     return StepRecord(calls=(call,), makespan_ms=ms)
>>> for ms in (100, 101, 99):  # the first samples of a key are news
...     det.observe(step(ms))
>>> v = det.versions(["ocr"])
>>> det.observe(step(100.5)); det.versions(["ocr"]) == v  # within the noise: no change
True
>>> det.observe(step(180)); det.versions(["ocr"]) == v  # a surprise moves the version
False
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Decision
from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.telemetry import DeviceState

SETTLE_SAMPLES = 3
"""A key's first samples always count as news (its spread is not known yet)."""
VRAM_BUCKET = 0.05
"""Telemetry buckets: VRAM in use in steps of this fraction of the budget ..."""
UTIL_BUCKET = 0.1
"""... and GPU utilization in steps of this much."""


def telemetry_bucket(device: DeviceState) -> tuple[object, ...]:
    """The telemetry a decision depends on, coarsened so that jitter does not count, and
    which models are warm on each side (a load or an eviction changes what a mapping costs);
    on several GPUs, each GPU's too."""
    budget = max(device.vram_budget_mb, 1.0)
    flat = (
        device.gpu_available, round(device.vram_budget_mb), device.cpu_cores,
        math.floor(device.vram_used_mb / budget / VRAM_BUCKET),
        math.floor(device.gpu_utilization / UTIL_BUCKET),
        frozenset((w.model, w.side) for w in device.resident),
    )
    if len(device.gpus) <= 1:
        return flat
    return flat + tuple(  # several GPUs: each one's load and warm models
        (round(d.budget_mb), math.floor(d.used_mb / max(d.budget_mb, 1.0) / VRAM_BUCKET),
         math.floor(d.utilization / UTIL_BUCKET), frozenset(w.model for w in d.resident))
        for d in device.gpus)


@dataclass
class _Welford:
    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def surprising(self, x: float, sigmas: float, floor: float) -> bool:
        if self.count < SETTLE_SAMPLES:
            return True
        std = math.sqrt(self.m2 / (self.count - 1))
        return abs(x - self.mean) > sigmas * max(std, floor * abs(self.mean), 1e-9)

    def add(self, x: float) -> None:
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)

    def take(self, x: float, sigmas: float, floor: float) -> bool:
        """`add` ``x``; whether it was `surprising` before (one call a sample)."""
        news = self.surprising(x, sigmas, floor)
        self.add(x)
        return news


@dataclass
class _ToolEvidence:
    samples: int = 0
    version: int = 0
    """0 until a sample of the tool was news."""


class ChangeDetector:
    """Per tool, a version that moves when one of its samples is news."""

    def __init__(
        self, *, max_keys: int = 4096, sigmas: float = 4.0, floor: float = 0.02
    ) -> None:
        self.sigmas = sigmas
        self.floor = floor
        self._stats: LruTable[tuple[object, ...], _Welford] = LruTable(max_keys)
        self._tools: LruTable[str, _ToolEvidence] = LruTable(max_keys)
        self._counter = itertools.count(1)

    def watch(self, tools: Iterable[str]) -> None:
        """Keep evidence of these tools from now on (a decision reads them)."""
        for name in tools:
            self._tools.setdefault_with(name, _ToolEvidence)

    def observe(self, record: StepRecord) -> None:
        """Take the samples of watched tools (`watch`): a tool no decision read, such as
        one that only ever runs in forced steps, costs nothing here."""
        tools, stats = self._tools, self._stats
        for call in record.calls:
            if call.error is not None:
                continue
            tool = tools.get(call.tool)
            if tool is None:
                continue
            tool.samples += 1
            stat = stats.setdefault_with(
                (call.tool, call.option, call.device, call.gpu_peers, call.fallback), _Welford)
            if stat.take(call.end_ms - call.start_ms, self.sigmas, self.floor):
                tool.version = next(self._counter)

    def versions(self, tools: Iterable[str]) -> tuple[int, ...]:
        """Each tool's version, sorted by tool name (0: never seen, or forgotten)."""
        known = self._tools
        return tuple(e.version if (e := known.get(t)) is not None else 0
                     for t in sorted(set(tools)))

    def samples(self, tools: Iterable[str]) -> int:
        """How many samples of these tools were seen (each tool once)."""
        known = self._tools
        return sum(e.samples if (e := known.get(t)) is not None else 0 for t in set(tools))

    def __len__(self) -> int:
        return len(self._stats)


@dataclass
class LastDecision:
    """What one batch (its tools in call order) was last decided from, and the decision."""

    specs: tuple[ToolDeviceSpec, ...]
    bucket: tuple[object, ...]
    versions: tuple[int, ...]
    options: tuple[str, ...]
    decision: Decision
    samples: int = 0
    """The batch's tools' samples when it was decided (it stands for less than twice that)."""
    settled: bool = True
    """False while the model behind the decision is still being fitted."""
    reuses: int = 0


def reusable(
    last: LastDecision | None, specs: Sequence[ToolDeviceSpec], bucket: tuple[object, ...],
    versions: tuple[int, ...], *, refresh_after: int, samples: int = 0,
) -> bool:
    """Whether ``last`` stands: nothing it was made from moved, its evidence has not doubled
    (``samples``: the batch's tools' samples now), it probed nothing, and it was not taken
    again ``refresh_after`` times already."""
    return (
        last is not None
        and last.settled
        and samples < 2 * max(last.samples, 1)
        and not last.decision.probe
        and last.reuses < refresh_after
        and last.bucket == bucket
        and last.versions == versions
        and len(last.specs) == len(specs)
        and all(a is b or a == b for a, b in zip(last.specs, specs, strict=True))
    )
