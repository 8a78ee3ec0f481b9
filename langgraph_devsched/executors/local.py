"""This machine: a CPU pool and (when CUDA is there) its GPUs, each behind a `VramLedger`.

Every visible CUDA device is driven (``CUDA_VISIBLE_DEVICES`` says which, as torch sees
them), or an explicit list of `GpuConfig` with a budget each; each GPU has its own ledger,
model cache entries and ``gpu_concurrency`` cap. A call on a GPU option runs on the GPU its
decision named, else the default rule's (`langgraph_devsched.gpus.default_gpus`); one GPU
is today's one path.

* ``cpu``: runs on the CPU (at most ``cpu_workers`` at once when set, OOM reruns included).
* ``gpu_now``: reserves its VRAM now if it fits, else falls back to the CPU (``oom``; with
  ``gpu_concurrency`` set and that many calls on the GPU: ``gpu_busy``).
* ``gpu_queued``: waits in FIFO order for admission (``queue_timeout_s`` → CPU; past the
  call's own deadline: its timeout answer). A call that can never fit beside the weights
  kept warm on the GPU is not queued: it goes to the CPU (``vram_over_budget``).
* A ``torch.cuda.OutOfMemoryError`` raised by the tool on the GPU releases the reservation,
  empties the CUDA cache and reruns the call on the CPU (``oom``).
Without a GPU, GPU options run on the CPU with the fallback ``no_gpu``. A call whose hints
forbid the CPU gets a `PlacementError` instead of a CPU fallback.

A call on a resident model (its ``model`` / ``weights_mb`` hints) reserves the model's
weights with its working memory when they are not resident yet, evicting idle models where
that makes room (`ledger`); the backend's `ModelCache` (``models``) answers the tool's
`ResidentModel.get`, frees what the ledger evicted and is emptied by `close`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

from langgraph_devsched.device import Placement
from langgraph_devsched.executors.base import (
    ARunOnce,
    BookedStep,
    Deadline,
    PlacementError,
    PlannedCall,
    RunOnce,
    demote_off_gpu,
    describe_failure,
    planned_gpus,
    vram_needed,
    wait_bound,
)
from langgraph_devsched.executors.lease import Lease, leased
from langgraph_devsched.gpus import gpu_index
from langgraph_devsched.ledger import (
    NeverFitsError,
    QueueTimeoutError,
    Reservation,
    VramLedger,
    WeightsNeed,
)
from langgraph_devsched.models import (
    MAX_MODELS,
    CallModels,
    ModelCache,
    ModelRoomError,
    Preloaded,
    ResidentModel,
)
from langgraph_devsched.records import CallRecord
from langgraph_devsched.residency import ModelSide
from langgraph_devsched.shared_ledger.background import NvmlBackground
from langgraph_devsched.telemetry import (
    DeviceState,
    GpuDevice,
    cuda_device_count,
    cuda_status,
    local_device_state,
)

T = TypeVar("T")

RunToolsOn = Literal["placed", "cpu"]
"""Where a tool's own code runs: on the device it was placed on, or always on the CPU."""


def is_gpu_oom(exc: BaseException) -> bool:
    """True for ``torch.cuda.OutOfMemoryError`` (checked without importing torch), and for a
    model whose weights found no room (`ModelRoomError`)."""
    if isinstance(exc, ModelRoomError):
        return True
    return type(exc).__name__ == "OutOfMemoryError" and "torch" in type(exc).__module__


def _empty_cuda_cache() -> None:
    try:
        import torch

        torch.cuda.empty_cache()
    except Exception:
        pass


@dataclass(frozen=True)
class GpuConfig:
    """A GPU the local backend drives. ``vram_budget_mb`` caps what tools may reserve."""

    vram_budget_mb: float
    device: str = "cuda:0"
    background_mb: float = 0.0
    speed: float = 1.0
    """Declared relative compute speed (schedulers read it in `GpuDevice.speed`)."""

    def __post_init__(self) -> None:
        check_gpu_config(self)


