"""Declared solo costs: what static schedulers read from a tool's hints (never the testbed).

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=400, gpu_ms=30, transfer_ms=5))
>>> declared_cost(spec, "cpu"), declared_cost(spec, "gpu"), declared_transfer(spec)
(400.0, 30.0, 5.0)
>>> declared_cost(ToolDeviceSpec(gpu_capable=False), "gpu")
inf
>>> from langgraph_devsched.hints import LoadProfile
>>> from langgraph_devsched.telemetry import DeviceState
>>> sd = ToolDeviceSpec(weights_mb=6600, load_ms=LoadProfile(gpu_ms=2800, cpu_ms=3500))
>>> cold = DeviceState(True, "gpu", 24000, 0, 0, 8)
>>> load_cost(sd, "edit", "gpu", cold), load_cost(sd, "edit", "gpu", cold, {("edit", "gpu")})
(2800.0, 0.0)
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Literal

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.telemetry import DeviceState

Arch = Literal["cpu", "gpu"]
UNKNOWN_COST_MS = 100.0
"""Assumed solo latency on a device the profile does not cover (same on both devices)."""


def can_use(spec: ToolDeviceSpec, arch: Arch, gpu_available: bool = True) -> bool:
    """Whether the hints let a scheduler put this tool on ``arch``."""
    allowed = spec.allowed_options()
    if arch == "cpu":
        return "cpu" in allowed
    return gpu_available and any(o != "cpu" for o in allowed)


def declared_cost(spec: ToolDeviceSpec, arch: Arch, gpu_available: bool = True) -> float:
    """Declared solo latency on ``arch`` in ms (GPU: transfers included); inf if not allowed."""
    if not can_use(spec, arch, gpu_available):
        return math.inf
    profile = spec.profile
    value = None if profile is None else (profile.cpu_ms if arch == "cpu" else profile.gpu_ms)
    return float(UNKNOWN_COST_MS if value is None else value)


def declared_transfer(spec: ToolDeviceSpec) -> float:
    """Declared host<->device copy time in ms (0 when not profiled)."""
    return float(spec.profile.transfer_ms) if spec.profile is not None else 0.0


def load_cost(
    spec: ToolDeviceSpec, tool: str, arch: Arch, device: DeviceState,
    loaded: Collection[tuple[str, str]] = (),
) -> float:
    """Declared time to load the tool's model on ``arch`` before the call can run: 0 when it
    has no resident model, when the model is warm there (`DeviceState.resident`) or already
    in ``loaded`` (``(model, arch)`` pairs an earlier call of the batch loads)."""
    model = spec.model_name(tool)
    if model is None or device.warm(model, arch) or (model, arch) in loaded:
        return 0.0
    load = spec.load_ms
    value = None if load is None else (load.gpu_ms if arch == "gpu" else load.cpu_ms)
    return float(value or 0.0)
