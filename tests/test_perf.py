"""``devsched perf`` with tiny sizes: the JSON document's shape (never its times)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from langgraph_devsched._dev.perf.generate import generate_scenario
from langgraph_devsched.cli import app

pytest.importorskip("numpy")

ROW_KEYS = {"scheduler", "n", "error", "fresh_p50_ms", "fresh_p95_ms", "repeated_p50_ms",
            "repeated_p95_ms", "peak_mb", "reused"}


def test_perf_command_writes_the_json_document(tmp_path: Path) -> None:
    out = tmp_path / "perf.json"
    result = CliRunner().invoke(app, [
        "perf", "--schedulers", "monitor,ucb,oracle", "--sizes", "1,3,15", "--samples", "2",
        "--warmup", "3", "--steps", "12", "--every", "5", "--overhead", "0", "--json", str(out),
    ])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert set(doc) == {"config", "decisions", "steps", "overhead", "shared", "quality"}
    assert doc["overhead"] is None and doc["shared"] is None
    assert doc["config"]["sizes"] == [1, 3, 15]
    rows = {(r["scheduler"], r["n"]): r for r in doc["decisions"]}
    assert set(rows) == {(s, n) for s in ("monitor", "ucb", "oracle") for n in (1, 3, 15)}
    for key, row in rows.items():
        if key == ("oracle", 15):  # over the oracle's limit: the reason, no times
            assert "over its limit" in row["error"]
            continue
        assert set(row) == ROW_KEYS and row["error"] is None
        assert row["fresh_p50_ms"] <= row["fresh_p95_ms"]
        assert row["peak_mb"] >= 0
    steps = doc["steps"]
    assert steps["steps"] == 12 and steps["tools"] == 30
    assert len(steps["windows"]) == 3 and len(steps["rss_mb"]) == 4  # 5, 10, 12; and start
    assert doc["quality"] is None


def test_perf_overhead_pairs_alternate_toolnode_and_the_node(tmp_path: Path) -> None:
    out = tmp_path / "perf.json"
    result = CliRunner().invoke(app, [
        "perf", "--schedulers", "static", "--sizes", "1", "--samples", "1", "--warmup", "0",
        "--steps", "0", "--overhead", "6", "--json", str(out),
    ])
    assert result.exit_code == 0, result.output
    assert "Node overhead against ToolNode" in result.output
    overhead = json.loads(out.read_text())["overhead"]
    assert overhead["calls_per_step"] == 3 and overhead["settle"] == 100
    for pair in ("unhinted", "hinted"):
        row = overhead[pair]
        assert row["steps"] == 6
        assert row["tool_node_ms"] > 0 and row["device_ms"] > 0
        assert row["ratio"] == pytest.approx(row["device_ms"] / row["tool_node_ms"], rel=1e-3)
    assert overhead["hinted"]["of"] == 6  # the timed steps' decisions, reused or not
    assert 0 <= overhead["hinted"]["reused"] <= 6


def test_perf_command_rejects_unknown_schedulers() -> None:
    result = CliRunner().invoke(app, ["perf", "--schedulers", "nope", "--steps", "0"])
    assert result.exit_code == 2
    assert "valid schedulers" in result.output


def test_generated_scenarios_are_reproducible_and_oracle_checkable() -> None:
    a, b = generate_scenario(5, calls=10), generate_scenario(5, calls=10)
    assert a == b and a != generate_scenario(6, calls=10)
    assert len(a.batches()) == 1 and len(a.batches()[0]) == 10


def test_learning_rounds_are_measured_through_the_protocol() -> None:
    from langgraph_devsched._dev.perf.learning import measure_learning

    row = measure_learning(2, seeds=1, rounds=3, max_decision_ms=None)
    assert row["n"] == 2 and len(row["per_round_p50_ms"]) == 3
    assert all(ms >= 0 for ms in row["per_round_p50_ms"])
    assert len(row["first_reused"]) == 1
    with pytest.raises(ValueError, match="n, seeds and rounds must be >= 1"):
        measure_learning(0)


def test_perf_shared_times_the_machine_wide_ledger_beside_the_in_process_one(
    tmp_path: Path,
) -> None:
    out = tmp_path / "perf.json"
    result = CliRunner().invoke(app, [
        "perf", "--schedulers", "static", "--sizes", "1", "--samples", "1", "--warmup", "0",
        "--steps", "0", "--overhead", "0", "--shared", "20", "--json", str(out),
    ])
    assert result.exit_code == 0, result.output
    assert "Machine-wide ledger (shared=) against the in-process one" in result.output
    shared = json.loads(out.read_text())["shared"]
    assert shared["ledger"]["pairs"] == 20 and shared["node"]["steps"] == 4
    for side in ("in_process", "shared"):
        for part in ("ledger", "node"):
            row = shared[part][side]
            assert 0 < row["p50_ms"] <= row["p99_ms"]
    assert shared["node"]["calls_per_step"] == 3
