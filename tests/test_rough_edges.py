"""Issue 27's rough edges, each as a new user meets it: a compiled graph on the simulated GPU,
or the ``devsched`` command as a user runs it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_core.tracers.context import collect_runs
from langgraph.graph import START, MessagesState, StateGraph
from typer.testing import CliRunner

import langgraph_devsched as devsched_package
from langgraph_devsched import (
    DeviceToolNode,
    InjectedDevice,
    LocalBackend,
    ResidentModel,
    device_hints,
)
from langgraph_devsched.cli import app
from langgraph_devsched.profiling import simulated_gpu
from langgraph_devsched.tracing import decision_runs


@tool
def render(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """A GPU-capable tool (it asks for its device)."""
    return f"render {seed} on {device}"


@tool
def word_stats(text: str) -> str:
    """A pure-Python tool that never runs on a GPU."""
    return f"{len(text.split())} words"


def graph_of(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(i: int) -> AIMessage:
    return AIMessage("", tool_calls=[
        {"name": "render", "args": {"seed": i}, "id": f"r{i}"},
        {"name": "word_stats", "args": {"text": "a b c"}, "id": f"w{i}"},
    ])


def test_a_cpu_only_tool_on_the_simulated_gpu_needs_no_figure() -> None:
    """Point 1. Old: ``HintsError: tool 'word_stats' has no profile.cpu_ms: declare profile:
    {cpu_ms: ..., gpu_ms: ...}`` for a tool that never runs on a GPU."""
    hints: dict[str, Any] = {
        "render": {"vram_mb": 500, "profile": {"cpu_ms": 400, "gpu_ms": 40}},
        "word_stats": {"gpu_capable": False},
    }
    bed = simulated_gpu(hints, vram_budget_mb=4000, run_tools_on="cpu")
    node = DeviceToolNode([render, word_stats], hints=hints, testbed=bed)
    result = graph_of(node).invoke({"messages": [step(0)]})
    assert [m.content for m in result["messages"][1:]] == ["render 0 on cpu", "3 words"]
    by_tool = {c.tool: c for c in node.history[-1].record.calls}
    assert by_tool["word_stats"].device == "cpu"
    assert node.history[-1].record.makespan_ms == pytest.approx(40.0)  # it sets no length


def test_the_monitor_tries_a_gpu_side_a_cpu_only_profile_leaves_unknown() -> None:
    """Point 2. Old: with a profile taken on the CPU only (no ``gpu_ms``) and the simulated
    GPU 10x faster, the monitor priced the GPU side at 4x the CPU time and never tried it
    (every step 400 ms on the CPU instead of 40 ms on the GPU)."""
    hints: dict[str, Any] = {
        "render": {"vram_mb": 500, "profile": {"cpu_ms": 400}},
        "word_stats": {"gpu_capable": False, "profile": {"cpu_ms": 2}},
    }
    bed = simulated_gpu(hints, vram_budget_mb=4000, gpu_speedup=10, run_tools_on="cpu")
    node = DeviceToolNode([render, word_stats], hints=hints, testbed=bed)
    graph = graph_of(node)
    for i in range(6):
        graph.invoke({"messages": [step(i)]})
    sides = [{c.tool: c.device for c in r.record.calls}["render"] for r in node.history]
    assert sides[0] == "cuda:0"  # started on the GPU, as a framework would
    assert sides[-1] == "cuda:0", sides  # and kept there once measured faster
    assert node.history[-1].record.makespan_ms == pytest.approx(40.0)


def test_a_cpu_only_profile_still_lets_a_slower_gpu_lose() -> None:
    """Point 2's other side: one GPU try, then the CPU where the GPU proved slower."""
    hints: dict[str, Any] = {"render": {"vram_mb": 500, "profile": {"cpu_ms": 40}}}
    bed = simulated_gpu(hints, vram_budget_mb=4000, gpu_speedup=0.25, run_tools_on="cpu")
    node = DeviceToolNode([render], hints=hints, testbed=bed)
    graph = graph_of(node)
    for i in range(4):
        graph.invoke({"messages": [AIMessage("", tool_calls=[
            {"name": "render", "args": {"seed": i}, "id": f"r{i}"}])]})
    sides = [r.record.calls[0].device for r in node.history]
    assert sides == ["cuda:0", "cpu", "cpu", "cpu"], sides


SLOW_FIRST_CALL = '''
import time

from langchain_core.tools import tool

from langgraph_devsched import ResidentModel, device_hints

_seen = []


@tool
def word_stats(text: str) -> str:
    """Pure Python; its first call builds a cache (60 ms at least, on any machine)."""
    if not _seen:
        time.sleep(0.06)
        _seen.append(1)
    return f"{len(text.split())} words"


encoder = ResidentModel("encoder", load=lambda device: time.sleep(0.06) or "weights",
                        weights_mb=50)


@device_hints(**encoder.hints(vram_mb=100))
@tool
def encode(text: str) -> str:
    """Runs on a resident model (its first call loads it)."""
    return f"{encoder.get()} for {text}"


word_stats.metadata = {"devsched_example_args": {"text": "a b a"}}
encode.metadata = {**(encode.metadata or {}), "devsched_example_args": {"text": "x"}}
TOOLS = [word_stats, encode]
'''


