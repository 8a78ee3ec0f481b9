"""The ``pick`` consultation: the twin's best mappings numbered, the answer one number.

Scripted models and an in-memory HTTP transport; the real server is in
``tests/test_agentic_real_wire.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from langgraph_devsched.bench.agentic_stats import summarize
from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor.observations import Observations
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.agentic.answers import parse_pick, pick_schema
from langgraph_devsched.schedulers.agentic.constraints import HardConstraints
from langgraph_devsched.schedulers.agentic.guard import TwinView
from langgraph_devsched.schedulers.agentic.modes.pick import PICK_MAX_TOKENS, pick_candidates
from langgraph_devsched.schedulers.agentic.prompts import call_labels
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
from langgraph_devsched.telemetry import DeviceState
from tests.agentic_fakes import HangingModel, ToolScriptModel
from tests.test_agentic import ByTool

GPU = DeviceState(True, "gpu", 8000, 0, 0.0, 8)
ASR = ToolDeviceSpec(vram_mb=1500, profile=SoloProfile(cpu_ms=900, gpu_ms=60))
EMBED = ToolDeviceSpec(vram_mb=500, profile=SoloProfile(cpu_ms=50, gpu_ms=40))
OCR = ToolDeviceSpec(vram_mb=800, profile=SoloProfile(cpu_ms=300, gpu_ms=70))
BATCH = Batch.of([("c1", "asr", ASR), ("c2", "embed", EMBED), ("c3", "ocr", OCR)])
VIEW = SchedulerView(GPU, Observations(step=0))
ALL_CPU = {"asr": "cpu", "embed": "cpu", "ocr": "cpu"}


class Probing(ByTool):
    """A fallback whose every decision is an exploratory probe."""

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return dataclasses.replace(super().decide(batch, view), probe=True)


FALLBACK = ByTool(ALL_CPU)


def reply(text: str) -> AIMessage:
    return AIMessage(text, id=f"r-{abs(hash(text))}")


def picker(script: list[AIMessage], **kw: Any) -> tuple[AgenticScheduler, ToolScriptModel]:
    model = ToolScriptModel(script=script)
    kw.setdefault("fallback", FALLBACK)
    kw.setdefault("max_explorations", None)  # these tests are about picking, not its bound
    return AgenticScheduler(model, mode="pick", **kw), model


def shown(sched: AgenticScheduler, batch: Batch = BATCH) -> list[Any]:
    """The candidates a pick consultation of ``batch`` shows (lead first)."""
    step = sched._prepare(batch, VIEW, asynchronous=False)
    return step.consultation.candidates  # type: ignore[union-attr]


def twin_candidates(k: int = 3, **kw: Any) -> list[Any]:
    twin_view = TwinView.build(BATCH, GPU, Observations(step=0))
    assert twin_view is not None
    return pick_candidates(twin_view, GPU, kw.pop("rules", HardConstraints()), k, **kw)


# -- reading a pick ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"pick": 2}', (2, "")),
        ('{\n  "pick": 1,\n  "reason": "lowest"\n}', (1, "lowest")),
        ('```json\n{"candidate": 3}\n```', (3, "")),
        ("2", (2, "")),
        ("I pick candidate 1.", (1, "")),
        ('{"pick": "2"}', (2, "")),
        ('{\n  "pick": 3,\n  "reason": "the 2 fastest calls on the GPU and', (3, "")),
    ],
)
def test_a_pick_is_read_from_json_or_a_lone_integer(text: str, expected: tuple[int, str]) -> None:
    assert parse_pick(text, 3) == expected


@pytest.mark.parametrize(
    "text",
    ['{"pick": 4}', '{"pick": 0}', '{"pick": "two"}', "1 or 2", "candidate 9", "none of them",
     "1) 95 ms (best): asr=gpu_now", ""],
)
def test_anything_else_is_no_pick(text: str) -> None:
    assert parse_pick(text, 3) is None


def test_the_schema_allows_only_the_shown_numbers() -> None:
    schema = pick_schema(3)
    assert schema["properties"]["pick"]["enum"] == [1, 2, 3]
    assert schema["required"] == ["pick"] and schema["additionalProperties"] is False
    assert schema["properties"]["reason"]["maxLength"] <= 60


# -- the candidates --------------------------------------------------------------------------


def test_candidates_are_distinct_best_first_and_held_to_the_hard_constraints() -> None:
    found = twin_candidates(3)
    assert len(found) == 3
    spans = [c.predicted_ms for c in found]
    assert spans == sorted(spans)
    assert len({tuple(c.mapping.values()) for c in found}) == 3
    assert found[0].mapping["c1"] != "cpu"  # asr: 900 ms on the CPU, 60 on the GPU
    pinned = twin_candidates(3, rules=HardConstraints(pinned={"asr": "gpu_queued"}))
    assert pinned and all(c.mapping["c1"] == "gpu_queued" for c in pinned)


def test_candidates_beyond_the_guard_ratio_are_not_shown() -> None:
    everything = twin_candidates(27)
    near = twin_candidates(27, within=1.5)
    assert near[0] == everything[0] and len(near) < len(everything)
    assert all(c.predicted_ms <= 1.5 * near[0].predicted_ms for c in near)


def test_repeated_tools_get_short_labels() -> None:
    batch = Batch.of([("call_8f2a91", "embed", EMBED), ("call_77b1c0", "embed", EMBED),
                      ("call_0c9d11", "asr", ASR)])
    assert call_labels(batch) == {
        "call_8f2a91": "embed#0", "call_77b1c0": "embed#1", "call_0c9d11": "asr"}


# -- the consultation ------------------------------------------------------------------------


def test_the_picked_candidate_is_the_decision_and_the_record_says_so() -> None:
    sched, model = picker([reply('{"pick": 2}')])
    offered = shown(sched)
    assert offered[0].mapping == {"c1": "cpu", "c2": "cpu", "c3": "cpu"}  # the fallback's
    assert [c.mapping for c in offered[1:]] == [
        c.mapping for c in twin_candidates(3, within=1.5)[: len(offered) - 1]]
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == offered[1].mapping
    assert decision.fallback is None and decision.llm_calls == 1
    record = decision.consultation
    assert (record.mode, record.channel, record.via, record.pick, record.candidates) == (
        "pick", "json_schema", "pick", 2, len(offered))
    assert decision.reason.startswith(f"agentic: pick 2/{len(offered)}")
    # one turn, no tools bound, the pick schema as the response format, a small token cap
    assert model.bindings == [((), None)]
    kwargs = model.call_kwargs[0]
    assert kwargs["max_tokens"] == PICK_MAX_TOKENS
    fmt = kwargs["response_format"]["json_schema"]
    assert fmt["name"] == "submit_pick"
    assert fmt["schema"]["properties"]["pick"]["enum"] == list(range(1, len(offered) + 1))
    prompt = model.received[0][-1].content
    assert "1) 900 ms: asr=cpu" in prompt and "c1" not in prompt  # labels, not ids
    assert "(best)" not in prompt and "1 is the current scheduler's choice" in prompt


def test_the_system_message_is_the_same_for_every_step() -> None:
    sched, model = picker([reply('{"pick": 1}')])
    other = Batch.of([("d1", "ocr", OCR), ("d2", "embed", EMBED)])
    sched.decide(BATCH, VIEW)
    sched.decide(other, VIEW)
    first, second = model.received
    assert first[0].content == second[0].content  # a stable prefix for the prompt cache
    assert first[1].content != second[1].content


def test_the_text_channel_reads_a_lone_number() -> None:
    sched, model = picker([reply("Candidate 1.")], answer="text")
    decision = sched.decide(BATCH, VIEW)
    assert decision.consultation.pick == 1 and decision.consultation.channel == "text"
    assert "response_format" not in model.call_kwargs[0]


def test_auto_moves_to_text_when_the_schema_gives_no_pick() -> None:
    sched, _ = picker([reply("I cannot decide."), reply("1")])
    decision = sched.decide(BATCH, VIEW)
    record = decision.consultation
    assert record.channels_tried == ("json_schema", "text") and record.pick == 1
    assert decision.llm_calls == 2 and sched.channel == "text"


def test_a_fixed_channel_without_a_pick_falls_back() -> None:
    sched, _ = picker([reply("no idea, maybe 1 or 3")], answer="json_schema")
    decision = sched.decide(BATCH, VIEW)
    assert decision.consultation.cause == "no_answer" and decision.fallback == "scheduler_error"
    assert dict(decision.mapping) == {"c1": "cpu", "c2": "cpu", "c3": "cpu"}


def test_a_failing_model_is_an_llm_error() -> None:
    sched, model = picker([reply("1")], answer="json_schema")
    model.error = "server gone"
    decision = sched.decide(BATCH, VIEW)
    assert decision.consultation.cause == "llm_error" and "server gone" in decision.reason
    assert decision.llm_calls == 2  # a transport error is tried once more, then it is final


def test_a_transport_error_keeps_the_channel() -> None:
    sched, model = picker([reply('{"pick": 1}')])
    model.error = "connection reset"
    failures = iter([True])

    original = type(model)._generate

    def flaky(self: Any, *args: Any, **kw: Any) -> Any:
        self.error = "connection reset" if next(failures, False) else None
        return original(self, *args, **kw)

    type(model)._generate = flaky  # type: ignore[method-assign]
    try:
        decision = sched.decide(BATCH, VIEW)
    finally:
        type(model)._generate = original  # type: ignore[method-assign]
    assert decision.consultation.pick == 1 and decision.consultation.channels_tried == (
        "json_schema", "json_schema")
    assert sched.channel == "json_schema"


@pytest.fixture
def hanging() -> Iterator[HangingModel]:
    model = HangingModel()
    yield model
    model.release.set()


async def test_a_hanging_model_times_out(hanging: HangingModel) -> None:
    sched = AgenticScheduler(hanging, mode="pick", fallback=FALLBACK, timeout_s=0.05)
    decision = await sched.adecide(BATCH, VIEW)
    assert decision.consultation.cause == "timeout" and decision.consultation.mode == "pick"
    assert sched.decide(Batch.of([("e1", "ocr", OCR)]), VIEW).consultation.cause == "timeout"


def test_without_predictions_a_pick_consultation_runs_as_one_shot() -> None:
    unknown = Batch.of([("c1", "mystery", ToolDeviceSpec(vram_mb=100))])
    answer = {"assignments": {"c1": "cpu"}, "reason": "unknown tool"}
    sched, model = picker([reply(json.dumps(answer))], answer="json_schema")
    decision = sched.decide(unknown, VIEW)
    assert decision.consultation.mode == "one_shot" and decision.consultation.pick is None
    assert dict(decision.mapping) == {"c1": "cpu"} and decision.fallback is None
    assert any("Observations:" in str(m.content) for m in model.received[0])


def test_the_guard_off_shows_the_candidates_beyond_the_ratio() -> None:
    sched, _ = picker([reply('{"pick": 3}')], guard_ratio=None, candidates=3)
    offered = shown(sched)
    assert [c.mapping for c in offered[1:]] == [c.mapping for c in twin_candidates(2)]
    decision = sched.decide(BATCH, VIEW)
    assert decision.fallback is None and decision.consultation.candidates == 3
    assert dict(decision.mapping) == offered[2].mapping


def test_the_fallbacks_own_mapping_leads_and_is_not_guarded() -> None:
    # all-CPU: the twin predicts it far beyond the guard's ratio (asr 900 ms vs 60 ms)
    sched, model = picker([reply('{"pick": 1}')], fallback=ByTool(ALL_CPU))
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "cpu", "c2": "cpu", "c3": "cpu"}
    assert decision.fallback is None and decision.consultation.pick == 1
    prompt = model.received[0][-1].content
    assert prompt.splitlines()[1].startswith("1) 900 ms: asr=cpu")  # no "(best)": it is not
    assert "(best)" not in prompt.splitlines()[1]


def test_the_other_candidates_are_the_twins_best_and_pass_the_guard() -> None:
    sched, _ = picker([reply('{"pick": 2}')], fallback=ByTool(ALL_CPU))
    decision = sched.decide(BATCH, VIEW)
    assert dict(decision.mapping) == twin_candidates(1)[0].mapping
    record = decision.consultation
    assert decision.fallback is None and record.guard_answer_ms == record.guard_best_ms


def test_the_monitor_policy_leads_with_its_own_prediction() -> None:
    sched, model = picker([reply('{"pick": 1}')], fallback="monitor")
    decision = sched.decide(BATCH, VIEW)
    record = decision.consultation
    assert record.pick == 1 and decision.fallback is None and record.mode == "pick"
    assert record.guard_answer_ms is not None  # predicted, and within the ratio
    assert "1) " in model.received[0][-1].content


def test_pick_refuses_the_tool_channels() -> None:
    with pytest.raises(ValueError, match="json_schema or text"):
        AgenticScheduler(ToolScriptModel(script=[]), mode="pick", answer="tool_required")
    with pytest.raises(ValueError, match="candidates"):
        AgenticScheduler(ToolScriptModel(script=[]), candidates=-1)


def test_pick_and_candidates_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    monkeypatch.setenv("DEVSCHED_LLM_MODEL", "m")
    monkeypatch.setenv("DEVSCHED_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DEVSCHED_LLM_MODE", "pick")
    monkeypatch.setenv("DEVSCHED_LLM_CANDIDATES", "4")
    sched = AgenticScheduler.from_env()
    assert (sched.mode, sched.candidates, sched.channel) == ("pick", 4, "json_schema")


# -- on the OpenAI wire ----------------------------------------------------------------------


def test_the_wire_format_of_a_pick() -> None:
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("langchain_openai")
    from langgraph_devsched.schedulers.agentic import openai_model
    from tests.test_agentic_openai_wire import completion

    bodies: list[dict[str, Any]] = []

    def serve(request: Any) -> Any:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=completion({"role": "assistant", "content": '{"pick":1}'}))

    transport = httpx.MockTransport(serve)
    model = openai_model("stub", base_url="http://llm.invalid/v1",
                         http_client=httpx.Client(transport=transport))
    decision = AgenticScheduler(model, mode="pick", fallback=FALLBACK).decide(BATCH, VIEW)
    assert decision.consultation.pick == 1 and decision.fallback is None
    (body,) = bodies
    assert "tools" not in body and "tool_choice" not in body
    assert body["max_completion_tokens"] == PICK_MAX_TOKENS
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "submit_pick"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_the_model_is_asked_again_when_the_fallbacks_mapping_moves() -> None:
    fallback = ByTool(dict(ALL_CPU))
    sched, model = picker([reply('{"pick": 1}')], fallback=fallback)
    first = sched.decide(BATCH, VIEW)
    again = sched.decide(BATCH, VIEW)
    assert (first.llm_calls, again.llm_calls) == (1, 0)  # same lead: the cached decision
    fallback.by_tool["asr"] = "gpu_now"  # the fallback learnt something
    moved = sched.decide(BATCH, VIEW)
    assert moved.llm_calls == 1 and len(model.received) == 2
    assert dict(moved.mapping)["c1"] == "gpu_now"


def test_a_probe_of_the_fallback_runs_as_it_is_without_consulting() -> None:
    fallback = Probing(dict(ALL_CPU))
    sched, model = picker([reply('{"pick": 1}')], fallback=fallback)
    probe = sched.decide(BATCH, VIEW)
    assert dict(probe.mapping) == {"c1": "cpu", "c2": "cpu", "c3": "cpu"}
    assert probe.probe and probe.llm_calls == 0 and model.received == []
    assert probe.consultation is not None and probe.consultation.skipped == "probe"
    assert "probe, not consulted" in probe.reason and sched.consultations == 0
    fallback.by_tool["ocr"] = "gpu_queued"  # the next probe: still not consulted
    assert dict(sched.decide(BATCH, VIEW).mapping)["c3"] == "gpu_queued"
    summary = summarize([probe])
    assert summary is not None and (summary.consultations, summary.skipped) == (0, {"probe": 1})


def test_a_probe_is_held_to_the_hard_constraints_and_leaves_the_cache() -> None:
    fallback = ByTool(dict(ALL_CPU))
    sched, model = picker([reply('{"pick": 1}')], fallback=fallback, cpu_forbidden=["ocr"])
    first = sched.decide(BATCH, VIEW)  # consulted: the lead is not a probe
    assert first.llm_calls == 1
    probing = Probing(dict(ALL_CPU))
    sched.fallback = probing
    probe = sched.decide(BATCH, VIEW)
    assert probe.probe and dict(probe.mapping)["c3"] != "cpu" and "repaired" in probe.reason
    sched.fallback = fallback  # the policy settles back: the cached answer stands
    again = sched.decide(BATCH, VIEW)
    assert again.llm_calls == 0 and dict(again.mapping) == dict(first.mapping)
    assert len(model.received) == 1


SMALL_GPU = DeviceState(True, "gpu", 2000, 0, 0.0, 8)  # ASR + OCR at once do not fit


def test_the_fallbacks_probe_and_lead_run_as_the_policy_sized_them() -> None:
    """The fallback's twin weighs the VRAM (the ledger queues what does not fit): its probe,
    and its mapping picked as candidate 1, are not VRAM-fitted again unless the operator
    keeps VRAM free (measured: re-queueing a monitor probe made the policy ask for it
    again every step, and the agentic run ended 1.07x where the monitor ended optimal)."""
    all_now = {"asr": "gpu_now", "embed": "gpu_now", "ocr": "gpu_now"}
    view = SchedulerView(SMALL_GPU, Observations(step=0))
    sched, _ = picker([reply('{"pick": 1}')], fallback=Probing(dict(all_now)))
    assert set(sched.decide(BATCH, view).mapping.values()) == {"gpu_now"}
    lead, _ = picker([reply('{"pick": 1}')], fallback=ByTool(dict(all_now)))
    picked = lead.decide(BATCH, view)
    assert picked.llm_calls == 1 and set(picked.mapping.values()) == {"gpu_now"}
    again = lead.decide(BATCH, view)
    assert again.llm_calls == 0 and set(again.mapping.values()) == {"gpu_now"}
    kept, _ = picker([reply('{"pick": 1}')], fallback=Probing(dict(all_now)),
                     min_free_vram_mb=100)
    assert "gpu_queued" in kept.decide(BATCH, view).mapping.values()


def test_pick_within_shows_only_near_best_candidates_and_skips_a_lone_one() -> None:
    best = twin_candidates(1)[0].mapping
    tools = {"c1": "asr", "c2": "embed", "c3": "ocr"}
    lead = ByTool({tools[c]: o for c, o in best.items()})
    wide, _ = picker([reply('{"pick": 1}')], fallback=lead, pick_within=None)
    near, _ = picker([reply('{"pick": 1}')], fallback=lead)
    assert len(shown(near)) <= len(shown(wide))
    top = shown(near)[0].predicted_ms
    assert all(c.predicted_ms <= 1.05 * twin_candidates(1)[0].predicted_ms + 1e-6
               for c in shown(near)[1:]) and top > 0
    cpu_best = Batch.of([("c1", "tok", ToolDeviceSpec(
        vram_mb=100, profile=SoloProfile(cpu_ms=20, gpu_ms=90)))])
    lone, model = picker([reply('{"pick": 1}')], fallback=ByTool({"tok": "cpu"}))
    decision = lone.decide(cpu_best, VIEW)
    assert decision.llm_calls == 0 and model.received == [] and lone.consultations == 0
    assert decision.consultation is not None
    assert decision.consultation.skipped == "one_candidate"
    assert dict(decision.mapping) == {"c1": "cpu"}
    summary = summarize([decision])
    assert summary is not None and summary.skipped == {"one_candidate": 1}
    with pytest.raises(ValueError, match="pick_within"):
        AgenticScheduler(model, mode="pick", pick_within=0.9)
