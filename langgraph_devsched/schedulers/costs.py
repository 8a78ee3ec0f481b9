"""Declared solo costs: what static schedulers read from a tool's hints (never the testbed).

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=400, gpu_ms=30, transfer_ms=5))
>>> declared_cost(spec, "cpu"), declared_cost(spec, "gpu"), declared_transfer(spec)
(400.0, 30.0, 5.0)
>>> declared_cost(ToolDeviceSpec(gpu_capable=False), "gpu")
inf
"""

from __future__ import annotations

import math
from typing import Literal

from langgraph_devsched.hints import ToolDeviceSpec

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
