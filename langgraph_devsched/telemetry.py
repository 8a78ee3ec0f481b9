"""Device state as telemetry shows it: CUDA through torch, NVML through `pynvml`.

Both are optional. When either is missing (no package, no driver, no GPU) the state says
why in ``reason`` and the node keeps working on the CPU. On the simulated testbed the same
interface (`TelemetrySource.device_state`) reports the simulated state.

>>> state = DeviceState.cpu_only("no GPU here", cpu_cores=2)
>>> state.gpu_available, state.reason
(False, 'no GPU here')
>>> reading = nvml_reading(nvml=None)     # no pynvml: a reading that says why
>>> reading.ok, reading.reason.startswith("pynvml is not installed")
(False, True)
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from langgraph_devsched.residency import WarmModel

_MB = 2**20


@dataclass(frozen=True)
class GpuProcess:
    """One process holding GPU memory, as NVML lists it."""

    pid: int
    used_mb: float | None
    """None where NVML cannot attribute memory (e.g. inside some containers)."""
    sm_utilization: float | None = None
    """Mean fraction of the last `UTILIZATION_WINDOW_S` its kernels ran on the SMs (NVML's
    per-process samples); None where the driver keeps none."""


@dataclass(frozen=True)
class GpuDevice:
    """One GPU of the machine as a scheduler may see it: telemetry and declarations only.

    >>> gpu = GpuDevice(1, "L4", 24000, used_mb=1000, resident=(WarmModel("llm", 8000),))
    >>> gpu.device, gpu.free_mb, gpu.warm("llm")
    ('cuda:1', 15000.0, True)
    """

    index: int
    name: str
    budget_mb: float
    used_mb: float = 0.0
    """What else holds this GPU (other processes, the background): not the resident weights."""
    utilization: float = 0.0
    """Other processes' utilization of this GPU (0-1)."""
    resident: tuple[WarmModel, ...] = ()
    """Model weights resident on this GPU now, least recently used first."""
    speed: float = 1.0
    """Declared relative compute speed (1: the reference GPU; 2: twice as fast)."""
    working_mb: float = 0.0
    """Working memory the calls running here now reserve (their weights are in
    ``resident``); 0 where the reader does not see them (telemetry alone)."""
    active: int = 0
    """Calls running on this GPU now (as its ledger counts them)."""
    max_active: int | None = None
    """Its concurrency cap (``gpu_concurrency``), None: none."""

    @property
    def device(self) -> str:
        """The device string a tool placed here receives (``cuda:<index>``)."""
        return f"cuda:{self.index}"

    @property
    def resident_mb(self) -> float:
        return sum(w.weights_mb for w in self.resident if w.side == "gpu")

    @property
    def free_mb(self) -> float:
        """The budget less what else holds it and the resident weights."""
        return float(self.budget_mb - self.used_mb - self.resident_mb)

    def warm(self, model: str) -> bool:
        """Whether ``model``'s weights are resident on this GPU now."""
        return any(w.model == model and w.side == "gpu" for w in self.resident)

    @property
    def room_mb(self) -> float:
        """What a call could get here now once every idle model is evicted: the budget less
        what else holds it, the running calls' working memory, and the weights in use or
        kept warm."""
        kept = sum(w.weights_mb for w in self.resident
                   if w.side == "gpu" and (w.in_use > 0 or w.keep_warm))
        return float(self.budget_mb - self.used_mb - self.working_mb - kept)

    @property
    def at_cap(self) -> bool:
        """Whether it already runs its concurrency cap of calls."""
        return self.max_active is not None and self.active >= self.max_active


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
    processes: tuple[GpuProcess, ...] = ()
    """Processes holding GPU memory (NVML), empty when unknown."""
    resident: tuple[WarmModel, ...] = ()
    """Model weights resident now (GPU and host side), least recently used first.
    ``vram_used_mb`` leaves out the GPU weights listed here (it is what else holds the GPU)."""
    gpus: tuple[GpuDevice, ...] = ()
    """Per GPU, on a machine with several (then the flat fields above describe GPU 0, and
    ``resident`` lists every GPU's weights); empty: the one GPU the flat fields describe."""

    @property
    def devices(self) -> tuple[GpuDevice, ...]:
        """The GPUs a call may be placed on (none without a GPU; one GPU: index 0)."""
        if self.gpus:
            return self.gpus
        if not self.gpu_available:
            return ()
        return (GpuDevice(0, self.gpu_name, self.vram_budget_mb, self.vram_used_mb,
                          self.gpu_utilization,
                          tuple(w for w in self.resident if w.side == "gpu")),)

    def warm(self, model: str, side: str = "gpu") -> bool:
        """Whether ``model``'s weights are resident on ``side`` now."""
        return any(w.model == model and w.side == side for w in self.resident)

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


