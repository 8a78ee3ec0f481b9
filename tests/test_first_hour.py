"""What a new user meets in their first hour: bad inputs caught where they are given, each
warning once, several simulated GPUs from hints, declared GPUs on a CPU-only machine."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
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


# -- devsched profile: async tools, side effects, tools it could not measure ------------------

PROFILED_TOOLS = '''
import asyncio
from pathlib import Path

from langchain_core.tools import tool

NOTES = Path("notes.txt")


@tool
async def embed_async(text: str) -> str:
    """Embed a text, asynchronously."""
    await asyncio.sleep(0)
    return text[::-1]


@tool
def save_note(text: str) -> str:
    """Append a note to the user's notes (a side effect)."""
    with NOTES.open("a") as f:
        f.write(text + "\\n")
    return "saved"


@tool
def broken(text: str) -> str:
    """Fails every time."""
    raise RuntimeError("model file missing")


TOOLS = [embed_async, save_note]
WITH_BROKEN = [embed_async, save_note, broken]
'''
ARGS = {"embed_async": {"text": "hi"}, "save_note": {"text": "x"}, "broken": {"text": "x"}}


def profile_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suite: str,
                *extra: str) -> Any:
    from typer.testing import CliRunner

    from langgraph_devsched.cli import app

    (tmp_path / "first_hour_tools.py").write_text(PROFILED_TOOLS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return CliRunner().invoke(app, [
        "profile", "--suite", f"first_hour_tools:{suite}", "--devices", "cpu",
        "--example-args", json.dumps({k: v for k, v in ARGS.items() if suite != "TOOLS"
                                      or k != "broken"}),
        "--hints-out", "hints.yaml", *extra])


def test_profile_awaits_async_tools_and_calls_a_tool_with_side_effects_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = profile_cli(tmp_path, monkeypatch, "TOOLS", "--repeats", "5", "--warmup", "1")
    assert done.exit_code == 0, done.output
    hints = yaml.safe_load((tmp_path / "hints.yaml").read_text())["tools"]
    assert hints["embed_async"]["profile"]["cpu_ms"] > 0  # measured, not {}
    assert (tmp_path / "notes.txt").read_text() == "x\n"  # one call, not 1 + 5
    said = " ".join(done.output.split())
    assert "called once (no warm-up, one device): embed_async, save_note, not declared " \
           "side-effect free" in said and "--assume-idempotent" in said


def test_profile_repeats_every_tool_when_told_they_are_side_effect_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = profile_cli(tmp_path, monkeypatch, "TOOLS", "--repeats", "3", "--warmup", "1",
                       "--assume-idempotent", "--json", "p.json")
    assert done.exit_code == 0, done.output
    assert (tmp_path / "notes.txt").read_text() == "x\n" * 4
    rows = json.loads((tmp_path / "p.json").read_text())["tools"]
    assert [r["runs"]["cpu"]["latency"]["runs"] for r in rows] == [3, 3]


def test_profile_that_could_not_measure_a_tool_exits_1_and_says_why_and_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = profile_cli(tmp_path, monkeypatch, "WITH_BROKEN")
    assert done.exit_code == 1, done.output
    said = " ".join(done.output.split())
    assert "not measured on any device: broken: cpu: failed: RuntimeError: model file " \
           "missing" in said
    assert "declare the figures yourself in the hints file (profile: {cpu_ms: ..., " \
           "gpu_ms: ...}; an estimate is fine)" in said
    text = (tmp_path / "hints.yaml").read_text()
    assert "# not measured: broken: cpu: failed: RuntimeError: model file missing" in text
    assert set(yaml.safe_load(text)["tools"]) == {"embed_async", "save_note", "broken"}


# -- several GPUs from hints; declared GPUs on a machine without CUDA ------------------------


def test_simulated_gpu_takes_several_gpus_from_plain_mappings() -> None:
    from langgraph_devsched.profiling import simulated_gpu

    hints = {"embed": {"vram_mb": 500, "gpus": [1],
                       "profile": {"cpu_ms": 100, "gpu_ms": 10}}}
    bed = simulated_gpu(hints, gpus=[{"vram_mb": 24000}, {"vram_mb": 8000, "speed": 0.5}],
                        run_tools_on="cpu")
    assert [(d.index, d.budget_mb, d.speed) for d in bed.device_state().gpus] == [
        (0, 24000.0, 1.0), (1, 8000.0, 0.5)]
    node = DeviceToolNode([embed], hints={"embed": {**hints["embed"], "pinned": "gpu_now"}},
                          testbed=bed)
    answers = run_step(graph(node), ["embed"], "g")
    assert [m.content for m in answers] == ["embed:input 1@cpu"]  # its code ran here
    call = node.history[-1].record.calls[0]
    assert (call.device, call.end_ms - call.start_ms) == ("cuda:1", 20.0)  # half speed
    with pytest.raises(ValueError, match=r"give vram_budget_mb .* or gpus=.*not both"):
        simulated_gpu(hints, vram_budget_mb=8000, gpus=[{"vram_mb": 8000}])


def test_declared_gpus_without_cuda_run_their_tools_on_the_cpu_when_asked() -> None:
    seen: list[tuple[str, str]] = []

    @tool
    def caption(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Caption an image."""
        seen.append((device, current_device()))
        return f"caption:{text}"

    hints = {"caption": {"vram_mb": 100, "gpus": [1], "pinned": "gpu_queued"}}
    gpus = [GpuConfig(vram_budget_mb=1000), GpuConfig(vram_budget_mb=500, device="cuda:1")]
    backend = LocalBackend(gpu=gpus, run_tools_on="cpu")
    node = DeviceToolNode([caption], hints=hints, backend=backend)
    answers = run_step(graph(node), ["caption", "caption"], "l")
    assert [m.content for m in answers] == ["caption:input 1", "caption:input 2"]
    assert seen == [("cpu", "cpu")] * 2  # not cuda:1 on a machine without CUDA
    assert [c.device for c in node.history[-1].record.calls] == ["cuda:1", "cuda:1"]
    assert [ledger.in_use_mb for ledger in backend.ledgers] == [0.0, 0.0]
    with pytest.raises(ValueError, match="unknown run_tools_on 'host'; valid: placed, cpu"):
        LocalBackend(gpu=gpus, run_tools_on="host")  # type: ignore[arg-type]


# -- what the CLI help and the records say ----------------------------------------------------


def test_cli_flags_show_no_value_in_the_help_and_take_none() -> None:
    from typer.testing import CliRunner

    from langgraph_devsched.cli import app

    runner = CliRunner()
    for command, flag in (("bench", "--real"), ("profile", "--assume-idempotent"),
                          ("profile", "--quiet")):
        shown = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
        line = next(x for x in shown.output.splitlines() if f" {flag} " in x)
        assert "<bool>" not in line, line
    wrong = runner.invoke(app, ["bench", "--real", "true", "--rounds", "1"])
    assert wrong.exit_code == 2  # a flag takes no value: `true` is an unexpected argument


def test_a_forced_step_names_no_scheduler_and_the_node_still_observes_it() -> None:
    from langchain_core.tracers.context import collect_runs

    from langgraph_devsched.tracing import decision_runs

    node = DeviceToolNode(TOOLS, hints={t.name: {"pinned": "cpu"} for t in TOOLS})
    with collect_runs() as cb:
        run_step(graph(node), ["asr", "ocr"], "f")
    report = node.history[-1]
    assert (report.scheduler, report.decision.scheduler) == ("monitor", "forced")
    assert report.decision.reason.startswith("forced")
    traced = decision_runs(cb.traced_runs)
    assert [r.extra["metadata"]["devsched.scheduler"] for r in traced] == ["forced", "forced"]


# -- decisions on LangGraph's custom stream ---------------------------------------------------


def test_decisions_and_outcomes_are_written_to_the_custom_stream() -> None:
    import asyncio

    from tests.fakes import HINTS, PARAMS

    bed = SimulatedTestbed(PARAMS, vram_budget_mb=4000)
    inputs = {"messages": [AIMessage("", tool_calls=calls("asr", "ocr"))]}
    quiet = graph(DeviceToolNode(TOOLS, hints=HINTS, testbed=bed, scheduler="static"))
    assert list(quiet.stream(inputs, stream_mode="custom")) == []  # as ToolNode: not asked
    g = graph(DeviceToolNode(TOOLS, hints=HINTS, testbed=bed, scheduler="static",
                             stream_decisions=True))
    events = list(g.stream(inputs, stream_mode="custom"))
    assert [e["devsched"] for e in events] == ["decision", "step"]
    decision, step = events
    assert decision["scheduler"] == "static"
    assert [(c["id"], c["tool"], c["option"]) for c in decision["calls"]] == [
        ("c1", "asr", "gpu_queued"), ("c2", "ocr", "gpu_queued")]
    assert [(c["id"], c["device"], c["fallback"]) for c in step["calls"]] == [
        ("c1", "cuda:0", None), ("c2", "cuda:0", None)]
    assert (step["makespan_ms"], [c["ms"] for c in step["calls"]]) == (115.0, [70.0, 45.0])

    async def modes() -> list[str]:
        return [mode async for mode, _ in g.astream(inputs, stream_mode=["custom", "updates"])]

    assert asyncio.run(modes()) == ["custom", "custom", "updates"]


def test_the_middleware_writes_each_steps_decision_once_to_the_custom_stream() -> None:
    pytest.importorskip("langchain.agents", reason="needs the 'agents' extra (langchain)")
    from langchain.agents import create_agent

    from langgraph_devsched.middleware import DeviceSchedulingMiddleware
    from tests.fakes import HINTS, PARAMS

    model = ScriptedChatModel(script=[AIMessage("", tool_calls=calls("asr", "ocr", "embed")),
                                      AIMessage("done")])
    mw = DeviceSchedulingMiddleware(hints=HINTS, scheduler="static", stream_decisions=True,
                                    testbed=SimulatedTestbed(PARAMS, vram_budget_mb=4000))
    agent = create_agent(model, TOOLS, middleware=[mw])
    events = list(agent.stream({"messages": [HumanMessage("go")]}, stream_mode="custom"))
    mine = [e for e in events if isinstance(e, dict) and "devsched" in e]
    assert [e["devsched"] for e in mine] == ["decision", "step"]  # one step of three calls
    assert [c["id"] for c in mine[0]["calls"]] == ["c1", "c2", "c3"]
    assert sorted(c["id"] for c in mine[1]["calls"]) == ["c1", "c2", "c3"]


def test_bench_output_fits_a_pipe_and_says_a_skipped_scheduler_in_one_line() -> None:
    """``make demo``'s bench, piped (no terminal, no COLUMNS): every scheduler it can build,
    and the agentic one (no LLM configured here) skipped in one line."""
    from typer.testing import CliRunner

    from langgraph_devsched.cli import app

    env = {"COLUMNS": None, "DEVSCHED_LLM_MODEL": None, "DEVSCHED_LLM_BASE_URL": None,
           "OPENAI_API_KEY": None, "NO_COLOR": "1"}
    done = CliRunner().invoke(app, ["bench", "--rounds", "2", "--scenarios",
                                    "serial_voice_assistant,parallel_rag_fanout"], env=env)
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    skipped = [line for line in lines if "agentic" in line]
    assert len(skipped) == 1 and skipped[0].startswith(
        "skipped agentic: the agentic scheduler is not configured"), skipped
    assert "AgenticNotConfiguredError" not in done.output
    for name in ("all_gpu", "static", "heft", "dmda", "ucb", "oracle", "monitor"):
        assert f" {name} " in done.output  # every row still there
