"""The Ray cluster as the scheduler sees it: nodes, their GPUs and VRAM, what is free.

VRAM is a custom Ray resource (``VRAM_MB`` by default) that each node declares when it joins
(``ray start ... --num-gpus 1 --resources '{"VRAM_MB": 80000}'``); Ray's ``gpu_memory`` task
option is not in the released package. Ray updates its view of free resources a little after
tasks end, so the backend admits calls by its own per-GPU ledgers and reads this view for
the cluster's shape and for what *other* drivers use.

>>> node = NodeView("n1", "10.0.0.2", True, {"CPU": 8, "GPU": 2, "VRAM_MB": 48000,
...     "accelerator_type:A10G": 1}, None)
>>> node.gpus, node.vram_per_gpu_mb("VRAM_MB"), node.gpu_type
(2, 24000.0, 'A10G')
>>> state = cluster_device_state([node], "VRAM_MB")
>>> state.gpu_available, state.vram_budget_mb, state.cpu_cores
(True, 48000.0, 8)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_devsched.telemetry import DeviceState

RAY_MISSING = (
    "RayBackend needs Ray, which is not installed: pip install ray "
    "(from a clone: pip install -e '.[ray]')"
)


def require_ray() -> Any:
    """Import and return the ``ray`` module, or raise `ImportError` saying how to get it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(RAY_MISSING) from exc
    return ray


def accelerator_type(resources: Mapping[str, float]) -> str | None:
    """The GPU type Ray detected on a node (its ``accelerator_type:<T>`` resource), if any."""
    for key in resources:
        if key.startswith("accelerator_type:"):
            return key.split(":", 1)[1]
    return None


@dataclass(frozen=True)
class NodeView:
    """One Ray node: its totals and (when Ray reports them) its free resources."""

    node_id: str
    ip: str
    alive: bool
    total: Mapping[str, float]
    available: Mapping[str, float] | None

    @property
    def gpus(self) -> int:
        """Whole GPUs on the node (a node declaring a fraction counts as one)."""
        gpu = float(self.total.get("GPU", 0.0))
        return math.ceil(gpu) if gpu > 0 else 0

    @property
    def gpu_type(self) -> str | None:
        return accelerator_type(self.total)

    def vram_per_gpu_mb(self, vram_resource: str) -> float:
        """The node's declared VRAM split evenly over its GPUs (0 when undeclared)."""
        return float(self.total.get(vram_resource, 0.0)) / self.gpus if self.gpus else 0.0

    def free(self, resource: str) -> float | None:
        """What Ray reports free of ``resource`` on this node (None when unknown)."""
        if self.available is None:
            return None
        return float(self.available.get(resource, 0.0))


def read_cluster() -> list[NodeView]:
    """Every node Ray knows, alive or not, with per-node free resources where available."""
    ray = require_ray()
    available: dict[str, Mapping[str, float]] | None
    try:
        from ray._private import state

        available = dict(state.available_resources_per_node())
    except Exception:  # private API: fail soft, the totals are enough to schedule
        available = None
    nodes = []
    for n in ray.nodes():
        node_id = str(n.get("NodeID", ""))
        nodes.append(
            NodeView(
                node_id=node_id,
                ip=str(n.get("NodeManagerAddress", "")),
                alive=bool(n.get("Alive", False)),
                total=dict(n.get("Resources", {})),
                available=None if available is None else dict(available.get(node_id, {})),
            )
        )
    return nodes


def _sum(nodes: Sequence[NodeView], resource: str, free: bool = False) -> float:
    total = 0.0
    for n in nodes:
        value = n.free(resource) if free else float(n.total.get(resource, 0.0))
        total += value or 0.0
    return total


def cluster_device_state(nodes: Sequence[NodeView], vram_resource: str) -> DeviceState:
    """Cluster-wide totals as a `DeviceState` (alive nodes only).

    ``vram_budget_mb`` is the sum over nodes (one call still needs a single GPU that fits
    it); ``gpu_utilization`` is the share of GPUs Ray has handed out, not a measurement.
    """
    alive = [n for n in nodes if n.alive]
    cpus = int(_sum(alive, "CPU")) or 1
    gpus = _sum(alive, "GPU")
    if gpus <= 0:
        return DeviceState.cpu_only(
            f"the Ray cluster has no GPUs ({len(alive)} alive node(s)); start GPU nodes with "
            f"ray start --num-gpus N --resources '{{\"{vram_resource}\": MB}}'",
            cpu_cores=cpus,
        )
    vram = _sum(alive, vram_resource)
    known = all(n.available is not None for n in alive)
    used = vram - _sum(alive, vram_resource, free=True) if known else 0.0
    busy = (gpus - _sum(alive, "GPU", free=True)) / gpus if known else 0.0
    types = sorted({t for n in alive if (t := n.gpu_type)})
    gpu_nodes = sum(1 for n in alive if n.gpus)
    reasons = ["Ray view: utilization is the share of GPUs allocated, not measured"]
    if not known:
        reasons.append("free resources per node unknown")
    missing = [n.ip for n in alive if n.gpus and vram_resource not in n.total]
    if missing:
        reasons.append(
            f"GPU node(s) {', '.join(missing)} declare no {vram_resource} resource, so only "
            "calls needing no VRAM can run there"
        )
    return DeviceState(
        gpu_available=True,
        gpu_name=f"ray: {gpus:g} GPU(s) on {gpu_nodes} node(s)"
        + (f" ({', '.join(types)})" if types else ""),
        vram_budget_mb=vram,
        vram_used_mb=max(0.0, used),
        gpu_utilization=min(1.0, max(0.0, busy)),
        cpu_cores=cpus,
        reason="; ".join(reasons),
    )
