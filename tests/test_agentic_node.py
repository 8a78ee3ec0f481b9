"""The agentic scheduler inside a graph: prompt hygiene end to end, tracing, checkpoints."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_devsched import DeviceToolNode, SimulatedTestbed
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.agentic.observations import OBSERVATION_TOOL_NAMES
from tests.agentic_fakes import ToolScriptModel, submit, tool_call
from tests.fakes import HINTS, PARAMS, TOOLS, ScriptedChatModel
from tests.test_agentic import BATCH, VIEW

CANARY = "CANARY-d41d8cd9-never-show-the-scheduler"


def look_at_everything(id: str) -> AIMessage:
    calls = [
        tool_call(n, {"tool": "asr"} if n == "tool_estimates" else {}, f"{id}-{n}")
        for n in OBSERVATION_TOOL_NAMES
    ]
    return AIMessage("", id=f"ai-{id}", tool_calls=calls)


def app(scheduler: AgenticScheduler, checkpointer: Any = None) -> Any:
    """A ReAct loop whose agent asks for two steps of tool calls carrying the canary."""
    steps = [
        AIMessage(
            "",
            id="outer-1",
            tool_calls=[
                {"name": "asr", "args": {"text": f"{CANARY} audio"}, "id": "s1a"},
                {"name": "ocr", "args": {"text": f"{CANARY} scan"}, "id": "s1b"},
            ],
        ),
        AIMessage(
            "",
            id="outer-2",
            tool_calls=[
                {"name": "asr", "args": {"text": f"{CANARY} again"}, "id": "s2a"},
                {"name": "embed", "args": {"text": CANARY}, "id": "s2b"},
            ],
        ),
        AIMessage("done", id="outer-3"),
    ]
    outer = ScriptedChatModel(script=steps)
    node = DeviceToolNode(
        TOOLS,
        hints=HINTS,
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
    return builder.compile(checkpointer=checkpointer)


def scheduler_model() -> ToolScriptModel:
    return ToolScriptModel(
        script=[
            look_at_everything("1"),
            submit({"s1a": "gpu_now", "s1b": "gpu_queued"}, id="1"),
            look_at_everything("2"),
            submit({"s2a": "gpu_now", "s2b": "cpu"}, id="2"),
        ]
    )


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_the_sub_agent_never_sees_arguments_or_outputs(mode: str) -> None:
    model = scheduler_model()
    scheduler = AgenticScheduler(model, fallback="static")
    graph = app(scheduler)
    inputs = {"messages": [HumanMessage("transcribe and read")]}
    result = graph.invoke(inputs) if mode == "invoke" else await graph.ainvoke(inputs)

    outputs = [m.content for m in result["messages"] if isinstance(m, ToolMessage)]
    assert outputs == [
        f"asr:{CANARY} audio",
        f"ocr:{CANARY} scan",
        f"asr:{CANARY} again",
        f"embed:{CANARY}",
    ]
    assert len(model.received) == 4 and scheduler.consultations == 2
    seen = json.dumps([[m.model_dump() for m in turn] for turn in model.received], default=str)
    assert "s1a" in seen and "s2b" in seen  # the calls are there, by id and tool name...
    assert CANARY not in seen  # ...their arguments and outputs are not
    estimates = next(m for m in model.received[3] if getattr(m, "name", "") == "tool_estimates")
    # the second step saw the monitor's stats
    assert any(isinstance(v, dict) for v in json.loads(estimates.text).values())
    assert scheduler.last_fallbacks == {}


def test_the_sub_agent_checkpoints_nothing_into_the_app() -> None:
    saver = InMemorySaver()
    graph = app(AgenticScheduler(scheduler_model(), fallback="static"), checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config)
    namespaces = {c.config["configurable"]["checkpoint_ns"] for c in saver.list(config)}
    assert namespaces == {""}


class Runs(BaseCallbackHandler):
    """Records (name, run id, parent run id, tags) of every chain and chat model start."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, UUID, UUID | None, list[str]]] = []

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kw: Any,
    ) -> None:
        self.runs.append((kw.get("name") or "", run_id, parent_run_id, kw.get("tags") or []))

    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kw: Any,
    ) -> None:
        self.runs.append(("chat_model", run_id, parent_run_id, kw.get("tags") or []))


@pytest.mark.parametrize("mode", ["decide", "adecide"])
async def test_the_consultation_is_a_child_run_of_the_caller(mode: str) -> None:
    scheduler = AgenticScheduler(ToolScriptModel(script=[submit({"c1": "cpu", "c2": "cpu"})]),
                                 screen=False)

    def step(_: Any, config: RunnableConfig) -> Any:
        return scheduler.decide(BATCH, VIEW, config=config)

    async def astep(_: Any, config: RunnableConfig) -> Any:
        return await scheduler.adecide(BATCH, VIEW, config=config)

    runs = Runs()
    outer = RunnableLambda(step, afunc=astep, name="tools_step")
    cfg: RunnableConfig = {"callbacks": [runs]}
    await outer.ainvoke(1, cfg) if mode == "adecide" else outer.invoke(1, cfg)

    by_name = {name: (run_id, parent, tags) for name, run_id, parent, tags in runs.runs}
    step_id = by_name["tools_step"][0]
    _, sub_parent, sub_tags = by_name["devsched_agentic"]
    assert sub_parent == step_id and "devsched:agentic" in sub_tags
    assert "chat_model" in by_name and scheduler.llm_calls == 1


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_each_consultation_nests_under_the_tools_step(mode: str) -> None:
    runs = Runs()
    graph = app(AgenticScheduler(scheduler_model(), fallback="static"))
    inputs = {"messages": [HumanMessage("go")]}
    cfg: RunnableConfig = {"callbacks": [runs]}
    await graph.ainvoke(inputs, cfg) if mode == "ainvoke" else graph.invoke(inputs, cfg)

    tools_steps = {run_id for name, run_id, _, _ in runs.runs if name == "tools"}
    consultations = [parent for name, _, parent, _ in runs.runs if name == "devsched_agentic"]
    assert len(consultations) == 2 and set(consultations) <= tools_steps
