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
  of the testbed's contention physics; about 30 % with 2-4 GPUs of different sizes (4-80
  GB, speeds 0.6-2.5x, some with an LLM server beside), each its own budget, and tools
  sometimes restricted to some GPUs (a ``gpus`` hint);
* a **crowded** class of half the 2.2 GB one-GPU workloads: five tools of 0.7-1.3 GB
  working memory, 16 cores, an idle-queue GPU half the time;
* **think time** 0 (steps back to back), 1, 3 or 5 s.

Every workload is small enough for the exact whole-run reference: at most four calls a step
and four models on one GPU (five calls in the crowded class); on several GPUs, where every
placement of every state is simulated (`bench.horizon_gpus`), at most 8 steps, two calls a
step and two models on 2 GPUs, two calls and one model on 3, one call and one model on 4.
The GPUs and the crowded class are drawn from random streams of their own: a workload
drawn on one GPU is the same as before they existed (the crowded ones apart). Workload
``i`` of seed ``S`` depends only on (S, i), so ``--generate 200`` holds the 50 workloads of
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
    think_ms = rng.choice(THINK_MS)
    # the draws above are those of every one-GPU workload; the GPUs and the memory-bound
    # class come from streams of their own, so they leave those workloads as they were
    gpus = random.Random(f"devsched-generate-gpus:{seed}:{index}")
    if gpus.random() < MULTI_GPU_SHARE:
        steps = _several_gpus(gpus, testbed, tools, steps)
    elif vram == MEMORY_BOUND_MB:
        crowd = random.Random(f"devsched-generate-crowd:{seed}:{index}")
        if crowd.random() < CROWDED_SHARE:
            steps = _crowded(crowd, testbed, tools, steps)
    return Scenario.model_validate({
        "name": f"gen-s{seed}-{index}",
        "category": "residency" if models else "parallel",
        "description": f"generated workload {index} of seed {seed} (bench.generate)",
        "testbed": testbed,
        "tools": tools,
        "workload": {"kind": "sequence", "batches": steps, "rounds": 1,
                     "think_ms": think_ms},
    })


MULTI_GPU_SHARE = 0.3
"""The share of workloads drawn on 2-4 GPUs."""
GPU_SIZES = (4000.0, 8000.0, 12000.0, 16000.0, 24000.0, 48000.0, 80000.0)
"""The sizes the GPUs beside GPU 0 are drawn from (each GPU of a machine another size)."""
GPU_CALLS = {2: 2, 3: 2, 4: 1}
"""The most calls a step holds per GPU count (every placement of every state is simulated
for the exact whole-run reference: `bench.horizon_gpus`)."""
GPU_MODELS = {2: 2, 3: 1, 4: 1}
"""The most models a workload keeps per GPU count (the reference's states grow with the
ways each model can sit on each GPU)."""
GPU_STEPS = 8
"""The most steps a workload on several GPUs keeps."""
MEMORY_BOUND_MB = 2200.0
CROWDED_SHARE = 0.5
"""The share of 2.2 GB workloads made crowded: five tools of 0.7-1.3 GB, 16 cores."""


def _several_gpus(rng: random.Random, testbed: dict[str, Any], tools: dict[str, Any],
                  steps: list[list[str]]) -> list[list[str]]:
    """The machine as 2-4 GPUs of different sizes: GPU 0 the one drawn (its background and
    resident models), the others drawn from `GPU_SIZES`, each with its own speed and
    sometimes an LLM server beside; some tools restricted to some GPUs (a ``gpus`` hint);
    steps cut to `GPU_CALLS` calls. Returns the steps."""
    count = rng.randint(2, 4)
    first = float(testbed.pop("vram_budget_mb"))
    background = testbed.pop("background")
    resident = testbed.pop("resident")
    sizes = rng.sample([v for v in GPU_SIZES if v != first], count - 1)
    gpus: list[dict[str, Any]] = [{"vram_mb": first, "background": background,
                                   "resident": resident["gpu"], "name": "gpu0"}]
    for k, size in enumerate(sizes, start=1):
        server = size >= 16000 and rng.random() < 0.3
        gpus.append({"vram_mb": size, "name": f"gpu{k}",
                     "speed": rng.choice((0.6, 1.0, 1.0, 1.5, 2.5)),
                     "background": {"vram_mb": rng.choice((4000.0, 6000.0)) if server else 0.0,
                                    "gpu_share": 0.2 if server else 0.0}})
    testbed["gpus"] = gpus
    for entry in tools.values():
        if rng.random() < 0.25:
            entry["hints"] = {"gpus": sorted(rng.sample(range(count), rng.randint(1,
                                                                             count - 1)))}
    models = list(dict.fromkeys(e["params"]["model"] for e in tools.values()
                                if "model" in e["params"]))
    keep = models[:GPU_MODELS[count]]
    for entry in tools.values():  # at most GPU_MODELS: the other models' tools keep none
        params = entry["params"]
        if "model" in params and params["model"] not in keep:
            for key in ("model", "weights_mb", "load_gpu_ms", "load_cpu_ms"):
                params.pop(key)
    for gpu in gpus:
        gpu["resident"] = [m for m in gpu.get("resident", ()) if m in keep]
    cap = GPU_CALLS[count]
    return [calls[:cap] for calls in steps[:GPU_STEPS]]


def _crowded(rng: random.Random, testbed: dict[str, Any], tools: dict[str, Any],
             steps: list[list[str]]) -> list[list[str]]:
    """The memory-bound class: five tools of 0.7-1.3 GB working memory (the drawn ones and
    new ones without a model), 16 cores, an idle-queue GPU half the time; the new tools join
    the steps by patterns of their own (at most five calls a step). Returns the steps."""
    testbed["cpu_cores"] = 16
    if rng.random() < 0.5:
        testbed["physics"] = "idle_queue"
    for entry in tools.values():
        entry["params"]["vram_mb"] = round(rng.uniform(700, 1300), 1)
    added = []
    for i in range(len(tools), 5):
        params: dict[str, Any] = _profile(rng)
        params.update(vram_mb=rng.uniform(700, 1300), gpu_share=rng.uniform(0.2, 1.0),
                      cpu_threads=rng.choice((1, 1, 2, 4)))
        tools[f"t{i}"] = {"params": {k: round(v, 1) if isinstance(v, float) else v
                                     for k, v in params.items()}}
        added.append(f"t{i}")
    patterns = {t: _pattern(rng, len(steps)) for t in added}
    out = []
    for k, calls in enumerate(steps):
        more = [t for t in added if patterns[t](k)]
        out.append((calls + more)[:5])
    return out


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
