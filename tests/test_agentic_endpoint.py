"""The agentic scheduler against a real OpenAI-compatible endpoint, and its cached overhead."""

from __future__ import annotations

import os

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
from langgraph_devsched.schedulers.policy.scheduler import DefaultPolicy
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
from tests.agentic_fakes import ToolScriptModel, submit

PARAMS = {
    "asr": ToolParams(cpu_ms=800, gpu_ms=60, transfer_ms=10, vram_mb=1500, gpu_share=0.6),
    "ocr": ToolParams(cpu_ms=300, gpu_ms=40, transfer_ms=5, vram_mb=3000, gpu_share=0.8),
    "fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40, vram_mb=200, gpu_share=0.2),
}
SPECS = {
    "asr": ToolDeviceSpec(vram_mb=1500, profile=SoloProfile(cpu_ms=800, gpu_ms=70)),
    "ocr": ToolDeviceSpec(vram_mb=3000, profile=SoloProfile(cpu_ms=300, gpu_ms=45)),
    "fft": ToolDeviceSpec(vram_mb=200, profile=SoloProfile(cpu_ms=30, gpu_ms=42)),
}


def warmed(steps: int = 6) -> tuple[Batch, SchedulerView, SimulatedTestbed]:
    """A batch and a view whose monitor has seen a few executed steps of it."""
    bed = SimulatedTestbed(PARAMS, vram_budget_mb=8000)
    monitor = RuntimeMonitor()
    policy = DefaultPolicy()
    for i in range(steps):
        batch = Batch.of([(f"{t}{i}", t, SPECS[t]) for t in PARAMS])
        view = SchedulerView(bed.device_state(), monitor.snapshot(batch))
        decision = policy.decide(batch, view)
        record = bed.run_step(
            [(c.call_id, c.tool, decision.mapping[c.call_id]) for c in batch.calls]
        )
        monitor.record_step(batch, decision, record, bed.device_state())
    batch = Batch.of([(t, t, SPECS[t]) for t in PARAMS])
    return batch, SchedulerView(bed.device_state(), monitor.snapshot(batch)), bed


@pytest.mark.skipif(
    not os.environ.get("DEVSCHED_LLM_BASE_URL"),
    reason="no endpoint: set DEVSCHED_LLM_BASE_URL (e.g. http://localhost:8080/v1) and "
    "DEVSCHED_LLM_MODEL to an OpenAI-compatible server to run this test",
)
async def test_a_real_endpoint_answers_a_complete_valid_mapping() -> None:
    batch, view, _ = warmed()
    scheduler = AgenticScheduler.from_env(
        timeout_s=float(os.environ.get("DEVSCHED_LLM_TIMEOUT", 120))
    )
    for decision in (scheduler.decide(batch, view), await scheduler.adecide(batch, view)):
        assert set(decision.mapping) == set(batch.call_ids)
        assert set(decision.mapping.values()) <= set(DEVICE_OPTIONS)
        # a small model may answer badly: then every repaired call says why
        assert set(scheduler.last_fallbacks) <= set(batch.call_ids)
        assert (decision.fallback is None) == (
            not scheduler.last_fallbacks and not scheduler.last_issues
        )
    assert scheduler.consultations >= 1 and scheduler.llm_calls >= 1


@pytest.mark.benchmark(group="decision-overhead")
def test_cached_agentic_decision(benchmark: BenchmarkFixture) -> None:
    batch, view, _ = warmed()
    model = ToolScriptModel(script=[submit({"asr": "gpu_now", "ocr": "gpu_queued", "fft": "cpu"})])
    scheduler = AgenticScheduler(model, fallback="static",  # beside it: no probe to run
                                 max_explorations=None)  # the answer deviates: unbounded
    scheduler.decide(batch, view)  # the one consultation

    decision: Decision = benchmark(scheduler.decide, batch, view)

    assert decision.llm_calls == 0 and len(model.received) == 1
    assert dict(decision.mapping) == {"asr": "gpu_now", "ocr": "gpu_queued", "fft": "cpu"}


@pytest.mark.benchmark(group="decision-overhead")
def test_monitor_decision(benchmark: BenchmarkFixture) -> None:
    """The reference for the cached agentic decision above (compare the two rows)."""
    batch, view, _ = warmed()
    decision: Decision = benchmark(DefaultPolicy().decide, batch, view)
    assert set(decision.mapping) == set(batch.call_ids)
