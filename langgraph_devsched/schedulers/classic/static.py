"""Schedulers that need no history: all-GPU (the framework default) and static hints.

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.telemetry import DeviceState
>>> cpu_only = ToolDeviceSpec(gpu_capable=False)
>>> batch = Batch.of([("a", "asr", ToolDeviceSpec()), ("b", "regex", cpu_only)])
>>> gpu = DeviceState(True, "gpu", 8000, 0, 0, 8)
>>> dict(AllGpuScheduler().decide(batch, SchedulerView(gpu)).mapping)
{'a': 'gpu_now', 'b': 'cpu'}
"""

from __future__ import annotations

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView


def constrained(spec: ToolDeviceSpec, wanted: DeviceOption, gpu_available: bool) -> DeviceOption:
    """``wanted`` if the hints allow it here, else the nearest allowed option."""
    allowed = spec.allowed_options()
    if not gpu_available and "cpu" in allowed:
        return "cpu"
    if wanted in allowed:
        return wanted
    return allowed[0]  # a validated spec always allows at least one option


class AllGpuScheduler(SchedulerBase):
    """Every GPU-capable call goes to the GPU at once: what frameworks do by default."""

    name = "all_gpu"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        gpu = view.device.gpu_available
        mapping = {c.call_id: constrained(c.spec, "gpu_now", gpu) for c in batch.calls}
        return self._decision(mapping, "every GPU-capable call on the GPU now")


class StaticHintScheduler(SchedulerBase):
    """Follow each tool's declared hints: pinned, then preferred, then a profile-based pick.

    With a solo profile and no preference it takes the faster device alone; otherwise a
    GPU-capable tool is queued for the GPU. Without a GPU everything allowed runs on the CPU.
    """

    name = "static"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        gpu = view.device.gpu_available
        mapping: dict[str, DeviceOption] = {}
        for call in batch.calls:
            spec = call.spec
            wanted: DeviceOption
            if spec.pinned is not None:
                wanted = spec.pinned
            elif spec.preferred is not None:
                wanted = spec.preferred
            elif (
                spec.profile and spec.profile.cpu_ms is not None and spec.profile.gpu_ms is not None
            ):
                wanted = "cpu" if spec.profile.cpu_ms <= spec.profile.gpu_ms else "gpu_queued"
            else:
                wanted = "gpu_queued" if spec.gpu_capable else "cpu"
            mapping[call.call_id] = constrained(spec, wanted, gpu)
        return self._decision(mapping, "declared hints (pinned > preferred > solo profile)")
