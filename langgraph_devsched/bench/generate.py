"""Generated agent workloads: seeded random scenarios, to judge a policy on a distribution
instead of the hand-written cases it was tuned on (``devsched bench --generate N --seed S``).

Each workload is one agent run of 6-14 steps (a ``sequence`` of batches, one round), with
the think time of an LLM turn between steps. Its parts are drawn from what agent tools are:

* **tools** (2-4) of the profile classes of the PyTorch suite (docs/profiling.md):
  GPU-preferred, CPU-preferred (transfer-dominated), device-neutral and ambiguous; most
  keep model **weights** resident (0.4-8 GB, GPU loads of 0.2-3.5 s), some share a model,
  some start resident;
* a **pattern** per tool: called every step, every k-th step, only from some step on, or
  only until some step (then never again: a model the agent stopped using);
* **steps** of one to four calls (parallel calls of one message, or a single call);
* **machines** with one GPU of 2.2-48 GB (the small ones memory-bound: a step's calls do not
  all fit at once; some large ones hold an LLM server as background), 4-16 cores, and each
  of the testbed's contention physics;
* **think time** 0 (steps back to back), 1, 3 or 5 s.

Every workload is small enough for the exact whole-run reference (at most four calls a step
and four models). Several GPUs are not drawn yet: the whole-run search models one GPU, and
on several the per-step reference is no bound once models stay resident. Workload ``i`` of
seed ``S`` depends only on (S, i), so ``--generate 200`` holds the 50 workloads of
``--generate 50`` first, and any miss replays by its name: ``gen-s{S}-{i}`` is
`generated_scenario(S, i)`.

>>> a = generate_scenarios(3, seed=1)
>>> [s.name for s in a], a[2] == generated_scenario(1, 2)
(['gen-s1-0', 'gen-s1-1', 'gen-s1-2'], True)
"""

from __future__ import annotations

import random
import re
from typing import Any

from langgraph_devsched.batchsim import PHYSICS
from langgraph_devsched.bench.scenario import Scenario

THINK_MS = (0.0, 1000.0, 3000.0, 3000.0, 5000.0)
"""Think times drawn (3 s, the bench's default, twice as often)."""
_NAME = re.compile(r"^gen-s(-?\d+)-(\d+)$")


def generate_scenarios(n: int, *, seed: int = 0) -> list[Scenario]:
    """``n`` generated workloads of seed ``seed`` (see the module)."""
    if n < 1:
        raise ValueError(f"--generate takes a count >= 1, got {n}")
    return [generated_scenario(seed, i) for i in range(n)]


def parse_generated_name(name: str) -> tuple[int, int] | None:
    """``(seed, index)`` of a generated workload's name, or None."""
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def generated_scenario(seed: int, index: int) -> Scenario:
    """Workload ``index`` of seed ``seed``."""
    rng = random.Random(f"devsched-generate:{seed}:{index}")
    vram = float(rng.choice((2200, 4000, 8000, 12000, 16000, 24000, 24000, 48000)))
    server = rng.random() < 0.3 and vram >= 16000
    background = {"vram_mb": float(rng.choice((4000, 6000))) if server else 0.0,
                  "gpu_share": 0.2 if server else 0.0}
    tools, models = _tools(rng, vram - background["vram_mb"])
    steps = _steps(rng, list(tools))
    testbed: dict[str, Any] = {
        "vram_budget_mb": vram,
        "background": background,
        "cpu_cores": rng.choice((4, 8, 8, 16)),
        "physics": rng.choice(PHYSICS),
        "seed": index,
        "resident": {"gpu": _resident(rng, models, vram - background["vram_mb"])},
    }
    return Scenario.model_validate({
        "name": f"gen-s{seed}-{index}",
        "category": "residency" if models else "parallel",
        "description": f"generated workload {index} of seed {seed} (bench.generate)",
        "testbed": testbed,
        "tools": tools,
        "workload": {"kind": "sequence", "batches": steps, "rounds": 1,
                     "think_ms": rng.choice(THINK_MS)},
    })


def _profile(rng: random.Random) -> dict[str, float]:
    """Solo latencies of one of the four profile classes."""
    kind = rng.choice(("gpu", "gpu", "cpu", "neutral", "ambiguous"))
    if kind == "gpu":
        cpu = rng.uniform(80, 3000)
        return {"cpu_ms": cpu, "gpu_ms": cpu / rng.uniform(5, 30),
                "transfer_ms": rng.uniform(2, 20)}
    if kind == "cpu":  # transfer-dominated
        return {"cpu_ms": rng.uniform(15, 120), "gpu_ms": rng.uniform(1, 8),
                "transfer_ms": rng.uniform(40, 160)}
    cpu = rng.uniform(40, 600)
    spread = (0.7, 1.4) if kind == "neutral" else (0.9, 1.1)
    transfer = rng.uniform(2, 0.3 * cpu)
    return {"cpu_ms": cpu, "gpu_ms": max(1.0, cpu * rng.uniform(*spread) - transfer),
            "transfer_ms": transfer}


def _tools(rng: random.Random, room_mb: float) -> tuple[dict[str, Any], dict[str, float]]:
    tools: dict[str, Any] = {}
    models: dict[str, dict[str, float]] = {}
    for i in range(rng.randint(2, 4)):
        params: dict[str, Any] = _profile(rng)
        params.update(vram_mb=rng.uniform(100, 1500), gpu_share=rng.uniform(0.2, 1.0),
                      cpu_threads=rng.choice((1, 1, 2, 4)))
        if rng.random() < 0.75:
            if models and rng.random() < 0.2:  # shares a model another tool loads
                name = rng.choice(list(models))
            else:
                name = f"m{i}"
                weights = min(rng.uniform(400, 8000), 0.6 * room_mb - params["vram_mb"])
                models[name] = {"weights_mb": max(200.0, weights),
                                "load_gpu_ms": rng.uniform(200, 3500),
                                "load_cpu_ms": rng.uniform(100, 1500)}
            params.update(model=name, **models[name])
        tools[f"t{i}"] = {"params": {k: round(v, 1) if isinstance(v, float) else v
                                     for k, v in params.items()}}
    return tools, {m: round(p["weights_mb"], 1) for m, p in models.items()}


def _steps(rng: random.Random, tools: list[str]) -> list[list[str]]:
    count = rng.randint(6, 14)
    patterns = {t: _pattern(rng, count) for t in tools}
    steps = []
    for k in range(count):
        calls = [t for t in tools if patterns[t](k) for _ in range(rng.choice((1, 1, 2)))]
        rng.shuffle(calls)
        steps.append(calls[:4] or [rng.choice(tools)])
    return steps


def _pattern(rng: random.Random, steps: int) -> Any:
    kind = rng.choice(("every", "every", "every_k", "from", "until"))
    if kind == "every_k":
        k, phase = rng.randint(2, 3), rng.randint(0, 2)
        return lambda i: (i + phase) % k == 0
    cut = rng.randint(1, steps - 1)
    if kind == "from":
        return lambda i: i >= cut
    if kind == "until":
        return lambda i: i < cut
    return lambda i: True


def _resident(rng: random.Random, models: dict[str, float], room_mb: float) -> list[str]:
    """Some models start resident on GPU 0 (a stale one is worth evicting later)."""
    out, held = [], 0.0
    for model, mb in models.items():
        if rng.random() < 0.25 and held + mb <= 0.8 * room_mb:
            out.append(model)
            held += mb
    return out
