"""The profiler on tiny tools: exact structure, devices, failures, files, CLI, scenarios."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
from langchain_core.tools import BaseTool, tool
from typer.testing import CliRunner

from langgraph_devsched.cli import app
from langgraph_devsched.device import InjectedDevice, current_device
from langgraph_devsched.hints import device_hints
from langgraph_devsched.profiling import (
    EXAMPLE_ARGS_KEY,
    DeviceRun,
    Profile,
    ToolProfile,
    load_tools,
    parse_devices,
    profile_tools,
    summarize,
)
from langgraph_devsched.profiling.report import markdown_table, plot_profile, profile_table
from langgraph_devsched.profiling.to_scenario import profile_to_scenarios, write_scenarios
from langgraph_devsched.telemetry import cuda_status

REPO = Path(__file__).resolve().parents[1]
HAS_CUDA = cuda_status()[0]
CALLS: list[str] = []


@device_hints(vram_mb=10, gpu_share=0.2)
@tool
def double(x: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Double a number."""
    CALLS.append(device)
    return f"{2 * x}@{device}"


@tool
def shout(text: str) -> str:
    """Upper-case a text and report the context device."""
    return f"{text.upper()}@{current_device('none')}"


double.metadata = {**(double.metadata or {}), EXAMPLE_ARGS_KEY: {"x": 3}}
TINY_TOOLS = [double, shout]


def tiny_tools() -> list[BaseTool]:
    return list(TINY_TOOLS)


def test_profile_of_two_tiny_tools_has_exact_structure() -> None:
    CALLS.clear()
    p = profile_tools(
        TINY_TOOLS, devices=["cpu"], repeats=3, warmup=2, args={"shout": {"text": "hi"}},
        assume_idempotent=True,  # side-effect free: warmed up and repeated
    )
    assert p.devices_requested == ["cpu"] and p.devices_measured == ["cpu"]
    assert (p.repeats, p.warmup, p.notes) == (3, 2, [])
    assert [t.tool for t in p.tools] == ["double", "shout"]
    assert CALLS == ["cpu"] * 5  # 2 warm-up + 3 timed, device injected
    d, s = p.tools
    assert list(d.runs) == ["cpu"] and d.skipped == {}
    run = d.runs["cpu"]
    assert run.device == "cpu" and run.latency.runs == 3 and len(run.samples_ms) == 3
    assert run.latency.min_ms <= run.latency.median_ms <= run.latency.max_ms
    assert (run.transfer_ms, run.transfer_method, run.peak_vram_mb) == (0.0, "none", None)
    assert run.cpu_threads == p.cpu_threads >= 1
    assert run.output_preview == "6@cpu"
    assert (d.gpu_capable, d.declared_vram_mb, d.declared_gpu_share) == (True, 10.0, 0.2)
    assert (d.tool_class, d.reason) == ("unknown", "measured on cpu only")
    assert s.gpu_capable is False  # no hints and no device argument
    assert s.runs["cpu"].output_preview == "HI@cpu"  # placement visible through the context


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA path; this machine has CUDA")
def test_cuda_requested_without_cuda_still_profiles_cpu() -> None:
    p = profile_tools([double], devices="cpu,cuda", repeats=1, warmup=0, assume_idempotent=True)
    assert p.devices_requested == ["cpu", "cuda:0"] and p.devices_measured == ["cpu"]
    assert len(p.notes) == 1 and "cuda:0 requested but unavailable" in p.notes[0]
    row = p.tools[0]
    assert "cpu" in row.runs and "cuda" in row.skipped
    assert row.tool_class == "unknown"
    assert row.reason == "measured on cpu only (cuda: cuda:0 requested but unavailable)"


