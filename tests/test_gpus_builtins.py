"""The multi-GPU built-ins (their own group, `--scenarios gpus`: the one-GPU built-ins and
their figures are apart): each loads, and on the two-GPU parallel ones the choice of GPU
decides the answer (all_gpu, heft and dmda not optimal; the oracle is)."""

from __future__ import annotations

import pytest

from langgraph_devsched.bench.runner import run_scenario
from langgraph_devsched.bench.scenario import (
    builtin_by_name,
    builtin_gpu_scenario_paths,
    builtin_scenario_paths,
    load_scenario,
)


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
