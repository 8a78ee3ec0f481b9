"""The event simulation: the simulated testbed's ground truth for one step, call by call.

`Simulation` runs a step's calls (`Task`) on a virtual clock, event by event: at each event
every running call progresses at the rate of the moment (the GPU's demand by the physics'
rule, `_sim.physics`; the free cores for the CPU), the clock moves to the next end of a
phase, and the GPU queue is admitted where a call released its VRAM (by the same
`VramLedger` the real executor uses). The batched simulator (`_sim.lockstep`) repeats these
operations in this order on many mappings at once, so the two agree to the bit.

The machine arrives as `Machine` (what the testbed holds), so the simulation reads nothing
private of the testbed's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from langgraph_devsched._sim.lockstep import BackgroundLoad, ToolParams
from langgraph_devsched._sim.physics import Physics, event_rule
from langgraph_devsched.ledger import Reservation, VramLedger
from langgraph_devsched.options import DeviceOption, FallbackCause
from langgraph_devsched.records import CallRecord, StepRecord

SIM_GPU_DEVICE = "cuda:0"
_EPS = 1e-9


class GpuSpec(Protocol):
    """What the simulation reads of one GPU (`testbed.GpuSpec` is one)."""

    @property
    def vram_mb(self) -> float: ...
    @property
    def speed(self) -> float: ...
    @property
    def background(self) -> BackgroundLoad: ...


class ModelParams(Protocol):
    """What the simulation reads of a resident model (a `testbed.ToolParams` naming it)."""

    @property
    def load_cpu_ms(self) -> float: ...


@dataclass(frozen=True)
class Machine:
    """What a step's simulation reads of its testbed."""

    background: BackgroundLoad
    gpus: Sequence[GpuSpec]
    cpu_cores: int
    physics: Physics
    slice_overhead: float
    oom_detect_ms: float
    host: Collection[str]
    """The models resident in host memory when the step starts."""
    models: Mapping[str, ModelParams]
    """Each resident model's parameters (its ``load_cpu_ms``)."""


@dataclass(eq=False)
class Task:
    """One call of the step as the simulation advances it."""

    index: int
    call_id: str
    tool: str
    option: DeviceOption
    p: ToolParams
    scale: float
    device: str = "cpu"
    fallback: FallbackCause | None = None
    phase: str = "pending"  # pending | transfer | gpu | cpu | done
    remaining: float = 0.0
    start: float = 0.0
    end: float = 0.0
    ready_at: float = 0.0
    reservation: Reservation | None = None
    peers: int = 0
    cpu_forbidden: bool = False
    error: str | None = None
    model: str | None = None
    gpu_load_ms: float = 0.0
    """load_gpu_ms of this call's model when the step loads it on the GPU, else 0."""
    no_room: bool = False
    after_load: str = ""
    load_ms: float = 0.0
    loaded: bool = False
    evicted: tuple[str, ...] = ()
    mem_bound: float = 0.0
    gpu_since: float = float("inf")
    """When the call began computing (``idle_queue`` serves the earliest)."""
    gpu: int = 0
    """The GPU a GPU option runs on (a testbed with several)."""



