"""Scenario files: the format, its error messages, and the 17 built-ins' properties.

The built-ins' properties are checked from the oracle's own results (through the runner),
never from labels written by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from langgraph_devsched.bench.runner import BenchResult, run_benchmark
from langgraph_devsched.bench.scenario import (
    Scenario,
    ScenarioError,
    builtin_scenario_paths,
    load_scenario,
    load_scenarios,
)
from langgraph_devsched.hints import SoloProfile

pytest.importorskip("numpy")

GOOD = """\
name: tiny
category: parallel
testbed: {vram_budget_mb: 8000, cpu_cores: 4}
tools:
  asr:
    params: {cpu_ms: 900, gpu_ms: 60, transfer_ms: 5, vram_mb: 1500, gpu_share: 0.7}
  bm25:
    params: {cpu_ms: 20, gpu_ms: 20}
    hints: {gpu_capable: false}
workload: {kind: parallel, calls: [asr, bm25]}
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_loads_with_a_derived_profile(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, GOOD))
    specs = s.specs()
    assert specs["asr"].profile == SoloProfile(cpu_ms=900, gpu_ms=65, transfer_ms=5)
    assert specs["asr"].vram_mb == 1500
    assert specs["bm25"].allowed_options() == ("cpu",)
    assert s.batches() == [["asr", "bm25"]]
    assert s.workload.rounds == 20
    bed = s.make_testbed(noise=0.0)
    assert bed.makespan([("a", "asr", "gpu_now")]) == 65.0


