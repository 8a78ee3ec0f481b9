"""The multi-GPU built-ins (their own group, `--scenarios gpus`: the one-GPU built-ins and
their figures are apart): each loads, and on the two-GPU parallel ones the choice of GPU
decides the answer (all_gpu, heft and dmda not optimal; the oracle is)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import (
    builtin_by_name,
    builtin_gpu_scenario_paths,
    builtin_scenario_paths,
    load_scenario,
)
from langgraph_devsched.cli import app


def test_the_gpu_group_holds_four_and_leaves_the_seventeen_alone() -> None:
    names = [p.stem for p in builtin_gpu_scenario_paths()]
    assert names == ["gpus_embed_beside_large_model", "gpus_fast_80gb_slow_24gb",
                     "gpus_llm_server_two_24gb", "gpus_visual_suite_4x24gb"]
    assert len(builtin_scenario_paths()) == 17
    assert [p.stem for p in builtin_by_name("gpus")] == names
    for path in builtin_gpu_scenario_paths():
        scenario = load_scenario(path)
        assert scenario.testbed.gpus is not None and len(scenario.testbed.gpus) >= 2
    suite = load_scenario(builtin_by_name("gpus_visual_suite_4x24gb")[0])
    weights = {n: e.params.weights_mb for n, e in suite.tools.items()}
    assert weights == {"image_editing": 3981, "text2image": 3385, "vqa": 1495,
                       "image_captioning": 1209, "instruct_pix2pix": 2827}


@pytest.mark.parametrize("name", ["gpus_fast_80gb_slow_24gb", "gpus_llm_server_two_24gb"])
def test_on_two_gpus_the_list_schedulers_miss_the_optimum_the_oracle_finds(name: str) -> None:
    scenario = load_scenario(builtin_by_name(name)[0])
    result = run_scenario(scenario, ["all_gpu", "heft", "dmda", "oracle"])  # its 4 rounds, seeded
    optimal = {n: r.optimal for n, r in result.results.items()}
    assert optimal == {"all_gpu": False, "heft": False, "dmda": False, "oracle": True}


def test_the_bench_shows_the_device_of_every_call_on_several_gpus(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, [
        "bench", "--scenarios", "gpus_embed_beside_large_model", "--schedulers",
        "all_gpu,oracle", "--rounds", "1", "--json", str(out), "--plots", str(tmp_path)],
        env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Device per call, last round" in result.output
    (scenario,) = json.loads(out.read_text())["scenarios"]
    calls = set(scenario["optimal_mapping"])
    # the large model on GPU 0, the embedding model beside it on GPU 1 (it must not evict it)
    assert scenario["optimal_devices"] == {"llm27b": "cuda:0", "embed#1": "cuda:1",
                                           "embed#2": "cuda:1"}
    for name in ("all_gpu", "oracle"):
        devices = scenario["results"][name]["final_devices"]
        assert set(devices) == calls and set(devices.values()) <= {"cuda:0", "cuda:1", "cpu"}
    line = next(x for x in result.output.splitlines() if "embed#1" in x)
    assert "queued@1" in line and "now@1" in line  # the reference's cell, all_gpu's
    assert (tmp_path / "devices.png").stat().st_size > 0


def test_one_gpu_runs_name_no_device() -> None:
    scenario = load_scenario(builtin_by_name("serial_voice_assistant")[0])
    result = run_scenario(scenario, ["all_gpu"], rounds=1)
    assert result.optimal_devices == {} and result.results["all_gpu"].final_devices == {}
