"""HEFT: static solo profiles, upward rank, earliest finish time; blind to contention.

The batch's calls are independent, so a call's upward rank is its mean declared cost over the
devices it may use. In rank order each call goes to the processor where it would finish first:
the GPU (one processor running one call at a time) or one of the CPU cores. The first call
placed on the GPU gets `gpu_now`, later ones `gpu_queued` (HEFT's serial GPU processor).
HEFT never sees sharing, VRAM pressure or background load: only the declared profiles, and
(resident models) the declared load time of a model not warm on that side (`costs.load_cost`;
the first call placed there pays it).

Several GPUs: each GPU is one serial processor (`gpu_workers`): compute divided by its
declared speed, plus the transfer, plus the load unless the model is warm on that GPU; the
call goes to the GPU or core where it finishes first and the decision names the GPU.

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.telemetry import DeviceState
>>> def spec(cpu, gpu):
...     return ToolDeviceSpec(profile=SoloProfile(cpu_ms=cpu, gpu_ms=gpu))
>>> batch = Batch.of([("a", "asr", spec(900, 60)), ("b", "embed", spec(80, 70)),
...                   ("c", "ocr", spec(300, 40))])
>>> view = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0, 4))
>>> dict(HeftScheduler().decide(batch, view).mapping)
{'a': 'gpu_now', 'b': 'cpu', 'c': 'gpu_queued'}
"""

from __future__ import annotations

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.schedulers.classic.static import constrained
from langgraph_devsched.schedulers.costs import declared_cost, declared_transfer, load_cost
from langgraph_devsched.schedulers.gpu_workers import WorkerQueues, fitting_gpus, gpu_load_cost


class HeftScheduler(SchedulerBase):
    """Heterogeneous Earliest Finish Time over declared solo profiles."""

    name = "heft"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        if len(view.devices) > 1:
            return self._decide_devices(batch, view)
        gpu_ok = view.device.gpu_available
        cores = max(1, view.device.cpu_cores)
        costs = [
            (declared_cost(c.spec, "gpu", gpu_ok), declared_cost(c.spec, "cpu", gpu_ok))
            for c in batch.calls
        ]

        def rank(i: int) -> float:
            finite = [x for x in costs[i] if x != float("inf")]
            return sum(finite) / len(finite)

        order = sorted(range(len(batch.calls)), key=lambda i: (-rank(i), i))
        gpu_free = 0.0
        cpu_free = [0.0] * cores
        mapping: dict[str, DeviceOption] = {}
        predicted: dict[str, float] = {}
        gpu_used = False
        loaded: set[tuple[str, str]] = set()
        for i in order:
            call = batch.calls[i]
            gpu_cost, cpu_cost = costs[i]
            gpu_cost += load_cost(call.spec, call.tool, "gpu", view.device, loaded)
            cpu_cost += load_cost(call.spec, call.tool, "cpu", view.device, loaded)
            core = min(range(cores), key=lambda k: (cpu_free[k], k))
            eft_gpu, eft_cpu = gpu_free + gpu_cost, cpu_free[core] + cpu_cost
            wanted: DeviceOption
            if eft_gpu <= eft_cpu:
                gpu_free = eft_gpu
                wanted = "gpu_queued" if gpu_used else "gpu_now"
                gpu_used = True
                predicted[call.call_id] = eft_gpu
                side = "gpu"
            else:
                cpu_free[core] = eft_cpu
                wanted = "cpu"
                predicted[call.call_id] = eft_cpu
                side = "cpu"
            model = call.spec.model_name(call.tool)
            if model is not None:
                loaded.add((model, side))
            mapping[call.call_id] = constrained(call.spec, wanted, gpu_ok)
        mapping = {cid: mapping[cid] for cid in batch.call_ids}
        return self._decision(
            mapping, "HEFT: rank by mean declared cost, earliest finish time",
            predicted_ms=predicted,
        )

    def _decide_devices(self, batch: Batch, view: SchedulerView) -> Decision:
        """HEFT with one serial processor per GPU."""
        devices = view.devices
        cores = max(1, view.device.cpu_cores)
        costs = [(declared_cost(c.spec, "gpu"), declared_cost(c.spec, "cpu"))
                 for c in batch.calls]

        def rank(i: int) -> float:
            finite = [x for x in costs[i] if x != float("inf")]
            return sum(finite) / len(finite)

        order = sorted(range(len(batch.calls)), key=lambda i: (-rank(i), i))
        queues = WorkerQueues.of(cores, devices)
        mapping: dict[str, DeviceOption] = {}
        predicted: dict[str, float] = {}
        for i in order:
            call = batch.calls[i]
            gpu_cost, cpu_cost = costs[i]
            transfer = declared_transfer(call.spec)
            best: tuple[float, int, int] = (float("inf"), 1, -1)
            if gpu_cost != float("inf"):
                for d in fitting_gpus(call.call_id, call.spec, call.tool, devices):
                    eft = (queues.gpu[d.index] + (gpu_cost - transfer) / d.speed + transfer
                           + gpu_load_cost(call.spec, call.tool, d, queues.loaded))
                    best = min(best, (eft, 0, d.index))
            if cpu_cost != float("inf"):
                core = min(range(cores), key=lambda k: (queues.cpu[k], k))
                eft = queues.cpu[core] + cpu_cost + load_cost(
                    call.spec, call.tool, "cpu", view.device, queues.cpu_loaded)
                best = min(best, (eft, 1, core))
            wanted = queues.commit(call.call_id, call.spec.model_name(call.tool), best)
            predicted[call.call_id] = best[0]
            mapping[call.call_id] = constrained(call.spec, wanted, True)
        mapping = {cid: mapping[cid] for cid in batch.call_ids}
        gpus = {cid: g for cid, g in queues.gpus.items() if mapping[cid] != "cpu"}
        return self._decision(
            mapping, "HEFT: rank by mean declared cost, earliest finish time per GPU",
            predicted_ms=predicted, gpus=gpus,
        )
