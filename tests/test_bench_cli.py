"""``devsched bench`` through typer's CliRunner: options, errors and the JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from langgraph_devsched.cli import app

pytest.importorskip("numpy")

TINY = """\
name: tiny
category: parallel
testbed: {vram_budget_mb: 8000, cpu_cores: 2, noise: 0.05, seed: 1}
tools:
  a: {params: {cpu_ms: 150, gpu_ms: 100, vram_mb: 1000, gpu_share: 1.0}}
  b: {params: {cpu_ms: 150, gpu_ms: 100, vram_mb: 1000, gpu_share: 1.0}}
workload: {kind: parallel, calls: [a, b], rounds: 4}
"""

runner = CliRunner()


def test_bench_json_contract(tmp_path: Path) -> None:
    scen = tmp_path / "tiny.yaml"
    scen.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out" / "bench.json"
    result = runner.invoke(
        app,
        ["bench", "--scenarios", str(scen), "--schedulers", "all_gpu,heft,oracle",
         "--rounds", "3", "--seed", "5", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "Summary" in result.output
    data = json.loads(out.read_text())
    (s,) = data["scenarios"]
    assert (s["name"], s["category"], s["optimal_makespan_ms"]) == ("tiny", "parallel", 150.0)
    assert set(s["results"]) == {"all_gpu", "heft", "oracle"}
    for r in s["results"].values():
        assert {"final_mapping", "final_makespan_ms", "optimal", "rounds_to_optimal",
                "regret_ms", "llm_calls"} <= set(r)
        assert len(r["round_makespans_ms"]) == 3
    assert s["results"]["all_gpu"]["final_mapping"] == {"a": "gpu_now", "b": "gpu_now"}
    assert s["results"]["all_gpu"]["regret_ms"] == 150.0  # 3 x (200 - 150)
    assert s["results"]["oracle"]["optimal"] is True
    assert data["summary"]["all_gpu"] == {**data["summary"]["all_gpu"],
                                          "optimal": 0, "total": 1, "regret_ms": 150.0}
    assert data["summary"]["oracle"]["optimal"] == 1
    assert data["config"]["seed"] == 5


def test_noise_override_and_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    scen = tmp_path / "tiny.yaml"
    scen.write_text(TINY, encoding="utf-8")
    out = tmp_path / "b.json"
    result = runner.invoke(
        app,
        ["bench", "--scenarios", str(scen), "--schedulers", "all_gpu,oracle", "--noise", "0",
         "--json", str(out), "--plots", str(tmp_path / "plots")],
    )
    assert result.exit_code == 0, result.output
    r = json.loads(out.read_text())["scenarios"][0]["results"]["all_gpu"]
    assert r["measured_makespans_ms"] == r["round_makespans_ms"] == [200.0] * 4
    for name in ("accuracy.png", "regret.png", "ratio.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:4] == b"\x89PNG"


def test_default_schedulers_include_the_oracle(tmp_path: Path) -> None:
    scen = tmp_path / "tiny.yaml"
    scen.write_text(TINY, encoding="utf-8")
    out = tmp_path / "b.json"
    result = runner.invoke(app, ["bench", "--scenarios", str(scen), "--rounds", "2",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    names = set(json.loads(out.read_text())["summary"])
    assert {"all_gpu", "heft", "dmda", "ucb", "oracle"} <= names


def test_unknown_scheduler_lists_the_valid_ones(tmp_path: Path) -> None:
    result = runner.invoke(app, ["bench", "--schedulers", "all_gpu,fastest"])
    assert result.exit_code == 2
    assert "unknown scheduler(s) 'fastest'; valid schedulers: all_gpu" in result.output


def test_bad_scenario_path_is_a_plain_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncategory: gpu\n", encoding="utf-8")
    result = runner.invoke(app, ["bench", "--scenarios", str(bad)])
    assert result.exit_code == 2
    assert str(bad) in result.output and "category" in result.output
