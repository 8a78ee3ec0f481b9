"""StarPU-style ``dmda``: history-based estimates, expected end time per worker queue.

Workers are the GPU (one queue) and the CPU cores (one kept to drive the GPU, as StarPU does).
Each call, in submission order, goes to the worker with the smallest expected end time:
that worker's queue end + the expected length on its architecture + (GPU) the declared
transfer penalty. Expected lengths come from history per (tool, architecture), learned in
`observe`: the mean of the measured run times (GPU: minus the declared transfer). Until a
(tool, architecture) pair has ``calibration_samples`` measurements the declared solo profile
is used. It learns contention only as history; it does not model sharing. History is bounded:
the mean of the last ``history_window`` samples per pair, for the ``max_tools`` most recently
used tools.
The first call given to the GPU gets `gpu_now`, later ones `gpu_queued`. A resident model
not warm on a worker's side adds its declared load time there (`costs.load_cost`, once per
batch and side); history samples leave out the time a call waited for a load.

Several GPUs: one queue per GPU (`gpu_workers`), calibrated per device as StarPU calibrates
per worker: a GPU's expected length is its own history once calibrated, else the declared
compute divided by its declared speed; the decision names the GPU.

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.telemetry import DeviceState
>>> spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=300, gpu_ms=50, transfer_ms=10))
>>> batch = Batch.of([("a", "ocr", spec), ("b", "ocr", spec)])
>>> view = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0, 4))
>>> dict(DmdaScheduler().decide(batch, view).mapping)
{'a': 'gpu_now', 'b': 'gpu_queued'}
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from langgraph_devsched.gpus import gpu_index
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.schedulers.classic.static import constrained
from langgraph_devsched.schedulers.costs import (
    Arch,
    can_use,
    declared_cost,
    declared_transfer,
    load_cost,
)
from langgraph_devsched.schedulers.gpu_workers import WorkerQueues, fitting_gpus, gpu_load_cost
from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.telemetry import GpuDevice

HISTORY_WINDOW = 1000
MAX_TOOLS = 4096


@dataclass
class _Window:
    """The last ``size`` samples and their running sum."""

    size: int
    samples: deque[float] = field(default_factory=deque)
    total: float = 0.0

    def add(self, x: float) -> None:
        self.samples.append(x)
        self.total += x
        if len(self.samples) > self.size:
            self.total -= self.samples.popleft()

    def __len__(self) -> int:
        return len(self.samples)

    def mean(self) -> float:
        return self.total / len(self.samples)


class DmdaScheduler(SchedulerBase):
    """Deque model, data aware: history per (tool, arch) plus a transfer penalty."""

    name = "dmda"

    def __init__(
        self, *, calibration_samples: int = 3, history_window: int = HISTORY_WINDOW,
        max_tools: int = MAX_TOOLS,
    ) -> None:
        if calibration_samples < 1:
            raise ValueError(f"calibration_samples must be >= 1, got {calibration_samples}")
        if history_window < calibration_samples:
            raise ValueError(
                f"history_window must be >= calibration_samples ({calibration_samples}), "
                f"got {history_window}")
        self.calibration_samples = calibration_samples
        self.history_window = history_window
        self._history: LruTable[tuple[str, Arch], _Window] = LruTable(2 * max_tools)
        self._per_gpu: LruTable[tuple[str, int], _Window] = LruTable(8 * max_tools)
        """History per (tool, GPU index), read on a machine with several GPUs."""

    def state_sizes(self) -> dict[str, int]:
        """History pairs kept and the most samples one holds (both bounded)."""
        windows = self._history.values()
        windows = [*windows, *self._per_gpu.values()]
        return {"pairs": len(windows), "max_samples": max((len(w) for w in windows), default=0)}

    def expected_length(self, tool: str, arch: Arch, declared: float, transfer: float) -> float:
        """History mean once calibrated, else the declared cost (GPU: compute only)."""
        samples = self._history.get((tool, arch))
        if samples is not None and len(samples) >= self.calibration_samples:
            return samples.mean()
        return declared - transfer if arch == "gpu" else declared

    def _sample(self, tool: str, arch: Arch, value: float) -> None:
        self._history.setdefault_with((tool, arch), lambda: _Window(self.history_window)).add(
            value)

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        if len(view.devices) > 1:
            return self._decide_devices(batch, view)
        gpu_ok = view.device.gpu_available
        workers = max(1, view.device.cpu_cores - (1 if gpu_ok else 0))
        gpu_end = 0.0
        cpu_end = [0.0] * workers
        mapping: dict[str, DeviceOption] = {}
        predicted: dict[str, float] = {}
        gpu_used = False
        loaded: set[tuple[str, str]] = set()
        for call in batch.calls:
            transfer = declared_transfer(call.spec)
            candidates: list[tuple[float, int, Arch, int]] = []
            if can_use(call.spec, "gpu", gpu_ok):
                length = self.expected_length(
                    call.tool, "gpu", declared_cost(call.spec, "gpu"), transfer
                )
                load = load_cost(call.spec, call.tool, "gpu", view.device, loaded)
                candidates.append((gpu_end + length + transfer + load, 0, "gpu", -1))
            if can_use(call.spec, "cpu", gpu_ok):
                k = min(range(workers), key=lambda w: (cpu_end[w], w))
                length = self.expected_length(call.tool, "cpu", declared_cost(call.spec, "cpu"), 0)
                load = load_cost(call.spec, call.tool, "cpu", view.device, loaded)
                candidates.append((cpu_end[k] + length + load, 1, "cpu", k))
            end, _, arch, k = min(candidates)
            wanted: DeviceOption
            if arch == "gpu":
                gpu_end = end
                wanted = "gpu_queued" if gpu_used else "gpu_now"
                gpu_used = True
            else:
                cpu_end[k] = end
                wanted = "cpu"
            predicted[call.call_id] = end
            mapping[call.call_id] = constrained(call.spec, wanted, gpu_ok)
            model = call.spec.model_name(call.tool)
            if model is not None:
                loaded.add((model, arch))
        return self._decision(
            mapping, "dmda: minimum expected end time per worker queue", predicted_ms=predicted
        )

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        specs = {c.call_id: c.spec for c in batch.calls}
        for call in record.calls:
            if call.fell_back or call.error is not None or call.call_id not in specs:
                continue
            run = call.run_ms - call.load_ms  # a load is no part of the tool's own time
            if call.on_gpu:
                length = max(0.0, run - declared_transfer(specs[call.call_id]))
                self._sample(call.tool, "gpu", length)
                index = gpu_index(call.device)
                if index is not None and decision.gpus:  # several GPUs: per device too
                    self._per_gpu.setdefault_with(
                        (call.tool, index), lambda: _Window(self.history_window)).add(length)
            else:
                self._sample(call.tool, "cpu", run)

    def device_length(self, tool: str, gpu: GpuDevice, declared: float, transfer: float) -> float:
        """GPU ``gpu``'s own history mean once calibrated, else the declared compute over its
        declared speed."""
        samples = self._per_gpu.get((tool, gpu.index))
        if samples is not None and len(samples) >= self.calibration_samples:
            return samples.mean()
        return (declared - transfer) / gpu.speed

    def _decide_devices(self, batch: Batch, view: SchedulerView) -> Decision:
        """dmda with one queue per GPU (several GPUs)."""
        devices = view.devices
        workers = max(1, view.device.cpu_cores - 1)
        queues = WorkerQueues.of(workers, devices)
        mapping: dict[str, DeviceOption] = {}
        predicted: dict[str, float] = {}
        for call in batch.calls:
            transfer = declared_transfer(call.spec)
            best: tuple[float, int, int] = (float("inf"), 1, -1)
            if can_use(call.spec, "gpu", True):
                declared = declared_cost(call.spec, "gpu")
                for d in fitting_gpus(call.call_id, call.spec, call.tool, devices):
                    end = (queues.gpu[d.index]
                           + self.device_length(call.tool, d, declared, transfer) + transfer
                           + gpu_load_cost(call.spec, call.tool, d, queues.loaded))
                    best = min(best, (end, 0, d.index))
            if can_use(call.spec, "cpu", True):
                k = min(range(workers), key=lambda w: (queues.cpu[w], w))
                length = self.expected_length(call.tool, "cpu", declared_cost(call.spec, "cpu"), 0)
                load = load_cost(call.spec, call.tool, "cpu", view.device, queues.cpu_loaded)
                best = min(best, (queues.cpu[k] + length + load, 1, k))
            wanted = queues.commit(call.call_id, call.spec.model_name(call.tool), best)
            predicted[call.call_id] = best[0]
            mapping[call.call_id] = constrained(call.spec, wanted, True)
        gpus = {cid: g for cid, g in queues.gpus.items() if mapping[cid] != "cpu"}
        return self._decision(
            mapping, "dmda: minimum expected end time per worker queue, one per GPU",
            predicted_ms=predicted, gpus=gpus)
