"""The simulated testbed: the ground truth when no GPU is present.

Each tool has hidden parameters (`ToolParams`). A step's calls run as a discrete-event
simulation on a virtual clock:

* GPU path: reserve VRAM, copy (``transfer_ms``, not slowed by sharing), then compute
  ``gpu_ms`` of work. With the default ``physics="processor_sharing"``, when the GPU shares
  of the computing calls (plus the background's) sum to D > 1, every one of them progresses
  at rate 1/D (GPU utilization contention); ``time_slicing``, ``idle_queue`` and
  ``bandwidth`` are other contention physics (`batchsim.Contention`, ``docs/physics.md``).
* `gpu_now` whose VRAM does not fit at start pays ``oom_detect_ms`` and falls back to the
  CPU (VRAM capacity contention); `gpu_queued` waits in FIFO order for admission (VRAM fits,
  shares within 1 or the GPU idle), by the same `VramLedger` the real executor uses.
* CPU path: ``cpu_ms`` of work using ``cpu_threads`` threads; when the threads in use exceed
  the free cores, every CPU call slows by the same factor.
* Resident models (a tool with ``weights_mb > 0``; see `batchsim.plan_gpu` for the GPU rule):
  the testbed keeps state across steps, the models resident on the GPU (LRU order) and in
  host memory (unbounded). At a step's start the models of its GPU-placed calls are
  protected; in call order each gets room for its weights (when not resident) plus its
  first call's working memory, and each GPU-placed call without a model for its working
  memory (as the ledger gives it), evicting least recently used others
  (`residency.plan_room`; the step's models it places only off that GPU first,
  `residency.demoted`) against the budget less the background less the resident weights,
  and loads. The resident
  weights are then the ledger's base for the whole step. A GPU call on a model
  loaded this step waits until ``load_gpu_ms`` from the step's start (a fixed phase, not
  slowed by sharing) before its copy; a model that gets no room sends its `gpu_now` calls
  down the OOM path and its `gpu_queued` calls to the CPU (``vram_over_budget``). A CPU call
  on a model not in host memory waits for its host load (``load_cpu_ms`` from when the
  step's first CPU call of that model started; a fixed phase that uses no core). Loads are
  noise-free. After a step the loads stay, the evicted leave, the used models become the
  most recently used (first-use order).

>>> bed = SimulatedTestbed({"asr": ToolParams(cpu_ms=800, gpu_ms=60, transfer_ms=10,
...     vram_mb=1500, gpu_share=0.6)}, vram_budget_mb=8000, cpu_cores=4)
>>> bed.run_step([("c1", "asr", "gpu_now")]).makespan_ms
70.0
>>> bed.now_ms
70.0
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from langgraph_devsched import batchsim
from langgraph_devsched._sim.events import Machine, Simulation, Task
from langgraph_devsched.batchsim import Physics, check_physics
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.records import StepRecord
from langgraph_devsched.residency import ModelSide, WarmModel, demoted, plan_room
from langgraph_devsched.telemetry import DeviceState, GpuDevice

DEFAULT_MEM_BOUND = 0.5
"""Under ``physics="bandwidth"``, how memory-bound a tool is when its parameters do not say."""
_EPS = 1e-9


class ToolParams(BaseModel):
    """Hidden ground-truth parameters of one tool (never shown to a scheduler)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    cpu_ms: float = Field(gt=0, description="solo latency on the CPU")
    gpu_ms: float = Field(ge=0, description="solo GPU compute time (transfers excluded)")
    transfer_ms: float = Field(default=0.0, ge=0, description="host<->device copy time")
    vram_mb: float = Field(default=0.0, ge=0, description="VRAM held while on the GPU")
    gpu_share: float = Field(default=1.0, gt=0, le=1, description="GPU share used alone")
    cpu_threads: int = Field(default=1, ge=1, description="CPU threads used on the CPU path")
    model: str | None = Field(
        default=None, description="resident model the tool runs on (default: the tool's own "
        "name when weights_mb > 0; tools naming one model share its weights)")
    weights_mb: float = Field(
        default=0.0, ge=0, description="VRAM the model's weights hold while resident, MB")
    load_gpu_ms: float = Field(default=0.0, ge=0, description="time to load the weights on the GPU")
    load_cpu_ms: float = Field(
        default=0.0, ge=0, description="time to load the weights into host memory")
    mem_bound: float | None = Field(
        default=None, ge=0, le=1, description="how memory-bound the GPU compute is, under "
        "physics 'bandwidth' (default: the testbed's mem_bound)")

    def model_name(self, tool: str) -> str | None:
        """The resident model ``tool``'s calls use, or None (no resident weights)."""
        if self.weights_mb <= 0:
            return None
        return self.model if self.model is not None else tool


