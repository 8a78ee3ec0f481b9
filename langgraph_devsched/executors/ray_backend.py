"""A Ray cluster: every scheduled call runs as a Ray task, with one machine's semantics.

* ``cpu``: a task with ``num_cpus=cpus_per_call``, wherever Ray puts it.
* ``gpu_now``: reserves a GPU *now* in the backend's per-GPU ledgers (one `VramLedger` per GPU
  of each node, budget = the node's ``VRAM_MB`` over its GPUs); if nothing fits, the call
  falls back to the CPU (``oom``), as on one machine. With ``shared=True`` Ray's per-node view
  of free resources must also cover it (other drivers use the GPUs too).
* ``gpu_queued``: waits in FIFO order for such a reservation (``queue_timeout_s`` → CPU).
* A GPU task asks Ray for ``resources={VRAM_MB: vram_mb}``, pinned to the reserved GPU's
  node, and runs on the GPU the ledger booked (`task_gpu`): on a node with one GPU it asks
  for ``num_gpus=gpu_share`` (fractional where tools share a GPU; Ray's one choice is that
  GPU); on a node with several it holds no Ray GPU and is told ``cuda:<k>``.
* A tool raising ``torch.cuda.OutOfMemoryError`` is rerun on the CPU (``oom``); hints that
  forbid the CPU give a `PlacementError` (an error `ToolMessage`), as on one machine.
* A task lost to a crashed worker is retried by Ray (``max_retries``); a call still lost
  (e.g. its node died) is placed again up to ``lost_call_retries`` times, then answered with
  an error `ToolMessage`. Reservations are released on every path; each call gets one answer.

Records carry where a call ran: ``device`` is ``"<node ip>/cuda:<id>"`` on a GPU, and
``node``/``gpu_type`` name the node and Ray's accelerator type.

A GPU call on a resident model (its ``model`` hint) goes, with ``model_actors`` (default),
to the long-lived actor of the GPU slot the decision named (``Decision.gpus`` over the
slots, else `langgraph_devsched.gpus.default_gpus`), which holds that GPU's models
(`executors.ray_actor`): its second call there is warm. The slot's ledger evicts idle
models LRU and the actor frees them; a dead actor's call is placed again (a new actor,
cold) or answered with an error; `close` kills the actors and empties the ledgers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from langgraph_devsched.device import Placement
from langgraph_devsched.executors.base import (
    ARunOnce,
    BookedStep,
    Deadline,
    PlacementError,
    PlannedCall,
    RunOnce,
    demote_off_gpu,
    planned_gpus,
    vram_needed,
    wait_bound,
)
from langgraph_devsched.executors.lease import Lease, leased
from langgraph_devsched.executors.local import is_gpu_oom
from langgraph_devsched.executors.ray_actor import ActorAnswer, HostRef, SlotHosts
from langgraph_devsched.executors.ray_cluster import (
    NodeView,
    cluster_device_state,
    read_cluster,
    require_ray,
)
from langgraph_devsched.executors.ray_ledger import NAMESPACE, SlotLedgerClient
from langgraph_devsched.executors.ray_task import Where, portable_config, remote_invoke
from langgraph_devsched.executors.ray_tool import RemoteTool
from langgraph_devsched.ledger import (
    NeverFitsError,
    QueueTimeoutError,
    Reservation,
    VramLedger,
    WeightsNeed,
)
from langgraph_devsched.models import MAX_MODELS
from langgraph_devsched.records import CallRecord
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.telemetry import DeviceState, GpuDevice

T = TypeVar("T")

def task_gpu(node_gpus: int) -> bool:
    """Whether a GPU task on a node with ``node_gpus`` GPUs asks Ray for its GPU share.

    Ray cannot be asked for GPU *k* of a node: a (fractional) ``num_gpus`` request lands on
    whichever GPU Ray picks, and Ray then narrows the task's ``CUDA_VISIBLE_DEVICES`` to that
    GPU, so on a node with several GPUs the call could run on another GPU than the one its
    ledger booked (and than the decision named). Worse, a reused worker's CUDA context keeps
    the devices it saw first. So there the task holds no Ray GPU: a process holding none
    keeps the node's ``CUDA_VISIBLE_DEVICES`` (Ray 2.x does not override it for zero GPUs
    unless ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO`` is set), in every worker alike, and the
    tool is told ``cuda:<k>``, the node's GPU *k* the ledger booked, as a GPU slot's actor
    is. Ray's ``GPU`` resource then does not count the call (the ledger admits it, and Ray's
    ``VRAM_MB`` still counts its memory). On a node with one GPU Ray's only choice is the
    booked one: the task asks for ``num_gpus=gpu_share`` as before and is told ``cuda:0``.

    >>> task_gpu(1), task_gpu(2)
    (True, False)
    """
    return node_gpus <= 1


NODE_LOSS_ERRORS = ("TaskUnschedulableError", "NodeDiedError", "LocalRayletDiedError",
                    "ActorUnschedulableError")
"""Ray errors that mean a GPU call's pinned node is gone: place it elsewhere."""


