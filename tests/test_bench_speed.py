"""Brute-force speed: the oracle over one batch of 10 tools (59,049 mappings).

Runs once as a plain test (pyproject sets --benchmark-disable); measure with
``pytest tests/test_bench_speed.py --benchmark-enable``. The target is at most 2 s.
"""

from __future__ import annotations

import pytest

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.schedulers.classic.oracle import OracleScheduler
from tests.test_bench_oracle import ten_tool_bed

pytest.importorskip("numpy")


def test_oracle_ten_tools(benchmark: pytest.FixtureRequest) -> None:
    bed, tools = ten_tool_bed()
    batch = Batch.of([(t, t, ToolDeviceSpec()) for t in tools])
    view = SchedulerView(bed.device_state())
    oracle = OracleScheduler(testbed=bed)
    decision = benchmark(oracle.decide, batch, view)  # type: ignore[operator]
    assert "of 59049 mappings" in decision.reason
    best = bed.makespan([(t, t, decision.mapping[t]) for t in tools])
    assert decision.predicted_ms["makespan"] == best
    all_gpu = bed.makespan([(t, t, "gpu_now") for t in tools])
    assert best < all_gpu