def test_failures_and_missing_arguments_are_skipped_with_the_reason() -> None:
    @tool
    def broken(device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Always fails."""
        raise RuntimeError("boom")

    @tool
    def needs_pkg(device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Needs a package that is not installed."""
        raise ImportError("no module named 'nosuchpkg'")

    @tool
    def needs_args(q: str) -> str:
        """Requires q."""
        return q

    p = profile_tools([broken, needs_pkg, needs_args], devices=["cpu"], repeats=1, warmup=0)
    by = {t.tool: t for t in p.tools}
    assert by["broken"].skipped == {"cpu": "failed: ToolException: boom"} or by[
        "broken"
    ].skipped["cpu"].startswith("failed: RuntimeError: boom")
    assert by["needs_pkg"].skipped["cpu"].startswith("missing package: ")
    assert EXAMPLE_ARGS_KEY in by["needs_args"].skipped["cpu"]
    assert all(t.tool_class == "unknown" and not t.runs for t in p.tools)
    assert by["broken"].reason.startswith("not measured (cpu: failed: ")


def test_time_budget_skips_the_remaining_tools() -> None:
    ticks = iter(range(100))
    p = profile_tools(
        [double, double], devices=["cpu"], repeats=1, warmup=0, time_budget_s=1.5,
        clock=lambda: float(next(ticks)), assume_idempotent=True,
    )
    assert "cpu" in p.tools[0].runs
    assert p.tools[1].skipped == {"cpu": "time budget exhausted"}
    assert p.tools[1].reason == "not measured (cpu: time budget exhausted)"
    assert p.notes == ["time budget of 1.5 s exhausted; later tools skipped"]


def test_parse_devices_normalises_and_lists_valid_values() -> None:
    assert parse_devices("cpu, cuda") == ["cpu", "cuda:0"]
    assert parse_devices(["cuda:1", "cpu", "cpu"]) == ["cuda:1", "cpu"]
    for bad in ("gpu", "cpu:0", "cuda:x", ""):
        with pytest.raises(ValueError, match="valid devices: cpu, cuda, cuda:<index>"):
            parse_devices(bad)


def test_load_tools_from_module_attr() -> None:
    assert load_tools("tests.test_profiler:TINY_TOOLS") == TINY_TOOLS
    assert load_tools("tests.test_profiler:tiny_tools") == TINY_TOOLS
    assert load_tools("tests.test_profiler:double") == [double]
    with pytest.raises(ValueError, match="expected MODULE:ATTR"):
        load_tools("tests.test_profiler")
    with pytest.raises(ValueError, match="has no attribute 'nope'"):
        load_tools("tests.test_profiler:nope")
    with pytest.raises(ValueError, match="must be a BaseTool"):
        load_tools("tests.test_profiler:REPO")


def _run(device: str, samples: list[float], transfer: float = 0.0, vram: float | None = None
         ) -> DeviceRun:
    return DeviceRun(
        device=device, latency=summarize(samples), samples_ms=samples, transfer_ms=transfer,
        transfer_method="observed" if transfer else "none", peak_vram_mb=vram, cpu_threads=4,
    )


def synthetic_profile() -> Profile:
    rows = [
        ("asr", [800, 810, 790], [60, 61, 59], 5.0, 1500.0, "gpu_preferred"),
        ("scan", [2, 2.1, 1.9], [40, 41, 39], 35.0, 560.0, "cpu_preferred"),
        ("hash", [0.5, 0.5, 0.5], [0.52, 0.5, 0.51], 0.0, 0.0, "device_neutral"),
        ("noisy", [100, 60, 140], [70, 40, 100], 1.0, 100.0, "ambiguous"),
    ]
    tools = [
        ToolProfile(tool=n, runs={"cpu": _run("cpu", c), "cuda": _run("cuda:0", g, t, v)},
                    tool_class=k, declared_gpu_share=0.4, declared_vram_mb=50)
        for n, c, g, t, v, k in rows
    ]
    tools.append(ToolProfile(tool="cpu_only", runs={"cpu": _run("cpu", [5, 5, 5])}))
    return Profile(
        created="2026-01-01T00:00:00+00:00", size="full", repeats=3, warmup=1, cpu_threads=4,
        devices_requested=["cpu", "cuda:0"], devices_measured=["cpu", "cuda:0"],
        host={"cpu_count": "16"}, tools=tools,
    )


def test_profile_json_round_trip_and_reports(tmp_path: Path) -> None:
    p = synthetic_profile()
    path = p.save(tmp_path / "p.json")
    assert Profile.load(path) == p
    assert p.tool("scan").gpu is not None and p.tool("cpu_only").gpu is None
    with pytest.raises(KeyError, match="known: asr, scan"):
        p.tool("missing")
    assert profile_table(p).row_count == 5
    md = markdown_table(p).splitlines()
    assert len(md) == 7 and md[2].startswith("| asr | 800.00 ± 10.00 | 60.00 ± 1.00 |")
    pytest.importorskip("matplotlib")
    png = plot_profile(p, tmp_path / "plots" / "scatter.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_to_scenarios_validates_and_round_trips(tmp_path: Path) -> None:
    from langgraph_devsched.bench.scenario import load_scenarios

    scenarios = profile_to_scenarios(synthetic_profile(), prefix="prof")
    assert [s.name for s in scenarios] == ["prof_serial", "prof_parallel", "prof_memory"]
    serial, parallel, memory = scenarios
    assert sorted(serial.tools) == ["asr", "hash", "noisy", "scan"]  # cpu_only skipped
    scan = serial.tools["scan"].params
    assert (scan.cpu_ms, scan.gpu_ms, scan.transfer_ms, scan.vram_mb) == (2.0, 5.0, 35.0, 560.0)
    assert (scan.gpu_share, scan.cpu_threads) == (0.4, 4)
    assert serial.tools["hash"].params.vram_mb == 50  # no peak measured: declared estimate
    assert parallel.workload.calls == ["asr", "scan", "noisy", "hash"]  # classes interleaved
    total = 1500 + 560 + 50 + 100
    assert parallel.testbed.vram_budget_mb == pytest.approx(total * 1.5)
    assert memory.testbed.vram_budget_mb == pytest.approx(max(total * 0.5, 1500 * 1.05))
    assert memory.testbed.cpu_cores == 16
    paths = write_scenarios(scenarios, tmp_path / "sc")
    assert [p.name for p in paths] == ["prof_serial.yaml", "prof_parallel.yaml", "prof_memory.yaml"]
    loaded = {s.name: s for s in load_scenarios(tmp_path / "sc")}
    assert loaded["prof_memory"] == memory
    pinned = profile_to_scenarios(synthetic_profile(), cpu_only="pin")[0]
    assert pinned.tools["cpu_only"].hints == {"gpu_capable": False}


def test_profile_to_scenarios_needs_gpu_rows() -> None:
    p = synthetic_profile()
    p.tools = [p.tool("cpu_only")]
    with pytest.raises(ValueError, match="measured on both cpu and cuda"):
        profile_to_scenarios(p)
    assert len(profile_to_scenarios(p, cpu_only="pin")) == 3


def test_cli_profile_writes_json_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.json"
    res = CliRunner().invoke(app, [
        "profile", "--suite", "tests.test_profiler:TINY_TOOLS", "--devices", "cpu",
        "--repeats", "2", "--warmup", "0", "--tools", "double", "--json", str(out),
        "--plots", str(tmp_path), "--assume-idempotent",
    ])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert [t["tool"] for t in data["tools"]] == ["double"]
    assert data["tools"][0]["runs"]["cpu"]["latency"]["runs"] == 2
    assert (tmp_path / "profile_scatter.png").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--devices", "gpu"], "valid devices: cpu, cuda"),
    (["--size", "huge"], "valid sizes: small, full"),
    (["--suite", "nosuchmodule_xyz:tools"], "cannot import module"),
    (["--tools", "nope"], "known tools: transcribe_speech"),
])
def test_cli_profile_errors_name_the_valid_values(args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["profile", *args])
    assert res.exit_code == 2
    assert message in res.output