class RemoteCallLost(PlacementError):
    """A call's Ray task was lost (worker crash after Ray's retries, node death, ...)."""


@dataclass(eq=False)
class GpuSlot:
    """One GPU of one node, as the backend's ledger accounts for it."""

    node_id: str
    ip: str
    index: int
    gpu_type: str | None
    ledger: VramLedger
    alive: bool = True

    @property
    def key(self) -> tuple[str, int]:
        return (self.node_id, self.index)


class RayBackend:
    """Run calls as Ray tasks on a cluster (or a local Ray instance).

    Connects with ``ray.init(address=address, **init_kwargs)`` on first use unless Ray is
    already initialised (call ``ray.init`` yourself to control it). ``model_actors`` sends
    the GPU calls of resident-model tools to one actor per GPU slot (created lazily, at most
    ``actor_concurrency`` calls at once each, at most ``max_models`` instances each), which
    keeps their models warm; ``close`` kills the actors. ``cluster_slots`` shares one ledger
    and one model actor per GPU slot with every driver of the cluster (named, detached
    actors in ``namespace``; a dead driver's reservations are reclaimed; ``close`` lets them
    run: `executors.ray_ledger`).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        vram_resource: str = "VRAM_MB",
        cpus_per_call: float = 1.0,
        cpus_per_gpu_call: float = 0.0,
        max_retries: int = 3,
        lost_call_retries: int = 1,
        queue_timeout_s: float | None = None,
        shared: bool = False,
        model_actors: bool = True,
        actor_concurrency: int = 16,
        max_models: int = MAX_MODELS,
        cluster_slots: bool = False,
        namespace: str = NAMESPACE,
        init_kwargs: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        require_ray()
        for label, value in (
            ("max_retries", max_retries),
            ("lost_call_retries", lost_call_retries),
        ):
            if value < 0:
                raise ValueError(f"{label} must be >= 0, got {value}")
        if cpus_per_call <= 0:
            raise ValueError(f"cpus_per_call must be > 0, got {cpus_per_call}")
        if cpus_per_gpu_call < 0:
            raise ValueError(f"cpus_per_gpu_call must be >= 0, got {cpus_per_gpu_call}")
        self.address = address
        self.vram_resource = vram_resource
        self.cpus_per_call = cpus_per_call
        self.cpus_per_gpu_call = cpus_per_gpu_call
        self.max_retries = max_retries
        self.lost_call_retries = lost_call_retries
        self.queue_timeout_s = queue_timeout_s
        self.shared = shared
        self.model_actors = model_actors
        if cluster_slots and not namespace:
            raise ValueError("namespace must be a non-empty Ray namespace with cluster_slots, "
                             f"got {namespace!r}")
        self.cluster_slots = cluster_slots
        """One ledger and one model actor per GPU slot for every driver of the cluster
        (named, detached actors in ``namespace``: `executors.ray_ledger`)."""
        self.namespace = namespace
        self.hosts = SlotHosts(actor_concurrency, max_models,
                               namespace if cluster_slots else None)
        """The GPU slots' actors (``model_actors``)."""
        self._init_kwargs = dict(init_kwargs or {})
        self._clock = clock
        self._slots: dict[tuple[str, int], GpuSlot] = {}
        self._nodes: dict[str, NodeView] = {}
        self._lock = threading.Lock()

    # -- cluster view ----------------------------------------------------------------------
    def _connect(self) -> Any:
        ray = require_ray()
        if not ray.is_initialized():
            ray.init(address=self.address, **self._init_kwargs)
        return ray

    def refresh(self) -> list[NodeView]:
        """Re-read the cluster; add ledgers for new GPUs, retire those of dead nodes."""
        self._connect()
        nodes = read_cluster()
        with self._lock:
            self._nodes = {n.node_id: n for n in nodes}
            for node in nodes:
                for i in range(node.gpus):
                    slot = self._slots.get((node.node_id, i))
                    if slot is None and node.alive:
                        ledger = self._ledger(node, i)
                        slot = GpuSlot(node.node_id, node.ip, i, node.gpu_type, ledger)
                        self._slots[slot.key] = slot
                    if slot is not None:
                        slot.alive = node.alive
            for slot in self._slots.values():
                if slot.node_id not in self._nodes:
                    slot.alive = False
        self._sync_shared()
        return nodes

    def _ledger(self, node: NodeView, index: int) -> VramLedger:
        budget = node.vram_per_gpu_mb(self.vram_resource)
        if self.cluster_slots:
            return SlotLedgerClient(node.node_id, index, budget, self.namespace)
        return VramLedger(budget)

    def _sync_shared(self) -> None:
        """Re-read the shared slot ledgers (what every driver holds there)."""
        for slot in self.slots():
            if isinstance(slot.ledger, SlotLedgerClient):
                slot.ledger.sync()

    def slots(self) -> list[GpuSlot]:
        """The GPUs calls may be placed on (alive nodes), in a stable order."""
        with self._lock:
            return sorted((s for s in self._slots.values() if s.alive), key=lambda s: s.key)

    def node(self, node_id: str) -> NodeView | None:
        return self._nodes.get(node_id)

    def device_state(self) -> DeviceState:
        """The cluster from Ray's view; with ``model_actors``, each GPU slot's resident
        models (its ledger), and, with several slots, one `GpuDevice` per slot (index: the
        slot's place in `slots`), so a scheduler can name the GPU."""
        state = cluster_device_state(self.refresh(), self.vram_resource)
        slots = self.slots()
        if not state.gpu_available or not slots or not self.model_actors:
            return state
        gpus = slot_devices(slots)
        flat: tuple[WarmModel, ...] = sum((d.resident for d in gpus), ())
        if len(slots) == 1:
            return dataclasses.replace(state, resident=flat)
        return dataclasses.replace(state, resident=flat, gpus=gpus)

    def close(self) -> None:
        """Kill the GPU slots' actors (their models go with them) and drop every idle
        model's weights from the ledgers; weights a running call uses go when it ends."""
        self.hosts.close()
        if self.cluster_slots:  # shared: other drivers use them (`close_cluster_slots`)
            return
        with self._lock:
            slots = list(self._slots.values())
        for slot in slots:
            slot.ledger.clear_weights()

    def start_step(self, calls: Sequence[PlannedCall]) -> _RayStep:
        self.refresh()
        return _RayStep(self, calls)


