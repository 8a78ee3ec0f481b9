"""Forecasts from words in the bench: a request's forecast is read at its arrival, in force
only after its latency (virtual time), enters the monitor policy's loads, and whatever it
says, the run stays within budget and its bound against the monitor alone."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.words import ToolCard, WordsForecast, predicted

TOOLS = {
    "asr": "transcribe speech in an audio recording into text",
    "draw": "generate an image from a text prompt",
    "ocr": "read the printed text of a scanned document image",
    "tts": "speak a text aloud as synthesized audio",
    "caption": "describe the content of a photo in a sentence",
}


def conversation(*, first_turn_ms: float = 3000.0) -> Scenario:
    """Three requests on one 8 GB GPU, five 3 GB models (two fit beside a call): each
    request's first turn ``first_turn_ms``, the gaps between requests 15 s."""
    tools = {n: {"description": d, "params": {
        "cpu_ms": 1500, "gpu_ms": 100, "transfer_ms": 5, "vram_mb": 500, "model": f"m_{n}",
        "weights_mb": 3000, "load_gpu_ms": 2000, "load_cpu_ms": 400}}
        for n, d in TOOLS.items()}
    requests = [
        {"step": 0, "text": "transcribe my audio recording, then generate an image of it",
         "tools": ["asr", "draw"], "arrival_ms": first_turn_ms},
        {"step": 2, "text": "read the scanned document and speak it aloud",
         "tools": ["ocr", "tts"], "arrival_ms": first_turn_ms},
        {"step": 4, "text": "describe this photo, then transcribe my audio recording",
         "tools": ["caption", "asr"], "arrival_ms": first_turn_ms},
    ]
    idle = [first_turn_ms, 1000, 15000 + first_turn_ms, 1000, 15000 + first_turn_ms, 1000]
    return Scenario.model_validate({
        "name": "words_conversation", "category": "residency",
        "testbed": {"vram_budget_mb": 8000, "noise": 0.0}, "tools": tools,
        "workload": {"kind": "sequence", "rounds": 1, "idle_ms": idle, "requests": requests,
                     "batches": [["asr"], ["draw"], ["ocr"], ["tts"], ["caption"], ["asr"]]}})


class Scripted:
    """A forecaster that answers ``answer(text, tools)`` with a declared latency."""

    def __init__(self, answer: Any, latency_ms: float = 0.0) -> None:
        self.answer, self.latency_ms, self.asked = answer, latency_ms, 0

    def forecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        self.asked += 1
        said = self.answer(text, [t.name for t in tools])
        if isinstance(said, WordsForecast):
            return said
        return WordsForecast(said, source="scripted", latency_ms=self.latency_ms)


def run(scenario: Scenario, names: Sequence[str],
        forecaster: Scripted | None = None) -> dict[str, Any]:
    opts = {"monitor": {"forecast": forecaster}} if forecaster is not None else None
    result = run_scenario(scenario, names, decision_cost="none", scheduler_options=opts)
    assert not result.below_reference()
    return {n: r for n, r in result.results.items()} | {"reference": result}


def test_a_forecast_in_force_warms_the_request_s_first_model_before_its_first_step() -> None:
    out = run(conversation(), ["monitor", "monitor+lexical", "monitor+oracle"])
    alone, lexical, oracle = out["monitor"], out["monitor+lexical"], out["monitor+oracle"]
    assert oracle.total_ms < alone.total_ms
    assert lexical.total_ms < alone.total_ms
    assert alone.words is None
    assert oracle.words["oracle"] and oracle.words["asked"] == 3
    assert oracle.words["in_time"] == 3 and oracle.words["f1"] == 1.0
    assert lexical.words["asked"] == 3 and not lexical.words["oracle"]
    assert out["reference"].total_reference_ms <= oracle.total_ms


