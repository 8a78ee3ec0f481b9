"""GPU contention physics: the names, the `Contention` a step runs under, one rule per physics.

A rule answers, at one instant, the GPU demand D (every computing call progresses at 1/D
when D > 1) and which computing calls are stalled (``idle_queue`` serves one call at a
time), in two forms: ``demand`` for every row of the lockstep simulation at once
(`_sim.lockstep`), ``one_gpu`` for the calls on one GPU of the event simulation
(`_sim.events`, the testbed's ground truth). Both forms of a physics sit in one class. The
rows' form repeats the event simulation's floating-point operations in its order, so the
batched makespans stay bit-identical to the testbed's; that is why processor sharing sums
with ``cumsum`` in call order rather than ``sum`` (numpy's pairwise sum rounds differently).

>>> import numpy as np
>>> rule = lockstep_rule(np, Contention("time_slicing", slice_overhead=0.1), None, 2)
>>> in_gpu = np.array([[True, True], [True, False]])
>>> demand, stalled = rule.demand(np, None, in_gpu, 0.0)
>>> [round(float(x), 6) for x in demand], stalled
([2.2, 1.0], None)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast, get_args

Physics = Literal["processor_sharing", "time_slicing", "idle_queue", "bandwidth"]
"""How computing GPU calls slow each other (see ``docs/physics.md``)."""
PHYSICS: tuple[Physics, ...] = get_args(Physics)


def check_physics(name: str) -> Physics:
    """``name`` as a `Physics`, or `ValueError` listing the valid names."""
    if name not in PHYSICS:
        raise ValueError(f"unknown physics {name!r}; valid: {', '.join(PHYSICS)}")
    return cast(Physics, name)


@dataclass(frozen=True)
class Contention:
    """The GPU contention physics of a step (``docs/physics.md``); with k calls computing
    and the background's share b, every computing call progresses at 1/D when D > 1, else 1:

    * ``processor_sharing``: D = b + the sum of the computing calls' shares;
    * ``time_slicing``: D = b + k, times ``1 + slice_overhead`` when k >= 2;
    * ``idle_queue``: only the call computing longest (ties: call order) progresses, with
      D = b + its share; the others hold their VRAM and wait;
    * ``bandwidth``: D = b + the sum of share_i * (1 + mem_bound_i * (k - 1)).

    ``mem_bound``: per call, in call order (``bandwidth`` only)."""

    physics: Physics = "processor_sharing"
    slice_overhead: float = 0.0
    mem_bound: tuple[float, ...] = ()

    @property
    def default(self) -> bool:
        return self.physics == "processor_sharing"


def mem_bounds(contention: Contention | None, n: int) -> list[float]:
    """Each of the ``n`` calls' ``mem_bound`` under a bandwidth physics (checked: one value
    per call), zeros under any other (the value is never read there)."""
    if contention is None or contention.physics != "bandwidth":
        return [0.0] * n
    if len(contention.mem_bound) != n:
        raise ValueError(f"contention.mem_bound: {len(contention.mem_bound)} values for "
                         f"{n} calls")
    return list(contention.mem_bound)


class RowRule(Protocol):
    """One physics as the lockstep simulation applies it to all its rows at once."""

    fifo: bool
    """The rule needs when each call began computing (``st.gpu_since``)."""

    def attach(self, st: Any) -> None:
        """Add the per-row fields the rule reads to the simulation state ``st``."""

    def demand(self, np: Any, st: Any, in_gpu: Any, base_share: float) -> tuple[Any, Any]:
        """Each row's GPU demand D, and the (m, n) computing calls that do not progress
        (None: every computing call progresses)."""
        ...


class _Rule:
    fifo = False

    def attach(self, st: Any) -> None:
        pass


class ProcessorSharing(_Rule):
    def one_gpu(self, share: float, computing: Sequence[Any]) -> tuple[float, Any]:
        return share + sum(t.p.gpu_share for t in computing), None

    def demand(self, np: Any, st: Any, in_gpu: Any, base_share: float) -> tuple[Any, Any]:
        # a running sum in call order (as the event simulation adds): bit-identical
        return base_share + np.where(in_gpu, st.share, 0.0).cumsum(axis=1)[:, -1], None


class TimeSlicing(_Rule):
    def __init__(self, overhead: float) -> None:
        self.overhead = overhead

    def one_gpu(self, share: float, computing: Sequence[Any]) -> tuple[float, Any]:
        demand = share + len(computing)
        if len(computing) >= 2:
            demand = demand * (1.0 + self.overhead)
        return demand, None

    def demand(self, np: Any, st: Any, in_gpu: Any, base_share: float) -> tuple[Any, Any]:
        k = in_gpu.sum(axis=1)
        demand = base_share + k.astype(np.float64)
        return np.where(k >= 2, demand * (1.0 + self.overhead), demand), None


class Bandwidth(_Rule):
    def __init__(self, mem_bound: Any = None) -> None:
        self.mem_bound = mem_bound  # per call (the rows' form; the one-GPU form reads each call's)

    def one_gpu(self, share: float, computing: Sequence[Any]) -> tuple[float, Any]:
        peers = len(computing) - 1
        return share + sum(t.p.gpu_share * (1.0 + t.mem_bound * peers) for t in computing), None

    def demand(self, np: Any, st: Any, in_gpu: Any, base_share: float) -> tuple[Any, Any]:
        k1 = (in_gpu.sum(axis=1) - 1).astype(np.float64)
        inflated = st.share * (1.0 + self.mem_bound[None, :] * k1[:, None])
        return base_share + np.where(in_gpu, inflated, 0.0).cumsum(axis=1)[:, -1], None


def _others_of(np: Any, in_gpu: Any, head: Any) -> Any:
    """The computing calls other than each row's head: they hold their VRAM and wait."""
    return in_gpu & (np.arange(in_gpu.shape[1])[None, :] != head[:, None])


