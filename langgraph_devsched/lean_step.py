"""The lean execution of a step with nothing to place: every call plain, on this machine's CPU.

A *plain* call's tool has no device hints that ask anything of the backend: the CPU is its
only allowed option, it names no resident model, has no timeout, no CPU/GPU variant and no
`InjectedDevice` argument. When every call of a step is plain, the node runs on a
`LocalBackend` without a CPU-slot limit and has no node-wide ``call_timeout_s``, there is
nothing to reserve, wait for or fall back from: `LeanExecution` runs each call where it is
(the CPU, under the backend's resident-model scope, so `ResidentModel.get` answers from the
same cache) and books one `CallRecord` per call, as the local backend would (device
``cpu``, no VRAM, no peers, the error text of a raised call). The step is still decided
(forced), recorded, observed and reported like any other; only the per-call placement,
lease and ledger work of the general path is skipped (issue 25: the unhinted overhead).

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

from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

from langgraph_devsched.device import Placement
from langgraph_devsched.executors.base import (
    ARunOnce,
    BookedStep,
    Deadline,
    PlannedCall,
    RunOnce,
    describe_failure,
)
from langgraph_devsched.executors.local import LocalBackend
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.models import CallModels
from langgraph_devsched.records import CallRecord

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


class LeanExecution(BookedStep):
    """A `StepExecution` of plain calls on the local CPU (see the module docstring)."""

    def __init__(self, calls: Sequence[PlannedCall], backend: LocalBackend) -> None:
        super().__init__(calls, backend._clock)
        self._models = backend.models

    def _book_run(self, call: PlannedCall, start: float, used: CallModels,
                  error: str | None) -> None:
        end = self._clock()
        self._book.add(CallRecord(
            call.call_id, call.tool, call.option, "cpu", None, (start - self._t0) * 1000.0,
            (end - self._t0) * 1000.0, 0.0, 0, error, model=used.model, load_ms=used.load_ms,
            loaded=used.loaded, evicted=used.evicted,
        ))

    def run_sync(self, call_id: str, run: RunOnce[T], deadline: Deadline | None = None) -> T:
        call = self._start(call_id)
        start = self._clock()
        error: str | None = None
        with self._models.scope("cpu") as used:
            try:
                return run(CPU)[0]
            except BaseException as failed:
                error = describe_failure(failed)
                raise
            finally:
                self._book_run(call, start, used, error)

    async def run_async(
        self, call_id: str, run: ARunOnce[T], deadline: Deadline | None = None
    ) -> T:
        call = self._start(call_id)
        start = self._clock()
        error: str | None = None
        with self._models.scope("cpu") as used:
            try:
                return (await run(CPU))[0]
            except BaseException as failed:
                error = describe_failure(failed)
                raise
            finally:
                self._book_run(call, start, used, error)


def lean_run(execution: Any) -> bool:
    """True when ``execution`` is a lean step's (the node then runs its calls directly)."""
    return isinstance(execution, LeanExecution)


__all__ = ["LeanExecution", "lean_backend", "lean_run", "plain_tools"]
