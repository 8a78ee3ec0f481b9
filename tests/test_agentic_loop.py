"""A hung or garbage-spewing chat model can never block tools, the event loop, or the step.

Regression tests for issue 12 class 7: consultations run in a bounded set of threads of
their own (never the loop's default executor); a full set falls back at once (``busy``);
reading the answer is linear, size-capped and inside the timeout.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.agentic.answers import MAX_ANSWER_CHARS, answer_from_text
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.telemetry import DeviceState
from tests.agentic_fakes import SyncHangingModel, TextModel
from tests.test_agentic import ByTool

GPU = DeviceState(True, "gpu", 8000, 0, 0.0, 8)
VIEW = SchedulerView(GPU)
FALLBACK = {"asr": "gpu_queued", "ocr": "cpu"}
# the text that took the old quadratic reader seconds: 900 nested, never-closed objects
NESTED_GARBAGE = ('{"a": [' * 900 + "0," * 150_000)[:300_000]


def batch(i: int) -> Batch:
    """A batch of a shape of its own (so no cached decision is reused)."""
    return Batch.of([(f"c{i}", "asr", ToolDeviceSpec(vram_mb=1000 + i))])


@pytest.fixture
def hanging() -> Iterator[SyncHangingModel]:
    model = SyncHangingModel()
    yield model
    model.release.set()


async def test_hung_consultations_never_take_the_loops_default_executor(
    hanging: SyncHangingModel,
) -> None:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=2))  # as small as on 2 cores
    scheduler = AgenticScheduler(
        hanging, fallback=ByTool(FALLBACK), timeout_s=0.05, max_consultations=2
    )
    causes = []
    for i in range(8):
        started = time.monotonic()
        decision = await scheduler.adecide(batch(i), VIEW)
        assert time.monotonic() - started < 2.0
        assert decision.fallback == "scheduler_error"
        causes.append(decision.consultation.cause)
    assert causes[0] == "timeout" and set(causes) <= {"timeout", "busy"}
    # never more than the two slots' threads hang in the model (a consultation whose thread
    # starts after its deadline on a loaded box gives its slot back without calling it)
    assert hanging.calls <= 2
    assert "busy" in causes or hanging.calls < 2  # with both slots hung, the rest are busy
    # a tool run by the node in the default executor still runs
    assert await asyncio.wait_for(loop.run_in_executor(None, lambda: 7), 2.0) == 7


def test_a_full_set_of_consultation_threads_falls_back_at_once(
    hanging: SyncHangingModel,
) -> None:
    """The one slot is held by a consultation hung in the model (its 60 s deadline far
    off); the next step falls back at once: long before that deadline, on any machine."""
    timeout_s = 60.0
    scheduler = AgenticScheduler(
        hanging, fallback=ByTool(FALLBACK), timeout_s=timeout_s, max_consultations=1
    )
    first: list[Any] = []
    holder = threading.Thread(target=lambda: first.append(scheduler.decide(batch(0), VIEW)))
    holder.start()
    waited = time.monotonic()
    while hanging.calls < 1:  # the first consultation is in the model: its slot is held
        assert time.monotonic() - waited < timeout_s / 2, "the first consultation never started"
        time.sleep(0.01)
    started = time.monotonic()
    second = scheduler.decide(batch(1), VIEW)
    took = time.monotonic() - started
    assert second.consultation.cause == "busy" and took < timeout_s / 2
    assert scheduler.last_fallbacks == {"c1": "busy"}
    assert "consultation threads are held" in second.reason
    assert dict(second.mapping) == {"c1": "gpu_queued"}  # the fallback's option
    assert hanging.calls == 1  # the second step never reached the model
    hanging.release.set()
    holder.join(timeout_s)
    assert first and first[0].consultation.cause in {"llm_error", "no_answer"}


def test_a_slot_comes_back_when_the_hung_model_returns(hanging: SyncHangingModel) -> None:
    # 1 s: the second consultation's thread starts, and the model raises, well before it
    scheduler = AgenticScheduler(
        hanging, fallback=ByTool(FALLBACK), timeout_s=1.0, max_consultations=1
    )
    assert scheduler.decide(batch(0), VIEW).consultation.cause == "timeout"
    hanging.release.set()
    deadline = time.monotonic() + 5
    while scheduler._runner.slots.in_use and time.monotonic() < deadline:
        time.sleep(0.01)
    scheduler.timeout_s = scheduler._runner.timeout_s = 30.0  # the model now raises at once
    decision = scheduler.decide(batch(1), VIEW)
    assert decision.consultation.cause == "llm_error"  # asked again: the model raised


@pytest.mark.parametrize("mode", ["decide", "adecide"])
async def test_a_huge_garbage_answer_is_read_within_the_timeout(mode: str) -> None:
    model = TextModel(text=NESTED_GARBAGE)
    scheduler = AgenticScheduler(model, fallback=ByTool(FALLBACK), timeout_s=1.0)
    started = time.monotonic()
    decision = (
        await scheduler.adecide(batch(0), VIEW)
        if mode == "adecide"
        else scheduler.decide(batch(0), VIEW)
    )
    assert time.monotonic() - started < 1.5
    assert decision.fallback == "scheduler_error"
    assert decision.consultation.cause in ("no_answer", "timeout")


def _fastest_s(fn: Callable[[], object], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def test_reading_is_linear_and_capped() -> None:
    garbage = (NESTED_GARBAGE, "{" * 300_000, '{"x": "' * 100_000, "[{]}" * 75_000)
    for text in garbage:
        assert answer_from_text(text) is None
    # linear: no slower than a few Python passes over the same characters, timed here (a
    # quadratic reading of 300,000 characters would be thousands of times slower)
    reading = _fastest_s(lambda: [answer_from_text(text) for text in garbage])
    scanning = _fastest_s(lambda: [sum(1 for _ in text) for text in garbage])
    assert reading < 10 * scanning, (reading, scanning)
    answer = '{"assignments": {"c1": "cpu"}}'
    assert answer_from_text("x" * 100 + answer) == {"assignments": {"c1": "cpu"}}
    assert answer_from_text("x" * MAX_ANSWER_CHARS + answer) is None  # past the cap


def test_a_virtual_clock_past_the_deadline_times_out_without_waiting() -> None:
    model = TextModel(text="thinking")

    def clock() -> float:  # 100 s pass during the first model call
        return 100.0 if model.kwargs else 0.0

    scheduler = AgenticScheduler(model, fallback=ByTool(FALLBACK), timeout_s=5.0, clock=clock)
    started = time.monotonic()
    decision = scheduler.decide(batch(0), VIEW)
    assert time.monotonic() - started < 5.0  # never waited for the (real) 5 s
    assert decision.consultation.cause == "timeout"
    assert len(model.kwargs) == 1  # the second turn never started
