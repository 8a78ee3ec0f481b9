"""``devsched bench --real``: real suite tools timed on this machine (CPU alone here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from langgraph_devsched.bench.real import RealScenario, load_real_scenarios, run_real_scenario
from langgraph_devsched.cli import app


@pytest.mark.slow
def test_cli_real_bench_on_the_cpu_says_so_and_keeps_the_contract(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text("name: tiny\ntools: [hash_text, tokenize_text]\nrounds: 2\n")
    out = tmp_path / "real.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--real",
            "--scenarios",
            str(scenario),
            "--schedulers",
            "all_gpu,static",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "running with the CPU alone" in result.output
    doc = json.loads(out.read_text())
    (entry,) = doc["scenarios"]
    assert entry["optimal_mapping"] == {"hash_text": "cpu", "tokenize_text": "cpu"}
    assert set(entry["results"]) == {"all_gpu", "static", "oracle"}
    assert entry["results"]["all_gpu"]["final_mapping"] == entry["optimal_mapping"]
    assert len(entry["results"]["static"]["round_makespans_ms"]) == 2
    assert all(x > 0 for x in entry["results"]["static"]["round_makespans_ms"])


def test_real_scenarios_are_validated_with_the_file_and_field() -> None:
    (builtin,) = load_real_scenarios()
    assert len(builtin.tools) <= 4
    with pytest.raises(ValueError, match=r"too_many\.yaml: tools: List should have at most 4"):
        bad = Path(__file__).parent / "too_many.yaml"
        try:
            bad.write_text("name: x\ntools: [a, b, c, d, e]\n")
            load_real_scenarios(bad)
        finally:
            bad.unlink()


def test_unknown_tool_in_a_real_scenario_lists_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown tool\(s\) nope; known tools: transcribe_speech"
    ):
        run_real_scenario(RealScenario(name="x", tools=["nope"]), ["static"], say=lambda _: None)
