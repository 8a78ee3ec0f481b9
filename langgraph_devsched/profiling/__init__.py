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
from langgraph_devsched.profiling.transfer import recording_transfers, to_device

__all__ = [
    "EXAMPLE_ARGS_KEY",
    "Classification",
    "DeviceRun",
    "LatencyStats",
    "Profile",
    "Thresholds",
    "ToolClass",
    "ToolProfile",
    "classify",
    "load_tools",
    "measure",
    "parse_devices",
    "profile_tools",
    "recording_transfers",
    "summarize",
    "to_device",
]
