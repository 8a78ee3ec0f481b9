"""Run a step on the `SimulatedTestbed`: times come from the simulation, results from the tools.

The whole step is simulated when it starts (all options are known then), so each call's
placement, fallback and latency are exact virtual times; the tool's own code still runs, on
the device string the simulation placed it on, so its answer is real.

``run_tools_on="cpu"`` keeps the simulation (placement, VRAM ledger, latency, records) but
runs the tool's own code on this machine's CPU: an `InjectedDevice` argument and
`current_device()` say ``"cpu"``, so a PyTorch tool runs where no CUDA exists. The step's
records still say where the simulation placed each call (``cuda:0`` or ``cpu``).

>>> from langgraph_devsched.testbed import SimulatedTestbed
>>> bed = SimulatedTestbed({"asr": {"cpu_ms": 800, "gpu_ms": 60}}, vram_budget_mb=8000)
>>> SimulatedBackend(bed, run_tools_on="cpu").run_tools_on
'cpu'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, TypeVar, get_args

from langgraph_devsched.device import Placement
from langgraph_devsched.executors.base import (
    ARunOnce,
    Deadline,
    PlacementError,
    PlannedCall,
    RecordBook,
    RunOnce,
    describe_failure,
    planned_gpus,
)
from langgraph_devsched.executors.local import is_gpu_oom
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import SimulatedTestbed

T = TypeVar("T")

RunToolsOn = Literal["simulated", "cpu"]
"""Where a tool's own code runs: on the simulated device string, or always on the CPU."""


class SimulatedBackend:
    """Backend over a `SimulatedTestbed` (virtual clock, no waiting).

    ``run_tools_on``: ``"simulated"`` (default) hands the tool the device the simulation
    placed it on (``cuda:k`` for a GPU option on GPU k); ``"cpu"`` hands it ``"cpu"`` while the
    simulation still decides placement and time. When not given, a ``run_tools_on``
    attribute of the testbed is used, if it has one.
    """

    name = "simulated"

    def __init__(
        self, testbed: SimulatedTestbed, *, run_tools_on: RunToolsOn | None = None
    ) -> None:
        chosen = run_tools_on or getattr(testbed, "run_tools_on", None) or "simulated"
        if chosen not in get_args(RunToolsOn):
            raise ValueError(
                f"unknown run_tools_on {chosen!r}; valid: {', '.join(get_args(RunToolsOn))}"
            )
        self.testbed = testbed
        self.run_tools_on: RunToolsOn = chosen

    def device_state(self) -> DeviceState:
        return self.testbed.device_state()

    def declared_capacity_mb(self) -> float:
        """The most VRAM a call could get: the budget less the background's (several GPUs:
        on the roomiest)."""
        state = self.testbed.device_state()
        if state.gpus:
            return max(d.budget_mb - d.used_mb for d in state.gpus)
        return state.vram_budget_mb - state.vram_used_mb

    def start_step(self, calls: Sequence[PlannedCall]) -> _SimulatedStep:
        gpus = None
        if self.testbed.gpu_count > 1:  # the decision's GPU, else the default rule
            gpus = planned_gpus(calls, self.testbed.device_state().devices)
        outcome = self.testbed.run_step(
            [(c.call_id, c.tool, c.option) for c in calls],
            cpu_forbidden={c.call_id for c in calls if not c.spec.cpu_allowed},
            gpus=gpus,
        )
        return _SimulatedStep(
            outcome,
            {c.call_id: c.spec.cpu_allowed for c in calls},
            on_host=self.run_tools_on == "cpu",
        )


class _SimulatedStep:
    def __init__(
        self,
        outcome: StepRecord,
        cpu_allowed: dict[str, bool] | None = None,
        *,
        on_host: bool = False,
    ) -> None:
        self._outcome = outcome
        self._cpu_allowed = cpu_allowed or {}
        self._on_host = on_host
        self._oom_reruns: set[str] = set()
        self._by_id = outcome.by_id()
        self._book = RecordBook(list(self._by_id))
        self._started: set[str] = set()
        self._errors: dict[str, str] = {}

    def _placement(self, call_id: str) -> Placement:
        rec = self._by_id[call_id]
        device = "cpu" if self._on_host and rec.device != "none" else rec.device
        return Placement(rec.option, device, rec.fallback, rec.vram_reserved_mb, rec.model,
                         None if rec.model is None else not rec.loaded, rec.evicted)

    def _refused(self, call_id: str) -> None:
        """A call the simulation could place nowhere: recorded, answered with an error."""
        rec = self._by_id[call_id]
        if rec.error is not None:
            self._book.add(rec)
            raise PlacementError(rec.error)

    def _cpu_rerun(self, call_id: str, placement: Placement) -> Placement:
        """A tool that hit a real CUDA OOM on a simulated GPU reruns on the CPU, as locally."""
        if not self._cpu_allowed.get(call_id, True):
            raise PlacementError(
                f"call {call_id} ran out of GPU memory and its hints forbid the CPU"
            )
        self._oom_reruns.add(call_id)
        return Placement(placement.option, "cpu", "oom")

    def close_unstarted(self, call_ids: Sequence[str], why: str) -> None:
        for call_id in call_ids:
            if call_id in self._by_id and call_id not in self._started:
                self._book.add_missing(self._by_id[call_id])

    def run_sync(self, call_id: str, run: RunOnce[T], deadline: Deadline | None = None) -> T:
        self._started.add(call_id)
        self._refused(call_id)
        placement = self._placement(call_id)
        try:
            try:
                result, oom = run(placement)
            except Exception as exc:
                if not (placement.on_gpu and is_gpu_oom(exc)):
                    raise
                oom = True
            if oom and placement.on_gpu:
                result, _ = run(self._cpu_rerun(call_id, placement))
            return result
        except BaseException as failed:  # a timeout, a cancellation, the tool's own error
            self._errors[call_id] = describe_failure(failed)
            raise
        finally:
            self._book.add(self._recorded(call_id))

    async def run_async(
        self, call_id: str, run: ARunOnce[T], deadline: Deadline | None = None
    ) -> T:
        self._started.add(call_id)
        self._refused(call_id)
        placement = self._placement(call_id)
        try:
            try:
                result, oom = await run(placement)
            except Exception as exc:
                if not (placement.on_gpu and is_gpu_oom(exc)):
                    raise
                oom = True
            if oom and placement.on_gpu:
                result, _ = await run(self._cpu_rerun(call_id, placement))
            return result
        except BaseException as failed:  # a timeout, a cancellation, the tool's own error
            self._errors[call_id] = describe_failure(failed)
            raise
        finally:
            self._book.add(self._recorded(call_id))

    def observed_ms(self, call_id: str) -> float | None:
        return self._by_id[call_id].latency_ms

    @property
    def done(self) -> bool:
        return self._book.done

    def _recorded(self, call_id: str) -> CallRecord:
        """The simulated record, with the error that ended the real run (if one did)."""
        rec = self._by_id[call_id]
        error = self._errors.get(call_id)
        return rec if error is None else dataclasses.replace(rec, error=error)

    def record(self) -> StepRecord:
        if not self._errors:
            return self._outcome
        calls = tuple(self._recorded(c.call_id) for c in self._outcome.calls)
        return dataclasses.replace(self._outcome, calls=calls)
