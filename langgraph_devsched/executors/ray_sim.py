"""Simulated tools inside Ray tasks: the benchmark's steps dispatched through a Ray cluster.

The `SimulatedTestbed` stays the ground truth (its virtual clock gives exact times, so a
Ray run must reproduce the local run's mappings); what travels through Ray is every call of
the step, as a task asking for the resources its simulated placement holds: a GPU call
``num_gpus=gpu_share`` and the ``VRAM_MB`` it reserved, scaled from the testbed's budget to
the cluster's largest GPU (so every simulated call fits a real node); a CPU call
``num_cpus=cpus_per_call``. The tasks answer with the call's record and where they ran.

    devsched bench --backend ray --scenarios ... --rounds 3
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from langgraph_devsched.executors.ray_cluster import read_cluster, require_ray
from langgraph_devsched.executors.ray_task import Where, as_remote
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.schedulers.base import Batch
from langgraph_devsched.testbed import SimulatedTestbed


def simulated_call(record: CallRecord) -> CallRecord:
    """The body of a simulated tool's Ray task: its record, stamped with where it ran."""
    ray = require_ray()
    ctx = ray.get_runtime_context()
    gpus = tuple(str(g) for g in ctx.get_accelerator_ids().get("GPU", []))
    where = Where(ctx.get_node_id(), ray.util.get_node_ip_address(), gpus)
    return dataclasses.replace(record, device=where.device(record.on_gpu), node=where.node_ip)


class RaySimulatedSteps:
    """A bench step runner: ``(testbed, batch, calls) -> StepRecord`` through Ray tasks.

    On first use, unless Ray is initialised: connects to ``address`` (or ``RAY_ADDRESS``),
    else starts a local instance with one *logical* GPU of ``local_vram_mb`` (the simulated
    tools only need the resources, not a device).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        vram_resource: str = "VRAM_MB",
        cpus_per_call: float = 1.0,
        local_vram_mb: float = 16000.0,
    ) -> None:
        require_ray()
        self.address = address
        self.vram_resource = vram_resource
        self.cpus_per_call = cpus_per_call
        self.local_vram_mb = local_vram_mb
        self._gpu_vram_mb: float | None = None
        self.tasks = 0

    def _remote(self) -> Any:
        ray = require_ray()
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS")
            if address:
                ray.init(address=address)
            else:
                ray.init(
                    num_gpus=1,
                    resources={self.vram_resource: self.local_vram_mb},
                    include_dashboard=False,
                )
        return as_remote(simulated_call)

    def _largest_gpu_vram(self) -> float:
        if self._gpu_vram_mb is None:
            gpus = [n for n in read_cluster() if n.alive and n.gpus]
            if not gpus:
                raise ValueError(
                    "the Ray cluster has no GPU node; start one with ray start --num-gpus 1 "
                    f"--resources '{{\"{self.vram_resource}\": MB}}'"
                )
            self._gpu_vram_mb = max(n.vram_per_gpu_mb(self.vram_resource) for n in gpus)
        return self._gpu_vram_mb

    def options(self, record: CallRecord, gpu_share: float, budget_mb: float) -> dict[str, Any]:
        """The Ray options of one simulated call's task."""
        if not record.on_gpu:
            return {"num_cpus": self.cpus_per_call}
        options: dict[str, Any] = {"num_cpus": 0, "num_gpus": max(0.0001, round(gpu_share, 4))}
        largest = self._largest_gpu_vram()
        if record.vram_reserved_mb > 0 and largest > 0 and budget_mb > 0:
            scaled = min(largest, record.vram_reserved_mb * largest / budget_mb)
            options["resources"] = {self.vram_resource: max(1, math.floor(scaled))}
        return options

    def __call__(
        self,
        bed: SimulatedTestbed,
        batch: Batch,
        calls: list[tuple[str, str, DeviceOption]],
    ) -> StepRecord:
        remote = self._remote()
        outcome = bed.run_step(calls)
        shares = {c.call_id: c.spec.gpu_share for c in batch.calls}
        budget = bed.device_state().vram_budget_mb
        refs = [
            remote.options(**self.options(r, shares.get(r.call_id, 1.0), budget)).remote(r)
            for r in outcome.calls
        ]
        ray = require_ray()
        done: list[CallRecord] = ray.get(refs)
        self.tasks += len(done)
        extra = {**outcome.extra, "backend": "ray"}
        return dataclasses.replace(outcome, calls=tuple(done), extra=extra)