@dataclass
class Simulation:
    """One step of the testbed (see `testbed`'s module docstring for the model), run to its
    end: the calls' records, the ledgers returned to zero."""

    machine: Machine
    tasks: list[Task]
    now: float = 0.0
    queue: list[Task] = field(default_factory=list)
    peak: float = 0.0
    bases: list[float] | None = None
    host_end: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bg = self.machine.background
        specs = self.machine.gpus
        shares = [bg.gpu_share] + [g.background.gpu_share for g in specs[1:]]
        bases = self.bases or [bg.vram_mb] + [g.background.vram_mb for g in specs[1:]]
        self.ledgers = [VramLedger(g.vram_mb, reserved_mb=base, reserved_share=share)
                        for g, base, share in zip(specs, bases, shares, strict=True)]
        self.ledger = self.ledgers[0]
        self.queues: list[list[Task]] = [self.queue] + [[] for _ in specs[1:]]
        self.peaks = [0.0] * len(specs)
        self.free_cores = max(1, self.machine.cpu_cores - bg.cpu_threads)
        self.bg_share = bg.gpu_share
        self.bg_shares = shares
        self.speeds = [g.speed for g in specs]
        self.rule = event_rule(self.machine.physics, self.machine.slice_overhead)

    def _start_gpu(self, t: Task, reservation: Reservation) -> None:
        t.reservation = reservation
        t.device = SIM_GPU_DEVICE if t.gpu == 0 else f"cuda:{t.gpu}"
        t.start = self.now
        in_use = self.ledgers[t.gpu].in_use_mb
        self.peaks[t.gpu] = max(self.peaks[t.gpu], in_use)
        self.peak = max(self.peak, in_use)
        pre = max(0.0, t.gpu_load_ms - self.now)
        if pre > 0:
            t.phase, t.remaining, t.load_ms, t.after_load = "load", pre, pre, "gpu"
            return
        self._begin_gpu(t)

    def _begin_gpu(self, t: Task) -> None:
        if t.p.transfer_ms > 0:
            t.phase, t.remaining = "transfer", t.p.transfer_ms * t.scale
        else:
            self._compute(t)

    def _compute(self, t: Task) -> None:
        t.phase, t.remaining, t.gpu_since = "gpu", t.p.gpu_ms * t.scale, self.now

    def _start_cpu(self, t: Task) -> None:
        t.device = "cpu"
        # a call that fell back after an OOM started when it tried the GPU: its record
        # charges the detection to it
        t.start = t.start if t.fallback == "oom" else self.now
        model = t.model
        if model is not None and model not in self.machine.host:
            cold = self.machine.models[model].load_cpu_ms
            if cold > 0:
                if model not in self.host_end:
                    self.host_end[model] = self.now + cold
                    t.loaded = True
                pre = max(0.0, self.host_end[model] - self.now)
                if pre > 0:
                    t.phase, t.remaining, t.load_ms, t.after_load = "load", pre, pre, "cpu"
                    return
        t.phase, t.remaining = "cpu", t.p.cpu_ms * t.scale

    def _fail(self, t: Task, why: str) -> None:
        t.phase, t.device, t.end = "done", "none", self.now
        t.error = f"tool {t.tool!r} cannot run: {why}, and its hints forbid the CPU"

    def _admit_queue(self, gpu: int = 0) -> None:
        queue, ledger = self.queues[gpu], self.ledgers[gpu]
        while queue:
            head = queue[0]
            # FIFO, as the real ledger admits: a call that fits never overtakes the head,
            # so a large call is not starved by a stream of small ones
            if not ledger.admissible(head.p.vram_mb, head.p.gpu_share):
                return
            queue.pop(0)
            res = ledger.try_reserve(head.p.vram_mb, head.p.gpu_share)
            assert res is not None
            self._start_gpu(head, res)

    def _launch(self) -> None:
        for t in self.tasks:
            if t.option == "cpu":
                self._start_cpu(t)
            elif t.option == "gpu_now":
                ledger = self.ledgers[t.gpu]
                if t.no_room or t.p.vram_mb > ledger.capacity_mb:
                    res = None
                else:
                    res = ledger.try_reserve(t.p.vram_mb, t.p.gpu_share)
                if res is not None:
                    self._start_gpu(t, res)
                else:
                    t.fallback, t.phase, t.start = "oom", "oom", self.now
                    t.ready_at = self.now + self.machine.oom_detect_ms
        for t in self.tasks:
            if t.option == "gpu_queued":
                if t.no_room or t.p.vram_mb > self.ledgers[t.gpu].capacity_mb:
                    t.fallback = "vram_over_budget"
                    if t.cpu_forbidden and t.no_room:
                        self._fail(t, f"the weights of model {t.model!r} get no room on the GPU")
                    elif t.cpu_forbidden:
                        self._fail(t, f"needs {t.p.vram_mb:.0f} MB of VRAM, over the budget")
                    else:
                        self._start_cpu(t)
                else:
                    self.queues[t.gpu].append(t)
        for gpu in range(len(self.queues)):
            self._admit_queue(gpu)

    def _rates(self, active: list[Task]) -> list[float]:
        """Each active call's progress per ms (0: waiting for the GPU under ``idle_queue``);
        the GPU demand D by the testbed's physics (`batchsim.Contention`), per GPU, where a
        GPU's speed scales its compute rate."""
        if len(self.ledgers) > 1:
            return self._rates_per_gpu(active)
        computing = [t for t in active if t.phase == "gpu"]
        demand, head = self.rule.one_gpu(self.bg_share, computing)
        gpu_rate = 1.0 / demand if demand > 1.0 else 1.0
        threads = sum(t.p.cpu_threads for t in active if t.phase == "cpu")
        cpu_rate = self.free_cores / threads if threads > self.free_cores else 1.0
        return [
            (gpu_rate if head is None or t is head else 0.0) if t.phase == "gpu"
            else cpu_rate if t.phase == "cpu" else 1.0 for t in active
        ]

    def _rates_per_gpu(self, active: list[Task]) -> list[float]:
        rate: dict[int, float] = {}
        heads: dict[int, Task | None] = {}
        for gpu, share in enumerate(self.bg_shares):
            computing = [t for t in active if t.phase == "gpu" and t.gpu == gpu]
            demand, head = self.rule.one_gpu(share, computing)
            rate[gpu] = (1.0 / demand if demand > 1.0 else 1.0) * self.speeds[gpu]
            heads[gpu] = head
        threads = sum(t.p.cpu_threads for t in active if t.phase == "cpu")
        cpu_rate = self.free_cores / threads if threads > self.free_cores else 1.0
        out = []
        for t in active:
            if t.phase == "gpu":
                head = heads[t.gpu]
                out.append(rate[t.gpu] if head is None or t is head else 0.0)
            else:
                out.append(cpu_rate if t.phase == "cpu" else 1.0)
        return out

    def run(self) -> StepRecord:
        self._launch()
        while True:
            active = [t for t in self.tasks if t.phase in ("load", "transfer", "gpu", "cpu")]
            waiting = [t for t in self.tasks if t.phase == "oom"]
            if not active and not waiting:
                if any(self.queues):  # cannot happen: an idle GPU admits any fitting head
                    raise RuntimeError("simulation stalled with a non-empty GPU queue")
                break
            rates = self._rates(active)
            computing = [0] * len(self.ledgers)
            for t in active:
                if t.phase == "gpu":
                    computing[t.gpu] += 1
            for t in active:
                if t.phase == "gpu":
                    t.peers = max(t.peers, computing[t.gpu] - 1)
            dt = min(
                [t.remaining / r for t, r in zip(active, rates, strict=True) if r > 0]
                + [t.ready_at - self.now for t in waiting]
            )
            dt = max(dt, 0.0)  # an OOM detection may end a rounding error behind the clock
            self.now += dt
            for t, r in zip(active, rates, strict=True):
                t.remaining -= r * dt
            for t in waiting:
                if t.ready_at <= self.now + _EPS:
                    if t.cpu_forbidden:
                        self._fail(t, f"{t.p.vram_mb:.0f} MB of VRAM did not fit (GPU OOM)")
                    else:
                        self._start_cpu(t)
            released: set[int] = set()
            for t in active:
                # relative tolerance: after hours of virtual time an exact zero is never hit
                if t.remaining > _EPS * max(1.0, self.now):
                    continue
                if t.phase == "transfer":
                    self._compute(t)
                    continue
                if t.phase == "load":
                    if t.after_load == "gpu":
                        self._begin_gpu(t)
                    else:
                        t.phase, t.remaining = "cpu", t.p.cpu_ms * t.scale
                    continue
                t.phase, t.end = "done", self.now
                if t.reservation is not None:
                    self.ledgers[t.gpu].release(t.reservation)
                    released.add(t.gpu)
            for gpu in sorted(released):
                self._admit_queue(gpu)
        if any(ledger.in_use_mb > _EPS for ledger in self.ledgers):
            raise RuntimeError("simulated ledger did not return to zero")
        calls = tuple(
            CallRecord(
                call_id=t.call_id,
                tool=t.tool,
                option=t.option,
                device=t.device,
                fallback=t.fallback,
                start_ms=t.start,
                end_ms=t.end,
                vram_reserved_mb=t.reservation.mb if t.reservation else 0.0,
                gpu_peers=t.peers,
                error=t.error,
                model=t.model,
                load_ms=t.load_ms,
                loaded=t.loaded,
                evicted=t.evicted,
            )
            for t in self.tasks
        )
        makespan = max((c.end_ms for c in calls), default=0.0)
        extra: dict[str, object] = {
            "vram_end_mb": self.ledger.in_use_mb, "vram_budget_mb": self.ledger.capacity_mb}
        if len(self.ledgers) > 1:  # per GPU: peak, end, budget
            extra["gpus"] = [{"vram_peak_mb": peak, "vram_end_mb": ledger.in_use_mb,
                              "vram_budget_mb": ledger.capacity_mb}
                             for peak, ledger in zip(self.peaks, self.ledgers, strict=True)]
        return StepRecord(calls=calls, makespan_ms=makespan, vram_peak_mb=self.peak, extra=extra)

