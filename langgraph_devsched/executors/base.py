"""What the node asks of an executor backend: place a step's calls, run them, record them.

A backend turns a planned step (call id, tool, option, hints) into a `StepExecution`. Each
call then runs through `run_sync`/`run_async`, which places it (reserving VRAM, waiting in
the GPU queue, or falling back to the CPU), runs the given function under that placement,
releases on every exit path and records what happened. `PlacementError` means the call
cannot run anywhere allowed; the node turns it into an error ToolMessage.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from langgraph.prebuilt.tool_node import ToolInvocationError

from langgraph_devsched.device import Placement
from langgraph_devsched.gpus import GpuCall, default_gpus
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.ledger import NeverFitsError, VramLedger
from langgraph_devsched.options import DeviceOption, FallbackCause
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.residency import demoted
from langgraph_devsched.telemetry import DeviceState, GpuDevice

T = TypeVar("T")

RunOnce = Callable[[Placement], tuple[T, bool]]
"""Run the call under a placement; return (result, hit_gpu_oom)."""

ARunOnce = Callable[[Placement], Awaitable[tuple[T, bool]]]


@dataclass(frozen=True)
class PlannedCall:
    call_id: str
    tool: str
    option: DeviceOption
    spec: ToolDeviceSpec
    gpu: int | None = None
    """The GPU the decision named for a GPU option (None: the backend's default rule)."""

    def __init__(self, call_id: str, tool: str, option: DeviceOption, spec: ToolDeviceSpec,
                 gpu: int | None = None) -> None:
        # one a call a step: filled at once (`records.CallRecord` says why)
        self.__dict__.update(call_id=call_id, tool=tool, option=option, spec=spec, gpu=gpu)


def planned_gpus(calls: Sequence[PlannedCall], devices: Sequence[GpuDevice]) -> dict[str, int]:
    """The GPU index of each GPU-placed call: the one its decision named, else the default
    rule (`langgraph_devsched.gpus.default_gpus`); one GPU: 0."""
    return default_gpus(
        [GpuCall.of(c.call_id, c.tool, c.spec, c.gpu) for c in calls if c.option != "cpu"],
        devices)


def demote_off_gpu(
    calls: Sequence[PlannedCall], gpus: Mapping[str, int], ledgers: Sequence[VramLedger]
) -> None:
    """At a step's start, each GPU's ledger (``ledgers[k]``: GPU k) demotes the step's models
    that it uses only off that GPU (`residency.demoted`): their copy there is evicted first.
    ``gpus``: the GPU of each GPU-placed call, 0 where it names none."""
    if not any(c.spec.model_name(c.tool) is not None for c in calls):
        return
    uses = [(c.spec.model_name(c.tool), None if c.option == "cpu" else gpus.get(c.call_id, 0))
            for c in calls]
    for index, ledger in enumerate(ledgers):  # moved off a GPU: evicted first
        ledger.demote(demoted(uses, index))


class PlacementError(RuntimeError):
    """The call cannot run on any device its hints allow (e.g. OOM and the CPU is not allowed).

    ``cause`` says why the GPU was out of the question (``vram_over_budget``, ``oom``, ...)."""

    def __init__(self, message: str, cause: FallbackCause | None = None) -> None:
        super().__init__(message)
        self.cause = cause


def vram_needed(vram_mb: float, weights_mb: float = 0.0) -> str:
    """What a call needs on a GPU, for a refusal: its VRAM and, where it has a resident
    model, that model's weights.

    >>> vram_needed(600, 2400)
    "600 MB of VRAM and 2400 MB for its model's weights"
    """
    with_weights = f" and {weights_mb:.0f} MB for its model's weights" if weights_mb else ""
    return f"{vram_mb:.0f} MB of VRAM{with_weights}"


def describe_failure(exc: BaseException) -> str:
    """A call's ``CallRecord.error`` for what ended it (``timeout: ...``, ``cancelled``, ...)."""
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, CallTimeoutError):
        return f"timeout: {exc.args[0]}"
    return f"{type(exc).__name__}: {exc}"


