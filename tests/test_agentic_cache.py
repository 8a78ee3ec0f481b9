"""The agentic scheduler is consulted only on change, and never hangs the caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.observations import Observations, OptionEstimate
from langgraph_devsched.monitor.unknowns import ExplorationHint
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.telemetry import DeviceState
from tests.agentic_fakes import HangingModel, ToolScriptModel, submit
from tests.test_agentic import ByTool

GPU = DeviceState(True, "gpu", 8000, 1000, 0.0, 8)
ASR, OCR = ToolDeviceSpec(vram_mb=1500), ToolDeviceSpec(vram_mb=3000)


def batch(*ids: str) -> Batch:
    """``ids`` name the calls: asr, ocr, asr, ... alternately."""
    tools = [("asr", ASR), ("ocr", OCR)]
    return Batch.of([(cid, *tools[i % 2]) for i, cid in enumerate(ids)])


def estimate(tool: str, option: Any, run_ms: float, status: Any = "measured") -> OptionEstimate:
    return OptionEstimate(
        tool=tool,
        option=option,
        context="gpu1-cpu0-low-idle",
        device="gpu" if option != "cpu" else "cpu",
        run_ms=run_ms,
        latency_ms=run_ms,
        count=4,
        status=status,
    )


def obs(asr_ms: float = 60.0, *hints: ExplorationHint, status: str = "measured") -> Observations:
    return Observations(
        step=7,
        estimates=(estimate("asr", "gpu_now", asr_ms, status), estimate("ocr", "cpu", 90)),
        hints=hints,
    )


def scheduler(**kw: Any) -> tuple[AgenticScheduler, ToolScriptModel]:
    model = ToolScriptModel(
        script=[
            submit({"a": "gpu_now", "b": "cpu"}, "first"),
            submit({"x": "gpu_queued", "y": "cpu"}, "second"),
        ]
    )
    kw.setdefault("fallback", ByTool({"asr": "gpu_queued", "ocr": "cpu"}))
    kw.setdefault("guard_ratio", None)
    return AgenticScheduler(model, **kw), model


# -- consulted only on change ------------------------------------------------------------------


def test_same_shape_in_the_same_situation_reuses_the_decision() -> None:
    sched, model = scheduler()
    first = sched.decide(batch("a", "b"), SchedulerView(GPU, obs()))
    again = sched.decide(batch("p", "q"), SchedulerView(GPU, obs(62.0)))  # within tolerance
    assert len(model.received) == 1
    assert (first.llm_calls, again.llm_calls, sched.llm_calls) == (1, 0, 1)
    assert dict(again.mapping) == {"p": "gpu_now", "q": "cpu"}
    assert again.reason == "agentic (cached): first" and again.fallback is None
    assert (sched.consultations, sched.cache_hits) == (1, 1)


def test_repeated_tools_map_by_occurrence() -> None:
    sched, model = scheduler()
    model.script[0] = submit({"a": "gpu_now", "b": "cpu", "c": "gpu_queued"})
    sched.decide(batch("a", "b", "c"), SchedulerView(GPU, obs()))
    again = sched.decide(batch("u", "v", "w"), SchedulerView(GPU, obs()))
    assert dict(again.mapping) == {"u": "gpu_now", "v": "cpu", "w": "gpu_queued"}
    assert again.llm_calls == 0


def test_a_different_shape_consults_again() -> None:
    sched, model = scheduler()
    sched.decide(batch("a", "b"), SchedulerView(GPU, obs()))
    sched.decide(batch("x"), SchedulerView(GPU, obs()))
    assert len(model.received) == 2


@pytest.mark.parametrize(
    ("later", "why"),
    [
        (SchedulerView(GPU, obs(80.0)), "asr's estimate drifted by a third"),
        (SchedulerView(GPU, obs(60.0, status="noisy")), "an estimate turned noisy"),
        (
            SchedulerView(
                GPU, obs(60.0, ExplorationHint.make("unknown", ("ocr",), devices=("gpu",)))
            ),
            "a new exploration hint",
        ),
        (
            SchedulerView(DeviceState(True, "gpu", 8000, 5000, 0.0, 8), obs()),
            "VRAM in use jumped",
        ),
        (SchedulerView(DeviceState(True, "gpu", 8000, 1000, 0.9, 8), obs()), "GPU turned busy"),
    ],
)
def test_change_invalidates_the_cached_decision(later: SchedulerView, why: str) -> None:
    sched, model = scheduler()
    sched.decide(batch("a", "b"), SchedulerView(GPU, obs()))
    decision = sched.decide(batch("x", "y"), later)
    assert len(model.received) == 2, why
    assert decision.llm_calls == 1 and dict(decision.mapping) == {"x": "gpu_queued", "y": "cpu"}


def test_hints_about_other_tools_do_not_invalidate() -> None:
    sched, model = scheduler()
    sched.decide(batch("a", "b"), SchedulerView(GPU, obs()))
    other = ExplorationHint.make("unknown", ("embed",), devices=("cpu",))
    assert sched.decide(batch("x", "y"), SchedulerView(GPU, obs(60.0, other))).llm_calls == 0
    assert len(model.received) == 1


def test_monitor_epoch_and_drift_flag_invalidate() -> None:
    sched, model = scheduler()
    plain = {"estimates": [], "hints": [], "epoch": 1}
    sched.decide(batch("a", "b"), SchedulerView(GPU, plain))
    sched.decide(batch("c", "d"), SchedulerView(GPU, dict(plain)))
    assert len(model.received) == 1
    sched.decide(batch("e", "f"), SchedulerView(GPU, {**plain, "drift": True}))
    sched.decide(batch("g", "h"), SchedulerView(GPU, {**plain, "epoch": 2}))
    assert len(model.received) == 3


def test_clear_cache_forces_a_consultation() -> None:
    sched, model = scheduler()
    sched.decide(batch("a", "b"), SchedulerView(GPU, obs()))
    sched.clear_cache()
    sched.decide(batch("a", "b"), SchedulerView(GPU, obs()))
    assert len(model.received) == 2


def test_a_cached_repair_keeps_its_cause() -> None:
    sched, model = scheduler(pinned={"ocr": "gpu_queued"})
    first = sched.decide(batch("a", "b"), SchedulerView(GPU, obs()))
    again = sched.decide(batch("x", "y"), SchedulerView(GPU, obs()))
    assert dict(first.mapping) == {"a": "gpu_now", "b": "gpu_queued"}
    assert dict(again.mapping) == {"x": "gpu_now", "y": "gpu_queued"}
    assert sched.last_fallbacks == {"y": "pinned"} and again.fallback == "invalid_decision"
    assert len(model.received) == 1


# -- never hangs ----------------------------------------------------------------------------


@pytest.fixture
def hanging() -> Iterator[HangingModel]:
    model = HangingModel()
    yield model
    model.release.set()  # let the abandoned worker thread end


def test_a_hanging_model_times_out_to_the_fallback(hanging: HangingModel) -> None:
    fallback = ByTool({"asr": "gpu_queued", "ocr": "cpu"})
    sched = AgenticScheduler(hanging, screen=False, fallback=fallback, timeout_s=0.05)
    decision = sched.decide(batch("a", "b"), SchedulerView(GPU, obs()))
    assert dict(decision.mapping) == {"a": "gpu_queued", "b": "cpu"}
    assert decision.fallback == "scheduler_error"
    assert decision.reason == (
        "agentic consultation failed (timeout: no answer within 0.05 s); fallback by_tool: fixed"
    )
    assert sched.last_fallbacks == {"a": "timeout", "b": "timeout"}


async def test_a_hanging_model_times_out_under_ainvoke(hanging: HangingModel) -> None:
    fallback = ByTool({"asr": "cpu", "ocr": "cpu"})
    # a deadline the consultation's thread surely starts within on a loaded machine (one that
    # starts after it never calls the model, and ``hanging.calls`` would say 0)
    sched = AgenticScheduler(hanging, screen=False, fallback=fallback, timeout_s=1.0)
    decision = await sched.adecide(batch("a", "b"), SchedulerView(GPU, obs()))
    assert dict(decision.mapping) == {"a": "cpu", "b": "cpu"}
    assert sched.last_fallbacks == {"a": "timeout", "b": "timeout"}
    assert decision.llm_calls == 1 and hanging.calls == 1


def test_a_failed_situation_is_not_retried_at_once(hanging: HangingModel) -> None:
    fallback = ByTool({"asr": "gpu_queued", "ocr": "cpu"})
    # 1 s: each consultation's thread starts (and calls the model) well before its deadline
    sched = AgenticScheduler(hanging, screen=False,
                             fallback=fallback, timeout_s=1.0, retry_failed_after=2)
    view = SchedulerView(GPU, obs())
    sched.decide(batch("a", "b"), view)
    reused = [sched.decide(batch("c", "d"), view) for _ in range(2)]
    assert hanging.calls == 1 and fallback.calls == 3
    assert [d.llm_calls for d in reused] == [0, 0]
    assert reused[0].reason.startswith("agentic earlier consultation failed (timeout: ")
    assert sched.last_fallbacks == {"c": "timeout", "d": "timeout"}
    sched.decide(batch("e", "f"), view)  # the retry budget is spent: ask again
    # consulted again (whether the hung model's turn started inside 50 ms is the machine's)
    assert sched.consultations == 2


async def test_adecide_answers_like_decide() -> None:
    sched, model = scheduler()
    decision = await sched.adecide(batch("a", "b"), SchedulerView(GPU, obs()), config=None)
    assert dict(decision.mapping) == {"a": "gpu_now", "b": "cpu"} and decision.llm_calls == 1
    cached = await sched.adecide(batch("x", "y"), SchedulerView(GPU, obs()))
    assert cached.llm_calls == 0 and len(model.received) == 1
