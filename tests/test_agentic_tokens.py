"""What a consultation costs in tokens, and answers that are the policy's in effect.

A small model on a CPU server pays for every prompt token it reads and every token it
writes: the default mode shows the model short labels (the tool names) instead of the step's
call ids, and reads its answer back to the ids. An answer that differs from the policy's
mapping only by ``gpu_now`` against ``gpu_queued`` on the step's one GPU call is the
policy's mapping in effect: it is used as agreement, not vetoed as an unfunded exploration.
"""

from __future__ import annotations

import json

from langchain_core.messages import AIMessage

from langgraph_devsched import ToolDeviceSpec
from langgraph_devsched.hints import SoloProfile
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch
from tests.agentic_fakes import ToolScriptModel
from tests.test_agentic import ByTool
from tests.test_agentic_channels import PROFILED, PROFILED_VIEW

LONG = ("call_Vx3kPq9LmZwT7aYb2RcD4eFg", "call_H8jK1mN5pQ6rS0tU3vW9xY2z")
LONG_BATCH = Batch.of([(LONG[0], "asr", PROFILED.calls[0].spec),
                       (LONG[1], "embed", PROFILED.calls[1].spec)])


def _text(messages: list) -> str:
    return "\n".join(f"{m.content}" for m in messages)


def test_the_model_reads_and_answers_tool_names_not_long_call_ids() -> None:
    """LangGraph call ids are long random strings (about 15 tokens each): the prompt names
    the calls by their tools, the answer's JSON schema has the tools as keys, and the answer
    is read back to the call ids."""
    model = ToolScriptModel(script=[AIMessage('{"asr": "gpu_now", "embed": "cpu"}')])
    scheduler = AgenticScheduler(model, screen=False,
                                 fallback=ByTool({"asr": "gpu_now", "embed": "cpu"}))
    decision = scheduler.decide(LONG_BATCH, PROFILED_VIEW)
    assert dict(decision.mapping) == {LONG[0]: "gpu_now", LONG[1]: "cpu"}
    assert decision.consultation.cause is None and decision.consultation.agrees
    shown = _text(model.received[0])
    assert not any(cid in shown for cid in LONG)
    step_calls = next(json.loads(str(m.content)) for m in model.received[0]
                      if getattr(m, "name", None) == "step_calls")
    assert list(step_calls) == ["asr", "embed"]
    schema = model.call_kwargs[0]["response_format"]["json_schema"]["schema"]
    branches = schema.get("anyOf", [schema])  # one per mapping the evidence admits
    assert branches and all(b["required"] == ["asr", "embed"] for b in branches)


def test_an_answer_naming_the_call_ids_themselves_is_read_too() -> None:
    model = ToolScriptModel(script=[AIMessage(json.dumps({LONG[0]: "cpu", LONG[1]: "cpu"}))])
    scheduler = AgenticScheduler(model, guard_ratio=None,
                                 fallback=ByTool({"asr": "gpu_now", "embed": "cpu"}))
    decision = scheduler.decide(LONG_BATCH, PROFILED_VIEW)
    assert dict(decision.mapping) == {LONG[0]: "cpu", LONG[1]: "cpu"}


def test_short_ids_and_repeated_tools_keep_unique_labels() -> None:
    """Ids already shorter than the tool name stay; a repeated tool is ``tool#i``; the
    answer in those labels maps back to each call."""
    spec = ToolDeviceSpec(vram_mb=500, profile=SoloProfile(cpu_ms=50, gpu_ms=40))
    batch = Batch.of([("call_aaaaaaaaaaaaaaaaaaaaaaaa", "embed", spec),
                      ("call_bbbbbbbbbbbbbbbbbbbbbbbb", "embed", spec), ("x", "asr", spec)])
    model = ToolScriptModel(script=[AIMessage(
        '{"embed#0": "cpu", "embed#1": "gpu_now", "x": "gpu_now"}')])
    scheduler = AgenticScheduler(model, guard_ratio=None,
                                 fallback=ByTool({"asr": "gpu_now", "embed": "cpu"}))
    decision = scheduler.decide(batch, PROFILED_VIEW)
    assert dict(decision.mapping) == {"call_aaaaaaaaaaaaaaaaaaaaaaaa": "cpu",
                                      "call_bbbbbbbbbbbbbbbbbbbbbbbb": "gpu_now", "x": "gpu_now"}


def test_gpu_now_for_the_one_gpu_call_the_policy_queues_is_agreement_not_a_veto() -> None:
    """The policy spells the step's one GPU call ``gpu_queued``, the model ``gpu_now``: with
    no other call on the GPU nothing queues it and the twin predicts no difference, so the
    answer is used and counts as agreement (on the base of this change it was vetoed as an
    unfunded exploration, predicted cost -0.0 ms). It runs in the policy's spelling: the
    monitor keys what ran by option, and the policy learns from what it decided."""
    model = ToolScriptModel(script=[AIMessage('{"c1": "gpu_now", "c2": "cpu"}')])
    scheduler = AgenticScheduler(model, screen=False,
                                 fallback=ByTool({"asr": "gpu_queued", "embed": "cpu"}))
    decision = scheduler.decide(PROFILED, PROFILED_VIEW)
    record = decision.consultation
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "cpu"}
    assert record.cause is None and record.veto is None and decision.fallback is None
    assert record.agrees and record.deviation is None


def test_gpu_now_beside_another_gpu_call_is_still_a_deviation() -> None:
    """With two calls on the GPU, ``gpu_now`` runs beside the other and ``gpu_queued`` waits:
    a different mapping, priced and held to the exploration budget as before (unscreened:
    screened, the model would not be asked, the policy's mapping the only one admitted)."""
    model = ToolScriptModel(script=[AIMessage('{"c1": "gpu_now", "c2": "gpu_now"}')])
    scheduler = AgenticScheduler(model, guard_ratio=100.0, screen=False,
                                 fallback=ByTool({"asr": "gpu_queued", "embed": "gpu_now"}))
    decision = scheduler.decide(PROFILED, PROFILED_VIEW)
    record = decision.consultation
    assert not record.agrees and record.veto is not None and record.veto.kind == "budget"
