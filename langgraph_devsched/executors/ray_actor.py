"""One long-lived Ray actor per GPU slot: it holds that GPU's resident models.

A call on a resident model (its ``model`` hint) placed on a GPU of a Ray node is sent to the
actor of that GPU instead of a fresh task, and runs there inside the actor's `ModelCache`
scope: `ResidentModel.get` answers from the actor's cache, so a model's second call routed
to the same GPU finds it warm. The backend's ledger of the slot still decides admission and
eviction (the models its admission evicted travel with the call and the actor frees them
first); the actor answers with what its cache did (loaded, load time, evicted) so records
say warm or cold.

The actor is pinned to its node (`NodeAffinitySchedulingStrategy`, hard) and holds no Ray
``GPU`` resource: Ray cannot pin a request to GPU *k* of a node, and a process that holds
none keeps the node's ``CUDA_VISIBLE_DEVICES``, so the actor addresses its GPU as ``cuda:k``
(the node's GPU k). The backend's per-GPU ledger accounts for its weights and calls.

>>> host = GpuModelHost(1)
>>> from langgraph_devsched.models import ResidentModel
>>> tiny = ResidentModel("tiny", load=lambda device: f"tiny@{device}")
>>> class Tool:
...     def invoke(self, tool_input, config):
...         return tiny.get()
>>> from langgraph_devsched.device import Placement
>>> cold, warm = (Placement("gpu_now", "cuda:1", model="tiny", warm=w) for w in (False, True))
>>> [(a.value, a.loaded) for a in (host.run(Tool(), {}, {}, p, False) for p in (cold, warm))]
[('tiny@cuda:1', True), ('tiny@cuda:1', False)]
>>> host.stats().loads, host.stats().hits, host.stats().resident
(1, 1, ('tiny',))
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from langgraph_devsched.device import Placement
from langgraph_devsched.executors.ray_ledger import slot_name
from langgraph_devsched.executors.ray_task import Where, as_remote, invoke_tool
from langgraph_devsched.models import MAX_MODELS, ModelCache


@dataclass(frozen=True)
class ActorAnswer:
    """What the actor sends back for one call: the tool's answer and what its cache did."""

    ok: bool
    value: Any
    where: Where
    model: str | None = None
    loaded: bool = False
    load_ms: float = 0.0
    evicted: tuple[str, ...] = ()
    holds: bool = False
    """The actor's cache holds the call's declared model on the GPU after the call."""
    asked: bool = False
    """The tool asked the cache for its declared model (`ResidentModel.get`)."""


@dataclass(frozen=True)
class HostStats:
    """An actor's cache counters and the models it holds on its GPU."""

    pid: int
    loads: int
    hits: int
    evictions: int
    resident: tuple[str, ...]


class GpuModelHost:
    """The body of a GPU slot's actor: a model cache for GPU ``index`` of its node."""

    def __init__(self, index: int, max_models: int = MAX_MODELS) -> None:
        self.index = index
        self.cache = ModelCache(max_models=max_models)
        self._lock = threading.Lock()

    def run(self, tool: Any, tool_input: Any, config: dict[str, Any], placement: Placement,
            use_async: bool) -> ActorAnswer:
        """Free the models the admission evicted, then run the call in the cache's scope."""
        if placement.evicted:  # an instance a running call uses stays (a later call's load)
            self.cache.drop(placement.evicted, idle_only=True)
        declared = placement.model
        # not ``cold``: calls reach a threaded actor in any order, so a call the ledger
        # admitted cold may come after a later one that loaded the model (reloading would
        # free that call's instance); the evictions travel with the calls instead
        with self.cache.scope(placement.device, declared, placement.evicted) as used:
            ok, value, where = invoke_tool(tool, tool_input, config, placement, use_async)
        where = Where(where.node_id, where.node_ip, (str(self.index),))
        holds = declared is not None and self.cache.holds(declared, "gpu")
        asked = declared is not None and declared in used.asked
        return ActorAnswer(ok, value, where, used.model or declared, used.loaded, used.load_ms,
                           used.evicted, holds, asked)

    def stats(self) -> HostStats:
        import os

        gpu = tuple(w.model for w in self.cache.resident() if w.side == "gpu")
        return HostStats(os.getpid(), self.cache.loads, self.cache.hits, self.cache.evictions,
                         gpu)

    def clear(self) -> None:
        self.cache.clear()


def host_actor_class() -> Any:
    """`GpuModelHost` as a Ray actor class (built once, on first use)."""
    return as_remote(GpuModelHost)


@dataclass(frozen=True)
class HostRef:
    """A slot's actor handle and its generation (a new actor after a death: a new one)."""

    handle: Any
    generation: int


class SlotHosts:
    """The actors of the GPU slots, created lazily, one per slot, killed on `close`."""

    def __init__(self, concurrency: int, max_models: int = MAX_MODELS,
                 namespace: str | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"actor_concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self.max_models = max_models
        self.namespace = namespace
        """Set: the actors are shared by every driver of the cluster (named
        ``slot-<node id>-<k>``, detached, got or created atomically in this namespace), and
        `close` leaves them running."""
        self._hosts: dict[tuple[str, int], HostRef] = {}
        self._generation = 0
        self._lock = threading.Lock()

    def get(self, node_id: str, index: int) -> HostRef:
        """The actor of GPU ``index`` of ``node_id``, created on first need."""
        with self._lock:
            ref = self._hosts.get((node_id, index))
            if ref is not None:
                return ref
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            shared: dict[str, Any] = {}
            if self.namespace is not None:
                shared = {"name": slot_name(node_id, index), "namespace": self.namespace,
                          "lifetime": "detached", "get_if_exists": True}
            handle = host_actor_class().options(
                num_cpus=0,
                num_gpus=0,
                max_concurrency=self.concurrency,
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                **shared,
            ).remote(index, self.max_models)
            self._generation += 1
            ref = HostRef(handle, self._generation)
            self._hosts[(node_id, index)] = ref
            return ref

    def current(self, node_id: str, index: int, generation: int) -> bool:
        """Whether the slot's actor is still the one of ``generation`` (not dead, not closed)."""
        with self._lock:
            ref = self._hosts.get((node_id, index))
            return ref is not None and ref.generation == generation

    def forget(self, node_id: str, index: int, generation: int) -> bool:
        """The actor of ``generation`` died: the next call creates a new one. Returns whether
        it was still the slot's actor."""
        with self._lock:
            ref = self._hosts.get((node_id, index))
            if ref is None or ref.generation != generation:
                return False
            del self._hosts[(node_id, index)]
        _kill(ref.handle)
        return True

    def handles(self) -> dict[tuple[str, int], Any]:
        with self._lock:
            return {key: ref.handle for key, ref in self._hosts.items()}

    def close(self) -> int:
        """Kill every actor (their models go with them); shared ones (``namespace``) are
        only let go: other drivers use them. Returns how many were killed."""
        with self._lock:
            refs = list(self._hosts.values())
            self._hosts.clear()
        if self.namespace is not None:
            return 0
        for ref in refs:
            _kill(ref.handle)
        return len(refs)


def _kill(handle: Any) -> None:
    import contextlib

    import ray

    with contextlib.suppress(Exception):
        ray.kill(handle, no_restart=True)
