"""The simulated testbed: the ground truth when no GPU is present.

Each tool has hidden parameters (`ToolParams`). A step's calls run as a discrete-event
simulation on a virtual clock:

* GPU path: reserve VRAM, copy (``transfer_ms``, not slowed by sharing), then compute
  ``gpu_ms`` of work. When the GPU shares of the computing calls (plus the background's) sum
  to D > 1, every one of them progresses at rate 1/D (GPU utilization contention).
* `gpu_now` whose VRAM does not fit at start pays ``oom_detect_ms`` and falls back to the
  CPU (VRAM capacity contention); `gpu_queued` waits in FIFO order for admission (VRAM fits,
  shares within 1 or the GPU idle), by the same `VramLedger` the real executor uses.
* CPU path: ``cpu_ms`` of work using ``cpu_threads`` threads; when the threads in use exceed
  the free cores, every CPU call slows by the same factor.

>>> bed = SimulatedTestbed({"asr": ToolParams(cpu_ms=800, gpu_ms=60, transfer_ms=10,
...     vram_mb=1500, gpu_share=0.6)}, vram_budget_mb=8000, cpu_cores=4)
>>> bed.run_step([("c1", "asr", "gpu_now")]).makespan_ms
70.0
>>> bed.now_ms
70.0
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from langgraph_devsched import batchsim
from langgraph_devsched.ledger import Reservation, VramLedger
from langgraph_devsched.options import DeviceOption, FallbackCause
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.telemetry import DeviceState

SIM_GPU_DEVICE = "cuda:0"
_EPS = 1e-9


class ToolParams(BaseModel):
    """Hidden ground-truth parameters of one tool (never shown to a scheduler)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_ms: float = Field(gt=0, description="solo latency on the CPU")
    gpu_ms: float = Field(ge=0, description="solo GPU compute time (transfers excluded)")
    transfer_ms: float = Field(default=0.0, ge=0, description="host<->device copy time")
    vram_mb: float = Field(default=0.0, ge=0, description="VRAM held while on the GPU")
    gpu_share: float = Field(default=1.0, gt=0, le=1, description="GPU share used alone")
    cpu_threads: int = Field(default=1, ge=1, description="CPU threads used on the CPU path")


