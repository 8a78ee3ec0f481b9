"""How the agentic scheduler asks for and finds its answer (issue 17), with scripted models.

Answers in any turn and in common wrappers; the token cap sized to the batch; the answer
channels and the ``auto`` chain; one-shot consultations; the twin guard and the candidates
observation; options from the environment.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor.observations import Observations
from langgraph_devsched.monitor.unknowns import ExplorationHint
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.agentic.model import (
    LONG_BUDGET_FACTOR,
    answer_budget,
    answer_schema,
)
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.telemetry import DeviceState
from tests.agentic_fakes import ToolScriptModel, submit, tool_call
from tests.test_agentic import BATCH, OBS_TOOLS, VIEW, ByTool

FALLBACK = ByTool({"asr": "gpu_queued", "embed": "gpu_queued"})
ANSWER = {"assignments": [{"call_id": "c1", "option": "gpu_now"},
                          {"call_id": "c2", "option": "cpu"}], "reason": "from text"}


def scheduler(script: list[AIMessage], **kw: Any) -> tuple[AgenticScheduler, ToolScriptModel]:
    model = ToolScriptModel(script=script)
    kw.setdefault("fallback", FALLBACK)
    kw.setdefault("guard_ratio", None)
    return AgenticScheduler(model, **kw), model


# -- answers in any turn, in any common wrapper ----------------------------------------------


def test_a_valid_answer_in_the_first_turns_text_is_used_at_once() -> None:
    text = f"Let me think.\n```json\n{json.dumps(ANSWER)}\n```"
    sched, model = scheduler([AIMessage(text, id="a1"), AIMessage("never asked", id="a2")],
                             max_turns=2)
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert decision.fallback is None and decision.llm_calls == 1 and len(model.received) == 1
    assert decision.consultation.via == "text" and decision.consultation.channel == "free"


def test_an_answer_in_an_earlier_turn_survives_a_useless_last_turn() -> None:
    # the model answers in text while looking, then the forced turn says nothing useful
    look = AIMessage(json.dumps(ANSWER) + " and now", id="a1",
                     tool_calls=[tool_call("device_state", id="t1")])
    sched, _ = scheduler([look, AIMessage("ok", id="a2")], answer="tool_required", max_turns=2)
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert decision.fallback is None


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "submit_mapping", "arguments": [{"call_id": "c1", "option": "gpu_now"}, '
        '{"call_id": "c2", "option": "cpu"}]}',
        '{"name": "submit_mapping", "arguments": "{\\"assignments\\": {\\"c1\\": \\"gpu_now\\", '
        '\\"c2\\": \\"cpu\\"}}"}',
        '<tool_call>{"function": {"name": "submit_mapping", "parameters": {"mapping": '
        '{"c1": "gpu_now", "c2": "cpu"}}}}</tool_call>',
        '[{"call_id": "c1", "option": "gpu_now"}, {"call_id": "c2", "option": "cpu"}]',
    ],
)
def test_wrapped_answers_are_accepted(text: str) -> None:
    sched, _ = scheduler([AIMessage(text, id="a1")])
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert decision.fallback is None


def test_an_answer_passed_to_the_wrong_tool_is_accepted() -> None:
    call = tool_call("json", {"assignments": {"c1": "gpu_now", "c2": "cpu"}}, "w1")
    sched, _ = scheduler([AIMessage("", id="a1", tool_calls=[call])])
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert decision.consultation.via == "wrapped_call"


def test_another_tools_call_written_as_text_is_not_an_answer() -> None:
    text = '{"name": "device_state", "arguments": {}}'
    sched, _ = scheduler([AIMessage(text, id="a1")], answer="text")
    assert sched.decide(BATCH, VIEW).consultation.cause == "no_answer"


# -- the token cap ---------------------------------------------------------------------------


def test_every_turn_is_capped_by_a_token_budget_sized_to_the_batch() -> None:
    look = AIMessage("", id="a1", tool_calls=[tool_call("device_state", id="t1")])
    sched, model = scheduler([look, AIMessage("hm", id="a2"), submit({"c1": "cpu", "c2": "cpu"})],
                             max_turns=2)
    sched.decide(BATCH, VIEW)
    # the free turn and the tool channel get room for a reason; json_schema the answer alone
    assert [kw.get("max_tokens") for kw in model.call_kwargs] == [
        LONG_BUDGET_FACTOR * answer_budget(2), answer_budget(2),
        LONG_BUDGET_FACTOR * answer_budget(2)]
    assert answer_budget(13) > answer_budget(2) >= 2 * len('"c1": "gpu_queued", ') // 4


def test_an_explicit_token_cap_is_sent_as_is() -> None:
    sched, model = scheduler([submit({"c1": "cpu", "c2": "cpu"})], max_tokens=77)
    sched.decide(BATCH, VIEW)
    assert model.call_kwargs[0]["max_tokens"] == 77


# -- answer channels -------------------------------------------------------------------------


def test_the_forced_turn_keeps_the_tool_list_and_names_the_tool_when_asked() -> None:
    sched, model = scheduler([AIMessage("hm", id="a1"), submit({"c1": "cpu", "c2": "cpu"})],
                             answer="tool_named", max_turns=2)
    sched.decide(BATCH, VIEW)
    assert model.bindings == [(OBS_TOOLS, None), (OBS_TOOLS, "submit_mapping")]


def test_the_json_schema_channel_sends_the_per_step_schema() -> None:
    text = '{"c1": "gpu_queued", "c2": "cpu"}'
    sched, model = scheduler([AIMessage("hm", id="a1"), AIMessage(text, id="a2")],
                             answer="json_schema", max_turns=2)
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "cpu"}
    assert model.bindings == [(OBS_TOOLS, None), (OBS_TOOLS, "none")]
    sent = model.call_kwargs[1]["response_format"]
    assert sent["json_schema"]["schema"] == answer_schema(["c1", "c2"])
    pinned = Batch.of([("c1", "asr", ToolDeviceSpec(pinned="cpu")),
                       ("c2", "embed", ToolDeviceSpec(gpu_capable=False))])
    sched, model = scheduler([AIMessage(text, id="a1")], answer="json_schema")
    sched.decide(pinned, VIEW)
    enum = {c: p["enum"] for c, p in
            model.call_kwargs[-1]["response_format"]["json_schema"]["schema"]["properties"].items()}
    assert enum == {"c1": ["cpu"], "c2": ["cpu"]}  # an enum per call: its allowed options
    assert decision.consultation.channel == "json_schema" and decision.consultation.via == "text"


class BadRequest(ValueError):
    status_code = 400


class RejectsToolChoice(ToolScriptModel):
    """A server that answers 400 to a forced tool_choice (and works otherwise)."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        if self.tool_choice == "any":
            self.received.append(list(messages))
            raise BadRequest("400: tool_choice 'required' is not supported")
        return super()._generate(messages, stop, run_manager, **kw)


