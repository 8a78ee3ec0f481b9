"""The performance suite (``devsched perf``): decision time, memory, per-step cost and the
node's overhead against `ToolNode`."""

from langgraph_devsched._dev.perf.command import run_perf
from langgraph_devsched._dev.perf.decisions import measure_decisions
from langgraph_devsched._dev.perf.generate import generate_scenario, generate_tools
from langgraph_devsched._dev.perf.overhead import measure_overhead
from langgraph_devsched._dev.perf.steps import measure_steps

__all__ = [
    "generate_scenario",
    "generate_tools",
    "measure_decisions",
    "measure_overhead",
    "measure_steps",
    "run_perf",
]