@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="on a CUDA machine the script runs the full GPU check")
def test_gpu_check_script_cpu_path(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = {
        **os.environ, "PYTHON": sys.executable,
        "DEVSCHED_GPU_CHECK_TOOLS": "hash_text,scan_archive", "DEVSCHED_GPU_CHECK_REPEATS": "1",
        "DEVSCHED_GPU_CHECK_THREADS": "1",
    }
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "out")],
        env=env, capture_output=True, text=True, check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no CUDA device visible to torch: running the CPU path only" in res.stdout
    p = Profile.load(tmp_path / "out" / "profile_small.json")
    assert [t.tool for t in p.tools] == ["hash_text", "scan_archive"]
    assert all(t.runs["cpu"].latency.runs == 1 for t in p.tools)
    assert p.cpu_threads == 1
    assert (tmp_path / "out" / "profile_scatter.png").exists()


def test_a_cold_start_becomes_a_load_time_hint() -> None:
    """The first call loads the tool's model (here 80 ms of a fake clock, then 2 ms a call):
    the profile says so, and the hints of the tool that declares the model carry it as
    ``load_ms``; a tool without a load has none."""
    from langchain_core.tools import tool

    from langgraph_devsched.profiling import profiler
    from langgraph_devsched.profiling.to_hints import profile_hints

    now = [0.0]
    seen: list[int] = []

    @tool
    def loads(text: str) -> str:
        """Loads a model on first use."""
        now[0] += 0.080 if not seen else 0.002
        seen.append(1)
        return text

    @tool
    def steady(text: str) -> str:
        """No model to load."""
        now[0] += 0.002
        return text

    runs = {t.name: profiler.measure(t, {"text": "x"}, "cpu", repeats=3, warmup=1,
                                     cpu_threads=1, clock=lambda: now[0])
            for t in (loads, steady)}
    assert runs["loads"].cold_ms == pytest.approx(80.0)
    assert runs["loads"].load_ms == pytest.approx(78.0)
    assert runs["steady"].load_ms == pytest.approx(0.0)
    from langgraph_devsched.profiling.model import Profile, ToolProfile

    rows = [ToolProfile(tool=name, runs={"cpu": run},
                        declared_model="m" if name == "loads" else None)
            for name, run in runs.items()]
    p = Profile(created="now", repeats=3, warmup=1, cpu_threads=1, devices_requested=["cpu"],
                devices_measured=["cpu"], tools=rows)
    hints = profile_hints(p)
    assert hints["loads"]["load_ms"] == {"cpu_ms": 78.0}
    from langgraph_devsched.hints import validate_spec

    assert validate_spec("loads", hints["loads"]).load_ms.cpu_ms == 78.0  # type: ignore[union-attr]
    assert "load_ms" not in hints["steady"] and "weights_mb" not in hints["steady"]
