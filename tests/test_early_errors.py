"""Bad input caught early (issue 23, classes 6-9): at construction or before the work starts,
with a message that names what is wrong and what is valid, never later as a traceback.

Class 6: weights that can never fit warn when the node is built. Class 7: persisted stats
with bad values load with the bad entries dropped (one warning) and the rest kept, and the
next decisions are the scheduler's, not ``scheduler_error``. Class 8: every CLI output path
is checked before the work starts (exit 2, one line, no traceback); a scenario file with a
non-finite time names the file, the tool and the field. Class 9: ``backend=`` that is not a
backend and a testbed that does not know one of the node's tools fail at construction.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    LocalBackend,
    SimulatedTestbed,
    StepReport,
    ToolParams,
)
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.monitor.persist import MonitorStatsWarning
from langgraph_devsched.profiling.to_testbed import simulated_gpu
from tests.fakes import asr, ocr


def graph_of(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def run_step(node: DeviceToolNode, step: int, names: tuple[str, ...] = ("asr", "ocr")) -> None:
    calls = [{"name": n, "args": {"text": "x"}, "id": f"{n}{step}"} for n in names]
    out = graph_of(node).invoke({"messages": [AIMessage("", tool_calls=calls)]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["success"] * len(names)


# -- class 6: weights that can never fit warn at construction ---------------------------------

HEAVY = {"asr": {"vram_mb": 500, "weights_mb": 20000}, "ocr": {"vram_mb": 500, "weights_mb": 3000}}
HEAVY_WARNING = (
    r"tool 'asr' declares vram_mb=500 and weights_mb=20000 \(20500 MB in all\) but a call can "
    r"get at most 8000 MB of this GPU: its calls will run on the CPU"
)


def never_fitting(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "can get at most" in str(w.message)]


def test_weights_that_never_fit_warn_at_construction_on_a_declared_local_gpu() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DeviceToolNode([asr, ocr], hints=HEAVY, backend=LocalBackend(gpu=GpuConfig(8000)))
    [text] = never_fitting(caught)  # ocr's 3,500 MB fit: no warning for it
    assert re.match(HEAVY_WARNING, text), text


def test_weights_that_never_fit_warn_at_construction_on_a_simulated_gpu() -> None:
    bed = SimulatedTestbed(
        {t: ToolParams(cpu_ms=50, gpu_ms=5, vram_mb=500, weights_mb=1000) for t in ("asr", "ocr")},
        vram_budget_mb=8000,
    )
    with pytest.warns(UserWarning, match=HEAVY_WARNING):
        DeviceToolNode([asr, ocr], hints=HEAVY, testbed=bed)


def test_weights_that_fit_with_the_working_memory_do_not_warn() -> None:
    fits = {"asr": {"vram_mb": 1000, "weights_mb": 7000}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DeviceToolNode([asr], hints=fits, backend=LocalBackend(gpu=GpuConfig(8000)))
    assert never_fitting(caught) == []


# -- class 9: backend= and testbed= arguments checked at construction ----------------------------

@pytest.mark.parametrize("backend", ["ray", "local", 3, object()])
def test_a_backend_that_is_not_one_fails_at_construction(backend: object) -> None:
    with pytest.raises(TypeError) as info:
        DeviceToolNode([asr], hints={"asr": {"vram_mb": 100}}, backend=backend)  # type: ignore[arg-type]
    text = str(info.value)
    assert text.startswith("backend= must be a backend object (LocalBackend(), RayBackend(), ")
    assert f"got {type(backend).__name__} " in text
    assert "has no device_state() or start_step()" in text


def test_a_string_backend_points_to_testbed_for_a_simulated_gpu() -> None:
    with pytest.raises(TypeError, match=r"got str 'ray'.*; for a simulated GPU give testbed="):
        DeviceToolNode([asr], backend="ray")  # type: ignore[arg-type]


def test_a_testbed_that_is_not_one_fails_at_construction() -> None:
    with pytest.raises(TypeError, match=r"testbed= must be a SimulatedTestbed .*got dict"):
        DeviceToolNode([asr], testbed={"asr": {}})  # type: ignore[arg-type]


def test_simulated_gpu_hints_without_one_of_the_nodes_tools_fail_at_construction() -> None:
    hinted = {"asr": {"vram_mb": 500, "profile": {"cpu_ms": 40, "gpu_ms": 4}}}
    bed = simulated_gpu(hinted, vram_budget_mb=8000)
    both = {**hinted, "ocr": {"vram_mb": 500, "profile": {"cpu_ms": 30, "gpu_ms": 3}}}
    with pytest.raises(ValueError) as info:
        DeviceToolNode([asr, ocr], hints=both, testbed=bed)
    assert str(info.value) == (
        "the testbed has no parameters for tool(s) 'ocr' of this node; it simulates: asr "
        "(build it with parameters or hints for every tool)"
    )
    run_step(DeviceToolNode([asr], hints=hinted, testbed=bed), 0, ("asr",))  # a full one runs


def test_a_middleware_with_a_string_backend_fails_when_built() -> None:
    from langgraph_devsched.middleware import DeviceSchedulingMiddleware

    with pytest.raises(TypeError, match=r"backend= must be a backend object .*got str 'ray'"):
        DeviceSchedulingMiddleware(backend="ray")  # type: ignore[arg-type]


# -- class 7: persisted stats with bad values: the bad entries dropped, the rest kept -----------

RESIDENT_HINTS = {
    t: {"vram_mb": 500, "weights_mb": 3000, "profile": {"cpu_ms": cpu, "gpu_ms": 10}}
    for t, cpu in (("asr", 100), ("ocr", 80))
}


def resident_bed() -> SimulatedTestbed:
    return SimulatedTestbed(
        {t: ToolParams(cpu_ms=cpu, gpu_ms=10, vram_mb=500, weights_mb=3000, load_gpu_ms=500,
                       load_cpu_ms=300) for t, cpu in (("asr", 100), ("ocr", 80))},
        vram_budget_mb=5000,
    )


def run_monitored(monitor: RuntimeMonitor, steps: int) -> list[StepReport]:
    reports: list[StepReport] = []
    node = DeviceToolNode([asr, ocr], hints=RESIDENT_HINTS, testbed=resident_bed(),
                          monitor=monitor, on_step=reports.append)
    for i in range(steps):
        run_step(node, i)
    return reports


@pytest.mark.parametrize("mixed", [False, True], ids=["negative-load-times", "mixed-bad-values"])
def test_a_stats_file_with_bad_residency_values_loads_the_rest_and_decisions_stay_the_schedulers(
    tmp_path: Path, mixed: bool
) -> None:
    warm = RuntimeMonitor()
    run_monitored(warm, 4)
    path = tmp_path / "stats.json"
    warm.save(path)
    data = json.loads(path.read_text())
    assert data["load_seen_ms"] == {"asr|gpu": 500.0, "asr|cpu": 300.0, "ocr|gpu": 500.0,
                                    "ocr|cpu": 300.0}
    data["load_seen_ms"]["asr|gpu"] = -501.0                     # a negative load time
    data["load_seen_ms"]["asr|cpu"] = -301.0
    if mixed:
        data["vram_seen_mb"]["ocr"] = "big"                      # a wrong type
        data["load_seen_ms"]["ocr|cpu"] = 1e999                  # written as inf: not finite
    path.write_text(json.dumps(data).replace("Infinity", "1e999"))
    with pytest.warns(MonitorStatsWarning) as caught:
        loaded = RuntimeMonitor.load(path)
    [text] = [str(w.message) for w in caught if issubclass(w.category, MonitorStatsWarning)]
    bad = ["load_seen_ms.'asr|gpu'", "load_seen_ms.'asr|cpu'"]
    bad += ["vram_seen_mb.'ocr'", "load_seen_ms.'ocr|cpu'"] if mixed else []
    assert text.startswith(
        f"monitor stats file {path}: dropped {len(bad)} invalid entries, kept the rest")
    assert all(where in text for where in bad)
    kept = loaded.state
    assert kept.step == 4 and kept.stats == warm.state.stats
    assert kept.outcomes == warm.state.outcomes
    assert kept.load_seen_ms == ({"ocr|gpu": 500.0} if mixed else
                                 {"ocr|gpu": 500.0, "ocr|cpu": 300.0})
    assert kept.vram_seen_mb == ({"asr": 500.0} if mixed else {"asr": 500.0, "ocr": 500.0})
    reports = run_monitored(loaded, 4)
    assert [r.decision.fallback for r in reports] == [None] * 4
    assert [r.fallbacks for r in reports] == [{}] * 4             # no scheduler_error


# -- class 8: every CLI output path checked before the work starts --------------------------------

TINY = """\
name: tiny
category: parallel
testbed: {vram_budget_mb: 8000, cpu_cores: 2, noise: 0.0, seed: 1}
tools:
  a: {params: {cpu_ms: 150, gpu_ms: 100, vram_mb: 1000}}
  b: {params: {cpu_ms: 150, gpu_ms: 100, vram_mb: 1000}}