def check_gpu_config(config: GpuConfig) -> None:
    """`ValueError` naming the GPU and the field for a budget, background or speed that is
    not a finite number in range (each GPU of a list is checked alike, one GPU too)."""
    rules = (("vram_budget_mb", config.vram_budget_mb, "a finite number of MB > 0", 0.0, False),
             ("background_mb", config.background_mb, "a finite number of MB >= 0", 0.0, True),
             ("speed", config.speed, "a finite number > 0 (1: the tools' declared speed)",
              0.0, False))
    for field, value, valid, low, low_ok in rules:
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(value) and (value >= low if low_ok else value > low))
        if not ok:
            raise ValueError(f"GpuConfig(device={config.device!r}): {field} must be {valid}, "
                             f"got {value!r}")


@dataclass
class _Lane:
    """One GPU of the backend: its config, ledger and model cache."""

    index: int
    config: GpuConfig
    ledger: VramLedger
    models: ModelCache


def _gpu_list(gpu: object) -> list[GpuConfig] | None:
    """An explicit list of GPUs, checked (cuda:0, cuda:1, ... each once), or None."""
    if isinstance(gpu, (GpuConfig, bool)) or gpu is None:
        return None
    if not isinstance(gpu, (list, tuple)) or not gpu or not all(
            isinstance(g, GpuConfig) for g in gpu):
        raise ValueError(
            f"gpu must be a GpuConfig, a non-empty list of GpuConfig (one per GPU), True/None "
            f"(detect) or False (CPU only); got {gpu!r}")
    devices = [g.device for g in gpu]
    want = [f"cuda:{i}" for i in range(len(gpu))]
    if devices != want:
        raise ValueError(f"gpu: the devices of a list of GPUs must be {', '.join(want)} in "
                         f"order (as CUDA_VISIBLE_DEVICES numbers them); got {', '.join(devices)}")
    return list(gpu)


