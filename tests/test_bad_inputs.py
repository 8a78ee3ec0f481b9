"""Bad-input corpus: each malformed input ends in a clear error or a validated fallback.

Malformed tool calls (unknown tool, invalid arguments, missing id), invalid hints and hint
files, malformed scenario files, malformed LLM answers, non-UTF-8 bytes and huge strings.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from langgraph_devsched import DeviceToolNode, StepReport
from langgraph_devsched._dev.stress.schedulers import StressChatModel, garbage_answers
from langgraph_devsched._dev.stress.tools import TOOL_HINTS, TOOL_NAMES, TOOL_PARAMS, Toolbox
from langgraph_devsched.bench.scenario import ScenarioError, builtin_scenario_paths, load_scenario
from langgraph_devsched.hints import HintsError, load_hints_file, resolve_specs, validate_spec
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import SimulatedTestbed

VALID = "asr, ocr, embed, diffuse, classify, rerank, detect"


def graph_of(node: ToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def sim_node(reports: list[StepReport] | None = None) -> DeviceToolNode:
    bed = SimulatedTestbed(TOOL_PARAMS, vram_budget_mb=8000)
    return DeviceToolNode(
        Toolbox().tools(), hints=TOOL_HINTS, testbed=bed,
        on_step=reports.append if reports is not None else None,
    )


def run_calls(node: ToolNode, calls: list[dict[str, Any]]) -> list[ToolMessage]:
    out = graph_of(node).invoke({"messages": [AIMessage("", tool_calls=calls)]})
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


# -- malformed tool calls ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ({"name": "nope", "args": {}}, f"Error: nope is not a valid tool, try one of [{VALID}]."),
        ({"name": "asr\udcff", "args": {}}, "Error: asr\udcff is not a valid tool, try one of"),
        ({"name": "asr", "args": {}}, "payload: Field required"),
        ({"name": "asr", "args": {"payload": [1]}}, "payload: Input should be a valid string"),
        ({"name": "asr", "args": {"payload": "p", "fault": {"deep": ["x"] * 1000}}},
         "fault: Input should be a valid string"),
    ],
)
def test_malformed_call_gets_one_clear_error_and_the_rest_of_the_step_runs(
    call: dict[str, Any], expected: str
) -> None:
    reports: list[StepReport] = []
    good = {"name": "ocr", "args": {"payload": "g"}, "id": "good"}
    answers = run_calls(sim_node(reports), [{**call, "id": "bad"}, good])
    assert [m.tool_call_id for m in answers] == ["bad", "good"]
    assert answers[0].status == "error" and expected in str(answers[0].content)
    assert answers[1].status == "success" and str(answers[1].content).startswith("ocr:g@")
    assert len(reports) == 1  # the step closed; the unknown tool is not in its batch
    assert set(reports[0].batch.call_ids) <= {"bad", "good"}


def test_huge_tool_name_is_answered_not_crashed() -> None:
    name = "x" * 100_000
    [answer] = run_calls(sim_node(), [{"name": name, "args": {}, "id": "a"}])
    assert answer.status == "error"
    assert str(answer.content).startswith("Error: xxxx") and "is not a valid tool" in answer.text


def test_call_without_id_fails_loudly_like_toolnode() -> None:
    """A call with ``id=None`` is rejected exactly as `ToolNode` rejects it (drop-in parity);
    a call with no ``id`` key cannot even be put in an AIMessage."""
    call = {"name": "asr", "args": {"payload": "p"}, "id": None}
    with pytest.raises(TypeError, match="Tool asr returned unexpected type"):
        run_calls(ToolNode(Toolbox().tools()), [call])
    with pytest.raises(TypeError, match="Tool asr returned unexpected type"):
        run_calls(sim_node(), [call])
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'id'"):
        AIMessage("", tool_calls=[{"name": "asr", "args": {}}])  # type: ignore[typeddict-item]


# -- invalid hints and hint files --------------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"vram_mb": -1}, "vram_mb: Input should be greater than or equal to 0 (got -1)"),
        ({"gpu_share": 0}, "gpu_share: Input should be greater than 0 (got 0)"),
        ({"pinned": "tpu"}, "(valid options: gpu_now, gpu_queued, cpu) (got 'tpu')"),
        ({"gpu_capable": False, "pinned": "gpu_now"},
         "pinned='gpu_now' contradicts gpu_capable=False; valid: 'cpu'"),
        ({"cpu_allowed": False, "preferred": "cpu"},
         "preferred='cpu' contradicts cpu_allowed=False; valid: 'gpu_now', 'gpu_queued'"),
        ({"gpu_capable": False, "cpu_allowed": False}, "leave no device; allow at least one"),
        ({"speed": 3}, "speed: unknown field; valid fields: gpu_capable, cpu_allowed, vram_mb"),
        ("fast", "hints for tool 'asr' must be a mapping of fields, got str"),
    ],
)
def test_invalid_hints_name_the_tool_field_and_valid_values(raw: Any, expected: str) -> None:
    with pytest.raises(HintsError) as info:
        validate_spec("asr", raw)
    assert expected in str(info.value)
    with pytest.raises(HintsError, match="'asr'"):
        DeviceToolNode(Toolbox().tools(), hints={"asr": raw})


def test_hints_for_an_unknown_tool_list_the_known_ones() -> None:
    with pytest.raises(HintsError) as info:
        resolve_specs({"asr": object(), "ocr": object()}, {"asr\udcff": {}})
    assert str(info.value) == (
        "device hints name unknown tool(s) 'asr\\udcff'; known tools: asr, ocr"
    )


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("h.yaml", b"\xff\xfe\x00 not text", "not UTF-8 text (invalid start byte)"),
        ("h.json", b"{bad", "not valid YAML/JSON: Expecting property name enclosed in double"),
        ("h.yaml", b"tools: [unclosed", "not valid YAML/JSON: while parsing a flow sequence"),
        ("h.yaml", b"tools: [1]", "expected a mapping with a 'tools' mapping of tool name"),
        ("h.yaml", b"other: 1", "expected a mapping with a 'tools' mapping of tool name"),
        ("h.yaml", b"", "expected a mapping with a 'tools' mapping of tool name"),
        ("h.yaml", b"tools:\n  asr: 5\n", "tools.asr must be a mapping of fields"),
        ("h.yaml", b"tools:\n  asr: {vram_mb: lots}\n", "vram_mb: Input should be a valid number"),
    ],
)
def test_malformed_hints_files_are_rejected_with_the_reason(
    tmp_path: Path, name: str, content: bytes, expected: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(HintsError) as info:
        DeviceToolNode(Toolbox().tools(), hints=path)
    assert expected in str(info.value)
    assert str(path) in str(info.value) or "'asr'" in str(info.value)


def test_missing_hints_file_says_it_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(HintsError, match=r"hints file .*nope.yaml: cannot read \(No such file"):
        load_hints_file(tmp_path / "nope.yaml")


def test_huge_tool_name_in_a_hints_file_is_an_unknown_tool(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text('{"tools": {"' + "y" * 100_000 + '": {"vram_mb": 1}}}', encoding="utf-8")
    with pytest.raises(HintsError) as info:
        DeviceToolNode(Toolbox().tools(), hints=path)
    message = str(info.value)
    assert message.startswith("device hints name unknown tool(s) 'yyyy")
    assert message.endswith(f"known tools: {', '.join(sorted(TOOL_NAMES))}")
    yaml_path = tmp_path / "h.yaml"  # YAML keys over 1024 characters are not simple keys
    yaml_path.write_text("tools:\n  " + "y" * 100_000 + ": {vram_mb: 1}\n", encoding="utf-8")
    with pytest.raises(HintsError, match="not valid YAML/JSON: mapping values are not allowed"):
        DeviceToolNode(Toolbox().tools(), hints=yaml_path)


# -- malformed scenario files -------------------------------------------------------------------

GOOD_SCENARIO = next(p for p in builtin_scenario_paths() if p.stem == "serial_voice_assistant")


def _edited(old: str, new: str) -> bytes:
    text = GOOD_SCENARIO.read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new).encode()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"name: [unclosed", "not valid YAML: while parsing a flow sequence"),
        (b"- a\n- list\n", "expected a mapping with fields name, category, description, "
         "testbed, tools, workload, got list"),
        (b"", "expected a mapping with fields name, category"),
        (b"\xff\xfe bad bytes", "not UTF-8 text (invalid start byte)"),
        (_edited("cpu_cores: 8", "cpu_cores: 8\n  gpu_count: 2"),
         "testbed.gpu_count: unknown field; valid fields here: vram_budget_mb, cpu_cores"),
        (_edited("cpu_cores: 8", "cpu_cores: 8\n  gpus: 2"),
         "testbed.gpus: Input should be a valid list (got 2)"),
        (_edited("kind: serial", "kind: sideways"),
         "workload.kind: expected one of 'serial', 'parallel' or 'sequence' (got 'sideways')"),
        (_edited("name: serial_voice_assistant\n", ""), "name: required field is missing"),
        (_edited("calls: [vad, whisper_asr, tts]", "calls: [vad, nope]"),
         "workload.calls: unknown tool 'nope'; known tools: tts, vad, whisper_asr"),
        (_edited("cpu_ms: 9,", "cpu_ms: -9,"),
         "tools.vad.params.cpu_ms: Input should be greater than 0 (got -9)"),
    ],
)
def test_malformed_scenario_files_name_the_problem(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).startswith(f"scenario file {path}: ")
    assert expected in str(info.value)


# -- malformed LLM answers ----------------------------------------------------------------------

BATCH = Batch.of([
    ("c1", "asr", validate_spec("asr", TOOL_HINTS["asr"])),
    ("c2", "classify", validate_spec("classify", TOOL_HINTS["classify"])),
])
VIEW = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0.0, 8))
NO_ANSWER = "agentic consultation failed (no_answer: the model never called submit_mapping)"


@pytest.mark.parametrize(
    ("index", "fallback", "cause", "reason"),
    [
        (0, "scheduler_error", "no_answer", NO_ANSWER),  # prose
        (1, "scheduler_error", "no_answer", NO_ANSWER),  # truncated JSON
        (2, "invalid_decision", "unknown_option", "fallback static for c1 (unknown_option)"),
        (3, "invalid_decision", "missing_call", "unknown call id(s) not-a-call; valid: c1, c2"),
        (4, "invalid_decision", "missing_call", "no assignments list"),
        (5, "scheduler_error", "no_answer", NO_ANSWER),  # calls a tool that does not exist
        (6, "scheduler_error", "no_answer", NO_ANSWER),  # NUL and lone surrogates
    ],
)
def test_malformed_llm_answers_end_in_a_valid_mapping_and_say_why(
    index: int, fallback: str, cause: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    reply = garbage_answers(list(BATCH.call_ids))[index]
    scheduler = AgenticScheduler(StressChatModel(reply=reply), fallback="static", timeout_s=5)
    decision = scheduler.decide(BATCH, VIEW)
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "cpu"}  # the static hints
    assert decision.fallback == fallback
    assert set(scheduler.last_fallbacks.values()) == {cause}
    assert reason in decision.reason


def test_erroring_and_hanging_llm_fall_back_with_the_cause() -> None:
    model = StressChatModel(mode="error")  # raises at once: the timeout is never reached
    scheduler = AgenticScheduler(model, fallback="static", timeout_s=30)
    decision = scheduler.decide(BATCH, VIEW)
    assert decision.fallback == "scheduler_error"
    assert "llm_error: RuntimeError: injected LLM error" in decision.reason
    hanging = StressChatModel(mode="hang")
    scheduler = AgenticScheduler(hanging, fallback="static", timeout_s=0.05)
    try:
        decision = scheduler.decide(BATCH, VIEW)
    finally:
        hanging.release.set()  # end the worker thread
    assert decision.fallback == "scheduler_error"
    assert "(timeout: no answer within 0.05 s)" in decision.reason
    assert dict(decision.mapping) == {"c1": "gpu_queued", "c2": "cpu"}