def slot_devices(slots: Sequence[GpuSlot]) -> tuple[GpuDevice, ...]:
    """The GPU slots as a scheduler sees them: index = place in ``slots``, the budget and
    resident models of each slot's ledger."""
    return tuple(
        GpuDevice(i, f"{slot.ip}/cuda:{slot.index}"
                  + (f" ({slot.gpu_type})" if slot.gpu_type else ""),
                  slot.ledger.capacity_mb, 0.0, 0.0, slot.ledger.resident())
        for i, slot in enumerate(slots))


class _Dispatch:
    """Submits one placed call as a Ray task (or to its GPU slot's actor) and waits for
    its answer."""

    def __init__(self, step: _RayStep, call: PlannedCall, placement: Placement) -> None:
        self._step = step
        self._call = call
        self._placement = placement

    def _submit(self, tool: BaseTool, tool_input: Any, config: RunnableConfig, aio: bool) -> Any:
        try:
            if self._placement.on_gpu and self._step.on_actor(self._call):
                host = self._step.host_for(self._call)
                return host.handle.run.remote(
                    tool, tool_input, portable_config(config), self._placement, aio)
            options = self._step.task_options(self._call, self._placement)
            return (
                remote_invoke()
                .options(**options)
                .remote(tool, tool_input, portable_config(config), self._placement, aio)
            )
        except Exception as exc:
            raise PlacementError(
                f"tool {self._call.tool!r} cannot be sent to Ray ({type(exc).__name__}: {exc}); "
                "the tool and its arguments (injected state, store and runtime included) must "
                "be picklable"
            ) from exc

    def _answer(self, answer: tuple[bool, Any, Where] | ActorAnswer) -> Any:
        if isinstance(answer, ActorAnswer):
            self._step.answers[self._call.call_id] = answer
            ok, value, where = answer.ok, answer.value, answer.where
        else:
            ok, value, where = answer
            slot = self._step.slot_of(self._call) if self._placement.on_gpu else None
            if slot is not None and not where.gpu_ids:  # a task holding no Ray GPU: the
                where = Where(where.node_id, where.node_ip, (str(slot.index),))  # booked one
        self._step.where[self._call.call_id] = where
        if ok:
            return value
        if is_gpu_oom(value):
            self._step.oom.add(self._call.call_id)
        raise value

    def _lost(self, exc: BaseException) -> RemoteCallLost:
        why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
        self._step.host_lost(self._call)
        self._step.lost[self._call.call_id] = why
        return RemoteCallLost(
            f"tool {self._call.tool!r} was lost on the Ray cluster ({why}) after "
            f"{self._step.backend.max_retries} retries"
        )

    def run(self, tool: BaseTool, tool_input: Any, config: RunnableConfig) -> Any:
        ray = require_ray()
        ref = self._submit(tool, tool_input, config, aio=False)
        try:
            answer = ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise self._lost(exc) from exc
        return self._answer(answer)

    async def arun(self, tool: BaseTool, tool_input: Any, config: RunnableConfig) -> Any:
        ray = require_ray()
        ref = self._submit(tool, tool_input, config, aio=True)
        try:
            answer = await ref
        except ray.exceptions.RayError as exc:
            raise self._lost(exc) from exc
        except BaseException:
            with contextlib.suppress(Exception):  # an actor's running call: not interruptible
                ray.cancel(ref)
            raise
        return self._answer(answer)