class LocalBackend:
    """Run calls on this machine's CPU and GPU.

    ``gpu=None`` detects every visible CUDA device through torch (budget: each device's
    total memory, or ``vram_budget_mb``); ``gpu=False`` is CPU only; a `GpuConfig` (or a
    list, one per GPU: ``cuda:0``, ``cuda:1``, ...) trusts the given GPUs.

    ``shared``: a file path every process of the machine names alike: their GPU ledgers
    then hold one budget per GPU between them (`shared_ledger`, docs/processes.md);
    None (the default): this process's own budget. ``nvml_background``: each GPU's
    background follows NVML's reading of the memory other processes hold (`NvmlBackground`);
    None (the default): on for detected GPUs, off for declared ones.
    ``run_tools_on="cpu"`` runs each tool's own code on the CPU wherever it is placed (its
    `InjectedDevice` argument, `current_device()` and `ResidentModel.get` say ``"cpu"``)
    while placement, the VRAM ledgers and the records follow the declared GPUs: declared
    GPUs on a machine without CUDA, as ``simulated_gpu(..., run_tools_on="cpu")`` does.
    """

    name = "local"

    def __init__(
        self,
        *,
        gpu: GpuConfig | Sequence[GpuConfig] | bool | None = None,
        vram_budget_mb: float | None = None,
        cpu_workers: int | None = None,
        gpu_concurrency: int | None = None,
        queue_timeout_s: float | None = None,
        telemetry_ttl_s: float = 1.0,
        max_models: int = MAX_MODELS,
        clock: Callable[[], float] = time.perf_counter,
        shared: str | os.PathLike[str] | None = None,
        nvml_background: bool | None = None,
        run_tools_on: RunToolsOn = "placed",
    ) -> None:
        if run_tools_on not in get_args(RunToolsOn):
            raise ValueError(f"unknown run_tools_on {run_tools_on!r}; valid: "
                             f"{', '.join(get_args(RunToolsOn))}")
        self.run_tools_on: RunToolsOn = run_tools_on
        if cpu_workers is not None and cpu_workers < 1:
            raise ValueError(f"cpu_workers must be >= 1 or None, got {cpu_workers}")
        if gpu_concurrency is not None and gpu_concurrency < 1:
            raise ValueError(f"gpu_concurrency must be >= 1 or None, got {gpu_concurrency}")
        self.gpu_concurrency = gpu_concurrency
        self._clock = clock
        self.queue_timeout_s = queue_timeout_s
        self.telemetry_ttl_s = telemetry_ttl_s
        self._state_cache: tuple[float, DeviceState] | None = None
        self._no_gpu_reason: str | None = None
        self._gpu_list = _gpu_list(gpu)
        self._gpu_arg = gpu
        self.shared = None if shared is None else os.fspath(shared)
        """The machine-wide ledger's file (docs/processes.md), or None: this process alone."""
        self._vram_budget_arg = vram_budget_mb
        self.nvml_background = nvml_background
        self._followers: list[tuple[_Lane, NvmlBackground]] = []
        self._next_background = -float("inf")
        self._gpu: GpuConfig | None = None
        self._lanes: list[_Lane] = []
        self._max_models = max_models
        self._detected = False
        self._detect_lock = threading.Lock()
        self._models = ModelCache(max_models=max_models, clock=clock)
        if gpu is not None:  # declared or disabled: nothing to probe
            self._detect()
        self.cpu_slots = VramLedger(cpu_workers) if cpu_workers else None

    def _detect(self) -> None:
        """Find the GPU once, on first need: ``gpu=None`` imports torch only then."""
        with self._detect_lock:
            if self._detected:
                return
            gpu = self._gpu_arg
            configs: list[GpuConfig] = []
            if self._gpu_list is not None:
                configs = self._gpu_list
            elif isinstance(gpu, GpuConfig):
                configs = [gpu]
            elif gpu is False:
                self._no_gpu_reason = "GPU disabled (gpu=False)"
            else:
                ok, reason = cuda_status(0)
                if ok:
                    for index in range(cuda_device_count()):
                        state = local_device_state(index, self._vram_budget_arg)
                        if state.gpu_available:
                            configs.append(GpuConfig(vram_budget_mb=state.vram_budget_mb,
                                                     device=f"cuda:{index}"))
                else:
                    self._no_gpu_reason = reason
            for index, config in enumerate(configs):
                models = self._models if index == 0 else ModelCache(
                    max_models=self._max_models, clock=self._clock)
                ledger = self._new_ledger(index, config, models)
                models.ledger = ledger
                models.route = self.cache_for  # each device's instances in its own cache
                self._lanes.append(_Lane(index, config, ledger, models))
                if self.nvml_background or (self.nvml_background is None and not (
                        self._gpu_list or isinstance(gpu, GpuConfig))):
                    exclude = getattr(ledger, "holder_pids", None)
                    self._followers.append(
                        (self._lanes[-1], NvmlBackground(index, exclude=exclude)))
            if self._lanes:
                self._gpu = self._lanes[0].config
            self._detected = True

    def _new_ledger(self, index: int, config: GpuConfig, models: ModelCache) -> VramLedger:
        if self.shared is None:
            return VramLedger(config.vram_budget_mb, reserved_mb=config.background_mb,
                              max_active=self.gpu_concurrency)
        from langgraph_devsched.shared_ledger import SharedVramLedger, gpu_key

        ledger = SharedVramLedger(config.vram_budget_mb, store=self.shared, gpu=gpu_key(index),
                                  reserved_mb=config.background_mb,
                                  max_active=self.gpu_concurrency)
        ledger.on_evicted = lambda names: models.drop(names, idle_only=True)
        ledger.in_use = models.in_use
        return ledger

    @property
    def _ledger(self) -> VramLedger | None:
        """GPU 0's ledger (a checked ledger may stand in for it: the setter)."""
        return self._lanes[0].ledger if self._lanes else None

    @_ledger.setter
    def _ledger(self, ledger: VramLedger) -> None:
        if self._lanes:
            self._lanes[0].ledger = ledger

    def declared_capacity_mb(self) -> float | None:
        """The most VRAM a call could get when the GPU was declared (`GpuConfig`; a list:
        on its largest GPU); None when it is detected (not probed here) or absent."""
        gpu = self._gpu_arg
        if isinstance(gpu, GpuConfig):
            return gpu.vram_budget_mb - gpu.background_mb
        if self._gpu_list is not None:
            return max(g.vram_budget_mb - g.background_mb for g in self._gpu_list)
        return None

    @property
    def gpu(self) -> GpuConfig | None:
        """The GPU this backend drives, or None (detected on first use)."""
        if not self._detected:
            self._detect()
        return self._gpu

    def stand_in_ledger(self, ledger: VramLedger) -> None:
        """Put ``ledger`` in place of GPU 0's ledger, for the backend and its model cache
        (the GPU detected first): the dev harness's checked ledgers watch every reservation
        and release the node makes."""
        if not self._detected:
            self._detect()
        self._ledger = ledger
        self._models.ledger = ledger

    @property
    def ledger(self) -> VramLedger | None:
        """The GPU's VRAM ledger, or None without a GPU."""
        if not self._detected:
            self._detect()
        return self._ledger

    @property
    def ledgers(self) -> tuple[VramLedger, ...]:
        """One VRAM ledger per GPU (index order); empty without a GPU."""
        if not self._detected:
            self._detect()
        return tuple(lane.ledger for lane in self._lanes)

    @property
    def caches(self) -> tuple[ModelCache, ...]:
        """One model cache per GPU (GPU 0's, `models`, also holds the host instances)."""
        if not self._detected:
            self._detect()
        return tuple(lane.models for lane in self._lanes) or (self._models,)

    def lane(self, index: int) -> _Lane:
        return self._lanes[index]

    def cache_for(self, device: str) -> ModelCache:
        """The model cache of ``device``'s GPU (the CPU: GPU 0's, which holds the host side)."""
        index = gpu_index(device)
        if index is None or index >= len(self._lanes):
            return self._models
        return self._lanes[index].models

    @property
    def models(self) -> ModelCache:
        """The resident model instances of this backend (GPU weights in its ledger, attached
        when the GPU is detected: reading this probes nothing)."""
        return self._models

    @property
    def clock(self) -> Callable[[], float]:
        """The clock calls and loads are timed on (seconds)."""
        return self._clock

    def preload_model(self, handle: ResidentModel[Any], gpu: int = 0, evict: Sequence[str] = (),
                      side: ModelSide = "gpu") -> Preloaded | None:
        """Load ``handle`` between steps (`ModelCache.preload`): on GPU ``gpu`` through that
        GPU's cache and ledger, evicting only the idle models in ``evict``; or into host
        memory (``side="cpu"``). None when there is nothing to do, no such GPU, or no room."""
        if side == "cpu":
            return self._models.preload(handle, "cpu")
        if not self._detected:
            self._detect()
        if type(gpu) is not int or not 0 <= gpu < len(self._lanes):
            return None
        lane = self._lanes[gpu]
        return lane.models.preload(handle, lane.config.device, evict)

    def close(self) -> None:
        """Free every resident model (instances and idle weights), on every GPU."""
        for cache in self.caches:
            cache.clear()
        for lane in self._lanes:
            close = getattr(lane.ledger, "close", None)  # a machine-wide ledger leaves
            if close is not None:
                close()

    def device_state(self) -> DeviceState:
        """Telemetry, read at most every ``telemetry_ttl_s`` (NVML calls cost per step);
        the resident models as they are now."""
        now = self._clock()
        cached = self._state_cache
        if cached is None or (self.gpu is not None and now - cached[0] >= self.telemetry_ttl_s):
            cached = (now, self._read_state())
            self._state_cache = cached
        if len(self._lanes) > 1:
            return self._with_resident(cached[1])
        resident = self.models.resident()
        if not resident and not cached[1].resident:
            return cached[1]
        return dataclasses.replace(cached[1], resident=resident)

    def _with_resident(self, state: DeviceState) -> DeviceState:
        """Several GPUs: each device's weights and running calls now (`VramLedger.running`),
        and all the weights (then the host's) flat."""
        per_gpu = [tuple(w for w in lane.models.resident() if w.side == "gpu")
                   for lane in self._lanes]
        host = tuple(w for w in self._models.resident() if w.side == "cpu")
        gpus = tuple(_live(dataclasses.replace(d, resident=per_gpu[d.index]),
                           self._lanes[d.index].ledger) for d in state.gpus)
        return dataclasses.replace(state, resident=sum(per_gpu, ()) + host, gpus=gpus)

    def _read_state(self) -> DeviceState:
        if self.gpu is None:
            return DeviceState.cpu_only(self._no_gpu_reason or "no GPU")
        if len(self._lanes) > 1:
            states = [self._lane_state(lane) for lane in self._lanes]
            gpus = tuple(GpuDevice(lane.index, st.gpu_name, st.vram_budget_mb, st.vram_used_mb,
                                   st.gpu_utilization, speed=lane.config.speed)
                         for lane, st in zip(self._lanes, states, strict=True))
            reasons = [f"{lane.config.device}: {st.reason}"
                       for lane, st in zip(self._lanes, states, strict=True) if st.reason]
            return dataclasses.replace(states[0], gpus=gpus,
                                       reason="; ".join(reasons) or None)
        return self._lane_state(self._lanes[0])

    def _lane_state(self, lane: _Lane) -> DeviceState:
        """One GPU's telemetry: CUDA and NVML where there are, else what was declared."""
        gpu, index = lane.config, lane.index
        if gpu.device.startswith("cuda") and cuda_status(index)[0]:
            state = local_device_state(index, gpu.vram_budget_mb)
            # `vram_used_mb` is what else holds the GPU: the CUDA reading also counts this
            # process's resident weights, which `resident` lists (the twins add them back)
            held = lane.ledger.weights_mb
            return dataclasses.replace(state, vram_used_mb=max(0.0, state.vram_used_mb - held))
        return DeviceState(
            gpu_available=True,
            gpu_name=gpu.device,
            vram_budget_mb=gpu.vram_budget_mb,
            vram_used_mb=gpu.background_mb,
            gpu_utilization=0.0,
            cpu_cores=1,
        )

    def start_step(self, calls: Sequence[PlannedCall]) -> _LocalStep:
        if self._followers:
            self._follow_background()
        return _LocalStep(self, calls)

    def _follow_background(self) -> None:
        """Each GPU's background follows NVML's reading of other processes (at most every
        ``telemetry_ttl_s``), never below the declared ``background_mb``."""
        now = self._clock()
        if now < self._next_background:
            return
        self._next_background = now + self.telemetry_ttl_s
        for lane, follower in self._followers:
            others = follower.others_mb()
            if others is not None:
                lane.ledger.set_background(max(lane.config.background_mb, others))


