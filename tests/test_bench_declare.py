"""``--declare``: what the scenario's tools declare reaches the schedulers, the JSON and the
caption; bad forms are errors naming the valid ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from langgraph_devsched.bench.report import tables, to_json
from langgraph_devsched.bench.runner import run_benchmark, run_scenario
from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.cli import app
from langgraph_devsched.hints import SoloProfile
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers import registry
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView

pytest.importorskip("numpy")

SCENARIO = {
    "name": "fft", "category": "serial",
    "testbed": {"vram_budget_mb": 8000, "noise": 0, "seed": 2},
    "tools": {"fft": {"params": {"cpu_ms": 30, "gpu_ms": 2, "transfer_ms": 40,
                                 "vram_mb": 300}}},
    "workload": {"kind": "serial", "calls": ["fft"], "rounds": 2},
}


class Spy(SchedulerBase):
    """Records the profile each decision was shown; always the CPU."""

    name = "spy"
    seen: ClassVar[list[Any]] = []

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        Spy.seen.append(batch.calls[0].spec.profile)
        return self._decision({c.call_id: "cpu" for c in batch.calls}, "spy")

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        pass


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> type[Spy]:
    monkeypatch.setitem(registry._FACTORIES, "spy", f"{__name__}:Spy")
    Spy.seen = []
    return Spy


def test_the_default_feeds_the_ground_truth_and_none_feeds_nothing(spy: type[Spy]) -> None:
    s = Scenario.model_validate(SCENARIO)
    run_scenario(s, ["spy"])
    assert spy.seen == [SoloProfile(cpu_ms=30, gpu_ms=42, transfer_ms=40)] * 2
    spy.seen = []
    run_scenario(s, ["spy"], declare="none")
    assert spy.seen == [None, None]
    spy.seen = []
    run_scenario(s, ["spy"], declare="stale(2)")
    assert spy.seen == [SoloProfile(cpu_ms=30, gpu_ms=84, transfer_ms=40)] * 2


def test_json_and_caption_say_what_was_declared(spy: type[Spy]) -> None:
    from rich.console import Console

    s = Scenario.model_validate(SCENARIO)
    exact = run_benchmark([s], ["spy"])
    noisy = run_benchmark([s], ["spy"], declare="noisy(0.3)")
    assert to_json(exact)["config"]["declare"] == "exact"
    assert to_json(exact)["config"]["ground_truth_declared"] is True
    assert to_json(noisy)["config"] == {**to_json(noisy)["config"], "declare": "noisy(0.3)",
                                        "ground_truth_declared": False}

    def text(bench: Any) -> str:
        console = Console(width=200, record=True)
        for t in tables(bench):
            console.print(t)
        return console.export_text()

    assert ("declare=exact: tools declare their exact solo profiles (ground truth)"
            in text(exact))
    assert "declare=noisy(0.3)" in text(noisy) and "ground truth" not in text(noisy)


def test_cli_declare_and_decision_cost(tmp_path: Path) -> None:
    scen = tmp_path / "fft.yaml"
    scen.write_text(json.dumps(SCENARIO), encoding="utf-8")
    out = tmp_path / "b.json"
    result = CliRunner().invoke(app, [
        "bench", "--scenarios", str(scen), "--schedulers", "heft,oracle", "--json", str(out),
        "--declare", "none", "--decision-cost", "none"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert (data["config"]["declare"], data["config"]["decision_cost"]) == ("none", "none")
    heft = data["scenarios"][0]["results"]["heft"]
    assert heft["wall_regret_ms"] == heft["regret_ms"]  # no decision time counted
    # with no profile heft cannot know the FFT is transfer-bound (exact: it picks the CPU)
    assert heft["final_mapping"] == {"fft": "gpu_now"}


@pytest.mark.parametrize("bad", ["perfect", "noisy", "exact(1)", "stale(0)"])
def test_cli_bad_declare_names_the_valid_forms(bad: str) -> None:
    result = CliRunner().invoke(app, ["bench", "--declare", bad])
    assert result.exit_code == 2
    assert "exact, none, noisy(SIGMA), stale(FACTOR)" in result.output


def test_cli_bad_decision_cost_names_the_valid_ones() -> None:
    result = CliRunner().invoke(app, ["bench", "--decision-cost", "free"])
    assert result.exit_code == 2
    assert "valid: measured, none" in result.output


def test_cli_takes_every_classic_builtin_by_name_in_one_list(tmp_path: Path) -> None:
    """A list of 13 built-in names is longer than a file name may be: it crashed with
    ``OSError: [Errno 36] File name too long`` while the CLI checked for such a file."""
    from langgraph_devsched.bench.scenario import builtin_scenario_paths

    names = [p.stem for p in builtin_scenario_paths() if not p.stem.startswith("residency")]
    out = tmp_path / "b.json"
    result = CliRunner().invoke(app, ["bench", "--scenarios", ",".join(names), "--schedulers",
                                      "static", "--rounds", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert [s["name"] for s in json.loads(out.read_text())["scenarios"]] == names
    bad = CliRunner().invoke(app, ["bench", "--scenarios", ",".join(names) + ",nope" * 40])
    assert bad.exit_code != 0 and "nope" in bad.output and "built-in scenarios" in bad.output
