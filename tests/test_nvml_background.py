"""Without a shared ledger, a GPU's admission background follows NVML's live reading of the
memory other processes hold (a fake NVML; a declared GPU, no CUDA needed)."""

from __future__ import annotations

import os
import sys
import types
from typing import Annotated, Any

import pytest
from langchain_core.tools import tool

from langgraph_devsched import DeviceToolNode, GpuConfig, InjectedDevice, LocalBackend
from tests import process_workers as pw

MB = 2**20


def fake_nvml(processes: dict[int, float | None]) -> Any:
    """NVML over one GPU whose compute processes are ``processes`` (pid -> MB, read live)."""
    return types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetName=lambda h: b"Fake GPU",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=0),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=1000 * MB, used=0),
        nvmlDeviceGetProcessUtilization=lambda h, t: [],
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            types.SimpleNamespace(pid=p, usedGpuMemory=None if mb is None else int(mb * MB))
            for p, mb in processes.items()],
    )


def run(node: DeviceToolNode, call_id: str) -> str:
    return pw.ask(pw.graph(node), "big", call_id)


@tool
def big(text: str, device: Annotated[str, InjectedDevice]) -> str:
    """Run on 700 MB of VRAM."""
    return device


HINTS = {"big": {"vram_mb": 700, "pinned": "gpu_now"}}


def test_a_lone_process_leaves_strangers_memory_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    processes: dict[int, float | None] = {os.getpid(): 200.0, 4242: 600.0}
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(processes))
    reports: list[Any] = []
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), nvml_background=True,
                           telemetry_ttl_s=0.0)
    node = DeviceToolNode([big], hints=HINTS, backend=backend, on_step=reports.append)
    # a stranger holds 600 of 1000 MB (this process's own 200 do not count): 700 do not fit
    assert run(node, "a") == "cpu"
    assert reports[-1].record.calls[0].fallback == "vram_over_budget"
    processes[4242] = 100.0  # the stranger shrank: the next step's reading follows
    assert run(node, "b") == "cuda:0"
    processes[4242] = None  # NVML cannot attribute it: the last figure stays
    assert run(node, "c") == "cuda:0"


def test_declared_gpus_do_not_follow_nvml_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({4242: 900.0}))
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), telemetry_ttl_s=0.0)
    node = DeviceToolNode([big], hints=HINTS, backend=backend)
    assert run(node, "a") == "cuda:0"
