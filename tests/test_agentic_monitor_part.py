"""The monitor's part in the default agentic mode (issue 24): it runs its reprobes itself and
expands what the model observes; the model is asked again when the observations change."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from langgraph_devsched.monitor.observations import Observations, PlacementOutcome
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from tests.agentic_fakes import ToolScriptModel
from tests.test_agentic import BATCH, GPU, OBS, VIEW


class Probing(SchedulerBase):
    """A policy whose every decision is a probe (a symmetric reprobe of asr on the CPU)."""

    name = "probing"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return Decision(mapping={"c1": "cpu", "c2": "gpu_now"}, reason="reprobe asr", probe=True)


def test_the_monitors_reprobe_runs_without_asking_the_model() -> None:
    model = ToolScriptModel(script=[AIMessage('{"c1": "gpu_now", "c2": "cpu"}')])
    scheduler = AgenticScheduler(model, fallback=Probing(), guard_ratio=None)
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "cpu", "c2": "gpu_now"} and decision.probe
    assert decision.llm_calls == 0 and model.received == []
    assert decision.consultation.skipped == "probe" and decision.consultation.mode == "agent"


def test_a_newly_measured_mapping_is_an_observation_the_model_is_asked_about() -> None:
    model = ToolScriptModel(script=[AIMessage('{"c1": "gpu_now", "c2": "cpu"}')])
    scheduler = AgenticScheduler(model, fallback="static", guard_ratio=None)
    assert scheduler.decide(BATCH, VIEW).llm_calls == 1
    assert scheduler.decide(BATCH, VIEW).llm_calls == 0  # nothing changed: cached
    ran = PlacementOutcome(shape=("asr", "embed"), placement=(("asr", "cpu"), ("embed", "cpu")),
                           makespan_ms=80.0, count=1)
    measured = SchedulerView(GPU, Observations(
        step=4, estimates=OBS.estimates, hints=OBS.hints, outcomes=(ran,)))
    again = scheduler.decide(BATCH, measured)
    assert again.llm_calls == 1 and scheduler.consultations == 2
    outcomes = next(m for m in model.received[-1] if getattr(m, "name", "") == "past_outcomes")
    assert '"runs":[[["cpu","cpu"],80,1]]' in str(outcomes.content)
    assert scheduler.decide(BATCH, measured).llm_calls == 0
