"""Device state as telemetry shows it: CUDA through torch, NVML through `pynvml`.

Both are optional. When either is missing (no package, no driver, no GPU) the state says
why in ``reason`` and the node keeps working on the CPU.

>>> state = DeviceState.cpu_only("no GPU here", cpu_cores=2)
>>> state.gpu_available, state.reason
(False, 'no GPU here')
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceState:
    """What telemetry shows about the machine: never any tool's hidden parameters."""

    gpu_available: bool
    gpu_name: str
    vram_budget_mb: float
    vram_used_mb: float
    gpu_utilization: float
    cpu_cores: int
    reason: str | None = None

    @classmethod
    def cpu_only(cls, reason: str, *, cpu_cores: int | None = None) -> DeviceState:
        return cls(
            gpu_available=False,
            gpu_name="",
            vram_budget_mb=0.0,
            vram_used_mb=0.0,
            gpu_utilization=0.0,
            cpu_cores=cpu_cores or os.cpu_count() or 1,
            reason=reason,
        )


def cuda_status(device_index: int = 0) -> tuple[bool, str | None]:
    """Whether CUDA is usable through torch, and if not, why."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed (pip install 'langgraph-devsched[gpu]')"
    try:
        if not torch.cuda.is_available():
            return False, f"torch {torch.__version__} sees no CUDA device (CPU build or no driver)"
        if device_index >= torch.cuda.device_count():
            return False, f"cuda:{device_index} does not exist ({torch.cuda.device_count()} devices)"
    except Exception as exc:  # a broken driver must not take the app down
        return False, f"CUDA probe failed: {exc}"
    return True, None


def local_device_state(device_index: int = 0, vram_budget_mb: float | None = None) -> DeviceState:
    """Read the local GPU's state (torch.cuda, then NVML for utilization), failing soft."""
    ok, reason = cuda_status(device_index)
    if not ok:
        return DeviceState.cpu_only(reason or "no GPU")
    import torch

    free_b, total_b = torch.cuda.mem_get_info(device_index)
    name = torch.cuda.get_device_name(device_index)
    utilization = 0.0
    nvml_reason = None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            utilization = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:
        nvml_reason = f"NVML unavailable ({type(exc).__name__}: {exc}); utilization unknown"
    total_mb = total_b / 2**20
    return DeviceState(
        gpu_available=True,
        gpu_name=name,
        vram_budget_mb=min(vram_budget_mb or total_mb, total_mb),
        vram_used_mb=(total_b - free_b) / 2**20,
        gpu_utilization=utilization,
        cpu_cores=os.cpu_count() or 1,
        reason=nvml_reason,
    )
