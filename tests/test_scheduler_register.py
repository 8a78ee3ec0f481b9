"""A new classical scheduler is one module plus one `register` call: the CLI's bench then runs
it by name next to the built-ins, and bad registrations are refused with a clear error."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from langgraph_devsched.schedulers import make_scheduler, register, scheduler_names, unregister

pytest.importorskip("numpy")

MODULE = '''
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView


class AllCpuScheduler(SchedulerBase):
    """Every call that may run on the CPU runs there."""

    name = "all_cpu_here"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        mapping = {c.call_id: "cpu" if "cpu" in c.spec.allowed_options()
                   else c.spec.allowed_options()[0] for c in batch.calls}
        return self._decision(mapping, "every call on the CPU")
'''

SCENARIO = """\
name: two_tools
category: parallel
testbed: {vram_budget_mb: 8000, cpu_cores: 2, noise: 0.0, seed: 1}
tools:
  a: {params: {cpu_ms: 150, gpu_ms: 100, vram_mb: 1000, gpu_share: 1.0}}
  b: {params: {cpu_ms: 900, gpu_ms: 90, vram_mb: 1000, gpu_share: 1.0}}
workload: {kind: parallel, calls: [a, b], rounds: 2}
"""


@pytest.fixture
def my_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_sched_mod.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_sched_mod:AllCpuScheduler"


def test_a_registered_module_runs_in_the_bench(tmp_path: Path, my_module: str) -> None:
    from typer.testing import CliRunner

    from langgraph_devsched.cli import app

    register("all_cpu_here", my_module)
    try:
        assert "all_cpu_here" in scheduler_names()
        scenario = tmp_path / "two_tools.yaml"
        scenario.write_text(SCENARIO)
        out = tmp_path / "bench.json"
        result = CliRunner().invoke(app, ["bench", "--scenarios", str(scenario), "--schedulers",
                                          "all_cpu_here,all_gpu", "--decision-cost", "none",
                                          "--json", str(out)])
        assert result.exit_code == 0, result.output
        text = out.read_text()
        assert "all_cpu_here" in text and "all_gpu" in text
        json.loads(text)
    finally:
        unregister("all_cpu_here")
    assert "all_cpu_here" not in scheduler_names()


def test_bad_registrations_are_refused(my_module: str) -> None:
    with pytest.raises(ValueError, match=r"already registered.*all_gpu"):
        register("all_gpu", my_module)
    with pytest.raises(ValueError, match="module:Factory"):
        register("no_colon", "my_sched_mod.AllCpuScheduler")
    with pytest.raises(ValueError, match="non-empty string"):
        register("", my_module)
    assert "no_colon" not in scheduler_names()
    with pytest.raises(ValueError, match="unknown scheduler 'no_colon'; valid schedulers: all_gpu"):
        make_scheduler("no_colon")
