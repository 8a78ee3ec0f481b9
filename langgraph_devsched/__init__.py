"""langgraph_devsched: schedule every LangGraph tool call on the GPU now, the GPU queue or the CPU.

The top level holds what an application touches: the node, its hints, the backends, the
simulated testbed and the read-backs. Scheduler authors import from
`langgraph_devsched.schedulers`; the other names that used to live here still work for one
release and warn once each (see ``_MOVED``).

>>> from langgraph_devsched import DeviceToolNode, device_hints
>>> from langgraph_devsched.options import DEVICE_OPTIONS
>>> DEVICE_OPTIONS
('gpu_now', 'gpu_queued', 'cpu')
"""

import importlib as _importlib
import warnings as _warnings
from importlib import metadata as _metadata
from typing import Any as _Any

from langgraph_devsched.device import InjectedDevice, current_device, current_placement
from langgraph_devsched.executors import GpuConfig, LocalBackend
from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec, device_hints, load_hints_file
from langgraph_devsched.models import ResidentModel
from langgraph_devsched.node import DeviceToolNode, StepReport
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

try:
    __version__ = _metadata.version("langgraph-devsched")
except _metadata.PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "DeviceToolNode",
    "GpuConfig",
    "InjectedDevice",
    "LocalBackend",
    "ResidentModel",
    "SimulatedTestbed",
    "SoloProfile",
    "StepReport",
    "ToolDeviceSpec",
    "ToolParams",
    "__version__",
    "current_device",
    "current_placement",
    "device_hints",
    "load_hints_file",
]

# Names the top level exported before it kept to what an application touches: each still
# resolves (imported on first use) and warns once, naming its home. Removed next release.
_MOVED: dict[str, str] = {
    "DEVICE_OPTIONS": "langgraph_devsched.options",
    "DeviceOption": "langgraph_devsched.options",
    "Placement": "langgraph_devsched.device",
    "SimulatedBackend": "langgraph_devsched.executors",
    "VramLedger": "langgraph_devsched.ledger",
    "ModelCache": "langgraph_devsched.models",
    "CallRecord": "langgraph_devsched.records",
    "StepRecord": "langgraph_devsched.records",
    "Batch": "langgraph_devsched.schedulers",
    "Decision": "langgraph_devsched.schedulers",
    "Scheduler": "langgraph_devsched.schedulers",
    "SchedulerView": "langgraph_devsched.schedulers",
    "make_scheduler": "langgraph_devsched.schedulers",
    "AgenticScheduler": "langgraph_devsched.schedulers.agentic",
    "BackgroundLoad": "langgraph_devsched.testbed",
}
_warned: set[str] = set()


def __getattr__(name: str) -> _Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _warned:
        _warned.add(name)
        _warnings.warn(
            f"langgraph_devsched.{name} moved: import it from {home} "
            "(the top-level name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
    return getattr(_importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MOVED))
