"""The scheduler protocol is declared: `AsyncScheduler.adecide`, `blocking`, ``config=`` and the
optional hooks are read through `capabilities`, and a compiled graph's node honours them."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, SimulatedTestbed
from langgraph_devsched.schedulers import (
    AsyncScheduler,
    Batch,
    Decision,
    SchedulerBase,
    SchedulerView,
    capabilities,
    make_scheduler,
    scheduler_names,
)
from tests.fakes import HINTS, PARAMS, TOOLS, calls

STEP = AIMessage("", tool_calls=calls("asr", "ocr"))


class Recording(SchedulerBase):
    name = "recording"

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.threads: list[int] = []

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        self.paths.append("decide")
        self.threads.append(threading.get_ident())
        return self._decision({c.call_id: "cpu" for c in batch.calls}, "cpu")


class Awaiting(Recording):
    async def adecide(self, batch: Batch, view: SchedulerView) -> Decision:
        self.paths.append("adecide")
        return self._decision({c.call_id: "cpu" for c in batch.calls}, "cpu")


class Blocking(Recording):
    blocking = True


class Undeclared(Recording):
    adecide = None  # a member set to None is not declared
    calibration = None


def run_async(scheduler: Recording) -> int:
    node = DeviceToolNode(TOOLS, hints=HINTS, scheduler=scheduler,
                          testbed=SimulatedTestbed(PARAMS, vram_budget_mb=4000, cpu_cores=4))
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()

    async def go() -> int:
        await graph.ainvoke({"messages": [HumanMessage("go"), STEP]})
        return threading.get_ident()

    return asyncio.run(go())


def test_async_scheduler_is_awaited() -> None:
    scheduler = Awaiting()
    assert isinstance(scheduler, AsyncScheduler) and not isinstance(Recording(), AsyncScheduler)
    run_async(scheduler)
    assert scheduler.paths == ["adecide"]


def test_blocking_decide_runs_off_the_event_loop() -> None:
    scheduler, plain = Blocking(), Recording()
    loop_thread = run_async(scheduler)
    assert scheduler.paths == ["decide"] and scheduler.threads[0] != loop_thread
    assert run_async(plain) == plain.threads[0]  # not blocking: on the loop's thread


def test_members_set_to_none_are_not_declared() -> None:
    scheduler = Undeclared()
    caps = capabilities(scheduler)
    assert caps.adecide is None and caps.calibration is None and caps.hooks() == ()
    run_async(scheduler)
    assert scheduler.paths == ["decide"]


def test_config_parameter_is_declared_by_decides_signature() -> None:
    class WithConfig(Recording):
        def decide(self, batch: Batch, view: SchedulerView, config: Any = None) -> Decision:
            return super().decide(batch, view)

    assert capabilities(WithConfig()).takes_config
    assert not capabilities(Recording()).takes_config


@pytest.mark.parametrize("name", [n for n in scheduler_names() if n not in ("agentic", "oracle")])
def test_built_ins_declare_what_they_define(name: str) -> None:
    scheduler = make_scheduler(name)
    caps = capabilities(scheduler)
    assert caps.adecide is None and not caps.blocking
    expected = {"monitor": ("calibration", "preloads", "declare_tools", "reload_ms",
                            "state_sizes", "forecast_words", "expect"),
                "dmda": ("state_sizes",), "ucb": ("state_sizes",)}.get(name, ())
    assert caps.hooks() == expected
    for hook in caps.hooks():
        assert getattr(caps, hook) == getattr(scheduler, hook)
