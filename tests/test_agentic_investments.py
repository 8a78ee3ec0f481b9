"""The sub-agent sees loads as investments: a cold model's forecast uses beside its load time,
from the policy it runs beside (an observation, never a prescription)."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage

from langgraph_devsched.hints import LoadProfile, SoloProfile, ToolDeviceSpec
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.schedulers.registry import make_scheduler
from langgraph_devsched.telemetry import DeviceState
from tests.agentic_fakes import ToolScriptModel

SPEC = ToolDeviceSpec(vram_mb=300, model="sst", weights_mb=6000,
                      profile=SoloProfile(cpu_ms=120, gpu_ms=8),
                      load_ms=LoadProfile(gpu_ms=800, cpu_ms=300))


def _the_call(messages: Any) -> dict[str, Any]:
    """The one call's row of the step_calls output the model received."""
    calls = json.loads(next(str(m.content) for m in messages
                            if getattr(m, "name", None) == "step_calls"))
    (row,) = calls.values()
    return dict(row)


def test_a_cold_model_reads_its_forecast_uses_beside_its_load_time() -> None:
    """A model every step calls, cold: from its first step on, step_calls gives its
    forecast uses over the coming steps (at least 3 once in use) beside its 800 ms load;
    once warm on the GPU the figure is left out (nothing to repay). Unscreened: the model
    is asked every step, whatever the evidence admits."""
    model = ToolScriptModel(script=[AIMessage('{"c0": "cpu"}')])
    scheduler = AgenticScheduler(model, fallback=make_scheduler("monitor", max_decision_ms=None),
                                 retry_failed_after=0, screen=False)
    cold = SchedulerView(DeviceState(True, "gpu", 16000, 0, 0.0, 8))
    for i in range(3):
        scheduler.decide(Batch.of([(f"c{i}", "sentiment", SPEC)]), cold)
    seen = [_the_call(m) for m in model.received]
    assert seen[-1]["load_ms"] == {"gpu": 800, "cpu": 300}
    assert seen[-1]["uses_next"] >= 3.0
    warm = SchedulerView(DeviceState(True, "gpu", 16000, 0, 0.0, 8,
                                     resident=(WarmModel("sst", 6000, "gpu"),)))
    scheduler.decide(Batch.of([("c9", "sentiment", SPEC)]), warm)
    assert "uses_next" not in _the_call(model.received[-1])