@runtime_checkable
class TelemetrySource(Protocol):
    """Anything that reports a `DeviceState`: the local machine or a `SimulatedTestbed`."""

    def device_state(self) -> DeviceState: ...


@dataclass(frozen=True)
class NvmlReading:
    """One NVML read of one GPU, or why there is none."""

    ok: bool
    reason: str | None = None
    name: str = ""
    utilization: float = 0.0
    memory_total_mb: float = 0.0
    memory_used_mb: float = 0.0
    processes: tuple[GpuProcess, ...] = ()
    others_utilization: float | None = None
    """The SM utilization of every process but this one (summed, at most 1), from NVML's
    per-process samples; None where there are none: the background, without this process's
    own calls."""


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


UTILIZATION_WINDOW_S = 1.0
"""How far back the per-process utilization samples are read."""


def _process_utilization(
    nvml: Any, handle: Any, *, since_us: int
) -> dict[int, float] | None:
    """Per pid, the mean SM utilization (0-1) of NVML's samples since ``since_us`` (CPU
    time, microseconds); None where the driver keeps no per-process samples (not supported,
    or none since then: NVML_ERROR_NOT_FOUND)."""
    try:
        samples = nvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except Exception:
        return None
    total: dict[int, list[float]] = {}
    for sample in samples:
        value = getattr(sample, "smUtil", None)
        if value is None:
            continue
        total.setdefault(int(sample.pid), []).append(min(100.0, max(0.0, float(value))))
    return {pid: sum(v) / len(v) / 100.0 for pid, v in total.items()} if total else None


def nvml_target(cuda_index: int, env: Mapping[str, str] | None = None) -> int | str:
    """The NVML device behind ``cuda:<cuda_index>``: NVML numbers every GPU of the machine,
    CUDA only the visible ones, in ``CUDA_VISIBLE_DEVICES`` order (an index, or a ``GPU-``
    / ``MIG-`` UUID, each entry). An index (NVML's) or a UUID string.

    >>> nvml_target(1, {"CUDA_VISIBLE_DEVICES": "2,0"}), nvml_target(0, {})
    (0, 0)
    >>> nvml_target(0, {"CUDA_VISIBLE_DEVICES": "GPU-8f2a"})
    'GPU-8f2a'
    """
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return cuda_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if cuda_index >= len(entries):
        return cuda_index
    entry = entries[cuda_index]
    return int(entry) if entry.isascii() and entry.isdigit() else entry


