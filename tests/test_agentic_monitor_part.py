"""The monitor's part in the default agentic mode (issue 24): it runs its reprobes itself and
expands what the model observes; the model is asked again when the observations change."""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage

from langgraph_devsched.monitor.observations import Observations, PlacementOutcome
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from tests.agentic_fakes import EveryCallAnswers, ToolScriptModel
from tests.test_agentic import BATCH, GPU, OBS, VIEW, ByTool


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
    assert json.loads(str(outcomes.content)) == [
        {"makespan_ms": 80, "n": 1, "options": {"c1": "cpu", "c2": "cpu"}}]
    assert scheduler.decide(BATCH, measured).llm_calls == 0


def _measured(*runs: tuple[str, str, float]) -> SchedulerView:
    """The view with executed mappings of BATCH's shape: (asr option, embed option, ms)."""
    outcomes = tuple(
        PlacementOutcome(shape=("asr", "embed"), placement=(("asr", a), ("embed", e)),
                         makespan_ms=ms, count=2)
        for a, e, ms in runs)
    return SchedulerView(GPU, Observations(step=6, estimates=OBS.estimates, outcomes=outcomes))


def test_an_answer_measured_slower_than_the_fastest_measured_mapping_is_not_kept() -> None:
    """A measured mistake is not repeated: the guard judges by measurement where the answer's
    mapping ran (both figures recorded), and the policy's mapping runs instead: a veto, not a
    failed consultation."""
    model = ToolScriptModel(script=[AIMessage('{"c1": "gpu_now", "c2": "gpu_now"}')] * 2)
    scheduler = AgenticScheduler(model, screen=False,
                                 fallback=ByTool({"asr": "gpu_now", "embed": "cpu"}))
    view = _measured(("gpu_now", "gpu_now", 120.0), ("gpu_now", "cpu", 90.0))
    decision = scheduler.decide(BATCH, view)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    record = decision.consultation
    assert record.veto is not None and (record.veto.kind, record.guard_by) == (
        "refuted", "measured")
    assert (record.guard_answer_ms, record.guard_best_ms) == (120.0, 90.0)
    assert record.cause is None and decision.fallback is None and decision.llm_calls == 1


def test_a_cached_answer_that_measures_slower_is_asked_about_again() -> None:
    model = ToolScriptModel(script=[AIMessage('{"c1": "gpu_now", "c2": "gpu_now"}')] * 3)
    scheduler = AgenticScheduler(model, fallback="static", guard_ratio=10,  # measured only
                                 max_explorations=None)
    first = _measured(("gpu_now", "cpu", 90.0))
    assert dict(scheduler.decide(BATCH, first).mapping) == {"c1": "gpu_now", "c2": "gpu_now"}
    ran = _measured(("gpu_now", "cpu", 90.0), ("gpu_now", "gpu_now", 91.0))  # within 2 %
    assert scheduler.decide(BATCH, ran).llm_calls == 1  # a new mapping measured: asked again
    assert scheduler.decide(BATCH, ran).llm_calls == 0  # nothing new: the cached answer
    slower = _measured(("gpu_now", "cpu", 90.0), ("gpu_now", "gpu_now", 130.0))
    again = scheduler.decide(BATCH, slower)  # the same mappings, the answer's now slower
    assert again.llm_calls == 1 and scheduler.consultations == 3
    assert again.consultation.veto is not None  # and the same answer is not kept


class Predicting(SchedulerBase):
    """A policy whose mapping (asr on the GPU, embed on the CPU) predicts 60 ms."""

    name = "predicting"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return Decision(mapping={"c1": "gpu_now", "c2": "cpu"}, reason="twin",
                        predicted_ms={"c1": 60.0, "c2": 40.0})


def test_the_policys_mapping_never_measured_is_measured_once_before_the_model_is_asked() -> None:
    """The model copies the fastest measured mapping; the policy's own, never run, was never
    among them. Now it is run once, unconsulted (a trial), then the model is asked."""
    model = ToolScriptModel(script=[AIMessage('{"c1": "gpu_now", "c2": "gpu_now"}')] * 2)
    scheduler = AgenticScheduler(model, fallback=Predicting(), guard_ratio=None)
    slower = _measured(("gpu_now", "gpu_now", 90.0))  # 60 ms predicted: worth a run
    trial = scheduler.decide(BATCH, slower)
    assert dict(trial.mapping) == {"c1": "gpu_now", "c2": "cpu"} and trial.probe
    assert trial.llm_calls == 0 and trial.consultation.skipped == "trial"
    assert "never ran" in trial.reason
    both = _measured(("gpu_now", "gpu_now", 90.0), ("gpu_now", "cpu", 61.0))
    asked = scheduler.decide(BATCH, both)  # measured now: the model decides
    assert asked.llm_calls == 1 and not asked.probe
    close = _measured(("gpu_now", "gpu_now", 61.0))  # predicted within 2 %: no trial
    assert AgenticScheduler(model, fallback=Predicting(), guard_ratio=None).decide(
        BATCH, close).consultation.skipped is None
    fresh = AgenticScheduler(model, fallback=Predicting(), guard_ratio=None, mode="pick")
    assert fresh.decide(BATCH, slower).consultation.skipped != "trial"