def test_a_forecast_that_comes_after_the_first_step_does_not_help_that_step() -> None:
    """The truth, answered 5 s after each request arrives (its first turn is 3 s): no
    first step finds its forecast in force, and the run is no shorter for the first steps'
    sake than the monitor's alone (the later steps may gain)."""
    truth = {q.text: set(q.tools) for q in conversation().workload.requests}
    late = Scripted(lambda text, tools: {t: float(t in truth[text]) for t in tools},
                    latency_ms=5000)
    out = run(conversation(), ["monitor"], late)
    assert late.asked == 3
    assert out["monitor"].words["in_time"] == 0
    on_time = Scripted(lambda text, tools: {t: float(t in truth[text]) for t in tools})
    fast = run(conversation(), ["monitor"], on_time)["monitor"]
    assert fast.words["in_time"] == 3
    assert fast.total_ms < out["monitor"].total_ms


def test_the_bench_s_forecast_reads_the_node_s_tools_only() -> None:
    """The node's tools are those the workload calls (what the runner declares to the
    scheduler), and a forecast in the bench reads theirs only, as the node's reader reads
    its own tools: a tool the scenario lists but never calls is no tool of the node."""
    scenario = conversation()
    scenario.tools["unused"] = scenario.tools["asr"].model_copy(
        update={"description": "a tool of the scenario that no step calls"})
    seen: set[str] = set()

    def answer(text: str, tools: Sequence[str]) -> dict[str, float]:
        seen.update(tools)
        return {t: 0.5 for t in tools}

    run(scenario, ["monitor"], Scripted(answer))
    assert seen == set(TOOLS)


@pytest.mark.parametrize("answer", [
    lambda text, tools: {t: 1.0 for t in tools},                        # "load every model"
    lambda text, tools: {t: float(t == "tts") for t in tools},          # always wrong
    lambda text, tools: {"nope": 1.0, "asr": float("nan"), "draw": 7},  # garbage
    lambda text, tools: WordsForecast({}, error="timed out"),           # no answer
], ids=["everything", "wrong", "garbage", "error"])
def test_whatever_the_forecast_says_the_run_stays_within_its_bound(answer: Any) -> None:
    """Every call answered, the budget held (the testbed refuses more), and the whole run
    within the rent-or-buy rule's robust bound (1 + 1/trust = 3x) of the monitor alone."""
    alone = run(conversation(), ["monitor"])["monitor"]
    said = run(conversation(), ["monitor"], Scripted(answer))["monitor"]
    assert said.total_ms <= 3 * alone.total_ms
    assert len(said.round_makespans_ms) == 1


class Answering(BaseChatModel):
    """A chat model that names ``tools`` (the words forecast's list form) after
    ``delay_s`` of wall time; it never answers a step's consultation usefully."""

    tools: list[str] = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "fake-reader"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls += 1
        text = json.dumps({"tools": self.tools})
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def test_the_agentic_sub_agent_reads_each_request_once_in_two_stages() -> None:
    """Words without a model at once, then the model's answer; each request read once (a
    second reading is kept); ``read_messages=False`` reads nothing."""
    chat = Answering(tools=["ocr", "tts"])
    agentic = AgenticScheduler(chat)
    tools = list(TOOLS.items())
    first = agentic.forecast_words("read the scanned document and speak it aloud", tools)
    assert first is not None and len(first) == 2
    quick, said = first
    assert quick.source == "lexical" and said.source == "lexical+llm"
    assert predicted(said) >= {"ocr", "tts"}
    again = agentic.forecast_words("read the scanned document and speak it aloud", tools)
    assert again is not None and again[1] is said and chat.calls == 1
    assert AgenticScheduler(chat, read_messages=False).forecast_words("x", tools) is None


def test_a_model_that_fails_leaves_the_words_without_a_model() -> None:
    class Broken(Answering):
        def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
            raise ConnectionError("server gone")

    quick, said = AgenticScheduler(Broken()).forecast_words(
        "transcribe my audio recording", list(TOOLS.items())) or (None, None)
    assert said is not None and said.error is None
    assert said.probabilities == quick.probabilities and "failed" in said.source
