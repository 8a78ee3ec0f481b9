"""Profile tools on each device and classify them (GPU-preferred, CPU-preferred, neutral,
ambiguous; ``unknown`` when measured on one device only). See docs/profiling.md.

>>> from langgraph_devsched.profiling import Thresholds
>>> Thresholds().neutral_rel
0.1
"""

from langgraph_devsched.profiling.classify import Classification, classify
from langgraph_devsched.profiling.model import (
    DeviceRun,
    LatencyStats,
    Profile,
    Thresholds,
    ToolClass,
    ToolProfile,
    summarize,
)
from langgraph_devsched.profiling.profiler import (
    EXAMPLE_ARGS_KEY,
    load_tools,
    measure,
    parse_devices,
    profile_tools,
)
from langgraph_devsched.profiling.to_hints import profile_hints, write_hints
from langgraph_devsched.profiling.to_testbed import HostRunTestbed, simulated_gpu
from langgraph_devsched.profiling.transfer import recording_transfers, to_device

__all__ = [
    "EXAMPLE_ARGS_KEY",
    "Classification",
    "DeviceRun",
    "HostRunTestbed",
    "LatencyStats",
    "Profile",
    "Thresholds",
    "ToolClass",
    "ToolProfile",
    "classify",
    "load_tools",
    "measure",
    "parse_devices",
    "profile_hints",
    "profile_tools",
    "recording_transfers",
    "simulated_gpu",
    "summarize",
    "to_device",
    "write_hints",
]
