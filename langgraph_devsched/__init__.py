"""langgraph_devsched: schedule every LangGraph tool call on the GPU now, the GPU queue or the CPU.

>>> from langgraph_devsched import DeviceToolNode, DEVICE_OPTIONS
>>> DEVICE_OPTIONS
('gpu_now', 'gpu_queued', 'cpu')
"""

from importlib import metadata as _metadata

from langgraph_devsched.device import InjectedDevice, Placement, current_device, current_placement
from langgraph_devsched.executors import GpuConfig, LocalBackend, SimulatedBackend
from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec, device_hints, load_hints_file
from langgraph_devsched.ledger import VramLedger
from langgraph_devsched.models import ModelCache, ResidentModel
from langgraph_devsched.node import DeviceToolNode, StepReport
from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.schedulers import Batch, Decision, Scheduler, SchedulerView, make_scheduler
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.testbed import BackgroundLoad, SimulatedTestbed, ToolParams

try:
    __version__ = _metadata.version("langgraph-devsched")
except _metadata.PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "DEVICE_OPTIONS",
    "AgenticScheduler",
    "BackgroundLoad",
    "Batch",
    "CallRecord",
    "Decision",
    "DeviceOption",
    "DeviceToolNode",
    "GpuConfig",
    "InjectedDevice",
    "LocalBackend",
    "ModelCache",
    "Placement",
    "ResidentModel",
    "Scheduler",
    "SchedulerView",
    "SimulatedBackend",
    "SimulatedTestbed",
    "SoloProfile",
    "StepRecord",
    "StepReport",
    "ToolDeviceSpec",
    "ToolParams",
    "VramLedger",
    "__version__",
    "current_device",
    "current_placement",
    "device_hints",
    "load_hints_file",
    "make_scheduler",
]
