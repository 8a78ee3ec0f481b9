"""The batched exact simulator and the brute-force oracle against plain simulation."""

from __future__ import annotations

import itertools
import random

import pytest

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.schedulers.classic.oracle import TIE_ORDER, OracleScheduler
from langgraph_devsched.testbed import BackgroundLoad, SimulatedTestbed, ToolParams

np = pytest.importorskip("numpy")


def random_bed(rng: random.Random, n_tools: int) -> SimulatedTestbed:
    tools = {
        f"t{i}": ToolParams(
            cpu_ms=rng.choice([9, 50, 120.5, 300, 800, 1500]),
            gpu_ms=rng.choice([0, 5, 20, 60, 150.3]),
            transfer_ms=rng.choice([0, 0, 3, 40, 120]),
            vram_mb=rng.choice([0, 200, 900, 2500, 6000]),
            gpu_share=rng.choice([0.1, 0.3, 0.35, 0.6, 0.7, 1.0]),
            cpu_threads=rng.choice([1, 1, 2, 4]),
        )
        for i in range(n_tools)
    }
    background = BackgroundLoad(
        vram_mb=rng.choice([0, 1000, 3000]),
        gpu_share=rng.choice([0, 0.2, 0.5]),
        cpu_threads=rng.choice([0, 1]),
    )
    return SimulatedTestbed(
        tools,
        vram_budget_mb=rng.choice([4000, 8000, 12000]),
        cpu_cores=rng.choice([1, 2, 4, 8]),
        background=background,
        oom_detect_ms=rng.choice([0, 20]),
    )


def exhaustive(bed: SimulatedTestbed, tools: list[str]) -> list[float]:
    return [
        bed.makespan([(f"c{i}", t, o) for i, (t, o) in enumerate(zip(tools, m, strict=True))])
        for m in itertools.product(DEVICE_OPTIONS, repeat=len(tools))
    ]


def test_batched_makespans_are_bit_identical_to_simulate() -> None:
    rng = random.Random(7)
    compared = 0
    for _ in range(40):
        n = rng.randint(1, 5)
        bed = random_bed(rng, n)
        tools = [rng.choice(bed.tool_names) for _ in range(n)]
        fast = bed.product_makespans(tools, [DEVICE_OPTIONS] * n)
        slow = exhaustive(bed, tools)
        assert [float(x) for x in fast] == slow
        compared += len(slow)
    assert compared > 1000


def test_batched_makespans_match_on_random_mappings_of_eight_calls() -> None:
    rng = random.Random(3)
    bed = random_bed(rng, 8)
    tools = list(bed.tool_names)
    all_spans = bed.product_makespans(tools, [DEVICE_OPTIONS] * 8)
    mappings = list(itertools.product(DEVICE_OPTIONS, repeat=8))
    for k in rng.sample(range(len(mappings)), 300):
        calls = [(f"c{i}", t, o) for i, (t, o) in enumerate(zip(tools, mappings[k], strict=True))]
        assert float(all_spans[k]) == bed.makespan(calls)


def test_pruning_keeps_the_minimum_and_every_tie_exact() -> None:
    rng = random.Random(11)
    for _ in range(60):
        n = rng.randint(2, 6)
        bed = random_bed(rng, n)
        tools = [rng.choice(bed.tool_names) for _ in range(n)]
        full = bed.product_makespans(tools, [DEVICE_OPTIONS] * n)
        pruned = bed.product_makespans(tools, [DEVICE_OPTIONS] * n, prune=True)
        best = full.min()
        assert pruned.min() == best
        assert list(np.flatnonzero(pruned == best)) == list(np.flatnonzero(full == best))
        kept = np.isfinite(pruned)
        assert (pruned[kept] == full[kept]).all()