class BackgroundLoad(BaseModel):
    """Something else on the machine, e.g. the agent's own LLM server."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    vram_mb: float = Field(default=0.0, ge=0)
    gpu_share: float = Field(default=0.0, ge=0, le=1)
    cpu_threads: int = Field(default=0, ge=0)


class GpuSpec(BaseModel):
    """One simulated GPU of a testbed with several (``gpus=[...]``; a scenario's ``gpus:``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    vram_mb: float = Field(gt=0, description="this GPU's VRAM budget, MB")
    speed: float = Field(default=1.0, gt=0, description="compute speed relative to the tools' "
                         "gpu_ms (2: computes twice as fast; copies and loads are not faster)")
    name: str = Field(default="simulated-gpu", description="the name telemetry reports")
    background: BackgroundLoad = Field(
        default_factory=BackgroundLoad, description="another process on this GPU: its VRAM "
        "and GPU share (cpu_threads belong to the testbed's own background)")
    resident: tuple[str | tuple[str, float], ...] = Field(
        default=(), description="models resident on this GPU at the start, least recently "
        "used first (as the testbed's resident['gpu'] for one GPU)")


class SimulatedTestbed:
    """Ground-truth simulator with a virtual clock; see the module docstring for the model."""

    def __init__(
        self,
        tools: Mapping[str, ToolParams | Mapping[str, float]],
        *,
        vram_budget_mb: float | None = None,
        cpu_cores: int = 8,
        background: BackgroundLoad | None = None,
        noise: float = 0.0,
        seed: int = 0,
        oom_detect_ms: float = 20.0,
        gpu_name: str = "simulated-gpu",
        resident: Mapping[str, Sequence[str | tuple[str, float]]] | None = None,
        physics: Physics = "processor_sharing",
        slice_overhead: float = 0.0,
        mem_bound: float = DEFAULT_MEM_BOUND,
        keep_warm: Collection[str] = (),
        gpus: Sequence[GpuSpec | Mapping[str, Any]] | None = None,
    ) -> None:
        """``resident``: models resident at the start, ``{"gpu": [...], "cpu": [...]}``
        (GPU ones least recently used first), each named by some tool's parameters; a GPU
        entry may also be ``(model, weights_mb)``, a model no tool uses (it only holds VRAM
        until evicted). ``physics``: how computing GPU calls slow each other
        (`batchsim.Contention`); ``slice_overhead`` (``time_slicing``) and ``mem_bound``
        (``bandwidth``: the value of every tool whose parameters leave it out) tune it.
        ``keep_warm``: models never evicted for another model (as the ledger treats a
        ``keep_warm`` hint). ``gpus``: several GPUs (`GpuSpec`: memory, speed, background,
        resident models each), instead of ``vram_budget_mb`` (the one-GPU shorthand); each
        has its own ledger, resident weights and contention; ``background`` then gives only
        the CPU threads and ``resident['gpu']`` is GPU 0's."""
        if cpu_cores < 1:
            raise ValueError(f"cpu_cores must be >= 1, got {cpu_cores}")
        if not 0 <= noise < 1:
            raise ValueError(f"noise is a relative sigma in [0, 1), got {noise}")
        self.physics = check_physics(physics)
        if not 0 <= slice_overhead <= 1:
            raise ValueError(f"slice_overhead must be in [0, 1], got {slice_overhead}")
        if not 0 <= mem_bound <= 1:
            raise ValueError(f"mem_bound must be in [0, 1], got {mem_bound}")
        self.slice_overhead = float(slice_overhead)
        self.mem_bound = float(mem_bound)
        self._params = {
            name: p if isinstance(p, ToolParams) else ToolParams.model_validate(p)
            for name, p in tools.items()
        }
        self._background = background or BackgroundLoad()
        self._gpus = _gpu_specs(vram_budget_mb, gpus, self._background, gpu_name)
        if len(self._gpus) > 1 or gpus is not None:
            first = self._gpus[0].background
            self._background = BackgroundLoad(vram_mb=first.vram_mb, gpu_share=first.gpu_share,
                                              cpu_threads=self._background.cpu_threads)
            gpu_name = self._gpus[0].name
        if self._background.vram_mb > self._gpus[0].vram_mb:
            raise ValueError("background VRAM exceeds the VRAM budget")
        self.vram_budget_mb = float(self._gpus[0].vram_mb)
        self.cpu_cores = cpu_cores
        self._noise = noise
        self._rng = random.Random(seed)
        self._oom_detect_ms = oom_detect_ms
        self._gpu_name = gpu_name
        self.now_ms = 0.0
        self.vram_peak_mb = 0.0
        self._models = _models_of(self._params)
        start = dict(resident or {})
        if gpus is not None and self._gpus[0].resident:
            start["gpu"] = list(start.get("gpu", ())) + list(self._gpus[0].resident)
        self._state = dataclasses.replace(self._initial(start),
                                          keep_warm=frozenset(keep_warm))
        if len(self._gpus) > 1:
            others = tuple(self._initial({"gpu": list(g.resident)}, index=i).gpu
                           for i, g in enumerate(self._gpus[1:], start=1))
            self._state = dataclasses.replace(self._state, others=others)

    @property
    def gpu_count(self) -> int:
        """How many GPUs the testbed simulates (1 with ``vram_budget_mb``)."""
        return len(self._gpus)

    @property
    def gpus(self) -> tuple[GpuSpec, ...]:
        """The simulated GPUs (one with ``vram_budget_mb``)."""
        return self._gpus

    def _gpu_weights(self, index: int) -> tuple[tuple[str, float], ...]:
        return self._weights_in(self._state, index)

    def _one_gpu(self, what: str) -> None:
        """The batched evaluator (`batchsim`) models one GPU: refuse it on several."""
        if len(self._gpus) > 1:
            raise NotImplementedError(
                f"{what} evaluates one GPU; this testbed has {len(self._gpus)}: use simulate() "
                "or makespan() per mapping")

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(self._params)

    def model_of(self, tool: str) -> str | None:
        """The resident model ``tool``'s calls use (None: none, or an unknown tool)."""
        p = self._params.get(tool)
        return p.model_name(tool) if p is not None else None

    def _initial(
        self, resident: Mapping[str, Sequence[str | tuple[str, float]]], index: int = 0,
    ) -> batchsim.Residency:
        unknown_sides = set(resident) - {"gpu", "cpu"}
        if unknown_sides:
            raise ValueError(f"resident: unknown side(s) {sorted(unknown_sides)}; valid: gpu, cpu")
        sized: dict[str, float] = {}
        for side in ("gpu", "cpu"):
            for entry in resident.get(side, ()):
                if not isinstance(entry, str) and side == "gpu":
                    sized[entry[0]] = float(entry[1])
                    continue
                if entry not in self._models:
                    known = ", ".join(sorted(self._models)) or "(none)"
                    raise ValueError(
                        f"resident.{side}: unknown model {entry!r}; models of the tools: {known}")
        gpu = tuple(dict.fromkeys(e if isinstance(e, str) else e[0]
                                  for e in resident.get("gpu", ())))
        weights = {m: sized[m] if m in sized else self._models[m].weights_mb for m in gpu}
        held = sum(weights.values())
        room = self._gpus[index].vram_mb - (
            self._background.vram_mb if index == 0 else self._gpus[index].background.vram_mb)
        if held > room + _EPS:
            where = "resident.gpu" if index == 0 else f"gpus[{index}].resident"
            raise ValueError(
                f"{where}: {held:.0f} MB of weights do not fit in the budget less the "
                f"background ({room:.0f} MB)")
        host = tuple(dict.fromkeys(str(m) for m in resident.get("cpu", ())))
        return batchsim.Residency(
            gpu=tuple((m, weights[m]) for m in gpu), host=frozenset(host), host_order=host)

    def residency(self) -> batchsim.Residency:
        """The resident-model state now (immutable: keep it to `restore` it later)."""
        return self._state

    def restore(self, state: batchsim.Residency) -> None:
        """Put back a state `residency` returned (the clock and noise are not touched)."""
        self._state = state

    def device_state(self) -> DeviceState:
        """Telemetry view: budget, background memory and utilization; nothing per tool.
        Several GPUs: the flat fields are GPU 0's, ``gpus`` lists each (``resident`` holds
        every GPU's weights, GPU by GPU, then the host's)."""
        if len(self._gpus) > 1:
            return self._devices_state()
        return DeviceState(
            gpu_available=True,
            gpu_name=self._gpu_name,
            vram_budget_mb=self.vram_budget_mb,
            vram_used_mb=self._background.vram_mb,
            gpu_utilization=self._background.gpu_share,
            cpu_cores=self.cpu_cores,
            resident=tuple(WarmModel(m, mb, "gpu", keep_warm=m in self._state.keep_warm)
                           for m, mb in self._state.gpu) + tuple(
                WarmModel(m, self._models[m].weights_mb, "cpu") for m in self._state.host_order),
        )

    def _devices_state(self) -> DeviceState:
        keep = self._state.keep_warm
        per_gpu = [tuple(WarmModel(m, mb, "gpu", keep_warm=m in keep)
                         for m, mb in self._gpu_weights(i)) for i in range(len(self._gpus))]
        host = tuple(WarmModel(m, self._models[m].weights_mb, "cpu")
                     for m in self._state.host_order)
        devices = tuple(
            GpuDevice(i, g.name, g.vram_mb, g.background.vram_mb, g.background.gpu_share,
                      per_gpu[i], g.speed) for i, g in enumerate(self._gpus))
        return DeviceState(
            gpu_available=True, gpu_name=self._gpus[0].name, vram_budget_mb=self.vram_budget_mb,
            vram_used_mb=self._background.vram_mb, gpu_utilization=self._background.gpu_share,
            cpu_cores=self.cpu_cores, resident=sum(per_gpu, ()) + host, gpus=devices)

    def _residency_for(self, tools: Sequence[str]) -> batchsim.Residency | None:
        """The state with these calls' models, as `batchsim` takes it (None: no models)."""
        models = tuple(self._params[t].model_name(t) for t in tools)
        if not self._state.gpu and all(m is None for m in models):
            return None
        used = {m for m in models if m is not None}
        return dataclasses.replace(
            self._state, models=models,
            weights_mb={m: self._models[m].weights_mb for m in used},
            load_gpu_ms={m: self._models[m].load_gpu_ms for m in used},
            load_cpu_ms={m: self._models[m].load_cpu_ms for m in used},
        )

    def _machine(self, tools: Sequence[str] = ()) -> dict[str, Any]:
        """The machine as `batchsim` takes it (budget, cores, background, OOM cost, and the
        resident-model state for ``tools``' calls)."""
        self._one_gpu("the batched simulator")
        return {
            "vram_budget_mb": self.vram_budget_mb,
            "cpu_cores": self.cpu_cores,
            "background": self._background,
            "oom_detect_ms": self._oom_detect_ms,
            "residency": self._residency_for(tools),
            "contention": self.contention(tools),
        }

    def contention(self, tools: Sequence[str] = ()) -> batchsim.Contention | None:
        """The physics as `batchsim` takes it for ``tools``' calls (None: the default)."""
        if self.physics == "processor_sharing":
            return None
        return batchsim.Contention(
            self.physics, self.slice_overhead,
            tuple(self._mem_bound(self._require(t)) for t in tools))

    def _mem_bound(self, p: ToolParams) -> float:
        return self.mem_bound if p.mem_bound is None else p.mem_bound

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
        gpus: Mapping[str, int] | None = None,
    ) -> StepRecord:
        """Run one step (noise applied, clock advanced) and return what happened.

        Calls in ``cpu_forbidden`` (ids) never fall back to the CPU: when their GPU option
        cannot be served they end with an ``error`` in their record instead. ``gpus``: the
        GPU index per GPU-placed call id (absent: GPU 0).
        """
        outcome, self._state = self._simulate(calls, noisy=True, cpu_forbidden=cpu_forbidden,
                                              gpus=gpus)
        self.now_ms += outcome.makespan_ms
        self.vram_peak_mb = max(self.vram_peak_mb, outcome.vram_peak_mb)
        return outcome

    def makespan(
        self, calls: Sequence[tuple[str, str, DeviceOption]],
        gpus: Mapping[str, int] | None = None,
    ) -> float:
        """Noise-free makespan of a step from the current resident-model state; changes
        neither the clock nor the state (used by the oracle)."""
        return self.simulate(calls, noisy=False, gpus=gpus).makespan_ms

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
        return batchsim.makespans(params, codes, prune=prune, **self._machine(tools))

    def mapping_evictions(
        self, tools: Sequence[str], mappings: Sequence[Sequence[DeviceOption]]
    ) -> list[tuple[str, ...]]:
        """Per mapping, the resident models its step would evict from the GPU (in order)."""
        params = [self._require(t) for t in tools]
        return batchsim.evicted_models(
            params, batchsim.mapping_codes(mappings, len(tools)), **self._machine(tools))

    def codes_residencies(
        self, tools: Sequence[str], codes: Any
    ) -> tuple[Any, list[batchsim.Residency]]:
        """Per row of option codes, the index of the resident-model state its step would
        leave (as `run_step` would leave it, whatever the noise), and those distinct states
        (`batchsim.step_ends`); changes nothing. A new host model comes after the ones
        already loaded, in name order (the order is telemetry only)."""
        params = [self._require(t) for t in tools]
        index, ends = batchsim.step_ends(params, codes, **self._machine(tools))
        states = []
        for gpu, loaded in ends:
            host = self._state.host_order + tuple(m for m in loaded if m not in self._state.host)
            states.append(dataclasses.replace(self._state, gpu=gpu, host=frozenset(host),
                                              host_order=host))
        return index, states

    def call_times(
        self, tools: Sequence[str], codes: Any, *, rows: dict[str, Any] | None = None,
        models: Sequence[batchsim.Contention | None] | None = None, groups: Any = None,
    ) -> tuple[Any, Any]:
        """Noise-free start and end times of every call of every row of option codes, with
        ``rows`` overriding parameters per row and call, and ``models``/``groups`` each row's
        contention physics instead of this testbed's (see `batchsim.call_times`)."""
        params = [self._require(t) for t in tools]
        return batchsim.call_times(params, codes, rows=rows, models=models, groups=groups,
                                   **self._machine(tools))

    def lower_bounds(self, tools: Sequence[str], codes: Any) -> Any:
        """An admissible lower bound on the noise-free makespan of each row of option codes
        (see `batchsim.lower_bounds`)."""
        params = [self._require(t) for t in tools]
        return batchsim.lower_bounds(params, codes, **self._machine(tools))

    def simulate(
        self,
        calls: Sequence[tuple[str, str, DeviceOption]],
        *,
        noisy: bool = False,
        cpu_forbidden: Collection[str] = (),
        gpus: Mapping[str, int] | None = None,
    ) -> StepRecord:
        """Discrete-event simulation of one step from the current resident-model state; pure
        except for the noise generator (`run_step` also keeps the state it ends in)."""
        return self._simulate(calls, noisy=noisy, cpu_forbidden=cpu_forbidden, gpus=gpus)[0]

    def _simulate(
        self,
        calls: Sequence[tuple[str, str, DeviceOption]],
        *,
        noisy: bool,
        cpu_forbidden: Collection[str],
        gpus: Mapping[str, int] | None = None,
    ) -> tuple[StepRecord, batchsim.Residency]:
        tasks = []
        gpus = gpus or {}
        for i, (call_id, tool, option) in enumerate(calls):
            params = self._require(tool)
            scale = 1.0
            if noisy and self._noise > 0:
                scale = max(0.05, self._rng.gauss(1.0, self._noise))
            task = Task(i, call_id, tool, option, params, scale)
            task.cpu_forbidden = call_id in cpu_forbidden
            task.model = params.model_name(tool)
            task.mem_bound = self._mem_bound(params)
            if option != "cpu":
                task.gpu = self._gpu_of(call_id, gpus.get(call_id, 0))
            tasks.append(task)
        plans = [self._plan_gpu(tasks, g) for g in range(len(self._gpus))]
        for g, plan in enumerate(plans):  # each call that got room names what it evicted
            for t, out in zip(self._room_of(tasks, g), plan.evicted, strict=True):
                t.evicted = out
        first: set[tuple[int, str]] = set()
        for t in tasks:
            if t.model is None or t.option == "cpu":
                continue
            plan, key = plans[t.gpu], (t.gpu, t.model)
            t.no_room = t.model in plan.no_room
            if t.model in plan.loaded:
                t.gpu_load_ms = self._models[t.model].load_gpu_ms
                if key not in first:
                    first.add(key)
                    t.loaded = True
        sim = Simulation(self._event_machine(), tasks, bases=[p.base_mb for p in plans])
        record = sim.run()
        host = tuple(self._state.host_order) + tuple(
            m for m in sim.host_end if m not in self._state.host)
        return record, dataclasses.replace(
            self._state, gpu=plans[0].after, host=frozenset(host), host_order=host,
            others=tuple(p.after for p in plans[1:]))

    def model_loads(self, side: ModelSide = "gpu") -> dict[str, float]:
        """Every resident model the tools name, with its load time (ms) on ``side``."""
        return {m: p.load_gpu_ms if side == "gpu" else p.load_cpu_ms
                for m, p in self._models.items()}

    def with_loaded(
        self, state: batchsim.Residency, model: str, gpu: int = 0,
        evict: Sequence[str] = (), side: ModelSide = "gpu",
    ) -> batchsim.Residency | None:
        """``state`` after loading ``model``'s weights between two steps (a background load):
        into host memory (``side="cpu"``), or on GPU ``gpu``, evicting ``evict`` first (models
        the caller chose, e.g. by their worth) and then least recently used others as a
        step's load would (never one kept warm); the model becomes the most recently used.
        None when it cannot get room (or is unknown, or already there); pure."""
        p = self._models.get(model)
        if p is None or not 0 <= gpu < len(self._gpus):
            return None
        if side == "cpu":
            if model in state.host:
                return None
            order = (*state.host_order, model)
            return dataclasses.replace(state, host=frozenset(order), host_order=order)
        weights = self._weights_in(state, gpu)
        if any(m == model for m, _ in weights):
            return None
        gone = set(evict) - state.keep_warm
        kept = tuple((m, mb) for m, mb in weights if m not in gone)
        free = self._free_mb(gpu, kept)
        warm = [WarmModel(m, mb, keep_warm=m in state.keep_warm) for m, mb in kept]
        more = plan_room(warm, need_mb=p.weights_mb, free_mb=free)
        if more is None:
            return None
        after = (*((m, mb) for m, mb in kept if m not in more), (model, p.weights_mb))
        if gpu == 0:
            return dataclasses.replace(state, gpu=after)
        others = list(state.others)
        others[gpu - 1] = after
        return dataclasses.replace(state, others=tuple(others))

    def beside(
        self, state: batchsim.Residency, model: str, gpu: int, evict: Sequence[str],
        tools: Sequence[str], busy: bool,
    ) -> batchsim.Residency | None:
        """``state`` (a step's end) after a load on GPU ``gpu`` that ran in the background of
        that step (`with_loaded`). On a GPU the step used (``busy``) it evicts nothing and
        needs room beside the step: its weights and the working memory (``vram_mb``) of the
        calls ``tools`` beside the resident weights (the bench names every call of the step
        on one GPU, those placed on that GPU on several: `bench.preloads.beside_tools`).
        None when that cannot be; pure."""
        if busy:
            p = self._models.get(model)
            if p is None or evict or not 0 <= gpu < len(self._gpus):
                return None
            free = self._free_mb(gpu, self._weights_in(state, gpu))
            if p.weights_mb + sum(self._params[t].vram_mb for t in tools) > free + _EPS:
                return None
        return self.with_loaded(state, model, gpu, evict)

    def load_beside(self, model: str, gpu: int, evict: Sequence[str], tools: Sequence[str],
                    busy: bool) -> float | None:
        """`beside` on the testbed's state (a step just ran): the load time (ms), or None."""
        return self._take(self.beside(self._state, model, gpu, evict, tools, busy), model, "gpu")

    def _take(self, after: batchsim.Residency | None, model: str,
              side: ModelSide) -> float | None:
        """Make ``after`` (a load of ``model`` on ``side``) the state: its load time (ms), or
        None (and the state unchanged) when there was no such load."""
        if after is None:
            return None
        self._state = after
        return self.model_loads(side)[model]

    def _weights_in(self, state: batchsim.Residency,
                    gpu: int) -> tuple[tuple[str, float], ...]:
        """GPU ``gpu``'s resident weights in ``state``."""
        return state.gpu if gpu == 0 else state.others[gpu - 1]

    def _free_mb(self, gpu: int, weights: Sequence[tuple[str, float]]) -> float:
        """GPU ``gpu``'s room beside its background and ``weights`` (MB)."""
        background = self._background if gpu == 0 else self._gpus[gpu].background
        return self._gpus[gpu].vram_mb - background.vram_mb - sum(mb for _, mb in weights)

    def preload(self, model: str, gpu: int = 0, evict: Sequence[str] = (),
                side: ModelSide = "gpu") -> float | None:
        """Load ``model`` between two steps (`with_loaded`; the clock is not advanced: the
        load runs while the agent's LLM thinks); its load time (ms), or None when it could
        not get room (or was there already)."""
        return self._take(self.with_loaded(self._state, model, gpu, evict, side), model, side)

    def _event_machine(self) -> Machine:
        """What the event simulation of a step reads of this testbed, at the step's start."""
        return Machine(self._background, self._gpus, self.cpu_cores, self.physics,
                       self.slice_overhead, self._oom_detect_ms, self._state.host, self._models)

    def _gpu_of(self, call_id: str, index: object) -> int:
        if type(index) is not int or not 0 <= index < len(self._gpus):
            raise ValueError(
                f"call {call_id}: GPU {index!r} does not exist; valid: 0..{len(self._gpus) - 1}")
        return index

    def _plan_gpu(self, tasks: Sequence[Task], gpu: int) -> batchsim.GpuPlan:
        """GPU ``gpu``'s weights for the step (`batchsim.plan_gpu`, one GPU at a time): its
        entries (``wanted``) are, in call order, each model's first GPU-placed call and every
        GPU-placed call without a model; `_room_of` maps them back to the calls."""
        wanted = [(t.model, t.p.vram_mb) for t in self._room_of(tasks, gpu)]
        background = self._background if gpu == 0 else self._gpus[gpu].background
        return batchsim.plan_gpu(
            self._gpu_weights(gpu), wanted,
            {m: self._models[m].weights_mb for m, _ in wanted if m is not None},
            budget_mb=self._gpus[gpu].vram_mb, background_mb=background.vram_mb,
            keep_warm=self._state.keep_warm,
            demote=demoted(((t.model, None if t.option == "cpu" else t.gpu) for t in tasks), gpu))

    @staticmethod
    def _room_of(tasks: Sequence[Task], gpu: int) -> list[Task]:
        """The calls that get room on GPU ``gpu`` at the step's start (`plan_gpu`'s
        ``wanted``, in order): each model's first GPU-placed call, every one without a model."""
        out: list[Task] = []
        seen: set[str] = set()
        for t in tasks:
            if t.option == "cpu" or t.gpu != gpu or t.model in seen:
                continue
            if t.model is not None:
                seen.add(t.model)
            out.append(t)
        return out