def test_a_pure_python_tools_slow_first_call_is_no_model_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 3. Old: ``devsched profile --hints-out`` gave the pure-Python tool
    ``load_ms: {cpu_ms: ...}`` (its slow first call), as if it had a model to load."""
    (tmp_path / "slow_first_tools.py").write_text(SLOW_FIRST_CALL, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, [
        "profile", "--suite", "slow_first_tools:TOOLS", "--devices", "cpu", "--repeats", "3",
        "--hints-out", "hints.yaml", "--assume-idempotent"])
    assert done.exit_code == 0, done.output
    hints = yaml.safe_load((tmp_path / "hints.yaml").read_text())["tools"]
    assert "load_ms" not in hints["word_stats"], hints["word_stats"]
    assert hints["encode"]["model"] == "encoder"  # the resident model's load is a load
    assert hints["encode"]["load_ms"]["cpu_ms"] >= 50.0


def test_bench_takes_built_in_scenario_names() -> None:
    """Point 4. Old: ``devsched bench --scenarios serial_voice_assistant`` answered ``Error:
    scenario path serial_voice_assistant: no such file or folder`` and listed nothing."""
    done = CliRunner().invoke(app, [
        "bench", "--scenarios", "serial_voice_assistant,parallel_rag_fanout",
        "--schedulers", "static,oracle", "--rounds", "2", "--decision-cost", "none"])
    assert done.exit_code == 0, done.output
    assert "serial_voice_assistant" in done.output and "parallel_rag_fanout" in done.output
    assert "memory_llm_heavy" not in done.output  # only the two named

    bad = CliRunner().invoke(app, ["bench", "--scenarios", "serial_voice_asistant"])
    assert bad.exit_code == 2
    assert "nor a built-in scenario name; built-in scenarios: memory_agent_sequence," in (
        bad.output)
    assert "serial_voice_assistant" in bad.output

    real = CliRunner().invoke(app, ["bench", "--real", "--scenarios", "no_such_real"])
    assert real.exit_code == 2
    assert "built-in: parallel_suite_contention" in real.output


TRACED_APP = '''
import threading

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langsmith import utils as ls_utils

from langgraph_devsched import DeviceToolNode, LocalBackend


@tool
def embed(text: str) -> str:
    """Embed a text."""
    return text.upper()


node = DeviceToolNode([embed], hints={"embed": {"vram_mb": 300}},
                      backend=LocalBackend(gpu=False))
graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
step = AIMessage("", tool_calls=[{"name": "embed", "args": {"text": "hi"}, "id": "1"}])
print(graph.invoke({"messages": [step]})["messages"][-1].content)
print("tracing on:", ls_utils.tracing_is_enabled())
# LangSmith's background tracing thread is what held the exit ~12 s flushing to nowhere
print("tracing threads:", [t.name for t in threading.enumerate() if "tracing" in t.name])
'''


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_tracing_with_langsmith_unreachable_says_so_once_and_queues_nothing(
    tmp_path: Path,
) -> None:
    """Point 5. Old: nothing from the project; LangSmith's connection errors and a blob of
    run ids on stderr, and the process held ~12 s at exit flushing runs nobody receives
    (measured: 14.1 s at d7c8ce5, 1.0 s now, for this app; LangSmith's
    ``tracing_control_thread_func`` thread alive at the end there, none now)."""
    (tmp_path / "traced_app.py").write_text(TRACED_APP, encoding="utf-8")
    url = f"http://127.0.0.1:{closed_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN"))
           and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(LANGSMITH_TRACING="true", LANGSMITH_API_KEY="not-a-key",
               LANGSMITH_ENDPOINT=url,  # and the package under test, not the one installed
               PYTHONPATH=str(Path(devsched_package.__file__).resolve().parents[1]))
    done = subprocess.run([sys.executable, "traced_app.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    # nothing queued to flush, no background thread left to hold the exit (old: ~12 s more)
    assert done.stdout.splitlines() == ["HI", "tracing on: False", "tracing threads: []"]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        f"LangSmith tracing is on but {url} is unreachable (Connection refused): tracing is "
        "off for this process (decisions stay in node.history; DEVSCHED_LANGSMITH_CHECK=0 "
        "skips this check)"], done.stderr


def test_a_reachable_langsmith_endpoint_keeps_tracing_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langsmith import utils as ls_utils

    from langgraph_devsched.langsmith_check import check_langsmith

    ls_utils.get_env_var.cache_clear()  # langsmith caches the variables it reads
    before = ls_utils.tracing_is_enabled()
    ls_utils.get_env_var.cache_clear()
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            for key in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
                monkeypatch.delenv(key, raising=False)
            monkeypatch.setenv("LANGSMITH_TRACING", "true")
            monkeypatch.setenv("LANGSMITH_ENDPOINT",
                               f"http://127.0.0.1:{server.getsockname()[1]}")
            assert check_langsmith() is None
            assert ls_utils.tracing_is_enabled() is True
    finally:
        monkeypatch.undo()
        ls_utils.get_env_var.cache_clear()
    assert ls_utils.tracing_is_enabled() == before  # the rest of the session as it was


encoder = ResidentModel("edges_encoder", load=lambda device: f"encoder@{device}", weights_mb=50)


@device_hints(**encoder.hints(vram_mb=100))
@tool
def encode(text: str) -> str:
    """Runs on a resident model."""
    return f"{encoder.get()}: {text}"


def traced_model_keys(graph: Any, steps: int, call: str = "encode") -> list[tuple[Any, Any]]:
    out = []
    for i in range(steps):
        msg = AIMessage("", tool_calls=[{"name": call, "args": {"text": str(i)}, "id": f"e{i}"}])
        with collect_runs() as runs:
            graph.invoke({"messages": [msg]})
        (run,) = decision_runs(runs.traced_runs)
        meta = run.extra["metadata"]
        out.append((meta.get("devsched.model"), meta.get("devsched.model_warm")))
    return out


def test_traced_runs_carry_the_model_on_the_cpu_and_the_simulated_gpu() -> None:
    """Point 6. Old: ``devsched.model`` / ``devsched.model_warm`` were absent from the traced
    runs of CPU and simulated calls (present in `CallRecord`)."""
    cpu = DeviceToolNode([encode], backend=LocalBackend(gpu=False))
    assert traced_model_keys(graph_of(cpu), 2) == [
        ("edges_encoder", False), ("edges_encoder", True)]  # loaded, then warm

    hints = {"encode": {"profile": {"cpu_ms": 5, "gpu_ms": 2},
                        "load_ms": {"gpu_ms": 300, "cpu_ms": 100}}}
    for pinned, device in (("cpu", "cpu"), ("gpu_queued", "cuda:0")):
        bed = simulated_gpu({"encode": {**encoder.hints(vram_mb=100), **hints["encode"]}},
                            vram_budget_mb=4000, run_tools_on="cpu")
        node = DeviceToolNode([encode], testbed=bed, hints={"encode": {
            **encoder.hints(vram_mb=100), **hints["encode"], "pinned": pinned}})
        assert traced_model_keys(graph_of(node), 2) == [
            ("edges_encoder", False), ("edges_encoder", True)], pinned
        record = node.history[-1].record.calls[0]
        assert (record.device, record.model, record.loaded) == (device, "edges_encoder", False)
        first = node.history[0].record.calls[0]
        assert first.loaded and first.load_ms == (100.0 if pinned == "cpu" else 300.0)


PLAIN_TOOLS = '''
from langchain_core.tools import tool


@tool
def word_stats_with_a_long_name(text: str) -> str:
    """Count words."""
    return str(len(text.split()))


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


TOOLS = [word_stats_with_a_long_name, shout]
'''


def table_rows(output: str) -> list[str]:
    """The body lines of the profile table (between its header rule and its bottom)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return lines[start + 1:end]


