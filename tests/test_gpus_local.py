"""The local backend on several GPUs, declared (no CUDA needed here): one ledger, one model
cache and one ``gpu_concurrency`` cap per GPU; the tool gets ``cuda:k``; NVML reads the
device CUDA numbers, by index or UUID, through ``CUDA_VISIBLE_DEVICES``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from langgraph_devsched import GpuConfig, LocalBackend, ResidentModel
from langgraph_devsched.device import Placement
from langgraph_devsched.executors.base import PlannedCall
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.telemetry import nvml_reading, nvml_target

MB = 2**20


def two(**kw: Any) -> LocalBackend:
    return LocalBackend(gpu=[GpuConfig(8000, "cuda:0"), GpuConfig(4000, "cuda:1", speed=2.0)],
                        **kw)


def call(cid: str, gpu: int | None, vram_mb: float = 1000, option: str = "gpu_now",
         **spec: Any) -> PlannedCall:
    return PlannedCall(cid, "t", option, ToolDeviceSpec(vram_mb=vram_mb, **spec), gpu)  # type: ignore[arg-type]


def test_each_declared_gpu_is_a_device_with_its_own_ledger() -> None:
    backend = two()
    a, b = backend.device_state().devices
    assert (a.device, a.budget_mb, a.speed, b.device, b.budget_mb, b.speed) == (
        "cuda:0", 8000, 1.0, "cuda:1", 4000, 2.0)
    assert [ledger.capacity_mb for ledger in backend.ledgers] == [8000, 4000]
    assert LocalBackend(gpu=False).device_state().devices == ()
    assert len(LocalBackend(gpu=GpuConfig(8000)).ledgers) == 1


def test_a_call_runs_on_its_gpu_and_its_vram_goes_back_to_that_ledger() -> None:
    backend = two()
    step = backend.start_step([call("a", 1, 3000), call("b", 0, 3000)])
    seen: dict[str, tuple[str, list[float]]] = {}

    def run_b(p: Placement) -> tuple[str, bool]:
        seen["b"] = (p.device, [ledger.in_use_mb for ledger in backend.ledgers])
        return p.device, False

    def run_a(p: Placement) -> tuple[str, bool]:
        seen["a"] = (p.device, [ledger.in_use_mb for ledger in backend.ledgers])
        step.run_sync("b", run_b)  # b is placed while a holds GPU 1
        return p.device, False

    assert step.run_sync("a", run_a) == "cuda:1"
    assert seen == {"a": ("cuda:1", [0.0, 3000.0]), "b": ("cuda:0", [3000.0, 3000.0])}
    assert [ledger.in_use_mb for ledger in backend.ledgers] == [0.0, 0.0]
    assert {c.call_id: c.device for c in step.record().calls} == {"a": "cuda:1", "b": "cuda:0"}


def test_a_call_that_names_no_gpu_gets_the_default_rule() -> None:
    step = two().start_step([call("a", None, 5000), call("b", None, 2000)])
    # a: most free is GPU 0 (8000 MB); then GPU 0 has 3000 MB left, GPU 1 4000 MB
    assert step.run_sync("a", lambda p: (p.device, False)) == "cuda:0"
    assert step.run_sync("b", lambda p: (p.device, False)) == "cuda:1"


def test_gpu_concurrency_is_per_gpu() -> None:
    backend = two(gpu_concurrency=1)
    step = backend.start_step([call("a", 0), call("b", 1), call("c", 0)])
    got: dict[str, tuple[str, str | None]] = {}

    def inner(cid: str, then: str | None) -> Any:
        def run(p: Placement) -> tuple[str, bool]:
            got[cid] = (p.device, p.fallback)
            if then is not None:
                step.run_sync(then, inner(then, "c" if then == "b" else None))
            return p.device, False
        return run

    step.run_sync("a", inner("a", "b"))
    assert got == {"a": ("cuda:0", None), "b": ("cuda:1", None), "c": ("cpu", "gpu_busy")}


def test_resident_models_are_cached_per_gpu_and_close_frees_every_gpu() -> None:
    backend = two()
    loads: list[str] = []
    llm = ResidentModel("llm", load=lambda device: loads.append(device) or device, weights_mb=2000)
    spec = {"model": "llm", "weights_mb": 2000}
    step = backend.start_step([call("a", 1, 500, **spec), call("b", 1, 500, **spec),
                               call("c", 0, 500, **spec)])
    for cid in "abc":
        step.run_sync(cid, lambda p: (llm.get(), False))
    assert loads == ["cuda:1", "cuda:0"]  # b found it warm on GPU 1, c loaded it on GPU 0
    a, b = backend.device_state().devices
    assert a.warm("llm") and b.warm("llm")
    assert [ledger.weights_mb for ledger in backend.ledgers] == [2000, 2000]
    backend.close()
    assert [ledger.in_use_mb for ledger in backend.ledgers] == [0.0, 0.0]
    assert [cache.resident() for cache in backend.caches] == [(), ()]


def test_a_bad_gpu_list_is_named() -> None:
    with pytest.raises(ValueError, match="must be cuda:0, cuda:1 in order"):
        LocalBackend(gpu=[GpuConfig(8000, "cuda:1"), GpuConfig(8000, "cuda:0")])
    with pytest.raises(ValueError, match="a non-empty list of GpuConfig"):
        LocalBackend(gpu=[8000])  # type: ignore[list-item]


def test_nvml_reads_the_device_cuda_numbers_by_index_or_uuid() -> None:
    assert nvml_target(0, {"CUDA_VISIBLE_DEVICES": "3,1"}) == 3
    assert nvml_target(1, {"CUDA_VISIBLE_DEVICES": "3,1"}) == 1
    assert nvml_target(0, {"CUDA_VISIBLE_DEVICES": "GPU-5a1e,0"}) == "GPU-5a1e"
    assert nvml_target(2, {}) == 2
    seen: list[object] = []
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 4,
        nvmlDeviceGetHandleByIndex=lambda i: seen.append(i) or i,
        nvmlDeviceGetHandleByUUID=lambda u: seen.append(u) or u,
        nvmlDeviceGetName=lambda h: f"gpu {h}",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=10),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=24000 * MB, used=0),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [],
        nvmlDeviceGetProcessUtilization=lambda h, t: [])
    assert nvml_reading("GPU-5a1e", nvml=nvml).name == "gpu GPU-5a1e"
    assert nvml_reading(3, nvml=nvml).name == "gpu 3"
    assert seen == ["GPU-5a1e", 3]


REPO = Path(__file__).resolve().parents[1]


def test_the_devices_check_passes_on_declared_gpus(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "scripts" / "gpu_devices_check.py"
    spec = importlib.util.spec_from_file_location("gpu_devices_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    assert module.main(["--declared", "3", "--json", str(tmp_path / "d.json")]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out and "8/8 passed on 3 GPU(s) (declared)" in out
    shell = (REPO / "scripts" / "gpu_check.sh").read_text()
    assert "scripts/gpu_devices_check.py --json" in shell
    res = subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu_check.sh")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