def test_declared_profile_is_kept_not_derived(tmp_path: Path) -> None:
    text = GOOD.replace(
        "hints: {gpu_capable: false}",
        "hints: {gpu_capable: false, profile: {cpu_ms: 33}}",
    )
    assert load_scenario(write(tmp_path, text)).specs()["bm25"].profile == SoloProfile(cpu_ms=33)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("category: parallel", "category: gpu",
         ["category", "expected one of 'serial', 'parallel', 'memory' or 'residency'", "'gpu'"]),
        ("testbed: {vram_budget_mb: 8000, cpu_cores: 4}", "testbed: {cpu_cores: 4}",
         ["testbed", "give vram_budget_mb (one GPU) or gpus", "exactly one of them"]),
        ("cpu_cores: 4", "cpu_cores: four",
         ["testbed.cpu_cores", "valid integer", "'four'"]),
        ("cpu_cores: 4", "cores: 4",
         ["testbed.cores", "unknown field", "valid fields here: vram_budget_mb, cpu_cores"]),
        ("vram_mb: 1500, gpu_share: 0.7", "vram_mb: -1, gpu_share: 0.7",
         ["tools.asr.params.vram_mb", "greater than or equal to 0"]),
        ("gpu_share: 0.7}", "gpu_share: 0.7, vram: 3}",
         ["tools.asr.params.vram", "unknown field", "cpu_ms, gpu_ms, transfer_ms"]),
        ("calls: [asr, bm25]", "calls: [asr, ocr]",
         ["workload.calls", "unknown tool 'ocr'", "known tools: asr, bm25"]),
        ("kind: parallel", "kind: batch",
         ["workload.kind", "expected one of 'serial', 'parallel' or 'sequence'"]),
        ("kind: parallel, calls: [asr, bm25]", "kind: sequence, calls: [asr, bm25]",
         ["kind 'sequence' needs 'batches'"]),
        ("hints: {gpu_capable: false}", "hints: {pinned: gpu_later}",
         ["tools.bm25.hints", "pinned", "valid options: gpu_now, gpu_queued, cpu"]),
        ("calls: [asr, bm25]", "calls: [asr, asr, asr, asr, asr, asr, asr, asr, asr, asr, asr]",
         ["workload.calls", "batch of 11 calls is too large", "at most 10"]),
    ],
)
def test_malformed_files_name_file_field_and_expectation(
    tmp_path: Path, old: str, new: str, expected: list[str]
) -> None:
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert str(path) in message
    for part in expected:
        assert part in message, message


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(write(tmp_path, "name: [unclosed"))
    with pytest.raises(ScenarioError, match="expected a mapping with fields name, category"):
        load_scenario(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_folders_and_duplicate_names(tmp_path: Path) -> None:
    write(tmp_path, GOOD, "a.yaml")
    assert [s.name for s in load_scenarios(tmp_path)] == ["tiny"]
    write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(ScenarioError, match="repeated: tiny"):
        load_scenarios(tmp_path)
    assert [s.name for s in load_scenarios(tmp_path / "a.yaml")] == ["tiny"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ScenarioError, match=r"no \*\.yaml files"):
        load_scenarios(empty)
    with pytest.raises(ScenarioError, match="no such file or folder"):
        load_scenarios(tmp_path / "nowhere")


# -- the built-ins -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builtins() -> list[Scenario]:
    return load_scenarios()


@pytest.fixture(scope="module")
def bench(builtins: list[Scenario]) -> BenchResult:
    return run_benchmark(builtins, ["all_gpu", "heft", "oracle"], rounds=2)


def test_seventeen_builtins_by_category(builtins: list[Scenario]) -> None:
    assert len(builtin_scenario_paths()) == 17
    cats = [s.category for s in builtins]
    assert cats.count("serial") >= 3
    assert cats.count("parallel") >= 5
    assert cats.count("memory") >= 4
    assert cats.count("residency") >= 4
    assert [s.has_resident_models() for s in builtins] == [c == "residency" for c in cats]
    assert all(len(b) <= 8 for s in builtins for b in s.batches())


def test_oracle_is_optimal_on_all_builtins(bench: BenchResult) -> None:
    """Without resident models the per-batch optimum is the reference. With them the
    reference counts what a step leaves for the next ones (`bench.horizon`), which the
    oracle, optimising each step alone, does not: it may pay more, never less."""
    plain = [s for s in bench.scenarios if not s.resident_models]
    assert len(plain) == 13
    assert all(s.results["oracle"].optimal for s in plain)
    assert all(s.results["oracle"].regret_ms == 0 for s in plain)
    assert all(not s.below_reference() for s in bench.scenarios)


def test_optimum_beats_all_gpu_in_at_least_eight(bench: BenchResult) -> None:
    differs = [
        s.name for s in bench.scenarios
        if s.results["all_gpu"].final_makespan_ms > 1.01 * s.optimal_makespan_ms
    ]
    assert len(differs) >= 8, differs


def test_heft_static_choice_is_not_optimal_in_at_least_four(bench: BenchResult) -> None:
    wrong = [s.name for s in bench.scenarios if not s.results["heft"].optimal]
    assert len(wrong) >= 4, wrong


def test_a_transfer_dominated_tool_is_cpu_preferred(builtins: list[Scenario]) -> None:
    found = []
    for s in builtins:
        bed = s.make_testbed(noise=0.0)
        for name in {t for b in s.batches() for t in b}:
            p = s.tools[name].params
            gpu = bed.makespan([("c", name, "gpu_now")])
            cpu = bed.makespan([("c", name, "cpu")])
            if p.transfer_ms > p.gpu_ms and cpu < 0.9 * gpu:
                found.append(name)
    assert found


def test_a_device_neutral_tool_exists(builtins: list[Scenario]) -> None:
    neutral = []
    for s in builtins:
        bed = s.make_testbed(noise=0.0)
        for name in {t for b in s.batches() for t in b}:
            if not s.specs()[name].gpu_capable:
                continue
            gpu = bed.makespan([("c", name, "gpu_now")])
            cpu = bed.makespan([("c", name, "cpu")])
            if abs(gpu - cpu) <= 2 * 0.05 * max(gpu, cpu):  # within twice the noise
                neutral.append(name)
    assert neutral


def test_a_background_load_holds_vram_and_gpu(builtins: list[Scenario]) -> None:
    loaded = [
        s.name for s in builtins
        if s.testbed.background.vram_mb > 0 and s.testbed.background.gpu_share > 0
    ]
    assert loaded


def test_builtin_parameters_are_plausible(builtins: list[Scenario]) -> None:
    for s in builtins:
        for name, entry in s.tools.items():
            p = entry.params
            if not s.specs()[name].gpu_capable:
                continue
            assert 1 <= p.gpu_ms <= 1000, (s.name, name)
            assert 5 <= p.cpu_ms <= 30000, (s.name, name)
            assert 200 <= p.vram_mb <= 10000, (s.name, name)


def test_the_documented_example_loads(tmp_path: Path) -> None:
    doc = Path(__file__).parent.parent / "docs" / "scenarios.md"
    if not doc.exists():
        pytest.skip("docs/scenarios.md is not part of this checkout")
    example = doc.read_text(encoding="utf-8").split("```yaml\n", 1)[1].split("```", 1)[0]
    s = load_scenario(write(tmp_path, example))
    assert s.name == "rag_next_to_llm"
    assert s.specs()["reranker"].preferred == "gpu_queued"
    assert s.specs()["embedder"].profile == SoloProfile(cpu_ms=120, gpu_ms=18, transfer_ms=4)