class IdleQueue(_Rule):
    fifo = True

    def one_gpu(self, share: float, computing: Sequence[Any]) -> tuple[float, Any]:
        # the call computing longest, ties in call order; only it progresses
        head = min(computing, key=lambda t: (t.gpu_since, t.index), default=None)
        return share + (head.p.gpu_share if head is not None else 0.0), head

    def demand(self, np: Any, st: Any, in_gpu: Any, base_share: float) -> tuple[Any, Any]:
        # the call computing longest, ties in call order
        head = np.argmin(np.where(in_gpu, st.gpu_since, np.inf), axis=1)
        any_gpu = in_gpu.any(axis=1)
        demand = np.where(any_gpu, base_share + st.share[np.arange(len(head)), head],
                          base_share)
        return demand, _others_of(np, in_gpu, head)


_PROCESSOR_SHARING, _TIME_SLICING, _BANDWIDTH, _IDLE_QUEUE = range(4)
_PHYSICS_CODE = {"processor_sharing": _PROCESSOR_SHARING, "time_slicing": _TIME_SLICING,
                 "bandwidth": _BANDWIDTH, "idle_queue": _IDLE_QUEUE}


class Mixed:
    """Per-row contention physics (`batchsim.call_times` ``models``/``groups``): each row's
    physics code, time-slicing overhead and per-call ``mem_bound``."""

    def __init__(self, np: Any, models: list[Contention | None], groups: Any, n: int) -> None:
        codes, overheads, bounds = [], [], []
        for c in models:
            physics = "processor_sharing" if c is None else c.physics
            if physics not in _PHYSICS_CODE:
                raise ValueError(f"unknown physics {physics!r}")
            bounds.append(mem_bounds(c, n))
            codes.append(_PHYSICS_CODE[physics])
            overheads.append(0.0 if c is None else float(c.slice_overhead))
        self.physics = np.array(codes, dtype=np.int64)[groups]
        self.overhead = np.array(overheads, dtype=np.float64)[groups]
        self.mem_bound = np.array(bounds, dtype=np.float64).reshape(-1, n)[groups]

    def has(self, physics: str) -> bool:
        return bool((self.physics == _PHYSICS_CODE[physics]).any())

    def take(self, rows: Any) -> Mixed:
        out = object.__new__(Mixed)
        out.physics, out.overhead = self.physics[rows], self.overhead[rows]
        out.mem_bound = self.mem_bound[rows]
        return out


