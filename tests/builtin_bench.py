"""One built-in scenario through the bench's own entry point, quality only, as `devsched
bench --scenarios langgraph_devsched/scenarios/NAME.yaml --decision-cost none` runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import langgraph_devsched
from langgraph_devsched.bench.command import run_bench_command
from langgraph_devsched.bench.runner import ScenarioResult

BUILTINS = Path(langgraph_devsched.__file__).parent / "scenarios"


UNBUDGETED = {"monitor": {"max_decision_ms": None}}
"""The monitor policy with no time budget on its decisions: its search and fit run to the end
on any machine, so a quality verdict never depends on the machine's speed or load (the
default 100 ms wall-clock budget cuts them short on a slow or loaded machine)."""


def run_builtin(name: str, schedulers: tuple[str, ...] = ("monitor", "oracle"),
                **options: Any) -> ScenarioResult:
    """The result of built-in ``name`` (``options``: `run_bench_command`'s, e.g. declare,
    physics, noise, seed), the monitor unbudgeted."""
    result = run_bench_command(scenarios=BUILTINS / f"{name}.yaml", schedulers=list(schedulers),
                               decision_cost="none", scheduler_options=UNBUDGETED, **options)
    (scenario,) = result.scenarios
    return scenario
