"""The one protocol every scheduler implements, and what it may see.

A scheduler gets a `Batch` (the step's calls: ids, tool names and declared hints, never the
arguments) and a `SchedulerView` (telemetry and, where present, the monitor's snapshot). It
answers a `Decision`: one option per call id. It can learn from `observe`.

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> batch = Batch.of([("c1", "ocr", ToolDeviceSpec(vram_mb=500))])
>>> batch.call_ids, batch.shape
(('c1',), ('ocr',))
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from langgraph_devsched.hedging import HEDGE_BOUND
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.options import DeviceOption, FallbackCause
from langgraph_devsched.records import StepRecord
from langgraph_devsched.residency import ModelSide
from langgraph_devsched.telemetry import DeviceState, GpuDevice


@dataclass(frozen=True)
class CallRequest:
    """One call as a scheduler sees it: id, tool name, declared hints. No arguments."""

    call_id: str
    tool: str
    spec: ToolDeviceSpec

    def __init__(self, call_id: str, tool: str, spec: ToolDeviceSpec) -> None:
        # one a call a step: filled at once (`records.CallRecord` says why)
        self.__dict__.update(call_id=call_id, tool=tool, spec=spec)


@dataclass(frozen=True)
class Batch:
    """All calls of one step, seen together before any starts."""

    calls: tuple[CallRequest, ...]

    @classmethod
    def of(cls, items: Sequence[tuple[str, str, ToolDeviceSpec]]) -> Batch:
        return cls(tuple(CallRequest(cid, tool, spec) for cid, tool, spec in items))

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(c.call_id for c in self.calls)

    @property
    def shape(self) -> tuple[str, ...]:
        """The sorted tool names: two steps of the same shape can reuse a decision."""
        return tuple(sorted(c.tool for c in self.calls))

    def __len__(self) -> int:
        return len(self.calls)


@dataclass(frozen=True)
class SchedulerView:
    """Everything a scheduler may read besides the batch: telemetry and observations."""

    device: DeviceState
    observations: Any | None = None
    """The runtime monitor's snapshot, when a monitor is attached."""

    @property
    def devices(self) -> tuple[GpuDevice, ...]:
        """The machine's GPUs (index, name, budget, free, residency, declared speed); one
        GPU: index 0; none on a CPU-only machine."""
        return self.device.devices


def batch_snapshot(monitor: Any) -> Callable[[Batch], Any]:
    """A reader of ``monitor.snapshot`` for one batch, its signature inspected once: the
    batch and its tool names are passed where the snapshot takes them (its cost then follows
    the batch, not what history holds), else the whole snapshot is taken.

    >>> class Whole:
    ...     def snapshot(self): return "all"
    >>> batch_snapshot(Whole())(Batch.of([]))
    'all'
    """
    snapshot = monitor.snapshot
    try:
        params = inspect.signature(snapshot).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    takes_batch, takes_tools = "batch" in params, "tools" in params

    def read(batch: Batch) -> Any:
        args = (batch,) if takes_batch else ()
        if takes_tools:
            return snapshot(*args, tools=frozenset(c.tool for c in batch.calls))
        return snapshot(*args)

    return read


@dataclass(frozen=True)
class Preload:
    """A model load off the critical path: ``model`` on GPU ``gpu`` (evicting ``evict``
    first), or into host memory (``side="cpu"``). Between two steps (a scheduler's
    ``preloads``) or in the background of a step that leaves that GPU idle
    (`Decision.background`)."""

    model: str
    gpu: int
    load_ms: float
    worth_ms: float
    evict: tuple[str, ...] = ()
    side: ModelSide = "gpu"


@dataclass(frozen=True)
class Decision:
    """One option per call id, with the why. ``probe`` marks an exploratory placement;
    ``reused`` a decision taken again unchanged because none of its inputs moved;
    ``hedges`` names, for some calls of side-effect-free tools (``idempotent`` hint), a
    second option run beside the first: the call is answered by whichever ends first and
    the other is cancelled at its bound (`langgraph_devsched.hedging`);
    ``gpus``: the GPU index of GPU-placed calls, on a machine with several; a call it leaves
    out gets the default rule (`langgraph_devsched.gpus.default_gpus`; one GPU: 0);
    ``background``: model loads to start with the step on a GPU none of its calls uses (the
    model the next steps need loads while this step runs on the CPU);
    ``veto``: the scheduler's own answer was vetoed by its guard, and why with the evidence
    (the agentic scheduler's `Veto` text, e.g. ``budget: exploration unfunded, predicted cost
    -60.0 ms against 0.0 ms of budget left for this shape``); the mapping is what runs
    instead. Not a fallback: the scheduler decided, nothing failed."""

    mapping: Mapping[str, DeviceOption]
    reason: str = ""
    predicted_ms: Mapping[str, float] = field(default_factory=dict)
    probe: bool = False
    fallback: FallbackCause | None = None
    llm_calls: int = 0
    scheduler: str = ""
    reused: bool = False
    hedges: Mapping[str, DeviceOption] = field(default_factory=dict)
    hedge_bound: float = HEDGE_BOUND
    """A hedge's loser is cancelled once it ran this many times the winner's run time."""
    gpus: Mapping[str, int] = field(default_factory=dict)
    background: tuple[Preload, ...] = ()
    veto: str | None = None

    def options_for(self, batch: Batch) -> tuple[DeviceOption, ...]:
        return tuple(self.mapping[cid] for cid in batch.call_ids)


@runtime_checkable
class Scheduler(Protocol):
    """Decide one option per call of a step; optionally learn from what happened."""

    name: str

    def decide(self, batch: Batch, view: SchedulerView) -> Decision: ...

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None: ...


class SchedulerBase:
    """Convenience base: a name and a no-op `observe`."""

    name: str = "base"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:  # pragma: no cover
        raise NotImplementedError

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        return None

    def _decision(self, mapping: Mapping[str, DeviceOption], reason: str, **kw: Any) -> Decision:
        return Decision(mapping=dict(mapping), reason=reason, scheduler=self.name, **kw)
