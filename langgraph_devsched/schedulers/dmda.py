"""StarPU-style ``dmda``: history-based estimates, expected end time per worker queue.

Workers are the GPU (one queue) and the CPU cores (one kept to drive the GPU, as StarPU does).
Each call, in submission order, goes to the worker with the smallest expected end time:
that worker's queue end + the expected length on its architecture + (GPU) the declared
transfer penalty. Expected lengths come from history per (tool, architecture), learned in
`observe`: the mean of the measured run times (GPU: minus the declared transfer). Until a
(tool, architecture) pair has ``calibration_samples`` measurements the declared solo profile
is used. It learns contention only as history; it does not model sharing.
The first call given to the GPU gets `gpu_now`, later ones `gpu_queued`.

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.telemetry import DeviceState
>>> spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=300, gpu_ms=50, transfer_ms=10))
>>> batch = Batch.of([("a", "ocr", spec), ("b", "ocr", spec)])
>>> view = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0, 4))
>>> dict(DmdaScheduler().decide(batch, view).mapping)
{'a': 'gpu_now', 'b': 'gpu_queued'}
"""

from __future__ import annotations

from collections import defaultdict

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.schedulers.costs import (
    Arch,
    can_use,
    declared_cost,
    declared_transfer,
)
from langgraph_devsched.schedulers.static import constrained


class DmdaScheduler(SchedulerBase):
    """Deque model, data aware: history per (tool, arch) plus a transfer penalty."""

    name = "dmda"

    def __init__(self, *, calibration_samples: int = 3) -> None:
        if calibration_samples < 1:
            raise ValueError(f"calibration_samples must be >= 1, got {calibration_samples}")
        self.calibration_samples = calibration_samples
        self._history: dict[tuple[str, Arch], list[float]] = defaultdict(list)

    def expected_length(self, tool: str, arch: Arch, declared: float, transfer: float) -> float:
        """History mean once calibrated, else the declared cost (GPU: compute only)."""
        samples = self._history.get((tool, arch), [])
        if len(samples) >= self.calibration_samples:
            return sum(samples) / len(samples)
        return declared - transfer if arch == "gpu" else declared

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        gpu_ok = view.device.gpu_available
        workers = max(1, view.device.cpu_cores - (1 if gpu_ok else 0))
        gpu_end = 0.0
        cpu_end = [0.0] * workers
        mapping: dict[str, DeviceOption] = {}
        predicted: dict[str, float] = {}
        gpu_used = False
        for call in batch.calls:
            transfer = declared_transfer(call.spec)
            candidates: list[tuple[float, int, Arch, int]] = []
            if can_use(call.spec, "gpu", gpu_ok):
                length = self.expected_length(
                    call.tool, "gpu", declared_cost(call.spec, "gpu"), transfer
                )
                candidates.append((gpu_end + length + transfer, 0, "gpu", -1))
            if can_use(call.spec, "cpu", gpu_ok):
                k = min(range(workers), key=lambda w: (cpu_end[w], w))
                length = self.expected_length(call.tool, "cpu", declared_cost(call.spec, "cpu"), 0)
                candidates.append((cpu_end[k] + length, 1, "cpu", k))
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
        return self._decision(
            mapping, "dmda: minimum expected end time per worker queue", predicted_ms=predicted
        )

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        specs = {c.call_id: c.spec for c in batch.calls}
        for call in record.calls:
            if call.fell_back or call.error is not None or call.call_id not in specs:
                continue
            if call.on_gpu:
                length = max(0.0, call.run_ms - declared_transfer(specs[call.call_id]))
                self._history[(call.tool, "gpu")].append(length)
            else:
                self._history[(call.tool, "cpu")].append(call.run_ms)
