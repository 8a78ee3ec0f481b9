"""The runtime monitor: running latency statistics, exploration hints, persisted stats."""

from langgraph_devsched.monitor.bounds import MonitorLimits, MonitorSizes
from langgraph_devsched.monitor.context import LoadContext
from langgraph_devsched.monitor.monitor import RuntimeMonitor
from langgraph_devsched.monitor.observations import Observations, OptionEstimate, PlacementOutcome
from langgraph_devsched.monitor.persist import load_file, load_store, save_file, save_store
from langgraph_devsched.monitor.stats import RunningStat
from langgraph_devsched.monitor.unknowns import ExplorationHint

__all__ = [
    "ExplorationHint",
    "LoadContext",
    "MonitorLimits",
    "MonitorSizes",
    "Observations",
    "OptionEstimate",
    "PlacementOutcome",
    "RunningStat",
    "RuntimeMonitor",
    "load_file",
    "load_store",
    "save_file",
    "save_store",
]