def test_auto_moves_past_a_channel_the_server_rejects() -> None:
    text = '{"assignments": {"c1": "cpu", "c2": "cpu"}, "reason": "json"}'
    model = RejectsToolChoice(script=[AIMessage(text, id="a2")])
    sched = AgenticScheduler(model, fallback=FALLBACK, guard_ratio=None, answer="auto")
    sched.channel_state.chain = ("tool_required", "json_schema", "text")
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "cpu", "c2": "cpu"} and decision.fallback is None
    assert decision.consultation.channels_tried == ("tool_required", "json_schema")
    assert sched.channel == "json_schema"
    # the next consultation starts where this endpoint works
    sched.clear_cache()
    sched.decide(BATCH, VIEW)
    assert "any" not in [choice for _, choice in model.bindings[3:]]


def test_a_fixed_channel_that_fails_is_an_llm_error() -> None:
    model = RejectsToolChoice(script=[AIMessage("hm", id="a1")])
    sched = AgenticScheduler(model, screen=False, fallback=FALLBACK, answer="tool_required")
    decision = sched.decide(BATCH, VIEW)
    assert decision.consultation.cause == "llm_error" and "not supported" in decision.reason


def test_an_unknown_answer_channel_names_the_valid_ones() -> None:
    assert AgenticScheduler(ToolScriptModel(script=[]), answer="tool_named").channel == (
        "tool_named")
    with pytest.raises(ValueError, match="valid: auto, tool_required"):
        AgenticScheduler(ToolScriptModel(script=[]), answer="xml")  # type: ignore[arg-type]


