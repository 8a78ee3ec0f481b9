"""The sub-agent sees loads as investments: a cold model's forecast uses beside its load time,
from the policy it runs beside (an observation, never a prescription)."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage

from langgraph_devsched.hints import LoadProfile, SoloProfile, ToolDeviceSpec
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, Decision, Preload, SchedulerView
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


class _Investing:
    """A policy whose decision loads a model in the background of its step (and hedges)."""

    name = "investing"

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def decide(self, batch: Batch, view: Any) -> Decision:
        return Decision(mapping=dict(self.mapping), reason="invest",
                        background=(Preload("sst", 0, 800.0, 40.0),),
                        hedges={"c0": "gpu_now"})

    def observe(self, *args: Any) -> None:
        pass


def test_the_policy_s_background_loads_ride_with_its_mapping() -> None:
    """Where the step runs the policy's mapping (decided without asking, or answered so),
    the policy's background loads and hedges come with it: they are its investments for
    that mapping. Dropped, the agentic scheduler paid on the critical path a load the
    monitor ran beside a CPU step (gen-s1-9: 5,540 ms against the monitor's 4,587, with no
    deviation). A deviation runs without them: they were sized for another mapping."""
    batch = Batch.of([("c0", "sentiment", SPEC)])
    view = SchedulerView(DeviceState(True, "gpu", 16000, 0, 0.0, 8))
    policy = AgenticScheduler(ToolScriptModel(script=[AIMessage('{"c0": "cpu"}')]),
                              fallback=_Investing({"c0": "cpu"}))
    decision = policy.decide(batch, view)
    assert dict(decision.mapping) == {"c0": "cpu"}
    assert decision.background == (Preload("sst", 0, 800.0, 40.0),)
    assert dict(decision.hedges) == {"c0": "gpu_now"}
    deviating = AgenticScheduler(ToolScriptModel(script=[AIMessage('{"c0": "gpu_now"}')]),
                                 fallback=_Investing({"c0": "cpu"}), guard_ratio=None)
    decision = deviating.decide(batch, view)
    assert dict(decision.mapping) == {"c0": "gpu_now"}
    assert decision.background == () and dict(decision.hedges) == {}


def test_a_model_answering_inside_the_schema_costs_nothing_on_a_generated_workload() -> None:
    """gen-s1-9, a workload no scheduler was tuned on: the agentic scheduler beside a model
    answering whatever the schema admits, against the monitor alone in the same run."""
    from langgraph_devsched.bench.generate import generated_scenario
    from tests.test_agentic_admitted import against_the_monitor

    scenario = generated_scenario(1, 9)
    agentic, monitor = against_the_monitor(scenario, seed=1, rounds=scenario.workload.rounds)
    assert agentic.preloads == monitor.preloads >= 1
    assert agentic.total_ms <= monitor.total_ms + 1e-6


def test_pricing_an_answer_leaves_the_policy_s_scores_as_they_were() -> None:
    """The agentic scheduler asks its policy to score answers (`DefaultPolicy.scored`): a
    question, not a decision. The policy's own scores, from which it reads its near-ties at
    its next decision, hold only what it scored itself (its search leaves some mappings of
    an eight-call step unscored)."""
    import itertools

    spec = ToolDeviceSpec(vram_mb=500, profile=SoloProfile(cpu_ms=300, gpu_ms=40))
    batch = Batch.of([(f"c{i}", f"t{i}", spec) for i in range(8)])
    view = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0.0, 8))
    policy = make_scheduler("monitor", max_decision_ms=None)
    policy.decide(batch, view)
    kept = policy._scores[1]  # the scores its last decision was made with
    before = dict(kept.values)
    others = [combo for combo in itertools.product(("cpu", "gpu_now", "gpu_queued"), repeat=8)
              if combo not in before][:20]
    assert others  # there is something it did not score itself
    for combo in others:
        assert policy.scored(batch, dict(zip(batch.call_ids, combo, strict=True))) is not None
    assert kept.values == before