def make_all_gpu_agentic() -> AgenticScheduler:
    """The policy beside it unbudgeted: its decisions do not depend on the machine's speed."""
    from langgraph_devsched.schedulers.registry import make_scheduler

    return AgenticScheduler(EveryCallAnswers(value="gpu_now"), screen=False, timeout_s=5,
                            fallback=make_scheduler("monitor", max_decision_ms=None))


def test_a_step_that_evicts_what_the_next_step_reloads_is_judged_with_that_reload() -> None:
    """`residency_visual_suite`: an all-GPU answer reloads a diffusion model on every step
    (8,210 ms a round, 3.27x, with Qwen2.5-Coder-1.5B). The policy's mapping predicted the
    same makespan for the step (both pay the load the last eviction caused), so it was never
    tried; priced with the reloads their evictions cost it is, and once measured the
    all-GPU answer is guarded by measurement."""
    from langgraph_devsched.bench.runner import run_scenario
    from langgraph_devsched.bench.scenario import builtin_by_name, load_scenario
    from langgraph_devsched.schedulers.registry import registered

    scenario = load_scenario(builtin_by_name("residency_visual_suite")[0])
    with registered("all_gpu_agentic", "tests.test_agentic_monitor_part:make_all_gpu_agentic"):
        result = run_scenario(scenario, ["all_gpu_agentic"], rounds=6, seed=0)
    row = result.results["all_gpu_agentic"]
    assert row.final_makespan_ms <= 1.01 * result.optimal_makespan_ms, row.round_makespans_ms
    # the policy's mapping tried unconsulted, or the all-GPU answer vetoed by the evidence
    assert row.agentic is not None and (
        row.agentic.skipped.get("trial", 0) + sum(row.agentic.vetoes.values()) >= 1)


def test_a_mapping_whose_one_run_was_a_cold_start_is_read_warm_and_tried_again() -> None:
    """`residency_cold_burst` with Qwen2.5-Coder-1.5B: the policy's mapping first ran while
    its models loaded (2.5 s against 0.6 s warm); the mean of every run kept that, the model
    copied a 0.7 s mapping, 1.21x, and the policy's was never tried again. Now the monitor
    keeps the warm runs' mean apart (``warm_ms``), observations read a mapping by it, and a
    mapping whose one run was cold is tried once more."""
    from langgraph_devsched.hints import ToolDeviceSpec
    from langgraph_devsched.monitor import RuntimeMonitor
    from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

    tools = {"vqa": ToolParams(cpu_ms=800, gpu_ms=100, vram_mb=500, weights_mb=2000,
                               load_gpu_ms=1000, load_cpu_ms=1000)}
    bed = SimulatedTestbed(tools, vram_budget_mb=8000, cpu_cores=4)
    batch = Batch.of([("c1", "vqa", ToolDeviceSpec(vram_mb=500, model="vqa",
                                                    weights_mb=2000))])
    monitor = RuntimeMonitor()
    for _ in range(2):  # a cold run, then a warm one
        monitor.record_step(batch, Decision({"c1": "gpu_now"}),
                            bed.run_step([("c1", "vqa", "gpu_now")]), bed.device_state())
    (outcome,) = monitor.snapshot(batch).outcomes
    assert outcome.makespan_ms == 600.0 and outcome.warm_ms == 100.0

    cold_once = SchedulerView(GPU, Observations(step=6, estimates=OBS.estimates, outcomes=(
        PlacementOutcome(shape=("asr", "embed"), placement=(("asr", "gpu_now"), ("embed", "cpu")),
                         makespan_ms=2500.0, warm_ms=None, count=1),
        PlacementOutcome(shape=("asr", "embed"), placement=(("asr", "gpu_now"),
                                                           ("embed", "gpu_now")),
                         makespan_ms=90.0, warm_ms=90.0, count=3))))
    model = ToolScriptModel(script=[AIMessage('{"c1": "gpu_now", "c2": "gpu_now"}')])
    trial = AgenticScheduler(model, fallback=Predicting(), guard_ratio=None).decide(
        BATCH, cold_once)
    assert trial.consultation.skipped == "trial" and "never ran warm" in trial.reason