workload: {kind: parallel, calls: [a, b], rounds: 2}
"""

FILE_WANTED = ": is a folder; give a file path (missing folders are created)"
FOLDER_WANTED = ": is a file; give a folder to write into (created if missing)"


def command_args(tmp_path: Path, command: str) -> list[str]:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY, encoding="utf-8")
    return {
        "bench": ["bench", "--scenarios", str(scenario), "--schedulers", "all_gpu,oracle",
                  "--rounds", "1"],
        "profile": ["profile", "--suite", "tests.test_profiler:TINY_TOOLS", "--devices", "cpu",
                    "--repeats", "1", "--warmup", "0", "--tools", "double"],
        "stress": ["stress", "--calls", "20", "--seed", "1", "--backend", "simulated"],
        "perf": ["perf", "--schedulers", "all_gpu", "--sizes", "1", "--samples", "1",
                 "--warmup", "0", "--steps", "0"],
    }[command]


@pytest.mark.parametrize(
    ("command", "option", "where", "expected"),
    [
        ("bench", "--json", "dir", FILE_WANTED),
        ("bench", "--plots", "file", FOLDER_WANTED),
        ("bench", "--json", "under_file", "cannot be created"),
        ("profile", "--hints-out", "dir", FILE_WANTED),
        ("profile", "--json", "dir", FILE_WANTED),
        ("profile", "--plots", "file", FOLDER_WANTED),
        ("profile", "--scenario-out", "file", FOLDER_WANTED),
        ("stress", "--json", "dir", FILE_WANTED),
        ("perf", "--json", "dir", FILE_WANTED),
    ],
)
def test_a_bad_output_path_is_one_line_and_exit_2_before_any_work(
    tmp_path: Path, command: str, option: str, where: str, expected: str
) -> None:
    from typer.testing import CliRunner

    from langgraph_devsched.cli import app

    folder = tmp_path / "out"
    folder.mkdir()
    a_file = tmp_path / "taken.txt"
    a_file.write_text("x")
    path = {"dir": folder, "file": a_file, "under_file": a_file / "sub" / "r.json"}[where]
    result = CliRunner().invoke(app, [*command_args(tmp_path, command), option, str(path)])
    assert result.exit_code == 2, result.output  # a usage error (stress: never 1, "violation")
    assert result.output.splitlines() == [result.output.strip()], result.output  # one line
    assert result.output.startswith(f"Error: {option} {path}")
    assert expected in result.output and "Traceback" not in result.output
    if where == "under_file":
        assert f"{a_file} is a file, not a folder" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "taken.txt", "tiny.yaml"]
    assert list(folder.iterdir()) == [] and a_file.read_text() == "x"  # nothing written


@pytest.mark.parametrize(("value", "why"), [
    (".inf", "Input should be a finite number (got inf)"),
    (".nan", "Input should be a finite number (got nan)"),
    ("-3", "Input should be greater than 0 (got -3)"),
])
def test_a_non_finite_time_in_a_scenario_names_the_file_the_tool_and_the_field(
    tmp_path: Path, value: str, why: str
) -> None:
    from typer.testing import CliRunner

    from langgraph_devsched.cli import app

    scenario = tmp_path / "bad.yaml"
    scenario.write_text(TINY.replace("a: {params: {cpu_ms: 150", f"a: {{params: {{cpu_ms: {value}"))
    result = CliRunner().invoke(app, ["bench", "--scenarios", str(scenario), "--rounds", "1"])
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        f"Error: scenario file {scenario}: invalid scenario",
        f"  tools.a.params.cpu_ms: {why}",
    ]
