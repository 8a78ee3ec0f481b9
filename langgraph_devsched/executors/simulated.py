"""Run a step on the `SimulatedTestbed`: times come from the simulation, results from the tools.

The whole step is simulated when it starts (all options are known then), so each call's
placement, fallback and latency are exact virtual times; the tool's own code still runs, on
the device string the simulation placed it on, so its answer is real.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from langgraph_devsched.device import Placement
from langgraph_devsched.executors.base import ARunOnce, PlannedCall, RecordBook, RunOnce
from langgraph_devsched.records import StepRecord
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import SimulatedTestbed

T = TypeVar("T")


class SimulatedBackend:
    """Backend over a `SimulatedTestbed` (virtual clock, no waiting)."""

    name = "simulated"

    def __init__(self, testbed: SimulatedTestbed) -> None:
        self.testbed = testbed

    def device_state(self) -> DeviceState:
        return self.testbed.device_state()

    def start_step(self, calls: Sequence[PlannedCall]) -> _SimulatedStep:
        outcome = self.testbed.run_step([(c.call_id, c.tool, c.option) for c in calls])
        return _SimulatedStep(outcome)


class _SimulatedStep:
    def __init__(self, outcome: StepRecord) -> None:
        self._outcome = outcome
        self._by_id = outcome.by_id()
        self._book = RecordBook(list(self._by_id))

    def _placement(self, call_id: str) -> Placement:
        rec = self._by_id[call_id]
        return Placement(rec.option, rec.device, rec.fallback, rec.vram_reserved_mb)

    def run_sync(self, call_id: str, run: RunOnce[T]) -> T:
        try:
            result, _ = run(self._placement(call_id))
            return result
        finally:
            self._book.add(self._by_id[call_id])

    async def run_async(self, call_id: str, run: ARunOnce[T]) -> T:
        try:
            result, _ = await run(self._placement(call_id))
            return result
        finally:
            self._book.add(self._by_id[call_id])

    def observed_ms(self, call_id: str) -> float | None:
        return self._by_id[call_id].latency_ms

    @property
    def done(self) -> bool:
        return self._book.done

    def record(self) -> StepRecord:
        return self._outcome