class _LocalStep(BookedStep):
    def __init__(self, backend: LocalBackend, calls: Sequence[PlannedCall]) -> None:
        super().__init__(calls, backend.clock)
        self._b = backend
        self._gpus: dict[str, int] = {}
        if len(backend._lanes) > 1:  # the decision's GPU, else the default rule
            self._gpus = planned_gpus(calls, backend.device_state().devices)
        demote_off_gpu(calls, self._gpus, [lane.ledger for lane in backend._lanes])

    def _for_tool(self, placement: Placement) -> Placement:
        """The placement the tool's code sees: ``cpu`` under ``run_tools_on="cpu"``."""
        if self._b.run_tools_on == "cpu" and placement.on_gpu:
            return dataclasses.replace(placement, device="cpu")
        return placement

    def _lane(self, call: PlannedCall) -> _Lane | None:
        lanes = self._b._lanes
        return lanes[self._gpus.get(call.call_id, 0)] if lanes else None

    # -- placement -------------------------------------------------------------------------
    def _gpu_plan(self, call: PlannedCall, need: WeightsNeed | None) -> Placement | None:
        """A CPU placement when the GPU is out of the question, else None (try the GPU)."""
        if call.option == "cpu":
            model = call.spec.model_name(call.tool)  # warm: its host copy is resident
            warm = None if model is None else self._b.models.holds(model, "cpu")
            return Placement("cpu", "cpu", model=model, warm=warm)
        if self._b.ledger is None:
            return self._cpu_or_fail(call, "no_gpu", self._b._no_gpu_reason or "no GPU")
        lane = self._lane(call)
        assert lane is not None
        ledger = lane.ledger
        weights = need.mb if need is not None else 0.0
        if call.spec.vram_mb + weights > ledger.capacity_mb:
            return self._cpu_or_fail(
                call,
                "vram_over_budget",
                f"it needs {vram_needed(call.spec.vram_mb, weights)}, the budget allows "
                f"{ledger.capacity_mb:.0f} MB",
            )
        return None

    def _need(self, call: PlannedCall) -> WeightsNeed | None:
        spec = call.spec
        lane = self._lane(call)
        cache = self._b.models if lane is None else lane.models
        return cache.need(spec.model_name(call.tool), spec.weights_mb, spec.keep_warm)

    def _gpu_placement(self, call: PlannedCall, res: Reservation) -> Placement:
        lane = self._lane(call)
        assert lane is not None
        self._peak = max(self._peak, lane.ledger.in_use_mb)
        if res.evicted:
            lane.models.drop(res.evicted)
        warm = None if res.model is None else not res.loaded
        return Placement(call.option, lane.config.device, None, res.mb, res.model, warm,
                         res.evicted)

    def _place(
        self, call: PlannedCall, deadline: Deadline | None = None
    ) -> tuple[Placement, Reservation | None]:
        need = self._need(call)
        planned = self._gpu_plan(call, need)
        if planned is not None:
            return planned, None
        lane = self._lane(call)
        assert lane is not None
        ledger = lane.ledger
        spec = call.spec
        if call.option == "gpu_now":
            res = ledger.try_reserve(spec.vram_mb, spec.gpu_share, need)
            if res is None and ledger.at_cap:
                why = f"the GPU already runs its cap of {ledger.max_active} calls"
                return self._cpu_or_fail(call, "gpu_busy", why), None
            if res is None:
                why = f"{spec.vram_mb:.0f} MB of VRAM do not fit now ({ledger.free_mb:.0f} MB free)"
                return self._cpu_or_fail(call, "oom", why), None
            return self._gpu_placement(call, res), res
        wait, by_deadline = wait_bound(deadline, self._b.queue_timeout_s)
        try:
            res = ledger.reserve(spec.vram_mb, spec.gpu_share, wait, need)
        except (QueueTimeoutError, NeverFitsError) as exc:
            return self._queue_refused(call, exc, deadline if by_deadline else None), None
        return self._gpu_placement(call, res), res

    async def _aplace(
        self, call: PlannedCall, deadline: Deadline | None = None
    ) -> tuple[Placement, Reservation | None]:
        need = self._need(call)
        if call.option != "gpu_queued" or self._gpu_plan(call, need) is not None:
            return self._place(call, deadline)
        lane = self._lane(call)
        assert lane is not None
        ledger = lane.ledger
        wait, by_deadline = wait_bound(deadline, self._b.queue_timeout_s)
        try:
            res = await ledger.areserve(call.spec.vram_mb, call.spec.gpu_share, wait, need)
        except (QueueTimeoutError, NeverFitsError) as exc:
            return self._queue_refused(call, exc, deadline if by_deadline else None), None
        return self._gpu_placement(call, res), res

    def _oom_fallback(self, call: PlannedCall, exc: BaseException | None) -> Placement:
        _empty_cuda_cache()
        if not call.spec.cpu_allowed:
            if exc is not None:
                raise exc
            raise PlacementError(
                f"tool {call.tool!r} ran out of GPU memory and may not use the CPU", "oom"
            )
        return Placement(call.option, "cpu", "oom")

    def _record(
        self,
        call: PlannedCall,
        placement: Placement,
        start: float,
        peers: int,
        error: str | None = None,
        end: float | None = None,
        models: CallModels | None = None,
    ) -> None:
        now = self._clock() if end is None else end
        used = models or CallModels(placement.device)
        self._book.add(
            CallRecord(
                call_id=call.call_id,
                tool=call.tool,
                option=call.option,
                device=placement.device,
                fallback=placement.fallback,
                start_ms=(start - self._t0) * 1000.0,
                end_ms=(now - self._t0) * 1000.0,
                vram_reserved_mb=placement.vram_reserved_mb,
                gpu_peers=peers,
                error=error,
                model=used.model,
                load_ms=used.load_ms,
                loaded=used.loaded,
                evicted=used.evicted,
            )
        )

    def _peers(self, placement: Placement) -> int:
        if not placement.on_gpu:
            return 0
        index = gpu_index(placement.device)
        lanes = self._b._lanes
        if index is None or index >= len(lanes):
            return 0
        return max(0, lanes[index].ledger.active - 1)

    def _held(self, call: PlannedCall, res: Reservation | None) -> _Held:
        return _Held(self._b, res)

    # -- running ---------------------------------------------------------------------------
    def _end(self, call: PlannedCall, run: _Run) -> None:
        end = self._clock()  # the call ended before its VRAM went back
        run.held.release_all()
        for used in run.models:
            self._b.cache_for(used.device).finish(used)
        self._record(call, run.placement, run.start, run.peers, run.error, end,
                     _merged(run.models))

    @contextlib.contextmanager
    def _models(self, call: PlannedCall, run: _Run) -> Iterator[None]:
        """`ResidentModel.get` answers from the backend's cache while the call runs here."""
        p = run.placement
        device = self._for_tool(p).device  # run_tools_on="cpu": the host's models
        with self._b.cache_for(device).scope(device, p.model or call.spec.model_name(call.tool),
                                  p.evicted, cold=p.warm is False, until_finish=True) as used:
            run.models.append(used)
            yield

    def run_sync(self, call_id: str, run: RunOnce[T], deadline: Deadline | None = None) -> T:
        call = self._start(call_id)
        try:
            placement, res = self._place(call, deadline)
        except BaseException as err:
            self._unplaced(call, err)
            raise
        state = _Run(placement, self._held(call, res), self._clock(), self._peers(placement))
        lease = Lease()
        try:
            state.held.take_cpu_slot(placement, deadline)
            lease.holding = state.held.holding
            with leased(lease):
                try:
                    with self._models(call, state):
                        result, oom = run(self._for_tool(placement))
                    if not (oom and placement.on_gpu):
                        return result
                    exc: BaseException | None = None
                except Exception as raised:
                    if not (placement.on_gpu and is_gpu_oom(raised)):
                        raise
                    exc = raised
                state.held.release_gpu()
                state.placement = placement = self._oom_fallback(call, exc)
                state.held.take_cpu_slot(placement, deadline)  # every CPU run takes a slot
                lease.holding = state.held.holding
                with self._models(call, state):
                    result, _ = run(placement)
                return result
        except BaseException as failed:
            state.error = describe_failure(failed)
            raise
        finally:
            lease.end(lambda: self._end(call, state))

    async def run_async(
        self, call_id: str, run: ARunOnce[T], deadline: Deadline | None = None
    ) -> T:
        call = self._start(call_id)
        try:
            placement, res = await self._aplace(call, deadline)
        except BaseException as err:  # cancelled while queued for the GPU included
            self._unplaced(call, err)
            raise
        state = _Run(placement, self._held(call, res), self._clock(), self._peers(placement))
        lease = Lease()
        try:
            await state.held.atake_cpu_slot(placement, deadline)
            lease.holding = state.held.holding
            with leased(lease):
                try:
                    with self._models(call, state):
                        result, oom = await run(self._for_tool(placement))
                    if not (oom and placement.on_gpu):
                        return result
                    exc: BaseException | None = None
                except Exception as raised:
                    if not (placement.on_gpu and is_gpu_oom(raised)):
                        raise
                    exc = raised
                state.held.release_gpu()
                state.placement = placement = self._oom_fallback(call, exc)
                await state.held.atake_cpu_slot(placement, deadline)  # every CPU run takes a slot
                lease.holding = state.held.holding
                with self._models(call, state):
                    result, _ = await run(placement)
                return result
        except BaseException as failed:
            state.error = describe_failure(failed)
            raise
        finally:
            lease.end(lambda: self._end(call, state))