class BackgroundLoad(BaseModel):
    """Something else on the machine, e.g. the agent's own LLM server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vram_mb: float = Field(default=0.0, ge=0)
    gpu_share: float = Field(default=0.0, ge=0, le=1)
    cpu_threads: int = Field(default=0, ge=0)


@dataclass(eq=False)
class _Task:
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


class SimulatedTestbed:
    """Ground-truth simulator with a virtual clock; see the module docstring for the model."""

    def __init__(
        self,
        tools: Mapping[str, ToolParams | Mapping[str, float]],
        *,
        vram_budget_mb: float,
        cpu_cores: int = 8,
        background: BackgroundLoad | None = None,
        noise: float = 0.0,
        seed: int = 0,
        oom_detect_ms: float = 20.0,
        gpu_name: str = "simulated-gpu",
    ) -> None:
        if cpu_cores < 1:
            raise ValueError(f"cpu_cores must be >= 1, got {cpu_cores}")
        if not 0 <= noise < 1:
            raise ValueError(f"noise is a relative sigma in [0, 1), got {noise}")
        self._params = {
            name: p if isinstance(p, ToolParams) else ToolParams.model_validate(p)
            for name, p in tools.items()
        }
        self._background = background or BackgroundLoad()
        if self._background.vram_mb > vram_budget_mb:
            raise ValueError("background VRAM exceeds the VRAM budget")
        self.vram_budget_mb = float(vram_budget_mb)
        self.cpu_cores = cpu_cores
        self._noise = noise
        self._rng = random.Random(seed)
        self._oom_detect_ms = oom_detect_ms
        self._gpu_name = gpu_name
        self.now_ms = 0.0
        self.vram_peak_mb = 0.0

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(self._params)

    def device_state(self) -> DeviceState:
        """Telemetry view: budget, background memory and utilization; nothing per tool."""
        return DeviceState(
            gpu_available=True,
            gpu_name=self._gpu_name,
            vram_budget_mb=self.vram_budget_mb,
            vram_used_mb=self._background.vram_mb,
            gpu_utilization=self._background.gpu_share,
            cpu_cores=self.cpu_cores,
        )

    def _machine(self) -> dict[str, Any]:
        """The machine as `batchsim` takes it (budget, cores, background, OOM cost)."""
        return {
            "vram_budget_mb": self.vram_budget_mb,
            "cpu_cores": self.cpu_cores,
            "background": self._background,
            "oom_detect_ms": self._oom_detect_ms,
        }

    def _require(self, tool: str) -> ToolParams:
        try:
            return self._params[tool]
        except KeyError:
            known = ", ".join(sorted(self._params)) or "(none)"
            raise KeyError(
                f"the testbed has no parameters for tool {tool!r}; known: {known}"
            ) from None

    def run_step(
        self,
        calls: Sequence[tuple[str, str, DeviceOption]],
        *,
        cpu_forbidden: Collection[str] = (),
    ) -> StepRecord:
        """Run one step (noise applied, clock advanced) and return what happened.

        Calls in ``cpu_forbidden`` (ids) never fall back to the CPU: when their GPU option
        cannot be served they end with an ``error`` in their record instead.
        """
        outcome = self.simulate(calls, noisy=True, cpu_forbidden=cpu_forbidden)
        self.now_ms += outcome.makespan_ms
        self.vram_peak_mb = max(self.vram_peak_mb, outcome.vram_peak_mb)
        return outcome

    def makespan(self, calls: Sequence[tuple[str, str, DeviceOption]]) -> float:
        """Noise-free makespan of a step; does not move the clock (used by the oracle)."""
        return self.simulate(calls, noisy=False).makespan_ms

    def product_makespans(
        self,
        tools: Sequence[str],
        choices: Sequence[Sequence[DeviceOption]],
        *,
        prune: bool = False,
    ) -> Any:
        """Noise-free makespans of every mapping in ``itertools.product(*choices)``, in that
        order, as a numpy array; bit-identical to `makespan` (see `batchsim`; used by the oracle).
        ``prune=True`` leaves mappings that provably cannot be optimal as ``inf``.
        """
        if len(tools) != len(choices):
            raise ValueError(f"{len(tools)} tools but {len(choices)} choice lists")
        return self.codes_makespans(tools, batchsim.product_codes(choices), prune=prune)

    def mapping_makespans(
        self, tools: Sequence[str], mappings: Sequence[Sequence[DeviceOption]]
    ) -> Any:
        """Noise-free makespans of explicit mappings (one option per tool each), as a numpy
        array in order; bit-identical to `makespan`."""
        return self.codes_makespans(tools, batchsim.mapping_codes(mappings, len(tools)))

    def codes_makespans(self, tools: Sequence[str], codes: Any, *, prune: bool = False) -> Any:
        """`mapping_makespans` of option codes (`batchsim` rows: one int8 per call)."""
        params = [self._require(t) for t in tools]
        return batchsim.makespans(params, codes, prune=prune, **self._machine())

    def call_times(
        self, tools: Sequence[str], codes: Any, *, rows: dict[str, Any] | None = None
    ) -> tuple[Any, Any]:
        """Noise-free start and end times of every call of every row of option codes, with
        ``rows`` overriding parameters per row and call (see `batchsim.call_times`)."""
        params = [self._require(t) for t in tools]
        return batchsim.call_times(params, codes, rows=rows, **self._machine())

    def lower_bounds(self, tools: Sequence[str], codes: Any) -> Any:
        """An admissible lower bound on the noise-free makespan of each row of option codes
        (see `batchsim.lower_bounds`)."""
        params = [self._require(t) for t in tools]
        return batchsim.lower_bounds(params, codes, **self._machine())

    def simulate(
        self,
        calls: Sequence[tuple[str, str, DeviceOption]],
        *,
        noisy: bool = False,
        cpu_forbidden: Collection[str] = (),
    ) -> StepRecord:
        """Discrete-event simulation of one step; pure except for the noise generator."""
        tasks = []
        for i, (call_id, tool, option) in enumerate(calls):
            params = self._require(tool)
            scale = 1.0
            if noisy and self._noise > 0:
                scale = max(0.05, self._rng.gauss(1.0, self._noise))
            task = _Task(i, call_id, tool, option, params, scale)
            task.cpu_forbidden = call_id in cpu_forbidden
            tasks.append(task)
        return _Simulation(self, tasks).run()


@dataclass
class _Simulation:
    bed: SimulatedTestbed
    tasks: list[_Task]
    now: float = 0.0
    queue: list[_Task] = field(default_factory=list)
    peak: float = 0.0

    def __post_init__(self) -> None:
        bg = self.bed._background
        self.ledger = VramLedger(
            self.bed.vram_budget_mb, reserved_mb=bg.vram_mb, reserved_share=bg.gpu_share
        )
        self.free_cores = max(1, self.bed.cpu_cores - bg.cpu_threads)
        self.bg_share = bg.gpu_share

    def _start_gpu(self, t: _Task, reservation: Reservation) -> None:
        t.reservation = reservation
        t.device = SIM_GPU_DEVICE
        t.start = self.now
        if t.p.transfer_ms > 0:
            t.phase, t.remaining = "transfer", t.p.transfer_ms * t.scale
        else:
            t.phase, t.remaining = "gpu", t.p.gpu_ms * t.scale
        self.peak = max(self.peak, self.ledger.in_use_mb)

    def _start_cpu(self, t: _Task) -> None:
        t.device, t.phase, t.remaining = "cpu", "cpu", t.p.cpu_ms * t.scale
        t.start = t.start if t.fallback == "oom" else self.now

    def _fail(self, t: _Task, why: str) -> None:
        t.phase, t.device, t.end = "done", "none", self.now
        t.error = f"tool {t.tool!r} cannot run: {why}, and its hints forbid the CPU"

    def _admit_queue(self) -> None:
        while self.queue:
            head = self.queue[0]
            if not self.ledger.admissible(head.p.vram_mb, head.p.gpu_share):
                return
            self.queue.pop(0)
            res = self.ledger.try_reserve(head.p.vram_mb, head.p.gpu_share)
            assert res is not None
            self._start_gpu(head, res)

    def _launch(self) -> None:
        for t in self.tasks:
            if t.option == "cpu":
                self._start_cpu(t)
            elif t.option == "gpu_now":
                if t.p.vram_mb > self.ledger.capacity_mb:
                    res = None
                else:
                    res = self.ledger.try_reserve(t.p.vram_mb, t.p.gpu_share)
                if res is not None:
                    self._start_gpu(t, res)
                else:
                    t.fallback, t.phase, t.start = "oom", "oom", self.now
                    t.ready_at = self.now + self.bed._oom_detect_ms
        for t in self.tasks:
            if t.option == "gpu_queued":
                if t.p.vram_mb > self.ledger.capacity_mb:
                    t.fallback = "vram_over_budget"
                    if t.cpu_forbidden:
                        self._fail(t, f"needs {t.p.vram_mb:.0f} MB of VRAM, over the budget")
                    else:
                        self._start_cpu(t)
                else:
                    self.queue.append(t)
        self._admit_queue()

    def _rates(self, active: list[_Task]) -> list[float]:
        demand = self.bg_share + sum(t.p.gpu_share for t in active if t.phase == "gpu")
        gpu_rate = 1.0 / demand if demand > 1.0 else 1.0
        threads = sum(t.p.cpu_threads for t in active if t.phase == "cpu")
        cpu_rate = self.free_cores / threads if threads > self.free_cores else 1.0
        return [
            gpu_rate if t.phase == "gpu" else cpu_rate if t.phase == "cpu" else 1.0 for t in active
        ]

    def run(self) -> StepRecord:
        self._launch()
        while True:
            active = [t for t in self.tasks if t.phase in ("transfer", "gpu", "cpu")]
            waiting = [t for t in self.tasks if t.phase == "oom"]
            if not active and not waiting:
                if self.queue:  # cannot happen: an idle GPU admits any fitting head
                    raise RuntimeError("simulation stalled with a non-empty GPU queue")
                break
            rates = self._rates(active)
            gpu_now_count = sum(1 for t in active if t.phase == "gpu")
            for t in active:
                if t.phase == "gpu":
                    t.peers = max(t.peers, gpu_now_count - 1)
            dt = min(
                [t.remaining / r for t, r in zip(active, rates, strict=True)]
                + [t.ready_at - self.now for t in waiting]
            )
            dt = max(dt, 0.0)
            self.now += dt
            for t, r in zip(active, rates, strict=True):
                t.remaining -= r * dt
            for t in waiting:
                if t.ready_at <= self.now + _EPS:
                    if t.cpu_forbidden:
                        self._fail(t, f"{t.p.vram_mb:.0f} MB of VRAM did not fit (GPU OOM)")
                    else:
                        self._start_cpu(t)
            released = False
            for t in active:
                if t.remaining > _EPS * max(1.0, self.now):
                    continue
                if t.phase == "transfer":
                    t.phase, t.remaining = "gpu", t.p.gpu_ms * t.scale
                    continue
                t.phase, t.end = "done", self.now
                if t.reservation is not None:
                    self.ledger.release(t.reservation)
                    released = True
            if released:
                self._admit_queue()
        if self.ledger.in_use_mb > _EPS:
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
            )
            for t in self.tasks
        )
        makespan = max((c.end_ms for c in calls), default=0.0)
        return StepRecord(
            calls=calls,
            makespan_ms=makespan,
            vram_peak_mb=self.peak,
            extra={"vram_end_mb": self.ledger.in_use_mb, "vram_budget_mb": self.ledger.capacity_mb},
        )
