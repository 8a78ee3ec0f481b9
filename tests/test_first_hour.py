"""What a new user meets in their first hour: bad inputs caught where they are given, each
warning once, several simulated GPUs from hints, declared GPUs on a CPU-only machine."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    InjectedDevice,
    LocalBackend,
    SimulatedTestbed,
    ToolParams,
    current_device,
)
from langgraph_devsched.hints import HintsError
from tests.fakes import TOOLS, ScriptedChatModel, calls


@tool
def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Embed a text."""
    return f"embed:{text}@{device}"


def graph(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def run_step(g: Any, names: list[str], prefix: str) -> list[ToolMessage]:
    msg = AIMessage("", tool_calls=calls(*names, prefix=prefix))
    out = g.invoke({"messages": [msg]})["messages"]
    return [m for m in out if isinstance(m, ToolMessage)]


# -- bad inputs: clear errors where they are given -------------------------------------------


def test_oracle_without_a_testbed_says_what_it_needs_and_with_one_gets_it() -> None:
    with pytest.raises(ValueError, match=r"oracle scheduler needs the ground truth.*testbed="):
        DeviceToolNode(TOOLS, scheduler="oracle")
    bed = SimulatedTestbed({t.name: ToolParams(cpu_ms=100, gpu_ms=10) for t in TOOLS},
                           vram_budget_mb=4000)
    hints = {t.name: {"vram_mb": 100} for t in TOOLS}
    g = graph(DeviceToolNode(TOOLS, scheduler="oracle", testbed=bed, hints=hints))
    answers = run_step(g, ["asr", "ocr"], "o")
    assert [m.content for m in answers] == ["asr:input 1", "ocr:input 2"]


def test_hints_given_as_a_list_is_a_hints_error_that_shows_the_valid_form() -> None:
    with pytest.raises(HintsError, match=r"hints= must be a mapping of tool name -> hints.*"
                                         r"got list"):
        DeviceToolNode(TOOLS, hints=[{"asr": {"vram_mb": 900}}])  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["yes", "true", 1, "no"])
def test_boolean_hints_take_only_booleans(value: object) -> None:
    with pytest.raises(HintsError, match=r"tool 'asr'.*\n  idempotent: expected true or false"):
        DeviceToolNode(TOOLS, hints={"asr": {"idempotent": value}})
    node = DeviceToolNode(TOOLS, hints={"asr": {"idempotent": True, "keep_warm": False}})
    assert node.device_specs["asr"].idempotent is True


# -- the middleware: hints checked before the model answers ----------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_middleware_hint_for_an_unknown_tool_fails_before_the_model_is_called(mode: str) -> None:
    import asyncio

    pytest.importorskip("langchain.agents", reason="needs the 'agents' extra (langchain)")
    from langchain.agents import create_agent

    from langgraph_devsched.middleware import DeviceSchedulingMiddleware

    model = ScriptedChatModel(script=[AIMessage("", tool_calls=calls("asr")), AIMessage("ok")])
    mw = DeviceSchedulingMiddleware(hints={"sentimnet": {"vram_mb": 100}})
    agent = create_agent(model, TOOLS, middleware=[mw])
    inputs = {"messages": [HumanMessage("go")]}
    with pytest.raises(HintsError, match=r"unknown tool\(s\) 'sentimnet'; known tools: asr, "
                                         r"embed, ocr"):
        agent.invoke(inputs) if mode == "sync" else asyncio.run(agent.ainvoke(inputs))
    assert model.received == []  # the model never answered


# -- a warning once per cause ----------------------------------------------------------------


def test_a_gpus_hint_naming_no_gpu_of_the_machine_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bed = SimulatedTestbed({"embed": ToolParams(cpu_ms=100, gpu_ms=10, vram_mb=500)},
                           gpus=[{"vram_mb": 8000}, {"vram_mb": 4000}])
    hints = {"embed": {"vram_mb": 500, "gpus": [7]}}
    g = graph(DeviceToolNode([embed], hints=hints, testbed=bed))
    with caplog.at_level(logging.WARNING, logger="langgraph_devsched"):
        for step in range(3):
            run_step(g, ["embed", "embed", "embed"], f"s{step}")
    said = [r.getMessage() for r in caplog.records if "names none of" in r.getMessage()]
    assert len(said) == 1, said
    assert "gpus hint [7] names none of this machine's GPUs [0, 1]" in said[0]