# -- one-shot --------------------------------------------------------------------------------


def test_one_shot_puts_the_observations_in_the_prompt_and_asks_once() -> None:
    text = '{"assignments": {"c1": "gpu_now", "c2": "cpu"}, "reason": "one shot"}'
    sched, model = scheduler([AIMessage(text, id="a1")], mode="one_shot", answer="json_schema")
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_now", "c2": "cpu"}
    assert decision.llm_calls == 1 and decision.consultation.mode == "one_shot"
    assert model.bindings == [((), None)]  # no tools at all on a JSON one-shot turn
    task = model.received[0][1].content
    assert "step_calls: {" in task and "tool_estimates: {" in task and "device_state: {" in task
    assert '"gpu_now":[60,3,"g1c0"]' in task  # the monitor's estimate, inline (compact)
    assert "null" not in task
    assert isinstance(model.received[0][-1], HumanMessage)


def test_one_shot_through_a_tool_channel_binds_only_the_answer_tool() -> None:
    sched, model = scheduler([submit({"c1": "cpu", "c2": "cpu"})], mode="one_shot",
                             answer="tool_required")
    assert sched.decide(BATCH, VIEW).fallback is None
    assert model.bindings == [(("submit_mapping",), "any")]


# -- the guard and the candidates ------------------------------------------------------------

PROFILED = Batch.of([
    ("c1", "asr", ToolDeviceSpec(vram_mb=1500, profile=SoloProfile(cpu_ms=900, gpu_ms=60))),
    ("c2", "embed", ToolDeviceSpec(vram_mb=500, profile=SoloProfile(cpu_ms=50, gpu_ms=40))),
])
PROFILED_VIEW = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0.0, 8), Observations(step=0))


def test_the_guard_rejects_an_answer_the_twin_predicts_much_worse() -> None:
    """A veto of kind ``twin`` (its prediction against ``guard_ratio`` times the best's), not
    a failed consultation: the policy's mapping runs, nothing falls back."""
    sched, _ = scheduler([submit({"c1": "cpu", "c2": "cpu"})], screen=False, guard_ratio=1.5)
    decision = sched.decide(PROFILED, PROFILED_VIEW)
    record = decision.consultation
    assert record.cause is None and record.answered and decision.fallback is None
    assert record.guard_answer_ms == pytest.approx(900, rel=0.1)
    assert record.guard_best_ms == pytest.approx(60, rel=0.5)
    assert record.veto is not None and record.veto.kind == "twin"
    assert (record.veto.answer_ms, record.veto.limit_ms) == (
        record.guard_answer_ms, pytest.approx(1.5 * record.guard_best_ms))
    assert sched.last_fallbacks == {"c1": "vetoed", "c2": "vetoed"}
    assert decision.veto == record.veto.text() and "twin: predicts" in decision.reason
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "gpu_queued"}


