"""GPUs as workers for the list schedulers (HEFT, dmda) on a machine with several.

Each GPU is one worker with its own queue end; a call's expected length there is its GPU
compute divided by the GPU's declared ``speed``, plus the declared transfer (not faster on a
faster GPU), plus its model's declared load time unless the model is warm on that GPU (or an
earlier call of the batch loads it there). Only the GPUs the call's ``gpus`` hint allows
are candidates (`gpus.candidates`), and of those the ones that can take the call now
(`fitting_gpus`), when any can. The first call given to a GPU gets ``gpu_now``, later
ones ``gpu_queued``.

>>> from langgraph_devsched.hints import LoadProfile, ToolDeviceSpec
>>> from langgraph_devsched.residency import WarmModel
>>> from langgraph_devsched.telemetry import GpuDevice
>>> spec = ToolDeviceSpec(weights_mb=900, load_ms=LoadProfile(gpu_ms=700))
>>> warm = GpuDevice(0, "a", 24000, resident=(WarmModel("ocr", 900),))
>>> gpu_load_cost(spec, "ocr", warm, set()), gpu_load_cost(spec, "ocr", GpuDevice(1, "b", 1), set())
(0.0, 700.0)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from langgraph_devsched.gpus import GpuCall, candidates, takes_now
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.telemetry import GpuDevice

if TYPE_CHECKING:
    from langgraph_devsched.testbed import SimulatedTestbed


def gpu_load_cost(
    spec: ToolDeviceSpec, tool: str, gpu: GpuDevice, loaded: Collection[tuple[str, int]]
) -> float:
    """Declared time to load the tool's model on ``gpu``: 0 without a model, when it is warm
    there or an earlier call of the batch loads it there (``(model, index)`` in ``loaded``)."""
    model = spec.model_name(tool)
    if model is None or gpu.warm(model) or (model, gpu.index) in loaded:
        return 0.0
    load = spec.load_ms
    return float((load.gpu_ms if load is not None else None) or 0.0)


def allowed_gpus(
    call_id: str, spec: ToolDeviceSpec, devices: Sequence[GpuDevice]
) -> list[GpuDevice]:
    """The devices the call's ``gpus`` hint allows (any when it names none of them)."""
    if spec.gpus is None:
        return list(devices)
    keep = set(candidates(GpuCall(call_id, allowed=spec.gpus), [d.index for d in devices]))
    return [d for d in devices if d.index in keep]


def fitting_gpus(
    call_id: str, spec: ToolDeviceSpec, tool: str, devices: Sequence[GpuDevice]
) -> list[GpuDevice]:
    """The allowed devices (`allowed_gpus`) that can take the call now (`gpus.takes_now`:
    below their cap, its memory fits once their idle models are evicted); all the allowed
    ones when none can."""
    allowed = allowed_gpus(call_id, spec, devices)
    call = GpuCall(call_id, spec.model_name(tool), spec.vram_mb, spec.weights_mb)
    return [d for d in allowed if takes_now(call, d)] or allowed


def gpu_option(used: set[int], index: int) -> DeviceOption:
    """``gpu_now`` for the first call given to GPU ``index``, ``gpu_queued`` after it."""
    option: DeviceOption = "gpu_queued" if index in used else "gpu_now"
    used.add(index)
    return option


@dataclass
class WorkerQueues:
    """The list schedulers' workers on several GPUs: a queue end per CPU worker and per GPU,
    and what the batch placed so far (each GPU's first call, the models loaded where).

    `commit` takes the chosen worker, ``(end, on_cpu, index)``, for a call: its queue ends
    there, and the call's option is ``cpu``, or ``gpu_now``/``gpu_queued`` on GPU ``index``."""

    cpu: list[float]
    gpu: dict[int, float]
    gpus: dict[str, int] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)
    loaded: set[tuple[str, int]] = field(default_factory=set)
    cpu_loaded: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def of(cls, cpu_workers: int, devices: Sequence[GpuDevice]) -> WorkerQueues:
        return cls([0.0] * cpu_workers, {d.index: 0.0 for d in devices})

    def commit(self, call_id: str, model: str | None,
               best: tuple[float, int, int]) -> DeviceOption:
        end, on_cpu, where = best
        if on_cpu:
            self.cpu[where] = end
            if model is not None:
                self.cpu_loaded.add((model, "cpu"))
            return "cpu"
        self.gpu[where] = end
        self.gpus[call_id] = where
        if model is not None:
            self.loaded.add((model, where))
        return gpu_option(self.used, where)


def interchangeable_gpus(bed: SimulatedTestbed) -> list[int]:
    """Per GPU of ``bed``, the first index of the GPUs alike to it (spec: memory, speed,
    background, name; and resident weights): placements that differ only by swapping alike
    GPUs are equal, so the oracle and the policy's placement search try one of them."""
    state = bed.device_state()
    keys = [(spec, dev.resident) for spec, dev in zip(bed.gpus, state.devices, strict=True)]
    return [keys.index(key) for key in keys]
