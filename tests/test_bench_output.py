"""What ``devsched bench`` shows: tables that read at 100 columns, progress on a terminal
only, the whole reason a scheduler was skipped, plots that say what they show."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from langgraph_devsched.bench.command import report, run_bench_command
from langgraph_devsched.bench.runner import default_schedulers, run_benchmark
from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.schedulers import registry

pytest.importorskip("numpy")

LONG_NAME = "a_scenario_with_quite_a_long_name"
TINY = f"""\
name: {LONG_NAME}
category: parallel
testbed: {{vram_budget_mb: 8000, cpu_cores: 2, noise: 0.05, seed: 1}}
tools:
  a: {{params: {{cpu_ms: 150, gpu_ms: 100, vram_mb: 1000, gpu_share: 1.0}}}}
  b: {{params: {{cpu_ms: 15000, gpu_ms: 9000, vram_mb: 1000, gpu_share: 1.0}}}}
workload: {{kind: parallel, calls: [a, b], rounds: 3}}
"""
SCHEDULERS = ["all_gpu", "static", "heft", "dmda", "ucb", "oracle", "monitor"]


def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY, encoding="utf-8")
    return path


def test_tables_read_at_100_columns(tmp_path: Path) -> None:
    """Seven schedulers do not fit side by side in 100 columns: the per-scenario table is
    printed a row per scheduler, and no figure is cut to '…'."""
    bench = run_benchmark([Scenario.model_validate(yaml.safe_load(TINY))], SCHEDULERS)
    console = Console(width=100, record=True, color_system=None)
    report(bench, console, json_path=None, plots=None)
    text = console.export_text()
    assert "…" not in text
    (s,) = bench.scenarios
    assert LONG_NAME in text
    for name in SCHEDULERS:
        r = s.results[name]
        assert f"{r.regret_ms:,.0f}" in text and name in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_progress_only_on_a_terminal(tmp_path: Path) -> None:
    path = tiny(tmp_path)
    shown = io.StringIO()
    run_bench_command(scenarios=path, schedulers=["all_gpu", "oracle"],
                      progress=Console(file=shown, force_terminal=True, width=100))
    assert f"{LONG_NAME} · all_gpu" in shown.getvalue()
    piped = io.StringIO()
    run_bench_command(scenarios=path, schedulers=["all_gpu", "oracle"],
                      progress=Console(file=piped, force_terminal=False))
    assert piped.getvalue() == ""


class Unconfigured:
    def __init__(self) -> None:
        raise RuntimeError("no model configured: " + "set DEVSCHED_LLM_MODEL " * 12 + "END")


def test_a_skipped_schedulers_reason_is_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._FACTORIES, "needs_llm", f"{__name__}:Unconfigured")
    skipped: dict[str, str] = {}
    default_schedulers(skipped=skipped)
    assert len(skipped["needs_llm"]) > 200
    assert skipped["needs_llm"].endswith("DEVSCHED_LLM_MODEL END")


def test_plots_say_what_they_show(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from langgraph_devsched.bench.plots import figures, write_plots

    bench = run_benchmark([Scenario.model_validate(yaml.safe_load(TINY))],
                          ["all_gpu", "oracle", "monitor"], declare="none")
    figs = figures(bench)
    for fig in figs.values():
        (ax,) = fig.axes
        assert "simulated testbed" in ax.get_title() and "declare=none" in ax.get_title()
    regret = figs["regret.png"].axes[0]
    markers = {line.get_marker() for line in regret.get_lines()}
    assert len(markers) == 3  # equal lines (oracle, a converged policy) still show
    labels = [t.get_text() for t in regret.get_yticklabels() if t.get_text()]
    assert "200" in labels or "2,000" in labels  # labelled between decades
    for name in ("regret.png", "ratio.png"):
        ax = figs[name].axes[0]
        fig = figs[name]
        fig.canvas.draw()
        legend = ax.get_legend().get_window_extent()
        assert legend.x0 >= ax.get_window_extent().x1  # outside the data
    paths = write_plots(bench, tmp_path)
    assert [p.name for p in paths] == ["accuracy.png", "regret.png", "ratio.png"]


def test_piped_output_is_not_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written to a file or a pipe (no terminal, no COLUMNS), the tables are not squeezed
    into rich's default 80 columns."""
    from typer.testing import CliRunner

    from langgraph_devsched.cli import app

    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(app, ["bench", "--scenarios", str(tiny(tmp_path)),
                                      "--schedulers", ",".join(SCHEDULERS)])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output and LONG_NAME in result.output
