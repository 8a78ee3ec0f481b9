"""The agentic scheduler's protocol: observation calls, the answer, repairs and fallbacks."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor.observations import Observations, OptionEstimate
from langgraph_devsched.monitor.unknowns import ExplorationHint
from langgraph_devsched.schedulers.agentic import (
    ANSWER_PROMPT,
    FORCE_PROMPT,
    AgenticNotConfiguredError,
    AgenticScheduler,
    openai_model,
)
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.telemetry import DeviceState
from tests.agentic_fakes import ToolScriptModel, submit, tool_call

OBS_TOOLS = (
    "device_state",
    "step_calls",
    "tool_estimates",
    "past_outcomes",
    "exploration_hints",
    "submit_mapping",
)
GPU = DeviceState(True, "gpu", 8000, 1000, 0.0, 8)
ASR = ToolDeviceSpec(vram_mb=1500)
EMBED = ToolDeviceSpec(vram_mb=500, profile=SoloProfile(cpu_ms=50, gpu_ms=40))
BATCH = Batch.of([("c1", "asr", ASR), ("c2", "embed", EMBED)])
OBS = Observations(
    step=3,
    estimates=(
        OptionEstimate(
            tool="asr",
            option="gpu_now",
            context="gpu1-cpu0-low-idle",
            device="gpu",
            run_ms=60,
            latency_ms=60,
            count=3,
        ),
    ),
    hints=(
        ExplorationHint.make(
            "unknown", ("asr",), devices=("cpu",), expected_gain_ms=10, probes_left=2
        ),
    ),
)
VIEW = SchedulerView(GPU, OBS)


class ByTool(SchedulerBase):
    """A fallback with a fixed option per tool, counting its consultations."""

    name = "by_tool"

    def __init__(self, by_tool: dict[str, Any]) -> None:
        self.by_tool = by_tool
        self.calls = 0

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        self.calls += 1
        return self._decision({c.call_id: self.by_tool[c.tool] for c in batch.calls}, "fixed")


def no_ids(messages: list[BaseMessage]) -> list[BaseMessage]:
    """Messages with the ids the graph generates removed (scripted AI ids are kept)."""
    return [m if isinstance(m, AIMessage) else m.model_copy(update={"id": None}) for m in messages]


def plain(decision: Decision) -> Decision:
    """The `Decision` part of an `AgenticDecision` (its consultation record left out)."""
    return Decision(**{f.name: getattr(decision, f.name) for f in dataclasses.fields(Decision)})


def agentic(script: list[AIMessage], **kw: Any) -> tuple[AgenticScheduler, ToolScriptModel]:
    model = ToolScriptModel(script=script)
    kw.setdefault("fallback", ByTool({"asr": "gpu_queued", "embed": "gpu_queued"}))
    kw.setdefault("guard_ratio", None)  # these tests are about the protocol, not the guard
    return AgenticScheduler(model, **kw), model


# -- the protocol ----------------------------------------------------------------------------


def test_the_observations_open_the_conversation_as_tool_outputs() -> None:
    """The monitor's observation tools are called for the sub-agent: an assistant message
    with the calls, their outputs as ToolMessages (compact JSON), then one forced turn whose
    answer is one option per call id through a json_schema with an enum per call."""
    answer = AIMessage('{"c1": "gpu_now", "c2": "cpu"}', id="ai-1")
    scheduler, model = agentic([answer])

    decision = scheduler.decide(BATCH, VIEW)

    assert plain(decision) == Decision(
        mapping={"c1": "gpu_now", "c2": "cpu"}, reason="agentic", llm_calls=1,
        scheduler="agentic",
    )
    calls = [tool_call(name, id=f"obs{i}") for i, name in enumerate(OBS_TOOLS[:-1])]
    outputs = [
        '{"gpu":true,"vram_budget_mb":8000,"vram_free_mb":7000,"gpu_utilization":0.0,'
        '"cpu_cores":8}',
        '{"c1":{"tool":"asr","vram_mb":1500},'
        '"c2":{"tool":"embed","vram_mb":500,"solo_ms":{"gpu":40,"cpu":50}}}',
        '{"asr":{"gpu_now":[60,3,"g1c0"]},"embed":"unmeasured"}',
        '[]',
        '["unknown: asr on cpu unmeasured, gain<=10ms"]',
    ]
    assert no_ids(model.received[0]) == [
        SystemMessage(scheduler.prompt(BATCH)[0].content),
        AIMessage("", id="devsched-observations", tool_calls=calls),
        *(ToolMessage(out, name=name, tool_call_id=f"obs{i}")
          for i, (name, out) in enumerate(zip(OBS_TOOLS, outputs, strict=False))),
        HumanMessage(f"Step of 2 call(s): c1 (asr), c2 (embed). {ANSWER_PROMPT}"),
    ]
    assert model.bindings == [((), None)]  # one turn: no tool to call, the schema constrains
    schema = model.call_kwargs[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"] == {
        "c1": {"type": "string", "enum": ["gpu_now", "gpu_queued", "cpu"]},
        "c2": {"type": "string", "enum": ["gpu_now", "gpu_queued", "cpu"]},
    }
    assert schema["required"] == ["c1", "c2"] and schema["additionalProperties"] is False
    assert scheduler.llm_calls == 1 and scheduler.consultations == 1


def test_no_mapping_is_offered_to_the_model_as_a_recommendation() -> None:
    """The classical policy's mapping is computed beside the model (agreement, fallback),
    never shown: no candidates, no "best", no policy mapping in what the model reads."""
    fallback = ByTool({"asr": "gpu_queued", "embed": "gpu_now"})
    scheduler, model = agentic([AIMessage('{"c1": "cpu", "c2": "cpu"}', id="a")],
                               fallback=fallback)
    decision = scheduler.decide(BATCH, VIEW)
    read = " ".join(str(m.content) for m in model.received[0])
    assert "best" not in read and "candidate" not in read and "recommend" not in read
    assert '"c2":"gpu_now"' not in read.replace(" ", "")
    assert fallback.calls == 1  # decided beside, for agreement
    assert decision.consultation.agrees is False
    assert decision.consultation.deviation.policy == {"c1": "gpu_queued", "c2": "gpu_now"}


def test_more_observation_calls_within_a_turn_budget() -> None:
    look = tool_call("tool_estimates", {"tool": "asr"}, "t1")
    first = AIMessage("", id="ai-1", tool_calls=[look])
    answer = submit({"c1": "gpu_now", "c2": "cpu"}, "asr is fast on the GPU; embed is tiny")
    scheduler, model = agentic([first, answer], max_turns=3)

    decision = scheduler.decide(BATCH, VIEW)

    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert decision.reason == "agentic: asr is fast on the GPU; embed is tiny"
    assert decision.llm_calls == 2
    assert no_ids(model.received[1][-2:]) == [
        first, ToolMessage('{"asr":{"gpu_now":[60,3,"g1c0"]}}', name="tool_estimates",
                           tool_call_id="t1")]
    assert model.bindings == [(OBS_TOOLS, None)] * 2  # the same tools on every free turn


def test_system_prompt_carries_policy_and_hard_constraints() -> None:
    scheduler, model = agentic(
        [submit({"c1": "gpu_now", "c2": "cpu"})],
        policy="keep at least 20 GB of VRAM free for the chat model",
        min_free_vram_mb=500,
        pinned={"asr": "gpu_now"},
        cpu_forbidden=["asr"],
    )
    scheduler.decide(BATCH, VIEW)
    system = model.received[0][0].text
    assert system.endswith(
        'Hard constraints, enforced after you answer: {"min_free_vram_mb":500.0,'
        '"pinned":{"asr":"gpu_now"},"cpu_forbidden":["asr"]}\n'
        "Operator policy: keep at least 20 GB of VRAM free for the chat model"
    )


def test_exploration_hints_and_past_outcomes_tools() -> None:
    script = [
        AIMessage(
            "",
            id="ai-1",
            tool_calls=[
                tool_call("exploration_hints", id="t1"),
                tool_call("past_outcomes", id="t2"),
                tool_call("tool_estimates", {"tool": "ocr"}, "t3"),
            ],
        ),
        submit({"c1": "gpu_now", "c2": "cpu"}),
    ]
    scheduler, model = agentic(script, max_turns=2)
    scheduler.decide(BATCH, VIEW)
    hints, outcomes, unknown = model.received[1][-3:]
    assert json.loads(hints.text) == ["unknown: asr on cpu unmeasured, gain<=10ms"]
    assert json.loads(outcomes.text) == []
    assert json.loads(unknown.text) == {"error": "unknown tool 'ocr'; known tools: asr, embed"}


# -- the forced answer turn ------------------------------------------------------------------


def test_text_turn_is_followed_by_a_forced_answer_turn() -> None:
    chat = AIMessage("I think asr should use the GPU.", id="ai-1")
    scheduler, model = agentic([chat, submit({"c1": "gpu_now", "c2": "cpu"})], max_turns=2,
                               answer="tool_required")

    decision = scheduler.decide(BATCH, VIEW)

    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    # the same tools on every turn (a server's prompt cache survives); only tool_choice moves
    assert model.bindings == [(OBS_TOOLS, None), (OBS_TOOLS, "any")]
    assert no_ids(model.received[1][-2:]) == [chat, HumanMessage(FORCE_PROMPT)]


def test_last_turn_is_forced_after_max_turns() -> None:
    looking = AIMessage("", id="ai-1", tool_calls=[tool_call("device_state", id="t1")])
    scheduler, model = agentic(
        [looking, looking, submit({"c1": "cpu", "c2": "cpu"})],
        max_turns=3,
        answer="tool_named",
    )
    decision = scheduler.decide(BATCH, VIEW)
    assert decision.llm_calls == 3 and dict(decision.mapping) == {"c1": "cpu", "c2": "cpu"}
    assert [b[1] for b in model.bindings] == [None, None, "submit_mapping"]


def test_json_answer_in_text_is_accepted_when_tool_choice_is_ignored() -> None:
    text = (
        'Here: {"assignments": [{"call_id": "c1", "option": "gpu_queued"}, '
        '{"call_id": "c2", "option": "cpu"}], "reason": "from text"}'
    )
    scheduler, _ = agentic([AIMessage("thinking", id="ai-1"), AIMessage(text, id="ai-2")],
                           answer="tool_required", max_turns=2)
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "cpu"}
    assert decision.reason == "agentic: from text" and decision.fallback is None


def test_no_answer_at_all_falls_back_for_every_call() -> None:
    scheduler, model = agentic([AIMessage("no idea", id="ai-1")], answer="tool_required")
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "gpu_queued"}
    assert decision.fallback == "scheduler_error" and decision.llm_calls == 1
    assert [b[1] for b in model.bindings] == ["any"]
    assert decision.reason == (
        "agentic consultation failed (no_answer: the model never called submit_mapping); "
        "fallback by_tool: fixed"
    )
    assert scheduler.last_fallbacks == {"c1": "no_answer", "c2": "no_answer"}


def test_auto_channel_walks_the_chain_and_remembers_it() -> None:
    scheduler, model = agentic([AIMessage("no idea", id="ai-1")])
    decision = scheduler.decide(BATCH, VIEW)
    assert decision.fallback == "scheduler_error" and decision.llm_calls == 3
    # json_schema (no tools bound), then tool_choice required (the answer tool), then text
    assert model.bindings == [((), None), (("submit_mapping",), "any"), ((), None)]
    assert "response_format" in model.call_kwargs[0]
    assert decision.consultation.channel == "text"
    assert decision.consultation.channels_tried == ("json_schema", "tool_required", "text")
    assert scheduler.channel == "text"  # the endpoint keeps the channel that is left


def test_model_error_falls_back_with_the_error() -> None:
    model = ToolScriptModel(script=[], error="connection refused")
    fallback = ByTool({"asr": "gpu_now", "embed": "cpu"})
    scheduler = AgenticScheduler(model, screen=False, fallback=fallback)
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert decision.fallback == "scheduler_error" and decision.llm_calls == 1
    assert "llm_error: RuntimeError: connection refused" in decision.reason
    assert scheduler.last_fallbacks == {"c1": "llm_error", "c2": "llm_error"}


# -- bad or partial answers ------------------------------------------------------------------


def test_unknown_and_missing_call_ids() -> None:
    scheduler, _ = agentic([submit({"c1": "gpu_now", "zz": "cpu"})])
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "gpu_queued"}
    assert scheduler.last_fallbacks == {"c2": "missing_call"}
    assert scheduler.last_issues == ("unknown call id(s) zz; valid: c1, c2",)
    assert decision.fallback == "invalid_decision"
    assert decision.reason == (
        "agentic: r; fallback by_tool for c2 (missing_call); unknown call id(s) zz; valid: c1, c2"
    )


def test_unknown_option_takes_the_fallback() -> None:
    scheduler, _ = agentic([submit({"c1": "tpu", "c2": "cpu"})])
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "cpu"}
    assert scheduler.last_fallbacks == {"c1": "unknown_option"}


def test_malformed_assignments_fall_back_per_call() -> None:
    bad = AIMessage(
        "",
        id="ai-1",
        tool_calls=[
            tool_call("submit_mapping", {"assignments": [{"id": "c1"}], "reason": "?"}, "a")
        ],
    )
    scheduler, _ = agentic([bad])
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "gpu_queued"}
    assert scheduler.last_fallbacks == {"c1": "missing_call", "c2": "missing_call"}
    assert scheduler.last_issues == ("assignment 0 is not {call_id, option}: {'id': 'c1'}",)


def test_assignments_as_a_mapping_are_accepted() -> None:
    lenient = AIMessage(
        "",
        id="ai-1",
        tool_calls=[
            tool_call("submit_mapping", {"assignments": {"c1": "cpu", "c2": "gpu_now"}}, "a")
        ],
    )
    scheduler, _ = agentic([lenient])
    assert dict(scheduler.decide(BATCH, VIEW).mapping) == {"c1": "cpu", "c2": "gpu_now"}
    assert scheduler.last_fallbacks == {}


def test_gpu_now_that_cannot_fit_is_queued() -> None:
    big = Batch.of(
        [("a", "asr", ToolDeviceSpec(vram_mb=4000)), ("b", "ocr", ToolDeviceSpec(vram_mb=3001))]
    )
    scheduler, _ = agentic([submit({"a": "gpu_now", "b": "gpu_now"})])
    decision = scheduler.decide(big, VIEW)  # 7000 MB free, 7001 MB asked
    assert dict(decision.mapping) == {"a": "gpu_now", "b": "gpu_queued"}
    assert scheduler.last_fallbacks == {"b": "vram_over_budget"}
    assert decision.reason == "agentic: r; repaired b->gpu_queued (vram_over_budget)"


def test_min_free_vram_sends_a_call_that_never_fits_to_the_cpu() -> None:
    big = Batch.of(
        [("a", "asr", ToolDeviceSpec(vram_mb=4000)), ("b", "ocr", ToolDeviceSpec(vram_mb=3000))]
    )
    scheduler, _ = agentic([submit({"a": "gpu_queued", "b": "gpu_now"})], min_free_vram_mb=3500)
    decision = scheduler.decide(big, VIEW)  # room: 8000 - 1000 - 3500 = 3500 MB
    assert dict(decision.mapping) == {"a": "cpu", "b": "gpu_now"}
    assert scheduler.last_fallbacks == {"a": "vram_over_budget"}


def test_pinned_options_are_restored() -> None:
    pinned_spec = Batch.of(
        [("c1", "asr", ToolDeviceSpec(pinned="gpu_now")), ("c2", "embed", EMBED)]
    )
    scheduler, _ = agentic([submit({"c1": "cpu", "c2": "gpu_now"})], pinned={"embed": "cpu"})
    decision = scheduler.decide(pinned_spec, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert scheduler.last_fallbacks == {"c1": "pinned", "c2": "pinned"}
    assert decision.fallback == "invalid_decision"


def test_cpu_forbidden_and_gpu_incapable_tools_are_repaired() -> None:
    batch = Batch.of([("c1", "asr", ASR), ("c2", "regex", ToolDeviceSpec(gpu_capable=False))])
    scheduler, _ = agentic(
        [submit({"c1": "cpu", "c2": "gpu_now"})], cpu_forbidden={"asr"}, fallback=ByTool({})
    )
    decision = scheduler.decide(batch, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "cpu"}
    assert scheduler.last_fallbacks == {"c1": "cpu_forbidden", "c2": "not_allowed"}


def test_gpu_options_go_to_the_cpu_without_a_gpu() -> None:
    scheduler, _ = agentic([submit({"c1": "gpu_now", "c2": "gpu_queued"})])
    decision = scheduler.decide(BATCH, SchedulerView(DeviceState.cpu_only("none"), OBS))
    assert dict(decision.mapping) == {"c1": "cpu", "c2": "cpu"}
    assert scheduler.last_fallbacks == {"c1": "no_gpu", "c2": "no_gpu"}


def test_the_fallback_answer_is_held_to_the_hard_constraints() -> None:
    scheduler, _ = agentic(
        [AIMessage("no", id="ai-1")],
        fallback=ByTool({"asr": "cpu", "embed": "cpu"}),
        pinned={"embed": "gpu_queued"},
    )
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "cpu", "c2": "gpu_queued"}
    assert decision.reason.endswith("; repaired c2->gpu_queued (pinned)")


def test_default_fallback_is_the_monitor_policy() -> None:
    scheduler = AgenticScheduler(ToolScriptModel(script=[]))
    assert scheduler.fallback.name == "monitor"


def test_invalid_construction_is_explained() -> None:
    with pytest.raises(ValueError, match="valid options: gpu_now, gpu_queued, cpu"):
        AgenticScheduler(ToolScriptModel(script=[]), pinned={"asr": "gpu"})
    with pytest.raises(ValueError, match="pinned to 'cpu' and in cpu_forbidden"):
        AgenticScheduler(ToolScriptModel(script=[]), pinned={"asr": "cpu"}, cpu_forbidden=["asr"])
    with pytest.raises(TypeError, match="LangChain chat model"):
        AgenticScheduler(object())  # type: ignore[arg-type]


# -- configuration from the environment ------------------------------------------------------


def test_from_env_without_a_model_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("DEVSCHED_LLM_MODEL", "DEVSCHED_LLM_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(AgenticNotConfiguredError) as err:
        AgenticScheduler.from_env()
    for var in ("DEVSCHED_LLM_MODEL", "DEVSCHED_LLM_BASE_URL", "OPENAI_API_KEY"):
        assert var in str(err.value)
    monkeypatch.setenv("DEVSCHED_LLM_MODEL", "gpt-4o-mini")
    with pytest.raises(AgenticNotConfiguredError, match="neither"):
        AgenticScheduler.from_env()


def test_from_env_builds_an_openai_compatible_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("DEVSCHED_LLM_MODEL", "qwen2.5-7b-instruct")
    monkeypatch.setenv("DEVSCHED_LLM_BASE_URL", "http://localhost:8080/v1")
    scheduler = AgenticScheduler.from_env(policy="p", timeout_s=5)
    chat: Any = scheduler.model
    assert (chat.model_name, chat.openai_api_base) == (
        "qwen2.5-7b-instruct",
        "http://localhost:8080/v1",
    )
    assert chat.openai_api_key.get_secret_value() == "not-needed"
    assert (scheduler.policy, scheduler.timeout_s) == ("p", 5)
    other: Any = openai_model("m", base_url="http://h:1/v1", api_key="k")
    assert (other.model_name, other.openai_api_base) == ("m", "http://h:1/v1")


def test_missing_langchain_openai_is_a_plain_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_openai", None)
    with pytest.raises(ImportError, match=r"pip install langchain-openai"):
        openai_model("m", base_url="http://h/v1")


def test_registered_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph_devsched.schedulers.registry import make_scheduler, scheduler_names

    monkeypatch.delenv("DEVSCHED_LLM_MODEL", raising=False)
    assert "agentic" in scheduler_names()
    with pytest.raises(AgenticNotConfiguredError, match="Set DEVSCHED_LLM_MODEL"):
        make_scheduler("agentic")
    built = make_scheduler("agentic", model=ToolScriptModel(script=[]), policy="p")
    assert isinstance(built, AgenticScheduler) and built.policy == "p"
    monkeypatch.setenv("DEVSCHED_LLM_MODEL", "m")
    monkeypatch.setenv("DEVSCHED_LLM_BASE_URL", "http://localhost:11434/v1")
    assert make_scheduler("agentic").name == "agentic"