def _live(device: GpuDevice, ledger: VramLedger) -> GpuDevice:
    """``device`` with what runs on it now (`VramLedger.running`)."""
    working, active, cap = ledger.running()
    return dataclasses.replace(device, working_mb=working, active=active, max_active=cap)


@dataclass
class _Run:
    """One call's run so far: where it runs, what it holds, when it started."""

    placement: Placement
    held: _Held
    start: float
    peers: int
    error: str | None = None
    models: list[CallModels] = dataclasses.field(default_factory=list)
    """What each run (a GPU run, then its CPU rerun) did with resident models."""


def _merged(runs: list[CallModels]) -> CallModels | None:
    """One call's resident-model record over its runs: loads add up, evictions too."""
    if not runs:
        return None
    last = runs[-1]
    return CallModels(
        last.device, next((r.model for r in runs if r.model), None),
        loaded=any(r.loaded for r in runs), load_ms=sum(r.load_ms for r in runs),
        evicted=tuple(m for r in runs for m in r.evicted),
    )


class _Held:
    """A call's GPU reservation and CPU slot, each given back once, the reservation to the
    ledger that granted it (its GPU's), never one looked up again at release."""

    def __init__(self, backend: LocalBackend, gpu: Reservation | None) -> None:
        self._b = backend
        self._gpu = gpu
        self._cpu: Reservation | None = None

    @property
    def holding(self) -> bool:
        return self._gpu is not None or self._cpu is not None

    def take_cpu_slot(self, placement: Placement, deadline: Deadline | None) -> None:
        slots = self._b.cpu_slots
        if slots is not None and not placement.on_gpu and self._cpu is None:
            try:
                self._cpu = slots.reserve(1, timeout=wait_bound(deadline, None)[0])
            except QueueTimeoutError:
                assert deadline is not None
                raise deadline.error() from None

    async def atake_cpu_slot(self, placement: Placement, deadline: Deadline | None) -> None:
        slots = self._b.cpu_slots
        if slots is not None and not placement.on_gpu and self._cpu is None:
            try:
                self._cpu = await slots.areserve(1, timeout=wait_bound(deadline, None)[0])
            except QueueTimeoutError:
                assert deadline is not None
                raise deadline.error() from None

    def release_gpu(self) -> None:
        if self._gpu is not None:
            self._gpu.release()
        self._gpu = None

    def release_all(self) -> None:
        self.release_gpu()
        if self._cpu is not None:
            self._cpu.release()
        self._cpu = None
