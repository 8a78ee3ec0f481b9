"""Device priors from words: for a tool whose hints declare no profile, the class the
sub-agent reads from its description is where its first calls start, until measured
(`schedulers.policy.priors`, docs/words.md)."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.schedulers.agentic import AgenticScheduler

TEXT = "sort the rows of my spreadsheet table into classes"


def light_table_tool(steps: int = 5) -> Scenario:
    """One light tool on one GPU: 50 ms on the CPU, 20 ms on a warm GPU, but its 3 GB model
    loads on the GPU in 2 s (100 ms into host memory); one request, ``steps`` calls."""
    return Scenario.model_validate({
        "name": "light_table", "category": "residency",
        "testbed": {"vram_budget_mb": 16000, "noise": 0.0},
        "tools": {"table": {
            "description": "classify the rows of a small table with a light tree model",
            "params": {"cpu_ms": 50, "gpu_ms": 20, "vram_mb": 200, "weights_mb": 3000,
                       "load_gpu_ms": 2000, "load_cpu_ms": 100}}},
        "workload": {"kind": "sequence", "rounds": 1, "batches": [["table"]] * steps,
                     "idle_ms": [3000] + [1000] * (steps - 1),
                     "requests": [{"step": 0, "text": TEXT, "tools": ["table"],
                                   "arrival_ms": 3000}]},
    })


class Classing(BaseChatModel):
    """A chat model answering the words prompt with ``tools`` and ``classes``; it keeps
    the system prompts it was sent."""

    tools: list[str] = Field(default_factory=list)
    classes: dict[str, str] = Field(default_factory=dict)
    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "fake-classing"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.prompts.append(str(messages[0].content))
        text = json.dumps({"tools": self.tools, "classes": self.classes})
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def run(chat: Classing, declare: str = "none") -> dict[str, Any]:
    result = run_scenario(light_table_tool(), ["monitor", "agentic"], decision_cost="none",
                          declare=declare, scheduler_options={"agentic": {"model": chat,
                                                                "device_classes": True}})
    return dict(result.results)


def test_a_cpu_class_from_words_starts_an_undeclared_tool_on_the_cpu() -> None:
    """Nothing declared (``--declare none``): the monitor starts the tool on the GPU, as a
    framework would, and pays the 2 s load; the sub-agent reads "light" in the description,
    says ``cpu``, and the tool starts there. Measured, it stays there (its GPU side is only
    guessed, 4x the CPU's)."""
    chat = Classing(tools=["table"], classes={"table": "cpu"})
    out = run(chat)
    monitor, agentic = out["monitor"], out["agentic"]
    assert monitor.total_ms > 2000  # the load, on the first call
    assert agentic.total_ms < 500
    assert set(agentic.final_mapping.values()) == {"cpu"}
    assert any('"classes"' in p and "table" in p for p in chat.prompts)
    assert agentic.words["classes"] == {"cpu": 1}  # what it said, in the bench JSON


def test_a_gpu_class_changes_nothing_and_a_declared_tool_is_not_asked() -> None:
    """``gpu`` is the default start; and a tool whose hints declare its profile is never
    asked a class (nor does a class given anyway change anything)."""
    gpu = run(Classing(tools=["table"], classes={"table": "gpu"}))
    assert gpu["agentic"].total_ms == gpu["monitor"].total_ms
    chat = Classing(tools=["table"], classes={"table": "cpu"})
    declared = run(chat, declare="exact")
    assert chat.prompts and not any('"classes"' in p for p in chat.prompts)
    assert declared["agentic"].total_ms == declared["monitor"].total_ms


def test_only_tools_declaring_no_time_and_no_prior_are_asked() -> None:
    chat = Classing(tools=["a"])
    agentic = AgenticScheduler(chat, device_classes=True)
    agentic.declare_tools({"a": ToolDeviceSpec(), "b": ToolDeviceSpec(device_prior="cpu"),
                           "c": ToolDeviceSpec(gpu_capable=False),
                           "d": ToolDeviceSpec(pinned="cpu")})
    agentic.forecast_words("hello", [(n, f"tool {n}") for n in "abcd"])
    assert chat.prompts and "classes" in chat.prompts[0]
    asked = chat.prompts[0].split("classes")[-1]
    assert "a." in asked and not any(f"{n}." in asked or f"{n}," in asked for n in "bcd")


def test_by_default_no_class_is_asked() -> None:
    """Off by default: measured harmful (docs/words.md), a wrong class has no bound."""
    chat = Classing(tools=["a"])
    agentic = AgenticScheduler(chat)
    agentic.declare_tools({"a": ToolDeviceSpec()})
    agentic.forecast_words("hello", [("a", "tool a")])
    assert chat.prompts and not any("classes" in p for p in chat.prompts)


def test_a_neutral_prior_still_tries_the_gpu_once() -> None:
    """``neutral`` leaves the first call to the search but keeps the forced GPU try: a
    heavy tool said neutral is not left on the CPU (the measured failure)."""
    heavy = light_table_tool(steps=4)
    heavy.tools["table"].params = heavy.tools["table"].params.model_copy(
        update={"cpu_ms": 60_000, "gpu_ms": 500})
    out = run_scenario(heavy, ["agentic"], decision_cost="none", declare="none",
                       scheduler_options={"agentic": {
                           "model": Classing(tools=["table"], classes={"table": "neutral"}),
                           "device_classes": True}}).results["agentic"]
    assert out.total_ms < 2 * 60_000  # one CPU run at most
    assert out.final_mapping["b3/table"] != "cpu"