class MixedRows:
    """Each row under its own physics: every rule's operations, each row's value taken from
    its physics (a row is bit-identical to a run under that physics alone). The per-row
    fields ride in the simulation state so that they leave with their rows."""

    def __init__(self, mixed: Mixed) -> None:
        self.mixed = mixed
        self.fifo = mixed.has("idle_queue")

    def attach(self, st: Any) -> None:
        st.extend(m_physics=self.mixed.physics, m_overhead=self.mixed.overhead,
                  m_mem_bound=self.mixed.mem_bound)

    def demand(self, np: Any, st: Any, in_gpu: Any, base_share: float) -> tuple[Any, Any]:
        kind = st.m_physics
        present = set(np.unique(kind).tolist())
        demand = base_share + np.cumsum(np.where(in_gpu, st.share, 0.0), axis=1)[:, -1]
        if _TIME_SLICING in present:
            k = in_gpu.sum(axis=1)
            sliced = base_share + k.astype(np.float64)
            sliced = np.where(k >= 2, sliced * (1.0 + st.m_overhead), sliced)
            demand = np.where(kind == _TIME_SLICING, sliced, demand)
        if _BANDWIDTH in present:
            k1 = (in_gpu.sum(axis=1) - 1).astype(np.float64)
            inflated = st.share * (1.0 + st.m_mem_bound * k1[:, None])
            wide = base_share + np.cumsum(np.where(in_gpu, inflated, 0.0), axis=1)[:, -1]
            demand = np.where(kind == _BANDWIDTH, wide, demand)
        if _IDLE_QUEUE not in present:
            return demand, None
        head = np.argmin(np.where(in_gpu, st.gpu_since, np.inf), axis=1)
        any_gpu = in_gpu.any(axis=1)
        queue = np.where(any_gpu, base_share + st.share[np.arange(len(head)), head],
                         base_share)
        demand = np.where(kind == _IDLE_QUEUE, queue, demand)
        # only the idle-queue rows stall
        return demand, _others_of(np, in_gpu, head) & (kind == _IDLE_QUEUE)[:, None]


class EventRule(Protocol):
    """One physics as the event simulation applies it to the calls computing on one GPU
    (`_sim.events`): each has ``p.gpu_share``, ``mem_bound``, ``gpu_since`` and ``index``."""

    def one_gpu(self, share: float, computing: Sequence[Any]) -> tuple[float, Any]:
        """The GPU's demand D with the background's ``share``, and the one call that
        progresses (None: every computing call)."""
        ...


def event_rule(physics: Physics, slice_overhead: float) -> EventRule:
    """The rule the event simulation applies under ``physics``."""
    make: dict[str, Callable[[], EventRule]] = {
        "processor_sharing": ProcessorSharing,
        "time_slicing": lambda: TimeSlicing(slice_overhead),
        "bandwidth": Bandwidth,
        "idle_queue": IdleQueue,
    }
    return make[physics]()


def lockstep_rule(np: Any, contention: Contention | None, mixed: Mixed | None,
                  n: int) -> RowRule:
    """The rule a lockstep run of ``n`` calls applies: each row's own (``mixed``), else
    ``contention``'s (None: processor sharing)."""
    if mixed is not None:
        return MixedRows(mixed)
    if contention is None:
        return ProcessorSharing()
    make: dict[str, Callable[[], RowRule]] = {
        "processor_sharing": lambda: ProcessorSharing(),
        "time_slicing": lambda: TimeSlicing(float(contention.slice_overhead)),
        "bandwidth": lambda: Bandwidth(np.array(mem_bounds(contention, n), dtype=np.float64)),
        "idle_queue": lambda: IdleQueue(),
    }
    return make[contention.physics]()
