"""Resident models in scenario files and the benchmark (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_devsched.bench.declare import Declare, declared_specs
from langgraph_devsched.bench.report import residency_markdown, tables, to_json
from langgraph_devsched.bench.runner import BenchResult, run_benchmark, run_scenario
from langgraph_devsched.bench.scenario import (
    Scenario,
    ScenarioError,
    load_scenario,
    load_scenarios,
)
from langgraph_devsched.hints import LoadProfile
from tests.builtin_bench import run_builtin

pytest.importorskip("numpy")

ALTERNATING = {
    "name": "swap", "category": "residency",
    "testbed": {"vram_budget_mb": 12000, "background": {"vram_mb": 6000}, "noise": 0},
    "tools": {
        "asr": {"params": {"cpu_ms": 2600, "gpu_ms": 220, "vram_mb": 700,
                           "weights_mb": 3100, "load_gpu_ms": 3000, "load_cpu_ms": 200}},
        "cap": {"params": {"cpu_ms": 5200, "gpu_ms": 300, "vram_mb": 900,
                           "weights_mb": 4400, "load_gpu_ms": 2600, "load_cpu_ms": 1200}},
    },
    # back to back: no idle time between steps in which a model could load (the think
    # time's loads are `test_loads_as_investments`'s)
    "workload": {"kind": "sequence", "batches": [["asr"], ["cap"]], "rounds": 4, "think_ms": 0},
}


def test_the_declared_hints_carry_the_weights_and_load_times_unless_none() -> None:
    s = Scenario.model_validate(ALTERNATING)
    exact = declared_specs(s.tools, Declare("exact"))["asr"]
    assert (exact.model_name("asr"), exact.weights_mb) == ("asr", 3100)
    assert exact.load_ms == LoadProfile(gpu_ms=3000, cpu_ms=200)
    none = declared_specs(s.tools, Declare("none"))["asr"]
    # none: the model and its size are known like its VRAM; its load times are not
    assert (none.model_name("asr"), none.weights_mb, none.load_ms) == ("asr", 3100, None)
    noisy = declared_specs(s.tools, Declare("noisy", 0.3))["asr"]
    assert noisy.weights_mb == 3100 and noisy.load_ms != exact.load_ms
    # the file's own hints win
    own = dict(ALTERNATING, tools=dict(ALTERNATING["tools"], asr=dict(
        ALTERNATING["tools"]["asr"], hints={"load_ms": {"gpu_ms": 10}})))
    spec = Scenario.model_validate(own).specs()["asr"]
    assert spec.load_ms == LoadProfile(gpu_ms=10)


def test_initial_residency_in_the_file_and_its_errors(tmp_path: Path) -> None:
    import yaml

    data = dict(ALTERNATING, testbed=dict(ALTERNATING["testbed"], resident={"gpu": ["cap"]}))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    bed = load_scenario(path).make_testbed()
    assert [(w.model, w.side) for w in bed.device_state().resident] == [("cap", "gpu")]
    data["testbed"]["resident"] = {"gpu": ["llm"]}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"resident.gpu: unknown model 'llm'.*asr, cap"):
        load_scenario(path)
    data["testbed"]["resident"] = {"disk": ["asr"]}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ScenarioError, match="valid fields here: gpu, cpu"):
        load_scenario(path)


def test_thrashing_pays_loads_and_evictions_and_the_reference_carries_state() -> None:
    r = run_scenario(Scenario.model_validate(ALTERNATING), ["all_gpu", "oracle"])
    assert r.resident_models
    gpu, oracle = r.results["all_gpu"], r.results["oracle"]
    # all on the GPU: each turn evicts the other model (after round 1's first load)
    assert gpu.loads == 8 and gpu.evictions_per_step == pytest.approx(7 / 8)
    assert gpu.round_makespans_ms == [3220 + 2900] * 4
    # the oracle keeps the caption model warm and runs ASR on the CPU (one host load)
    assert oracle.final_mapping == {"b0/asr": "cpu", "b1/cap": "gpu_queued"}
    # the reference loads the caption model beside round 1's ASR step (on the CPU, the GPU
    # idle; the 2.6 s load ends within the 2.8 s step): round 1's caption call is warm
    assert r.reference_makespans_ms == [2800 + 300, 2600 + 300, 2600 + 300, 2600 + 300]
    assert oracle.regret_ms == 2900 - 300  # the per-step oracle pays that load in round 1
    assert oracle.optimal and oracle.evictions_per_step == 0
    assert r.optimal_makespan_ms == 2900
    assert gpu.regret_ms == sum(
        s - ref for s, ref in zip(gpu.round_makespans_ms, r.reference_makespans_ms, strict=True))
    doc = to_json(BenchResult([r], ["all_gpu", "oracle"], None, None, None))
    assert doc["scenarios"][0]["resident_models"] is True
    assert doc["scenarios"][0]["results"]["all_gpu"]["evictions_per_step"] == 0.875
    assert doc["scenarios"][0]["results"]["all_gpu"]["loads"] == 8


def test_the_residency_table_shows_only_scenarios_with_resident_models() -> None:
    from rich.console import Console

    plain = Scenario.model_validate({
        "name": "fft", "category": "serial", "testbed": {"vram_budget_mb": 8000, "noise": 0},
        "tools": {"fft": {"params": {"cpu_ms": 30, "gpu_ms": 2, "transfer_ms": 40}}},
        "workload": {"kind": "serial", "calls": ["fft"], "rounds": 2}})
    without = run_benchmark([plain], ["all_gpu", "oracle"])
    assert len(tables(without)) == 2 and plain.has_resident_models() is False
    both = run_benchmark([plain, Scenario.model_validate(ALTERNATING)], ["all_gpu", "oracle"])
    assert len(tables(both)) == 4  # and the whole run's
    console = Console(width=200, record=True)
    console.print(tables(both)[3])
    text = console.export_text()
    assert "swap" in text and "fft" not in text and "2.11× 0.88 8" in text
    assert residency_markdown(both).splitlines()[2] == (
        "| swap | 2.11× · 0.88 · Σ2.07× | 1.00× · 0.00 · Σ1.22× |")  # no load beside a step


def test_the_builtin_residency_scenarios_reward_knowing_residency() -> None:
    residency = [s for s in load_scenarios() if s.category == "residency"]
    assert len(residency) >= 4
    for s in residency:
        assert all(len(b) <= 10 for b in s.batches())
        # back to back (no think time to load in), the per-step oracle is optimal on each
        s = s.model_copy(update={"workload": s.workload.model_copy(update={"think_ms": 0})})
        r = run_scenario(s, ["all_gpu", "oracle"], rounds=6)
        assert r.results["oracle"].optimal
        # everything on the GPU is never better here, and loses on all but the cold burst
        assert r.results["all_gpu"].final_makespan_ms >= r.optimal_makespan_ms
    thrash = run_scenario(next(s for s in residency if s.name == "residency_alternating"),
                          ["all_gpu", "oracle"], rounds=4)
    assert thrash.results["all_gpu"].evictions_per_step > 0.5
    assert thrash.results["oracle"].evictions_per_step == 0


def test_with_nothing_declared_the_monitor_learns_the_loads_and_stops_thrashing() -> None:
    """`--declare none` keeps a tool's model and weights (known like its VRAM), not its
    load times: the monitor learns those from the steps that pay them. When `none` dropped
    the weights too, no scheduler knew a model was resident and the monitor thrashed
    (2.11x, 40 loads in 40 steps)."""
    scenario = run_builtin("residency_alternating", declare="none")
    monitor = scenario.results["monitor"]
    assert monitor.optimal, (monitor.final_mapping, scenario.optimal_mapping)
    assert monitor.loads <= 6, monitor.loads