@pytest.mark.parametrize("devices", ["cpu", "cpu,cuda"])
def test_the_profile_table_reads_at_80_columns(
    devices: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 7. Old: at 80 columns the reason column wrapped to ~9 lines a tool and names
    were folded (``word_sta|ts``), beside three GPU columns of dashes."""
    if devices.endswith("cuda"):
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("needs a machine without CUDA (the unavailable-GPU note)")
    (tmp_path / "table_tools.py").write_text(PLAIN_TOOLS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, [
        "profile", "--suite", "table_tools:TOOLS", "--devices", devices, "--repeats", "1",
        "--warmup", "0", "--example-args",
        '{"word_stats_with_a_long_name": {"text": "a b"}, "shout": {"text": "a"}}'],
        env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    rows = table_rows(done.output)
    assert len(rows) == 2, "\n".join(rows)  # one line a tool
    assert "word_stats_with_a_long_name" in rows[0]  # not folded
    assert all(row.rstrip(" │").endswith("measured on cpu only") for row in rows), rows
    assert all(len(line) <= 80 for line in done.output.splitlines())


def test_perf_logs_say_what_runs_not_where_in_the_code() -> None:
    """Point 7. Old: every ``devsched perf`` log line ended in ``command.py:151``, and the
    default was 50,000 node steps (minutes for a first try)."""
    done = CliRunner().invoke(app, ["perf", "--schedulers", "static", "--sizes", "1",
                                    "--samples", "1", "--warmup", "0", "--steps", "0"])
    assert done.exit_code == 0, done.output
    assert "decisions: static n=1" in done.output
    assert "command.py" not in done.output
    from langgraph_devsched._dev.perf.command import DEFAULT_STEPS

    helped = CliRunner().invoke(app, ["perf", "--help"], env={"COLUMNS": "200"})
    assert f"[default: {DEFAULT_STEPS}]" in helped.output and DEFAULT_STEPS <= 5_000
