"""The lean execution of a step with nothing to place: every call plain, on this machine's CPU.

A *plain* call's tool has no device hints that ask anything of the backend: the CPU is its
only allowed option, it names no resident model, has no timeout, no CPU/GPU variant and no
`InjectedDevice` argument. When every call of a step is plain, the node runs on a
`LocalBackend` without a CPU-slot limit and has no node-wide ``call_timeout_s``, there is
nothing to reserve, wait for or fall back from: `LeanExecution` runs each call where it is
(the CPU, under the backend's resident-model scope, so `ResidentModel.get` answers from the
same cache) and gives one `CallRecord` per call, as the local backend would (device
``cpu``, no VRAM, no peers, the error text of a raised call). The step is still decided
(forced), recorded, observed and reported like any other; only the per-call placement,
lease and ledger work of the general path is skipped (issue 25: the unhinted overhead).
When no callback or tracer would see the runs, the node hands each call to `run_plain`,
which books its start, end and error (the records are built once, when the step's record
is read), and a call's model scope costs nothing until the tool asks for a model
(`models.CallScope`).

>>> from langgraph_devsched.executors.base import PlannedCall
>>> from langgraph_devsched.executors.local import LocalBackend
>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> step = LeanExecution([PlannedCall("c1", "echo", "cpu", ToolDeviceSpec())], LocalBackend())
>>> step.run_sync("c1", lambda placement: (placement.device, False))
'cpu'
>>> step.done, [(c.call_id, c.device, c.error) for c in step.record().calls]
(True, [('c1', 'cpu', None)])
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

from langgraph_devsched.device import Placement
from langgraph_devsched.executors.base import (
    ARunOnce,
    Deadline,
    PlannedCall,
    RunOnce,
    describe_failure,
)
from langgraph_devsched.executors.local import LocalBackend
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.models import CallModels, CallScope
from langgraph_devsched.records import CallRecord, StepRecord

T = TypeVar("T")

CPU = Placement("cpu", "cpu")


def plain_tools(
    specs: Mapping[str, ToolDeviceSpec], variants: Collection[str],
    device_args: Mapping[str, Sequence[str]],
) -> frozenset[str]:
    """The tools whose calls are plain (see the module docstring); ``variants``: tools with
    a CPU or GPU implementation of their own."""
    return frozenset(
        name for name, spec in specs.items()
        if spec.allowed_options() == ("cpu",) and spec.model_name(name) is None
        and spec.timeout_s is None and name not in variants and not device_args.get(name)
    )


def lean_backend(backend: object, call_timeout_s: float | None) -> bool:
    """True when ``backend`` may run plain steps lean: the local machine, no CPU-slot limit,
    and no node-wide call timeout."""
    return (type(backend) is LocalBackend and backend.cpu_slots is None
            and call_timeout_s is None)


class LeanExecution:
    """A `StepExecution` of plain calls on the local CPU (see the module docstring).

    A call books what it needs to be recorded (start, end, error, what it did with resident
    models); its `CallRecord` is built when the step's record is read, once."""

    def __init__(self, calls: Sequence[PlannedCall], backend: LocalBackend) -> None:
        self._calls = {c.call_id: c for c in calls}
        self._clock = backend.clock
        self._models = backend.models
        self._t0 = self._clock()
        self._ended: dict[str, tuple[str, float, float, str | None, CallModels | None]] = {}
        """Per call id: its device (``cpu``; ``none``: it never started), start, end,
        error, and what it did with resident models (None: nothing)."""
        self._started: set[str] = set()

    def _book(self, call_id: str, start: float, error: str | None,
              used: CallModels | None) -> None:
        self._ended[call_id] = ("cpu", start, self._clock(), error, used)  # a retry: its last

    def run_plain(self, call_id: str, run: Callable[[], T]) -> T:
        """Run ``run()`` as the plain call ``call_id``, on the CPU (`current_placement` and
        the backend's model cache answer inside), and book it."""
        if call_id not in self._calls:
            raise KeyError(call_id)
        self._started.add(call_id)
        scope = CallScope(self._models, "cpu", CPU)  # the placement and the model scope
        error: str | None = None
        start = self._clock()
        with scope:
            try:
                return run()
            except BaseException as failed:
                error = describe_failure(failed)
                raise
            finally:
                self._book(call_id, start, error, scope.record)

    def run_sync(self, call_id: str, run: RunOnce[T], deadline: Deadline | None = None) -> T:
        return self.run_plain(call_id, lambda: run(CPU)[0])

    async def run_async(
        self, call_id: str, run: ARunOnce[T], deadline: Deadline | None = None
    ) -> T:
        if call_id not in self._calls:
            raise KeyError(call_id)
        self._started.add(call_id)
        scope = CallScope(self._models, "cpu")
        error: str | None = None
        start = self._clock()
        with scope:
            try:
                return (await run(CPU))[0]
            except BaseException as failed:
                error = describe_failure(failed)
                raise
            finally:
                self._book(call_id, start, error, scope.record)

    def close_unstarted(self, call_ids: Sequence[str], why: str) -> None:
        if len(self._ended) == len(self._calls):
            return  # every call ended: none is unstarted
        now = self._clock()
        for call_id in call_ids:
            if call_id in self._calls and call_id not in self._started:
                self._ended.setdefault(call_id, ("none", now, now, why, None))

    def observed_ms(self, call_id: str) -> float | None:
        return None  # measured when the call ends; see CallRecord

    @property
    def done(self) -> bool:
        return len(self._ended) == len(self._calls)  # only planned calls are booked

    def record(self) -> StepRecord:
        """One `CallRecord` a booked call (device ``cpu``, no VRAM, no peers; ``none`` for
        a call that never started), in the order the calls were planned."""
        t0 = self._t0
        calls: list[CallRecord] = []
        for call_id, call in self._calls.items():
            ended = self._ended.get(call_id)
            if ended is None:
                continue
            device, start, end, error, used = ended
            calls.append(CallRecord(
                call_id, call.tool, call.option, device, None, (start - t0) * 1000.0,
                (end - t0) * 1000.0, 0.0, 0, error,
                model=None if used is None else used.model,
                load_ms=0.0 if used is None else used.load_ms,
                loaded=used is not None and used.loaded,
                evicted=() if used is None else used.evicted))
        makespan = max((c.end_ms for c in calls), default=0.0)
        return StepRecord(calls=tuple(calls), makespan_ms=makespan)


__all__ = ["LeanExecution", "lean_backend", "plain_tools"]
