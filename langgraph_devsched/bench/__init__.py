"""The scenario benchmark: scenario files, the runner, reports and plots (``devsched bench``)."""

from langgraph_devsched.bench.scenario import (
    Scenario,
    ScenarioError,
    load_scenario,
    load_scenarios,
)

__all__ = ["Scenario", "ScenarioError", "load_scenario", "load_scenarios"]
