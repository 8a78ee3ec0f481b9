"""Generated workloads on several GPUs of different sizes, and the crowded memory-bound
class: drawn from streams of their own (the one-GPU workloads stay as they were), small
enough for the exact whole-run reference, and reported by the bench."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from langgraph_devsched.bench import generate
from langgraph_devsched.bench.generate import generate_scenarios, generated_scenario
from langgraph_devsched.cli import app

pytest.importorskip("numpy")


def test_the_gpu_draw_leaves_every_one_gpu_workload_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = generate_scenarios(40, seed=1)
    monkeypatch.setattr(generate, "MULTI_GPU_SHARE", 0.0)
    monkeypatch.setattr(generate, "CROWDED_SHARE", 0.0)
    plain = generate_scenarios(40, seed=1)
    several = [s for s in drawn if s.testbed.gpus is not None]
    assert 4 <= len(several) <= 24  # about 30 %
    for a, b in zip(drawn, plain, strict=True):
        if a.testbed.gpus is None and len(a.tools) < 5:
            assert a == b, a.name
    assert all(s.testbed.gpus is None for s in plain)


def test_several_gpus_are_of_different_sizes_and_small_enough_for_the_search() -> None:
    several = [s for s in generate_scenarios(200, seed=2) if s.testbed.gpus is not None]
    assert {len(s.testbed.gpus or ()) for s in several} == {2, 3, 4}
    hinted = 0
    for s in several:
        gpus = s.testbed.gpus or []
        sizes = [g.vram_mb for g in gpus]
        assert len(set(sizes)) == len(sizes), s.name
        assert s.testbed.vram_budget_mb is None
        count = len(gpus)
        assert len(s.batches()) <= generate.GPU_STEPS
        assert max(len(b) for b in s.batches()) <= generate.GPU_CALLS[count]
        models = {e.params.model_name(t) for t, e in s.tools.items()} - {None}
        assert len(models) <= generate.GPU_MODELS[count], s.name
        hinted += sum(1 for e in s.tools.values() if (e.hints or {}).get("gpus"))
        s.make_testbed()  # a valid machine: resident models fit, pins name real GPUs
    assert hinted > 0


def test_the_crowded_memory_bound_class_is_drawn() -> None:
    crowded = [s for seed in (1, 2) for s in generate_scenarios(200, seed=seed)
               if len(s.tools) == 5]
    assert crowded
    for s in crowded:
        assert s.testbed.vram_budget_mb == generate.MEMORY_BOUND_MB
        assert s.testbed.cpu_cores == 16
        assert all(700 <= e.params.vram_mb <= 1300 for e in s.tools.values())
        assert max(len(b) for b in s.batches()) <= 5
    assert any(s.physics == "idle_queue" for s in crowded)


def test_cli_bench_on_generated_gpus_workloads_has_an_exact_whole_run_reference(
        tmp_path) -> None:
    names = ["gen-s1-19", "gen-s1-0"]  # 2 and 3 GPUs
    assert all(generated_scenario(1, int(n.rsplit("-", 1)[1])).testbed.gpus for n in names)
    out = tmp_path / "g.json"
    run = CliRunner().invoke(app, ["bench", "--scenarios", ",".join(names), "--schedulers",
                                   "heft,monitor", "--decision-cost", "none", "--json",
                                   str(out)])
    assert run.exit_code == 0, run.output
    data = json.loads(out.read_text())
    for s in data["scenarios"]:
        assert s["total_reference_exact"] is True and s["reference_exact"] is True
        assert s["optimal_devices"]
        for r in s["results"].values():
            assert r["total_ratio"] >= 1.0 - 1e-6
            assert r["below_reference"] == []
