"""What the brute-force tests of the bench's references walk between two steps, written
independently of `bench.horizon` and `bench.horizon_gpus`."""

from __future__ import annotations

from typing import Any

from langgraph_devsched.testbed import SimulatedTestbed


def idle_states(bed: SimulatedTestbed, think_ms: float) -> list[Any]:
    """The state now and every state one load between two steps can leave: a model into
    host memory, or onto any GPU evicting least recently used models or one chosen first."""
    state = bed.residency()
    out = [state]
    if think_ms <= 0:
        return out
    for side in ("gpu", "cpu"):
        for model, ms in bed.model_loads(side).items():
            if ms > think_ms:
                continue
            for gpu in range(bed.gpu_count) if side == "gpu" else [0]:
                weights = state.gpu if gpu == 0 else state.others[gpu - 1]
                for evict in [(), *((m,) for m, _ in weights)] if side == "gpu" else [()]:
                    after = bed.with_loaded(state, model, gpu, evict, side=side)
                    if after is not None and after not in out:
                        out.append(after)
    return out


def beside_states(bed: SimulatedTestbed, on_gpus: dict[int, list[str]], span: float,
                  think_ms: float) -> list[tuple[Any, float]]:
    """Every state one load started beside the step that just ran (its makespan ``span``)
    can leave, with what it delays the next step by (its time past the step and the think
    time): on a GPU the step used (a key of ``on_gpus``), into room beside the working
    memory of the calls it names there only; on an idle GPU evicting least recently used
    models or one chosen first."""
    state = bed.residency()
    out = []
    for gpu in range(bed.gpu_count):
        busy = gpu in on_gpus
        weights = state.gpu if gpu == 0 else state.others[gpu - 1]
        for model, ms in bed.model_loads("gpu").items():
            for evict in [()] if busy else [(), *((m,) for m, _ in weights)]:
                after = bed.beside(state, model, gpu, evict, on_gpus.get(gpu, []), busy)
                if after is not None:
                    out.append((after, max(0.0, ms - span - think_ms)))
    return out