def test_the_guard_passes_a_good_answer_and_records_both_predictions() -> None:
    # predicted 40 ms faster than the policy's mapping, never run: an exploration, which
    # runs where an allowance funds it (by default only what measurement won funds one)
    sched, _ = scheduler([submit({"c1": "gpu_now", "c2": "cpu"})], guard_ratio=1.5,
                         explore_allowance_ms=1.0)
    decision = sched.decide(PROFILED, PROFILED_VIEW)
    assert decision.fallback is None
    assert decision.consultation.deviation.predicted_cost_ms == -40.0
    assert decision.consultation.guard_answer_ms is not None
    assert decision.consultation.guard_answer_ms <= 1.5 * decision.consultation.guard_best_ms


def test_the_guard_can_be_turned_off() -> None:
    sched, _ = scheduler([submit({"c1": "cpu", "c2": "cpu"})], guard_ratio=None)
    decision = sched.decide(PROFILED, PROFILED_VIEW)
    assert decision.fallback is None and decision.consultation.guard_answer_ms is None


def test_the_guard_never_vetoes_a_probe_the_hints_asked_for() -> None:
    """An answer the twin predicts beyond the ratio passes when it measures what an
    exploration hint names as unknown (asr never ran on the CPU); the override is recorded
    with both predictions. Another bad answer is still rejected. The waived probe is still an
    exploration, priced on the shape's budget: without an allowance that covers its predicted
    cost it is vetoed, with both figures."""
    hint = ExplorationHint.make("unknown", ("asr",), devices=("cpu",), expected_gain_ms=5)
    view = SchedulerView(PROFILED_VIEW.device, Observations(step=3, hints=(hint,)))
    sched, _ = scheduler([AIMessage('{"c1": "cpu", "c2": "gpu_now"}', id="a")], screen=False,
                         guard_ratio=1.5)
    vetoed = sched.decide(PROFILED, view).consultation
    assert vetoed.cause is None and vetoed.veto is not None and vetoed.veto.kind == "budget"
    assert vetoed.veto.answer_ms > 0 and vetoed.veto.limit_ms == 0.0
    sched, _ = scheduler([AIMessage('{"c1": "cpu", "c2": "gpu_now"}', id="a")], screen=False,
                         guard_ratio=1.5, explore_allowance_ms=10_000.0)
    decision = sched.decide(PROFILED, view)
    record = decision.consultation
    assert decision.fallback is None and dict(decision.mapping) == {"c1": "cpu", "c2": "gpu_now"}
    assert record.cause is None and record.guard_waived == hint.text
    assert record.guard_answer_ms > 1.5 * record.guard_best_ms
    unhinted = Observations(step=3, hints=(
        ExplorationHint.make("unknown", ("embed",), devices=("cpu",), expected_gain_ms=5),))
    sched, _ = scheduler([AIMessage('{"c1": "cpu", "c2": "gpu_now"}', id="a")], screen=False,
                         guard_ratio=1.5)
    rejected = sched.decide(PROFILED, SchedulerView(view.device, unhinted)).consultation
    assert rejected.veto is not None and rejected.veto.kind == "twin"


# -- configuration from the environment ------------------------------------------------------


def test_options_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    monkeypatch.setenv("DEVSCHED_LLM_MODEL", "m")
    monkeypatch.setenv("DEVSCHED_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DEVSCHED_LLM_TIMEOUT", "7.5")
    monkeypatch.setenv("DEVSCHED_LLM_MAX_TOKENS", "99")
    monkeypatch.setenv("DEVSCHED_LLM_MODE", "one_shot")
    monkeypatch.setenv("DEVSCHED_LLM_ANSWER", "json_schema")
    sched = AgenticScheduler.from_env()
    assert (sched.timeout_s, sched.max_tokens, sched.mode, sched.channel) == (
        7.5, 99, "one_shot", "json_schema")
    assert sched.model.max_retries == 0  # type: ignore[attr-defined]
    monkeypatch.setenv("DEVSCHED_LLM_MODE", "chatty")
    with pytest.raises(ValueError, match="valid: agent, one_shot"):
        AgenticScheduler.from_env()