class CallTimeoutError(ToolInvocationError):
    """A call ran past its deadline (``call_timeout_s`` or its ``timeout_s`` hint).

    A `ToolInvocationError`, so `ToolNode`'s default ``handle_tool_errors`` answers the model
    with its message; ``handle_tool_errors=False`` raises it.
    """

    def __init__(self, tool: str, timeout_s: float, args: dict[str, Any] | None = None) -> None:
        Exception.__init__(self, f"tool {tool!r} timed out after {timeout_s:g} s")
        self.tool_name = tool
        self.tool_kwargs = args or {}
        self.source = TimeoutError(f"timed out after {timeout_s:g} s")  # type: ignore[assignment]
        self.filtered_errors = None
        self.timeout_s = timeout_s
        self.message = (
            f"Error: tool {tool!r} timed out after {timeout_s:g} s; it was stopped waiting for "
            "(a sync tool's thread runs on until it returns, holding its device)."
        )

    def __str__(self) -> str:
        return self.message


class Deadline:
    """One call's deadline: its whole life from the moment the node starts placing it (GPU
    queue wait, CPU slot wait, model load, run, an OOM rerun), answered with the same
    `CallTimeoutError` wherever it fires.

    >>> d = Deadline("ocr", 0.5, clock=lambda: 10.0)
    >>> d.remaining(), d.wait_bound(2.0), d.wait_bound(0.1)
    (0.5, (0.5, True), (0.1, False))
    >>> str(d.error()).startswith("Error: tool 'ocr' timed out after 0.5 s")
    True
    """

    def __init__(
        self, tool: str, timeout_s: float, args: dict[str, Any] | None = None, *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tool = tool
        self.timeout_s = timeout_s
        self.args = args
        self._clock = clock
        self.at = clock() + timeout_s

    def remaining(self) -> float:
        """Seconds left (0 once past)."""
        return max(0.0, self.at - self._clock())

    def wait_bound(self, timeout: float | None) -> tuple[float | None, bool]:
        """How long a wait with its own ``timeout`` (None: forever) may last, and whether
        the deadline is what bounds it (then a timed-out wait is this call's timeout)."""
        left = self.remaining()
        if timeout is None or left <= timeout:
            return left, True
        return timeout, False

    def check(self) -> float:
        """The seconds left; `CallTimeoutError` when none are."""
        left = self.remaining()
        if left <= 0.0:
            raise self.error()
        return left

    def error(self) -> CallTimeoutError:
        return CallTimeoutError(self.tool, self.timeout_s, self.args)


def wait_bound(deadline: Deadline | None, timeout: float | None) -> tuple[float | None, bool]:
    """`Deadline.wait_bound`, or ``(timeout, False)`` for a call without a deadline."""
    return (timeout, False) if deadline is None else deadline.wait_bound(timeout)


class StepExecution(Protocol):
    """One step's calls in flight on a backend."""

    def run_sync(self, call_id: str, run: RunOnce[T], deadline: Deadline | None = None) -> T:
        """Place the call, ``run`` it, release. ``deadline`` bounds every wait of the
        placement (past it: its `CallTimeoutError`); ``run`` bounds the tool's run by it."""
        ...

    async def run_async(
        self, call_id: str, run: ARunOnce[T], deadline: Deadline | None = None
    ) -> T: ...

    @property
    def done(self) -> bool: ...

    def observed_ms(self, call_id: str) -> float | None:
        """The call's latency if already known when it starts (simulated), else None."""
        ...

    def close_unstarted(self, call_ids: Sequence[str], why: str) -> None:
        """Record the calls among ``call_ids`` that never started (their run was cancelled
        before it began), so the step can close."""
        ...

    def record(self) -> StepRecord: ...


class RemoteExecution(Protocol):
    """A `StepExecution` whose calls run in another process (e.g. a Ray task).

    The node hands it each placed tool and invokes the stand-in it returns instead; the
    stand-in ships ``tool.invoke(call, config)`` to where the call runs. Optional: the node
    looks for ``remote_tool`` and runs tools in its own process when it is absent.
    """

    def remote_tool(self, call_id: str, tool: Any, placement: Placement) -> Any: ...


class Backend(Protocol):
    """Where calls run: the local machine, the simulated testbed, or a Ray cluster."""

    name: str

    def device_state(self) -> DeviceState: ...

    def start_step(self, calls: Sequence[PlannedCall]) -> StepExecution: ...


class RecordBook:
    """Collects one `CallRecord` per call id of a step (a retried call keeps its latest)."""

    def __init__(self, call_ids: Sequence[str]) -> None:
        self._expected = set(call_ids)
        self._order = list(call_ids)
        self._records: dict[str, CallRecord] = {}
        self._lock = threading.Lock()

    def add(self, record: CallRecord) -> None:
        with self._lock:
            self._records[record.call_id] = record

    def add_missing(self, record: CallRecord) -> None:
        """Add ``record`` unless its call already has one."""
        with self._lock:
            self._records.setdefault(record.call_id, record)

    def has(self, call_id: str) -> bool:
        return call_id in self._records

    @property
    def done(self) -> bool:
        return self._expected.issubset(self._records)

    def step_record(
        self, vram_peak_mb: float = 0.0, makespan_ms: float | None = None
    ) -> StepRecord:
        calls = tuple(self._records[c] for c in self._order if c in self._records)
        makespan = (
            makespan_ms if makespan_ms is not None else max((c.end_ms for c in calls), default=0.0)
        )
        return StepRecord(calls=calls, makespan_ms=makespan, vram_peak_mb=vram_peak_mb)


class BookedStep:
    """The common part of a real step execution: the planned calls, one record per call,
    the step's clock, and the answers for calls that cannot run anywhere allowed."""

    def __init__(self, calls: Sequence[PlannedCall], clock: Callable[[], float]) -> None:
        self._calls = {c.call_id: c for c in calls}
        self._book = RecordBook([c.call_id for c in calls])
        self._clock = clock
        self._t0 = clock()
        self._peak = 0.0
        self._started: set[str] = set()

    def _cpu_or_fail(self, call: PlannedCall, cause: FallbackCause, why: str) -> Placement:
        """The CPU instead of the GPU (recorded as ``cause``), unless the hints forbid it."""
        if call.option == "cpu" or call.spec.cpu_allowed:
            return Placement(call.option, "cpu", None if call.option == "cpu" else cause)
        raise PlacementError(
            f"tool {call.tool!r} cannot run: {why}, and its hints forbid the CPU", cause
        )

    def _queue_refused(
        self, call: PlannedCall, exc: Exception, deadline: Deadline | None
    ) -> Placement:
        """A queued call the GPU did not admit: past the call's own deadline, its timeout;
        one that can never fit (kept weights leave no room), the CPU as
        ``vram_over_budget``; past ``queue_timeout_s``, the CPU as ``queue_timeout``."""
        if isinstance(exc, NeverFitsError):
            return self._cpu_or_fail(call, "vram_over_budget", str(exc))
        if deadline is not None:
            raise deadline.error()
        return self._cpu_or_fail(call, "queue_timeout", str(exc))

    def _unplaced(self, call: PlannedCall, exc: BaseException) -> None:
        """Record a call that ran nowhere: it could not be placed (its answer is an error
        message) or was cancelled before it started. Its device is ``none``."""
        now = (self._clock() - self._t0) * 1000.0
        error = str(exc) if isinstance(exc, PlacementError) else describe_failure(exc)
        cause = exc.cause if isinstance(exc, PlacementError) else None
        self._book.add(
            CallRecord(call.call_id, call.tool, call.option, "none", cause, now, now, 0.0, 0, error)
        )

    def _start(self, call_id: str) -> PlannedCall:
        self._started.add(call_id)
        return self._calls[call_id]

    def close_unstarted(self, call_ids: Sequence[str], why: str) -> None:
        now = (self._clock() - self._t0) * 1000.0
        for call_id in call_ids:
            call = self._calls.get(call_id)
            if call is None or call_id in self._started:
                continue
            self._book.add_missing(
                CallRecord(call_id, call.tool, call.option, "none", None, now, now, 0.0, 0, why)
            )

    def observed_ms(self, call_id: str) -> float | None:
        return None  # measured when the call ends; see CallRecord

    @property
    def done(self) -> bool:
        return self._book.done

    def record(self) -> StepRecord:
        return self._book.step_record(vram_peak_mb=self._peak)
