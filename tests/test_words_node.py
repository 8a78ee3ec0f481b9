"""The node reads each new request in the background: a compiled graph, a scheduler that
reads words, a forecaster the test holds. No step waits for the forecast; what it reads is
the newest human message and the tools' names and descriptions, once per request; whatever
the words are, every call is answered."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_devsched import DeviceToolNode, SimulatedTestbed, StepReport
from langgraph_devsched.schedulers.policy.scheduler import DefaultPolicy
from langgraph_devsched.words import ToolCard, WordsForecast
from tests.fakes import HINTS, PARAMS, TOOLS, ScriptedChatModel

WAIT_S = 30.0


class Held:
    """A forecaster that records what it was given and answers once ``gate`` opens."""

    def __init__(self, answer: dict[str, float] | Exception | None = None) -> None:
        self.gate = threading.Event()
        self.done = threading.Event()
        self.asked = threading.Event()
        """Set once the reader's thread has called it (the graph does not wait for that)."""
        self.seen: list[tuple[str, list[ToolCard]]] = []
        self.answer = answer if answer is not None else {"asr": 0.9, "ocr": 0.1, "embed": 0.0}

    def forecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        self.seen.append((text, list(tools)))
        self.asked.set()
        try:
            self.gate.wait(WAIT_S)
            if isinstance(self.answer, Exception):
                raise self.answer
            return WordsForecast(self.answer, source="held", latency_ms=1.0)
        finally:
            self.done.set()


def graph(node: DeviceToolNode, steps: int = 2) -> Any:
    """An agent that asks for ``steps`` steps (asr, then ocr), then answers."""
    script = [AIMessage("", id=f"o{k}", tool_calls=[
        {"name": "asr" if k % 2 == 0 else "ocr", "args": {"text": str(k)}, "id": f"c{k}"}])
        for k in range(steps)] + [AIMessage("done", id="end")]
    outer = ScriptedChatModel(script=script)
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda s: {"messages": [outer.invoke(s["messages"])]})
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    return builder.compile()


def node_with(forecaster: Any, reports: list[StepReport]) -> DeviceToolNode:
    return DeviceToolNode(TOOLS, hints=HINTS, scheduler=DefaultPolicy(forecast=forecaster),
                          testbed=SimulatedTestbed(PARAMS, vram_budget_mb=8000),
                          on_step=reports.append)


def test_no_step_waits_for_the_forecast_and_the_request_is_read_once() -> None:
    """The forecaster is held for the whole run: both steps run and answer meanwhile; it
    was asked once, with the human message's text and each tool's name and description."""
    held, reports = Held(), []
    node = node_with(held, reports)
    out = graph(node).invoke({"messages": [HumanMessage("please transcribe my call",
                                                        id="h1")]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in answers] == ["c0", "c1"]
    assert len(reports) == 2 and all(r.words is None for r in reports)  # not in force yet
    assert held.asked.wait(WAIT_S)  # the reader's thread runs on its own time
    assert len(held.seen) == 1
    text, cards = held.seen[0]
    assert text == "please transcribe my call"
    assert {c.name: c.description for c in cards} == {t.name: t.description for t in TOOLS}
    held.gate.set()
    assert node.words is not None and node.words.join(WAIT_S)
    assert len(held.seen) == 1
    reading = node.words.history[-1]
    assert reading.predicted == ("asr",) and reading.error is None and reading.stages == 1


def test_the_forecast_in_force_is_on_the_step_s_report_with_hits_and_misses() -> None:
    held, reports = Held(), []
    held.gate.set()
    node = node_with(held, reports)
    assert node.read_request("transcribe it, then read the scan")  # at the graph's entry
    assert node.words is not None and node.words.join(WAIT_S)
    graph(node).invoke({"messages": [HumanMessage("transcribe it, then read the scan")]})
    assert len(held.seen) == 1  # the same text at the first step is not read again
    first, second = reports
    assert first.words is not None and first.words["hits"] == ["asr"]
    assert second.words is not None and second.words["misses"] == ["ocr"]
    assert first.words["predicted"] == ["asr"] and first.words["source"] == "held"


@pytest.mark.parametrize("text", [
    "load every model now, all of them, on every GPU",
    "x" * 50_000,
    "",
    "Transkribiere bitte die Aufnahme und lies danach den Scan vor.",
    "use the tools vision_giant and llm_70b, then asr",
], ids=["load-everything", "50KB", "empty", "another-language", "unknown-tools"])
def test_whatever_the_words_every_call_is_answered(text: str) -> None:
    """The lexical forecaster on hostile words: every call answered, the budget held (the
    testbed refuses more), the forecast bounded."""
    reports: list[StepReport] = []
    node = DeviceToolNode(TOOLS, hints=HINTS, scheduler=DefaultPolicy(forecast="lexical"),
                          testbed=SimulatedTestbed(PARAMS, vram_budget_mb=8000),
                          on_step=reports.append)
    out = graph(node, steps=3).invoke({"messages": [HumanMessage(text)]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in answers] == ["c0", "c1", "c2"]
    assert all(m.status != "error" for m in answers)
    assert node.words is not None and node.words.join(WAIT_S)
    assert node.words.history[-1].error is None


@pytest.mark.parametrize("answer", [ConnectionError("server gone"),
                                    {"asr": "lots", "nope": 1.0, "ocr": float("nan")}],
                         ids=["raises", "garbage"])
def test_a_forecaster_that_fails_or_talks_garbage_changes_nothing(answer: Any) -> None:
    held, reports = Held(answer), []
    held.gate.set()
    node = node_with(held, reports)
    out = graph(node).invoke({"messages": [HumanMessage("go")]})
    assert len([m for m in out["messages"] if isinstance(m, ToolMessage)]) == 2
    assert node.words is not None and node.words.join(WAIT_S)
    if isinstance(answer, Exception):
        assert "server gone" in (node.words.history[-1].error or "")
    else:
        assert node.words.history[-1].predicted == ()


def test_a_scheduler_that_reads_no_words_has_no_reader() -> None:
    node = DeviceToolNode(TOOLS, hints=HINTS, testbed=SimulatedTestbed(PARAMS,
                                                                        vram_budget_mb=8000))
    assert node.read_request("anything") is False


def test_the_agent_middleware_reads_the_request_before_the_model_is_called() -> None:
    """``create_agent``: the request is read at the first model call, once, and the model
    call does not wait for it (the forecaster is held until the run ended)."""
    pytest.importorskip("langchain.agents", reason="needs the 'agents' extra (langchain)")
    from langchain.agents import create_agent

    from langgraph_devsched.middleware import DeviceSchedulingMiddleware
    from tests.test_middleware import ToolCallingModel

    held = Held()
    middleware = DeviceSchedulingMiddleware(
        scheduler=DefaultPolicy(forecast=held), hints=HINTS,
        testbed=SimulatedTestbed(PARAMS, vram_budget_mb=8000))
    script = [AIMessage("", tool_calls=[{"name": "asr", "args": {"text": "a"}, "id": "c1"}]),
              AIMessage("", tool_calls=[{"name": "ocr", "args": {"text": "b"}, "id": "c2"}]),
              AIMessage("done")]
    agent = create_agent(ToolCallingModel(responses=script), TOOLS, middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage("transcribe the call")]})
    assert [m.tool_call_id for m in out["messages"] if isinstance(m, ToolMessage)] == [
        "c1", "c2"]
    assert held.asked.wait(WAIT_S)  # the reader's thread runs on its own time
    assert [text for text, _ in held.seen] == ["transcribe the call"]  # three model calls
    held.gate.set()
    assert held.done.wait(WAIT_S)
