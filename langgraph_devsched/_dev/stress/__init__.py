"""Reliability harness: drive `DeviceToolNode` with injected faults and check its invariants."""

from langgraph_devsched._dev.stress.driver import StressConfig, run_stress
from langgraph_devsched._dev.stress.faults import DEFAULT_RATES, FAULT_KINDS, parse_fault_rates
from langgraph_devsched._dev.stress.report import StressReport

__all__ = [
    "DEFAULT_RATES",
    "FAULT_KINDS",
    "StressConfig",
    "StressReport",
    "parse_fault_rates",
    "run_stress",
]