def test_oracle_matches_plain_exhaustive_search() -> None:
    rng = random.Random(5)
    for _ in range(40):
        n = rng.randint(1, 5)
        bed = random_bed(rng, n)
        tools = [rng.choice(bed.tool_names) for _ in range(n)]
        batch = Batch.of([(f"c{i}", t, ToolDeviceSpec()) for i, t in enumerate(tools)])
        decision = OracleScheduler(testbed=bed).decide(batch, SchedulerView(bed.device_state()))
        spans = exhaustive(bed, tools)
        chosen = bed.makespan(
            [(cid, t, decision.mapping[cid]) for cid, t in zip(batch.call_ids, tools, strict=True)]
        )
        assert chosen == min(spans)
        # deterministic tie-break: cpu < gpu_queued < gpu_now, first call first
        tied = [
            m for m, s in zip(itertools.product(DEVICE_OPTIONS, repeat=n), spans, strict=True)
            if s == min(spans)
        ]
        first = min(tied, key=lambda m: tuple(TIE_ORDER.index(o) for o in m))
        assert decision.options_for(batch) == first


def test_oracle_respects_hints_and_refuses_huge_batches() -> None:
    bed = SimulatedTestbed(
        {"fft": ToolParams(cpu_ms=500, gpu_ms=1), "bm25": ToolParams(cpu_ms=5, gpu_ms=1)},
        vram_budget_mb=8000,
    )
    batch = Batch.of([
        ("a", "fft", ToolDeviceSpec(pinned="gpu_queued")),
        ("b", "bm25", ToolDeviceSpec(gpu_capable=False)),
    ])
    decision = OracleScheduler(testbed=bed).decide(batch, SchedulerView(bed.device_state()))
    assert dict(decision.mapping) == {"a": "gpu_queued", "b": "cpu"}
    big = Batch.of([(f"c{i}", "fft", ToolDeviceSpec()) for i in range(15)])
    with pytest.raises(ValueError, match="over its limit of 14"):
        OracleScheduler(testbed=bed).decide(big, SchedulerView(bed.device_state()))


def test_oracle_ten_tool_optimum_is_not_beaten_by_sampled_mappings() -> None:
    bed, tools = ten_tool_bed()
    batch = Batch.of([(t, t, ToolDeviceSpec()) for t in tools])
    decision = OracleScheduler(testbed=bed).decide(batch, SchedulerView(bed.device_state()))
    best = bed.makespan([(t, t, decision.mapping[t]) for t in tools])
    assert decision.predicted_ms["makespan"] == best
    rng = random.Random(1)
    for _ in range(400):
        mapping = [rng.choice(DEVICE_OPTIONS) for _ in tools]
        assert bed.makespan(list(zip(tools, tools, mapping, strict=True))) >= best


def ten_tool_bed() -> tuple[SimulatedTestbed, list[str]]:
    """Ten realistic tools on a 16 GB GPU next to an LLM server (the speed benchmark case)."""
    p = ToolParams
    tools = {
        "whisper_asr": p(cpu_ms=2100, gpu_ms=95, transfer_ms=6, vram_mb=2400, gpu_share=0.75,
                         cpu_threads=4),
        "captioner": p(cpu_ms=2600, gpu_ms=110, transfer_ms=5, vram_mb=3000, gpu_share=0.85,
                       cpu_threads=4),
        "ocr": p(cpu_ms=640, gpu_ms=45, transfer_ms=9, vram_mb=1200, gpu_share=0.6, cpu_threads=2),
        "detector": p(cpu_ms=260, gpu_ms=28, transfer_ms=14, vram_mb=700, gpu_share=0.55,
                      cpu_threads=2),
        "embedder": p(cpu_ms=120, gpu_ms=14, transfer_ms=4, vram_mb=450, gpu_share=0.3),
        "tts": p(cpu_ms=950, gpu_ms=70, transfer_ms=3, vram_mb=1500, gpu_share=0.6, cpu_threads=2),
        "reranker": p(cpu_ms=420, gpu_ms=32, transfer_ms=3, vram_mb=900, gpu_share=0.6,
                      cpu_threads=2),
        "vad": p(cpu_ms=9, gpu_ms=2, transfer_ms=12, vram_mb=200, gpu_share=0.1),
        "fft": p(cpu_ms=28, gpu_ms=3, transfer_ms=45, vram_mb=300, gpu_share=0.2, cpu_threads=2),
        "vector_search": p(cpu_ms=38, gpu_ms=6, transfer_ms=55, vram_mb=900, gpu_share=0.3,
                           cpu_threads=2),
    }
    bed = SimulatedTestbed(
        tools, vram_budget_mb=16000, cpu_cores=8,
        background=BackgroundLoad(vram_mb=8000, gpu_share=0.3, cpu_threads=1),
    )
    return bed, list(tools)