@dataclass
class _RayRun:
    """One call's run so far: where it runs, the GPU slot it holds, when it started."""

    placement: Placement
    held: tuple[GpuSlot, Reservation] | None
    start: float
    peers: int


class _RayStep(BookedStep):
    def __init__(self, backend: RayBackend, calls: Sequence[PlannedCall]) -> None:
        super().__init__(calls, backend._clock)
        self.backend = backend
        self._slot_of: dict[str, GpuSlot] = {}
        self.where: dict[str, Where] = {}
        self.oom: set[str] = set()
        self.lost: dict[str, str] = {}
        self._avoid: dict[str, set[str]] = {}
        """Per call, nodes not to place it on again (its task was lost with the node)."""
        self.answers: dict[str, ActorAnswer] = {}
        """Per call sent to a GPU slot's actor, what that actor answered."""
        self._host_of: dict[str, HostRef] = {}
        self._order = backend.slots()
        self._gpus: dict[str, int] = {}
        if backend.model_actors and len(self._order) > 1:  # the decision's GPU, else the rule
            self._gpus = planned_gpus(calls, slot_devices(self._order))
        if backend.model_actors:
            demote_off_gpu(calls, self._gpus, [slot.ledger for slot in self._order])

    def slot_of(self, call: PlannedCall) -> GpuSlot | None:
        """The GPU slot whose ledger booked ``call`` (None: not on a GPU)."""
        return self._slot_of.get(call.call_id)

    # -- resident models: the GPU slot's actor ----------------------------------------------
    def on_actor(self, call: PlannedCall) -> bool:
        """A call on a resident model runs, on a GPU, in its slot's actor."""
        return self.backend.model_actors and call.spec.model_name(call.tool) is not None

    def host_for(self, call: PlannedCall) -> HostRef:
        slot = self._slot_of[call.call_id]
        host = self.backend.hosts.get(slot.node_id, slot.index)
        self._host_of[call.call_id] = host
        return host

    def host_lost(self, call: PlannedCall) -> None:
        """The call's actor died (or its node): a new actor takes the slot, the models the
        dead one held leave the ledger (those in use when their calls end: `_settle`)."""
        host, slot = self._host_of.get(call.call_id), self._slot_of.get(call.call_id)
        if host is not None and slot is not None and self.backend.hosts.forget(
                slot.node_id, slot.index, host.generation):
            slot.ledger.clear_weights()

    def _settle(self, call: PlannedCall) -> None:
        """After an actor call's reservation went back: weights no actor holds leave the
        ledger (its actor died or was closed, or the tool's load failed); a declared model
        the tool never asked the cache for is loaded its own way and kept (as locally)."""
        host = self._host_of.pop(call.call_id, None)
        slot = self._slot_of.get(call.call_id)
        model = call.spec.model_name(call.tool)
        if host is None or slot is None or model is None:
            return
        if not self.backend.hosts.current(slot.node_id, slot.index, host.generation):
            slot.ledger.evict(model)
            return
        answer = self.answers.get(call.call_id)
        if answer is None or answer.holds or not slot.ledger.is_resident(model):
            return
        if answer.asked:
            slot.ledger.evict(model)
        else:
            slot.ledger.keep(model)

    # -- the node's hook: run the tool inside a Ray task ------------------------------------
    def remote_tool(self, call_id: str, tool: BaseTool, placement: Placement) -> BaseTool:
        return RemoteTool.wrap(tool, _Dispatch(self, self._calls[call_id], placement))

    def task_options(self, call: PlannedCall, placement: Placement) -> dict[str, Any]:
        b = self.backend
        options: dict[str, Any] = {"max_retries": b.max_retries, "retry_exceptions": False}
        if not placement.on_gpu:
            options["num_cpus"] = b.cpus_per_call
            return options
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        slot = self._slot_of[call.call_id]
        options["num_cpus"] = b.cpus_per_gpu_call
        node = b.node(slot.node_id)
        if task_gpu(node.gpus if node is not None else 2):  # unknown node: no Ray GPU
            options["num_gpus"] = max(0.0001, round(call.spec.gpu_share, 4))
        if call.spec.vram_mb > 0:
            options["resources"] = {b.vram_resource: math.ceil(call.spec.vram_mb)}
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(slot.node_id, soft=False)
        return options

    # -- placement (the local backend's rules over per-GPU ledgers) ---------------------------
    def _candidates(self, call: PlannedCall) -> list[GpuSlot] | Placement:
        if call.option == "cpu":
            return Placement("cpu", "cpu")
        avoid = self._avoid.get(call.call_id, set())
        slots = [s for s in self.backend.slots() if s.node_id not in avoid]
        index = self._gpus.get(call.call_id)
        named = self._order[index] if index is not None and index < len(self._order) else None
        if not slots:
            why = "the Ray cluster has no alive GPU node"
            if avoid:
                why += " other than the one its task was lost with"
            return self._cpu_or_fail(call, "no_gpu", why)
        need = self._weights(call)
        weights = need.mb if need is not None else 0.0
        big = [s for s in slots if call.spec.vram_mb + weights <= s.ledger.capacity_mb + 1e-9]
        if named is not None and named in big:
            return [named]  # an actor call: the GPU the decision (or the default rule) named
        if not big:
            most = max(s.ledger.capacity_mb for s in slots)
            return self._cpu_or_fail(
                call,
                "vram_over_budget",
                f"it needs {vram_needed(call.spec.vram_mb, weights)}, the largest GPU in the "
                f"cluster has {most:.0f} MB ({self.backend.vram_resource})",
            )
        return sorted(big, key=lambda s: (-s.ledger.free_mb, s.key))

    def _weights(self, call: PlannedCall) -> WeightsNeed | None:
        """A call's model weights on a Ray GPU. In a slot's actor (``model_actors``) they
        are the actor's cache entry: evicted LRU as on one machine (unless ``keep_warm``).
        In a task they live in Ray worker processes, which the node cannot make free them:
        reserved on that GPU's ledger the first time a call of the model lands there and
        kept (``keep_warm``), never evicted for another model."""
        model = call.spec.model_name(call.tool)
        if model is None:
            return None
        keep = call.spec.keep_warm if self.on_actor(call) else True
        return WeightsNeed(model, call.spec.weights_mb, keep_warm=keep)

    def _free_in_ray(self, slot: GpuSlot, call: PlannedCall) -> bool:
        """With ``shared``: Ray's view of the node also has room (other drivers' use)."""
        if not self.backend.shared:
            return True
        node = self.backend.node(slot.node_id)
        if node is None or node.available is None:
            return True
        vram, gpu = node.free(self.backend.vram_resource), node.free("GPU")
        return (vram or 0.0) + 1e-9 >= call.spec.vram_mb and (gpu or 0.0) + 1e-9 >= min(
            call.spec.gpu_share, 1.0
        )

    def _granted(self, call: PlannedCall, slot: GpuSlot, res: Reservation) -> Placement:
        self._slot_of[call.call_id] = slot
        in_use = sum(s.ledger.in_use_mb for s in self.backend.slots())
        self._peak = max(self._peak, in_use)
        warm = None if res.model is None else not res.loaded
        # an actor, or a task holding no Ray GPU, sees its node's GPUs: its own is
        # cuda:<index>; a task given the one GPU of its node sees only it, cuda:0 (`task_gpu`)
        evicted = res.evicted if self.on_actor(call) else ()  # the actor frees them
        return Placement(call.option, f"cuda:{slot.index}", None, res.mb, res.model, warm,
                         evicted)

    def _now(
        self, call: PlannedCall, slots: list[GpuSlot]
    ) -> tuple[Placement, tuple[GpuSlot, Reservation] | None]:
        for slot in slots:
            if not self._free_in_ray(slot, call):
                continue
            res = slot.ledger.try_reserve(call.spec.vram_mb, call.spec.gpu_share,
                                          self._weights(call))
            if res is not None:
                return self._granted(call, slot, res), (slot, res)
        free = max(s.ledger.free_mb for s in slots)
        why = f"{call.spec.vram_mb:.0f} MB of VRAM do not fit now (at most {free:.0f} MB free)"
        return self._cpu_or_fail(call, "oom", why), None

    def _queue_slot(self, call: PlannedCall, slots: list[GpuSlot]) -> GpuSlot:
        for slot in slots:
            if slot.ledger.queued == 0 and slot.ledger.admissible(
                call.spec.vram_mb, call.spec.gpu_share, self._weights(call)
            ):
                return slot
        return min(slots, key=lambda s: (s.ledger.queued, s.ledger.active, s.key))

    def _place(
        self, call: PlannedCall, deadline: Deadline | None = None
    ) -> tuple[Placement, tuple[GpuSlot, Reservation] | None]:
        slots = self._candidates(call)
        if isinstance(slots, Placement):
            return slots, None
        if call.option == "gpu_now":
            return self._now(call, slots)
        slot = self._queue_slot(call, slots)
        wait, by_deadline = wait_bound(deadline, self.backend.queue_timeout_s)
        try:
            res = slot.ledger.reserve(
                call.spec.vram_mb, call.spec.gpu_share, wait, self._weights(call),
            )
        except (QueueTimeoutError, NeverFitsError) as exc:
            return self._queue_refused(call, exc, deadline if by_deadline else None), None
        return self._granted(call, slot, res), (slot, res)

    async def _aplace(
        self, call: PlannedCall, deadline: Deadline | None = None
    ) -> tuple[Placement, tuple[GpuSlot, Reservation] | None]:
        slots = self._candidates(call)
        if isinstance(slots, Placement) or call.option != "gpu_queued":
            return self._place(call, deadline)
        slot = self._queue_slot(call, slots)
        wait, by_deadline = wait_bound(deadline, self.backend.queue_timeout_s)
        try:
            res = await slot.ledger.areserve(
                call.spec.vram_mb, call.spec.gpu_share, wait, self._weights(call),
            )
        except (QueueTimeoutError, NeverFitsError) as exc:
            return self._queue_refused(call, exc, deadline if by_deadline else None), None
        return self._granted(call, slot, res), (slot, res)

    @staticmethod
    def _release(held: tuple[GpuSlot, Reservation] | None) -> None:
        if held is not None:
            held[1].release()  # to the ledger that granted it

    # -- after an attempt: done, CPU after OOM, or placed again after a lost task -------------
    def _retry_lost(self, call: PlannedCall, attempt: int) -> bool:
        if call.call_id not in self.lost or attempt >= self.backend.lost_call_retries:
            return False
        why = self.lost.pop(call.call_id)
        self.where.pop(call.call_id, None)
        self.backend.refresh()
        slot = self._slot_of.get(call.call_id)
        if slot is not None and (why.startswith(NODE_LOSS_ERRORS) or not slot.alive):
            # Ray's node list may still show the node alive for a while after it died
            self._avoid.setdefault(call.call_id, set()).add(slot.node_id)
        return True

    def _after_oom(self, call: PlannedCall, exc: BaseException | None) -> Placement:
        self.oom.discard(call.call_id)
        if not call.spec.cpu_allowed:
            if exc is not None:
                raise exc
            raise PlacementError(
                f"tool {call.tool!r} ran out of GPU memory and may not use the CPU", "oom"
            )
        return Placement(call.option, "cpu", "oom")

    def _record(self, call: PlannedCall, placement: Placement, start: float, peers: int) -> None:
        where = self.where.get(call.call_id)
        slot = self._slot_of.get(call.call_id) if placement.on_gpu else None
        lost = self.lost.get(call.call_id)
        node = where.node_ip if where is not None and where.node_ip else None
        answer = self.answers.get(call.call_id)
        model = call.spec.model_name(call.tool)
        loaded, load_ms, evicted = placement.warm is False, 0.0, placement.evicted
        if answer is not None:  # what the GPU slot's actor's cache did
            loaded, load_ms, evicted = answer.loaded, answer.load_ms, answer.evicted
            model = answer.model or model
        self._book.add(
            CallRecord(
                call_id=call.call_id,
                tool=call.tool,
                option=call.option,
                device=where.device(placement.on_gpu) if where is not None else placement.device,
                fallback=placement.fallback,
                start_ms=(start - self._t0) * 1000.0,
                end_ms=(self._clock() - self._t0) * 1000.0,
                vram_reserved_mb=placement.vram_reserved_mb,
                gpu_peers=peers,
                error=f"lost: {lost}" if lost else None,
                node=node or (slot.ip if slot is not None else None),
                gpu_type=slot.gpu_type if slot is not None else None,
                model=model,
                loaded=loaded,
                load_ms=load_ms,
                evicted=evicted,
            )
        )

    @staticmethod
    def _peers(held: tuple[GpuSlot, Reservation] | None) -> int:
        return max(0, held[0].ledger.active - 1) if held is not None else 0

    def _end(self, call: PlannedCall, run: _RayRun) -> None:
        self._release(run.held)
        run.held = None
        self._settle(call)
        self._record(call, run.placement, run.start, run.peers)

    def run_sync(self, call_id: str, run: RunOnce[T], deadline: Deadline | None = None) -> T:
        call = self._start(call_id)
        try:
            placement, held = self._place(call, deadline)
        except BaseException as err:
            self._unplaced(call, err)
            raise
        state = _RayRun(placement, held, self._clock(), self._peers(held))
        lease = Lease()
        try:
            for attempt in itertools.count():
                exc: BaseException | None = None
                try:
                    lease.holding = state.held is not None
                    with leased(lease):
                        result, oom = run(state.placement)
                except Exception as raised:
                    exc, oom = raised, False
                if lease.outlived:  # its thread still waits on the task: keep what it holds
                    raise exc if exc is not None else AssertionError("outlived without error")
                self._release(state.held)
                state.held = None
                self._settle(call)
                if self._retry_lost(call, attempt):
                    state.placement, state.held = self._place(call, deadline)
                    state.peers = max(state.peers, self._peers(state.held))
                    continue
                oom = oom or call_id in self.oom or (exc is not None and is_gpu_oom(exc))
                if state.placement.on_gpu and oom and call_id not in self.lost:
                    state.placement = self._after_oom(call, exc)
                    continue
                if exc is not None:
                    raise exc
                return result
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            lease.end(lambda: self._end(call, state))

    async def run_async(
        self, call_id: str, run: ARunOnce[T], deadline: Deadline | None = None
    ) -> T:
        call = self._start(call_id)
        try:
            placement, held = await self._aplace(call, deadline)
        except BaseException as err:  # cancelled while queued included
            self._unplaced(call, err)
            raise
        state = _RayRun(placement, held, self._clock(), self._peers(held))
        lease = Lease()
        try:
            for attempt in itertools.count():
                exc: BaseException | None = None
                try:
                    lease.holding = state.held is not None
                    with leased(lease):
                        result, oom = await run(state.placement)
                except Exception as raised:
                    exc, oom = raised, False
                if lease.outlived:  # its thread still waits on the task: keep what it holds
                    raise exc if exc is not None else AssertionError("outlived without error")
                self._release(state.held)
                state.held = None
                self._settle(call)
                if self._retry_lost(call, attempt):
                    state.placement, state.held = await self._aplace(call, deadline)
                    state.peers = max(state.peers, self._peers(state.held))
                    continue
                oom = oom or call_id in self.oom or (exc is not None and is_gpu_oom(exc))
                if state.placement.on_gpu and oom and call_id not in self.lost:
                    state.placement = self._after_oom(call, exc)
                    continue
                if exc is not None:
                    raise exc
                return result
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            lease.end(lambda: self._end(call, state))


