"""A Ray cluster: every scheduled call runs as a Ray task, with one machine's semantics.

* ``cpu``: a task with ``num_cpus=cpus_per_call``, wherever Ray puts it.
* ``gpu_now``: reserves a GPU *now* in the backend's per-GPU ledgers (one `VramLedger` per GPU
  of each node, budget = the node's ``VRAM_MB`` over its GPUs); if nothing fits, the call
  falls back to the CPU (``oom``), as on one machine. With ``shared=True`` Ray's per-node view
  of free resources must also cover it (other drivers use the GPUs too).
* ``gpu_queued``: waits in FIFO order for such a reservation (``queue_timeout_s`` → CPU).
* A GPU task asks Ray for ``num_gpus=gpu_share`` (fractional where tools share a GPU) and
  ``resources={VRAM_MB: vram_mb}``, pinned to the reserved GPU's node.
* A tool raising ``torch.cuda.OutOfMemoryError`` is rerun on the CPU (``oom``); hints that
  forbid the CPU give a `PlacementError` (an error `ToolMessage`), as on one machine.
* A task lost to a crashed worker is retried by Ray (``max_retries``); a call still lost
  (e.g. its node died) is placed again up to ``lost_call_retries`` times, then answered with
  an error `ToolMessage`. Reservations are released on every path; each call gets one answer.

Records carry where a call ran: ``device`` is ``"<node ip>/cuda:<id>"`` on a GPU, and
``node``/``gpu_type`` name the node and Ray's accelerator type.
"""

from __future__ import annotations

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
    vram_needed,
    wait_bound,
)
from langgraph_devsched.executors.lease import Lease, leased
from langgraph_devsched.executors.local import is_gpu_oom
from langgraph_devsched.executors.ray_cluster import (
    NodeView,
    cluster_device_state,
    read_cluster,
    require_ray,
)
from langgraph_devsched.executors.ray_task import Where, portable_config, remote_invoke
from langgraph_devsched.executors.ray_tool import RemoteTool
from langgraph_devsched.ledger import (
    NeverFitsError,
    QueueTimeoutError,
    Reservation,
    VramLedger,
    WeightsNeed,
)
from langgraph_devsched.records import CallRecord
from langgraph_devsched.telemetry import DeviceState

T = TypeVar("T")

GPU_DEVICE_IN_TASK = "cuda:0"
"""The device a GPU tool is told: Ray sets ``CUDA_VISIBLE_DEVICES`` to the GPU it assigned."""


NODE_LOSS_ERRORS = ("TaskUnschedulableError", "NodeDiedError", "LocalRayletDiedError")
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
    already initialised (call ``ray.init`` yourself to control it).
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
                        ledger = VramLedger(node.vram_per_gpu_mb(self.vram_resource))
                        slot = GpuSlot(node.node_id, node.ip, i, node.gpu_type, ledger)
                        self._slots[slot.key] = slot
                    if slot is not None:
                        slot.alive = node.alive
            for slot in self._slots.values():
                if slot.node_id not in self._nodes:
                    slot.alive = False
        return nodes

    def slots(self) -> list[GpuSlot]:
        """The GPUs calls may be placed on (alive nodes), in a stable order."""
        with self._lock:
            return sorted((s for s in self._slots.values() if s.alive), key=lambda s: s.key)

    def node(self, node_id: str) -> NodeView | None:
        return self._nodes.get(node_id)

    def device_state(self) -> DeviceState:
        return cluster_device_state(self.refresh(), self.vram_resource)

    def start_step(self, calls: Sequence[PlannedCall]) -> _RayStep:
        self.refresh()
        return _RayStep(self, calls)


class _Dispatch:
    """Submits one placed call as a Ray task and waits for its answer."""

    def __init__(self, step: _RayStep, call: PlannedCall, placement: Placement) -> None:
        self._step = step
        self._call = call
        self._placement = placement

    def _submit(self, tool: BaseTool, tool_input: Any, config: RunnableConfig, aio: bool) -> Any:
        options = self._step.task_options(self._call, self._placement)
        try:
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

    def _answer(self, answer: tuple[bool, Any, Where]) -> Any:
        ok, value, where = answer
        self._step.where[self._call.call_id] = where
        if ok:
            return value
        if is_gpu_oom(value):
            self._step.oom.add(self._call.call_id)
        raise value

    def _lost(self, exc: BaseException) -> RemoteCallLost:
        why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
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
        if not slots:
            why = "the Ray cluster has no alive GPU node"
            if avoid:
                why += " other than the one its task was lost with"
            return self._cpu_or_fail(call, "no_gpu", why)
        need = _weights(call)
        weights = need.mb if need is not None else 0.0
        big = [s for s in slots if call.spec.vram_mb + weights <= s.ledger.capacity_mb + 1e-9]
        if not big:
            most = max(s.ledger.capacity_mb for s in slots)
            return self._cpu_or_fail(
                call,
                "vram_over_budget",
                f"it needs {vram_needed(call.spec.vram_mb, weights)}, the largest GPU in the "
                f"cluster has {most:.0f} MB ({self.backend.vram_resource})",
            )
        return sorted(big, key=lambda s: (-s.ledger.free_mb, s.key))

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
        return Placement(call.option, GPU_DEVICE_IN_TASK, None, res.mb, res.model, warm)

    def _now(
        self, call: PlannedCall, slots: list[GpuSlot]
    ) -> tuple[Placement, tuple[GpuSlot, Reservation] | None]:
        for slot in slots:
            if not self._free_in_ray(slot, call):
                continue
            res = slot.ledger.try_reserve(call.spec.vram_mb, call.spec.gpu_share, _weights(call))
            if res is not None:
                return self._granted(call, slot, res), (slot, res)
        free = max(s.ledger.free_mb for s in slots)
        why = f"{call.spec.vram_mb:.0f} MB of VRAM do not fit now (at most {free:.0f} MB free)"
        return self._cpu_or_fail(call, "oom", why), None

    def _queue_slot(self, call: PlannedCall, slots: list[GpuSlot]) -> GpuSlot:
        for slot in slots:
            if slot.ledger.queued == 0 and slot.ledger.admissible(
                call.spec.vram_mb, call.spec.gpu_share, _weights(call)
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
                call.spec.vram_mb, call.spec.gpu_share, wait, _weights(call),
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
                call.spec.vram_mb, call.spec.gpu_share, wait, _weights(call),
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
                model=call.spec.model_name(call.tool),
                loaded=placement.warm is False,
            )
        )

    @staticmethod
    def _peers(held: tuple[GpuSlot, Reservation] | None) -> int:
        return max(0, held[0].ledger.active - 1) if held is not None else 0

    def _end(self, call: PlannedCall, run: _RayRun) -> None:
        self._release(run.held)
        run.held = None
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


def _weights(call: PlannedCall) -> WeightsNeed | None:
    """A call's model weights on a Ray GPU: reserved on that GPU's ledger the first time a
    call of the model lands there, and kept (``keep_warm``): they live in Ray worker
    processes, which the node cannot make free them, so they are never evicted for
    another model."""
    model = call.spec.model_name(call.tool)
    if model is None:
        return None
    return WeightsNeed(model, call.spec.weights_mb, keep_warm=True)
