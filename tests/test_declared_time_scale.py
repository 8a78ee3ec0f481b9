"""A declared CPU time that no solo run measured is corrected from the runs beside other
calls (`fit_contention`'s CPU scale, docs/monitor.md step 2).

With `--declare 'noisy(0.3)'` the tools' declared profiles are off by up to 30-60 %. A tool
that only ever ran on the CPU beside other calls (four detectors sharing the CPU) had no solo
measurement there, so its declared time stood: the twin kept a detector at 160 ms on the
CPU where it takes 190, and `parallel_vision_burst` ended 2.2 % off the optimum.
"""

from __future__ import annotations

import pytest

from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor.observations import Observations
from langgraph_devsched.schedulers.policy.model import estimate_params
from tests.builtin_bench import run_builtin

pytest.importorskip("numpy")


def test_a_wrong_declared_cpu_time_that_never_ran_alone_is_corrected() -> None:
    scenario = run_builtin("parallel_vision_burst", declare="noisy(0.3)")
    monitor = scenario.results["monitor"]
    assert monitor.optimal, (monitor.final_mapping, scenario.optimal_mapping)


def test_the_scale_applies_only_to_a_declared_cpu_time() -> None:
    spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=160, gpu_ms=60, transfer_ms=10))
    p = estimate_params("det", spec, Observations(step=0), bg_share=0.0, cpu_scale=1.2)
    assert (p.cpu_ms, p.gpu_ms, p.transfer_ms) == (pytest.approx(192.0), 50.0, 10.0)
    plain = estimate_params("det", ToolDeviceSpec(), Observations(step=0), bg_share=0.0,
                            cpu_scale=1.2)
    assert plain.cpu_ms == estimate_params(
        "det", ToolDeviceSpec(), Observations(step=0), bg_share=0.0).cpu_ms
