"""Telemetry fails soft with a reason; NVML and torch.cuda readings; the simulated source."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from langgraph_devsched.telemetry import (
    DeviceState,
    GpuProcess,
    TelemetrySource,
    cuda_status,
    local_device_state,
    nvml_reading,
    read_device_state,
)
from langgraph_devsched.testbed import BackgroundLoad, SimulatedTestbed, ToolParams

MB = 2**20


class FakeNvmlError(Exception):
    pass


def fake_nvml(*, init_error: Exception | None = None, processes_error: bool = False,
              count: int = 1, samples: list[tuple[int, int]] | None = None) -> Any:
    """``samples``: NVML's per-process utilization samples as (pid, SM %); None: the
    driver keeps none (the call raises, as NVML_ERROR_NOT_FOUND or Not Supported does)."""
    calls: list[str] = []
    since: list[int] = []

    def process_utilization(handle: object, time_stamp: int) -> list[Any]:
        since.append(time_stamp)
        if samples is None:
            raise FakeNvmlError("Not Found")
        return [types.SimpleNamespace(pid=p, smUtil=u, memUtil=0, timeStamp=time_stamp + 1)
                for p, u in samples]

    def init() -> None:
        calls.append("init")
        if init_error is not None:
            raise init_error

    def processes(handle: object) -> list[Any]:
        if processes_error:
            raise FakeNvmlError("Not Supported")
        return [types.SimpleNamespace(pid=42, usedGpuMemory=512 * MB),
                types.SimpleNamespace(pid=43, usedGpuMemory=None)]

    return types.SimpleNamespace(
        calls=calls,
        since=since,
        nvmlDeviceGetProcessUtilization=process_utilization,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetName=lambda h: b"Fake H100",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=37),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80000 * MB, used=3000 * MB),
        nvmlDeviceGetComputeRunningProcesses=processes,
    )


def test_nvml_missing_package_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    reading = nvml_reading()
    assert not reading.ok
    assert reading.reason == "pynvml is not installed (pip install nvidia-ml-py)"


def test_nvml_without_driver_says_so() -> None:
    nvml = fake_nvml(init_error=FakeNvmlError("Driver Not Loaded"))
    reading = nvml_reading(nvml=nvml)
    assert not reading.ok
    assert reading.reason == "NVML init failed (FakeNvmlError: Driver Not Loaded); no driver?"


def test_nvml_missing_index_says_so() -> None:
    reading = nvml_reading(3, nvml=fake_nvml(count=1))
    assert not reading.ok and reading.reason == "NVML sees 1 GPU(s); index 3 is absent"


def test_nvml_reads_utilization_memory_and_processes() -> None:
    nvml = fake_nvml()
    reading = nvml_reading(nvml=nvml)
    assert reading.ok and reading.reason is None
    assert (reading.name, reading.utilization) == ("Fake H100", 0.37)
    assert (reading.memory_total_mb, reading.memory_used_mb) == (80000.0, 3000.0)
    assert reading.processes == (GpuProcess(42, 512.0), GpuProcess(43, None))
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_without_per_process_support_still_reads() -> None:
    reading = nvml_reading(nvml=fake_nvml(processes_error=True))
    assert reading.ok and reading.processes == () and reading.memory_used_mb == 3000.0


def test_per_process_utilization_leaves_this_process_out_of_the_background() -> None:
    """NVML's device counter also counts this process's own running calls; a twin that
    took them for background would slow its own calls twice."""
    nvml = fake_nvml(samples=[(42, 60), (42, 80), (43, 20), (44, 100), (44, 0)])
    reading = nvml_reading(nvml=nvml, pid=42, clock=lambda: 1000.0)
    assert reading.utilization == 0.37  # the device counter, as before
    assert reading.others_utilization == pytest.approx(0.2 + 0.5)
    assert reading.processes == (GpuProcess(42, 512.0, pytest.approx(0.7)),
                                 GpuProcess(43, None, pytest.approx(0.2)))
    assert nvml.since == [999_000_000]  # the last second, in NVML's microseconds
    crowded = nvml_reading(nvml=fake_nvml(samples=[(43, 90), (44, 80)]), pid=42)
    assert crowded.others_utilization == 1.0


def test_without_per_process_samples_the_device_counter_stands() -> None:
    reading = nvml_reading(nvml=fake_nvml(samples=None), pid=42)
    assert reading.ok and reading.others_utilization is None
    assert reading.processes == (GpuProcess(42, 512.0), GpuProcess(43, None))


def test_no_torch_means_cpu_only_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    reason = "torch is not installed (pip install torch)"
    assert cuda_status() == (False, reason)
    state = local_device_state()
    assert not state.gpu_available
    assert state.reason == "torch is not installed (pip install torch)"


def fake_torch(*, available: bool) -> Any:
    cuda = types.SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: 1 if available else 0,
        mem_get_info=lambda i: (6000 * MB, 8000 * MB),
        get_device_name=lambda i: "Fake GPU",
    )
    return types.SimpleNamespace(__version__="9.9", cuda=cuda)


def test_nvml_view_is_added_when_torch_sees_no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(available=False))
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    state = local_device_state()
    assert not state.gpu_available
    assert state.reason == (
        "torch 9.9 sees no CUDA device (CPU build or no driver); NVML sees Fake H100 (3000 MB used)"
    )


def test_cuda_with_nvml_reports_memory_utilization_and_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(available=True))
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    state = local_device_state(vram_budget_mb=5000)
    assert state.gpu_available and state.reason is None
    assert state.gpu_name == "Fake GPU"
    assert (state.vram_budget_mb, state.vram_used_mb) == (5000.0, 2000.0)
    assert state.gpu_utilization == 0.37
    assert [p.pid for p in state.processes] == [42, 43]


def test_the_background_utilization_is_the_other_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    monkeypatch.setitem(sys.modules, "torch", fake_torch(available=True))
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(samples=[(os.getpid(), 90), (43, 25)]))
    state = local_device_state()
    assert state.gpu_utilization == 0.25  # not the device's 0.37, nor this process's 0.9


def test_cuda_without_nvml_keeps_working_and_says_utilization_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(available=True))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    state = local_device_state()
    assert state.gpu_available and state.vram_budget_mb == 8000.0
    assert state.gpu_utilization == 0.0
    assert state.reason == "pynvml is not installed (pip install nvidia-ml-py); utilization unknown"


def test_simulated_testbed_is_a_telemetry_source() -> None:
    bed = SimulatedTestbed({"x": ToolParams(cpu_ms=1, gpu_ms=1)}, vram_budget_mb=8000,
                           background=BackgroundLoad(vram_mb=1000, gpu_share=0.4))
    assert isinstance(bed, TelemetrySource)
    state = read_device_state(bed)
    assert state == DeviceState(True, "simulated-gpu", 8000.0, 1000.0, 0.4, 8)


@pytest.mark.gpu
def test_real_gpu_reading() -> None:
    ok, reason = cuda_status()
    if not ok:
        pytest.skip(f"no CUDA GPU: {reason}")
    state = local_device_state()
    assert state.gpu_available and state.vram_budget_mb > 0
    assert 0.0 <= state.gpu_utilization <= 1.0


@pytest.mark.gpu
def test_real_gpu_own_load_is_not_background() -> None:
    ok, reason = cuda_status()
    if not ok:
        pytest.skip(f"no CUDA GPU: {reason}")
    import os
    import time

    import torch

    x = torch.randn(4096, 4096, device="cuda")
    until = time.time() + 1.5
    while time.time() < until:  # this process keeps the SMs busy for the whole window
        x @ x
        torch.cuda.synchronize()
    reading = nvml_reading()
    if reading.others_utilization is None:
        pytest.skip(f"the driver keeps no per-process utilization samples ({reading.reason})")
    own = next((p.sm_utilization for p in reading.processes if p.pid == os.getpid()), None)
    assert own is not None and own > 0.5, reading
    assert reading.others_utilization < reading.utilization, reading
