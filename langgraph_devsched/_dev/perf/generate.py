"""Random but reproducible tools and scenarios, for the performance suite and quality checks.

Tools are drawn from four kinds, as a profiler classifies them: GPU-preferred (heavy compute),
CPU-preferred (transfer dominated), device-neutral and ambiguous; VRAM, GPU share and CPU
threads vary, and a scenario may carry a background load (an LLM server). Every draw comes
from ``random.Random(seed)``: the same seed gives the same scenario.

>>> s = generate_scenario(3, calls=9)
>>> len(s.batches()[0]), s.category, s == generate_scenario(3, calls=9)
(9, 'parallel', True)
"""

from __future__ import annotations

import random

from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.testbed import ToolParams

KINDS = ("gpu_preferred", "cpu_preferred", "neutral", "ambiguous")


def generate_tool(rng: random.Random) -> ToolParams:
    """One tool's hidden parameters, of a random kind."""
    kind = rng.choice(KINDS)
    gpu = rng.uniform(5, 120)
    if kind == "gpu_preferred":
        cpu, transfer = gpu * rng.uniform(4, 15), rng.uniform(0, 10)
    elif kind == "cpu_preferred":
        cpu, transfer = rng.uniform(10, 80), rng.uniform(20, 80)
        gpu = rng.uniform(1, 10)
    elif kind == "neutral":
        cpu, transfer = gpu * rng.uniform(0.9, 1.2), rng.uniform(0, 5)
    else:
        cpu, transfer = gpu * rng.uniform(1.5, 3), rng.uniform(0, 20)
    return ToolParams(
        cpu_ms=round(cpu, 1), gpu_ms=round(gpu, 1), transfer_ms=round(transfer, 1),
        vram_mb=round(rng.uniform(100, 4000)), gpu_share=round(rng.uniform(0.2, 1.0), 2),
        cpu_threads=rng.choice((1, 1, 2, 4)),
    )


def generate_tools(count: int, seed: int = 0) -> dict[str, ToolParams]:
    """``count`` tools named ``t0`` ... (the same seed gives the same tools)."""
    rng = random.Random(seed)
    return {f"t{i}": generate_tool(rng) for i in range(count)}


def generate_scenario(
    seed: int, *, calls: int = 10, tools: int | None = None, rounds: int = 20,
    noise: float = 0.05,
) -> Scenario:
    """A parallel scenario of one batch of ``calls`` calls over ``tools`` distinct tools
    (default: about two thirds of the calls), on a machine with 8-24 GB of VRAM and 4-16
    cores, sometimes beside a background load."""
    rng = random.Random(seed)
    distinct = tools or max(1, round(calls * rng.uniform(0.5, 0.9)))
    params = {f"t{i}": generate_tool(rng) for i in range(distinct)}
    names = list(params)
    batch = names + [rng.choice(names) for _ in range(calls - len(names))]
    batch = batch[:calls]
    rng.shuffle(batch)
    budget = rng.choice((8000, 12000, 16000, 24000))
    background = {}
    if rng.random() < 0.3:
        background = {"vram_mb": round(budget * rng.uniform(0.2, 0.5)),
                      "gpu_share": round(rng.uniform(0.2, 0.7), 2)}
    return Scenario.model_validate({
        "name": f"generated_{seed}",
        "category": "parallel",
        "description": f"generated: {calls} parallel calls over {distinct} tools",
        "testbed": {"vram_budget_mb": budget, "cpu_cores": rng.choice((4, 8, 16)),
                    "background": background, "noise": noise, "seed": seed},
        "tools": {n: {"params": p.model_dump()} for n, p in params.items()},
        "workload": {"kind": "parallel", "calls": batch, "rounds": rounds},
    })