def nvml_reading(
    device_index: int | str = 0, *, nvml: Any = ..., pid: int | None = None,
    clock: Callable[[], float] = time.time,
) -> NvmlReading:
    """Read utilization, memory, per-process memory and per-process SM utilization (the
    last `UTILIZATION_WINDOW_S`) through NVML, failing soft. ``device_index``: NVML's index,
    or a device UUID (`nvml_target` maps a CUDA index to one of them).

    ``nvml`` injects the module (tests); ``None`` means "not installed". ``pid``: this
    process (default ``os.getpid()``), left out of ``others_utilization``; ``clock``: wall
    time in seconds, as NVML's sample timestamps count it.
    """
    if nvml is ...:
        try:
            nvml = _import_pynvml()
        except ImportError:
            nvml = None
    if nvml is None:
        return NvmlReading(False, "pynvml is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NvmlReading(False, f"NVML init failed ({type(exc).__name__}: {exc}); no driver?")
    try:
        if isinstance(device_index, str):
            handle = nvml.nvmlDeviceGetHandleByUUID(device_index)
        else:
            count = nvml.nvmlDeviceGetCount()
            if device_index >= count:
                return NvmlReading(
                    False, f"NVML sees {count} GPU(s); index {device_index} is absent")
            handle = nvml.nvmlDeviceGetHandleByIndex(device_index)
        name = nvml.nvmlDeviceGetName(handle)
        if isinstance(name, bytes):
            name = name.decode()
        util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        sm = _process_utilization(
            nvml, handle, since_us=int((clock() - UTILIZATION_WINDOW_S) * 1e6))
        processes: tuple[GpuProcess, ...] = ()
        try:
            processes = tuple(
                GpuProcess(
                    int(p.pid),
                    None if getattr(p, "usedGpuMemory", None) is None else p.usedGpuMemory / _MB,
                    None if sm is None else sm.get(int(p.pid), 0.0),
                )
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            )
        except Exception:  # per-process info is optional (not supported everywhere)
            processes = ()
        me = os.getpid() if pid is None else pid
        others = None if sm is None else min(1.0, sum(u for p, u in sm.items() if p != me))
        return NvmlReading(
            True, None, str(name), float(util), mem.total / _MB, mem.used / _MB, processes,
            others,
        )
    except Exception as exc:
        return NvmlReading(False, f"NVML query failed ({type(exc).__name__}: {exc})")
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def cuda_status(device_index: int = 0) -> tuple[bool, str | None]:
    """Whether CUDA is usable through torch, and if not, why."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed (pip install torch)"
    try:
        if not torch.cuda.is_available():
            return False, f"torch {torch.__version__} sees no CUDA device (CPU build or no driver)"
        if device_index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            return False, f"cuda:{device_index} does not exist ({count} devices)"
    except Exception as exc:  # a broken driver must not take the app down
        return False, f"CUDA probe failed: {exc}"
    return True, None


def cuda_device_count() -> int:
    """How many CUDA devices torch sees (the visible ones), 0 without torch or CUDA."""
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:
        return 0


def local_device_state(device_index: int = 0, vram_budget_mb: float | None = None) -> DeviceState:
    """Read the local GPU ``cuda:<device_index>``'s state (torch.cuda memory; NVML
    utilization and processes of the same device, `nvml_target`).

    Without CUDA through torch the node cannot run tools on the GPU, so the state is CPU-only
    with the reason (NVML's view is added to the reason when it sees a GPU anyway).
    """
    ok, reason = cuda_status(device_index)
    nvml = nvml_reading(nvml_target(device_index))
    if not ok:
        if nvml.ok:
            reason = f"{reason}; NVML sees {nvml.name} ({nvml.memory_used_mb:.0f} MB used)"
        return DeviceState.cpu_only(reason or "no GPU")
    import torch

    try:
        free_b, total_b = torch.cuda.mem_get_info(device_index)
        name = torch.cuda.get_device_name(device_index)
    except Exception as exc:
        return DeviceState.cpu_only(f"torch.cuda.mem_get_info failed: {exc}")
    total_mb = total_b / _MB
    return DeviceState(
        gpu_available=True,
        gpu_name=name,
        vram_budget_mb=min(vram_budget_mb or total_mb, total_mb),
        vram_used_mb=(total_b - free_b) / _MB,
        # the background is what other processes use: this process's own running calls are
        # not (NVML's device counter counts them too; its per-process samples do not)
        gpu_utilization=(nvml.utilization if nvml.others_utilization is None
                         else nvml.others_utilization) if nvml.ok else 0.0,
        cpu_cores=os.cpu_count() or 1,
        reason=None if nvml.ok else f"{nvml.reason}; utilization unknown",
        processes=nvml.processes,
    )


def read_device_state(source: TelemetrySource | None = None) -> DeviceState:
    """The state from ``source`` (e.g. a `SimulatedTestbed`), else the local machine's."""
    if source is not None:
        return source.device_state()
    return local_device_state()