def _gpu_specs(
    vram_budget_mb: float | None, gpus: Sequence[GpuSpec | Mapping[str, Any]] | None,
    background: BackgroundLoad, gpu_name: str,
) -> tuple[GpuSpec, ...]:
    """The testbed's GPUs: ``gpus``, or one of ``vram_budget_mb`` (exactly one is given)."""
    if gpus is None:
        if vram_budget_mb is None:
            raise ValueError("give vram_budget_mb (one GPU) or gpus=[...] (one GpuSpec each)")
        return (GpuSpec(vram_mb=vram_budget_mb, name=gpu_name),)
    if vram_budget_mb is not None:
        raise ValueError("give vram_budget_mb (one GPU) or gpus=[...], not both")
    if isinstance(gpus, (str, Mapping)) or not gpus:
        raise ValueError("gpus must be a non-empty list of GPUs (vram_mb, speed, name, "
                         "background, resident each)")
    if background.vram_mb or background.gpu_share:
        raise ValueError("with gpus=[...], give each GPU's background in gpus[i].background; "
                         "the testbed's background then holds only cpu_threads")
    specs = tuple(g if isinstance(g, GpuSpec) else GpuSpec.model_validate(dict(g))
                  for g in gpus)
    for i, g in enumerate(specs):
        if g.background.cpu_threads:
            raise ValueError(f"gpus[{i}].background.cpu_threads: CPU threads belong to the "
                             "testbed's own background")
        if g.background.vram_mb > g.vram_mb:
            raise ValueError(f"gpus[{i}]: background VRAM exceeds the GPU's vram_mb")
    return specs


def _models_of(params: Mapping[str, ToolParams]) -> dict[str, ToolParams]:
    """Each resident model's parameters (the first tool naming it); tools sharing a model
    must agree on its weights and load times."""
    out: dict[str, ToolParams] = {}
    for tool, p in params.items():
        model = p.model_name(tool)
        if model is None:
            continue
        seen = out.setdefault(model, p)
        mine = (p.weights_mb, p.load_gpu_ms, p.load_cpu_ms)
        if (seen.weights_mb, seen.load_gpu_ms, seen.load_cpu_ms) != mine:
            raise ValueError(
                f"tool {tool!r}: model {model!r} is declared with other weights_mb/load_gpu_ms/"
                f"load_cpu_ms by another tool; tools sharing a model must agree")
    return out
