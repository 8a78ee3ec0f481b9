"""docs/results.md is what ``python scripts/results_page.py`` writes from the runs committed
under docs/results/ (each a ``devsched bench --json`` file with its ``.run.yaml`` sidecar):
a table on the page cannot drift from its JSON, and a run without its sidecar is refused."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("results_page",
                                                  ROOT / "scripts" / "results_page.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_page"] = module
    spec.loader.exec_module(module)
    return module


results_page = _script()


def test_the_committed_results_page_is_what_the_committed_runs_give() -> None:
    committed = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert committed == results_page.render(), (
        "docs/results.md is stale: run python scripts/results_page.py")


def test_every_committed_run_has_its_sidecar_and_is_on_the_page() -> None:
    runs = results_page.load_runs()
    assert len(runs) >= 2
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for name, side, bench in runs:
        assert f"## {side['title']}" in page and f"results/{name}.json" in page
        for scheduler, row in bench["summary"].items():
            assert f"| {scheduler} | {row['optimal']}/{row['total']} |" in page


def test_a_new_run_in_the_folder_is_picked_up(tmp_path: Path) -> None:
    """What an engineer adding a run does: the JSON and its sidecar, nothing else."""
    source = ROOT / "docs" / "results"
    first = sorted(source.glob("*.json"))[0]
    shutil.copy(first, tmp_path / "zz_new.json")
    bench = json.loads(first.read_text(encoding="utf-8"))
    bench["summary"] = {"monitor": {**next(iter(bench["summary"].values())),
                                    "optimal": 3, "total": 4}}
    (tmp_path / "zz_new.json").write_text(json.dumps(bench), encoding="utf-8")
    with pytest.raises(results_page.RunError, match=r"zz_new.json: no sidecar zz_new.run.yaml"):
        results_page.render(tmp_path)
    (tmp_path / "zz_new.run.yaml").write_text(
        "title: A generated workload\ncommand: devsched bench --generate 4 --json x.json\n"
        "date: 2026-01-01\nmachine: 8 cores, no GPU, idle\n", encoding="utf-8")
    page = results_page.render(tmp_path)
    assert "## A generated workload" in page and "| monitor | 3/4 |" in page
    assert "8 cores, no GPU, idle" in page


def test_a_sidecar_with_a_wrong_key_says_which_keys_are_valid(tmp_path: Path) -> None:
    first = sorted((ROOT / "docs" / "results").glob("*.json"))[0]
    shutil.copy(first, tmp_path / "run.json")
    (tmp_path / "run.run.yaml").write_text("title: t\ncommand: c\ndate: d\nmachine: m\n"
                                           "titel: typo\n", encoding="utf-8")
    with pytest.raises(results_page.RunError, match=r"unknown \['titel'\]; valid keys: "):
        results_page.render(tmp_path)


def test_a_generated_set_shows_its_distribution_and_its_worst_workloads(tmp_path: Path) -> None:
    """A generated set (``--generate N``): the total ratio's p50 / p95 / max per
    scheduler and the worst workloads by name, not one row each; --slim keeps what the page
    reads."""
    scenarios = [{"name": f"gen-s1-{i}", "physics": "idle_queue", "optimal_makespan_ms": 100.0,
                  "optimal_mapping": {"a": "cpu"}, "results": {"monitor": {
                      "total_ratio": 1.0 + i / 100, "optimal": True, "makespan_ratio": 1.0,
                      "final_mapping": {"a": "cpu"}}}} for i in range(41)]
    bench = {"config": {"decision_cost": "none"}, "scenarios": scenarios, "summary": {
        "monitor": {"optimal": 41, "total": 41, "regret_ms": 0.0, "total_ratio_p50": 1.2,
                    "total_ratio_p95": 1.38, "total_ratio_max": 1.4, "optimal_total": 1,
                    "preloads": 3, "preloads_beside": 1, "preload_delay_ms": 50.0}}}
    (tmp_path / "gen.json").write_text(json.dumps(bench), encoding="utf-8")
    results_page.slim(tmp_path / "gen.json")
    slimmed = json.loads((tmp_path / "gen.json").read_text(encoding="utf-8"))
    assert "final_mapping" not in slimmed["scenarios"][0]["results"]["monitor"]
    assert "optimal_mapping" not in slimmed["scenarios"][0]
    (tmp_path / "gen.run.yaml").write_text(
        "title: Generated\ncommand: devsched bench --generate 41\ndate: 2026-12-05\n"
        "machine: test\n", encoding="utf-8")
    page = results_page.render(tmp_path)
    assert "| monitor | 1.200 / 1.380 / 1.400 | 1/41 | 30 |" in page  # above 1.10: 11..40
    assert "`gen-s1-40` 1.40× (idle_queue), `gen-s1-39` 1.39×" in page
    assert "3 loads (1 beside a step)" in page and "| gen-s1-0 |" not in page
