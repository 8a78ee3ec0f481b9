"""The monitor policy's contention fit on a machine with several GPUs.

The one-GPU fit (`monitor_model.fit_contention`) replays executed placements on one GPU; on
several it would read two calls that ran on different GPUs as sharing one. Here each
executed placement is replayed where it ran: the policy remembers the GPUs it gave each
placement (`PlacedGpus`, bounded), and `fit_gpu_shares` sets each GPU tool's share, one tool
at a time over `GRID`, to the value whose replay in the twin of every GPU
(`gpu_placement.gpus_twin`) comes closest to the observed run times (relative squared
error, weighted by the runs, as the one-GPU fit; of equal losses the value nearest the
current one). Only a tool that ran beside another call on the same GPU is fitted; the others
keep their declared share.

>>> from langgraph_devsched.testbed import GpuSpec, SimulatedTestbed, ToolParams
>>> truth = {"a": ToolParams(cpu_ms=900, gpu_ms=100, gpu_share=0.5),
...          "b": ToolParams(cpu_ms=900, gpu_ms=100, gpu_share=0.5)}
>>> bed = SimulatedTestbed(truth, gpus=[GpuSpec(vram_mb=8000), GpuSpec(vram_mb=8000)])
>>> calls = [("c0", "a", "gpu_now"), ("c1", "b", "gpu_now")]
>>> seen = [c.run_ms for c in bed.simulate(calls, noisy=False, gpus={"c0": 0, "c1": 0}).calls]
>>> guess = {t: p.model_copy(update={"gpu_share": 1.0}) for t, p in truth.items()}
>>> fit = fit_gpu_shares(guess, bed.device_state(), [Replay(calls, {"c0": 0, "c1": 0}, seen, 1)],
...                      oom_ms=20.0)
>>> fit, sum(fit.values()) <= 1.0  # they did not slow each other: together at most the GPU
({'a': 0.2, 'b': 0.8}, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from langgraph_devsched.options import DeviceOption, is_gpu
from langgraph_devsched.schedulers.gpu_placement import gpus_twin
from langgraph_devsched.schedulers.monitor_model import ContentionModel
from langgraph_devsched.schedulers.tables import LruTable
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import ToolParams

GRID: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""The shares tried per tool (the one-GPU fit's grid, coarser: each value is a replay)."""
MAX_REPLAYS = 4
"""The executed placements replayed per fit (the most run first)."""

Key = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Replay:
    """One executed placement: its calls (id, tool, option), their GPUs, the observed run
    time of each call and how much it weighs (its runs, at most 5)."""

    calls: Sequence[tuple[str, str, DeviceOption]]
    gpus: Mapping[str, int]
    seen_ms: Sequence[float]
    weight: float


class PlacedGpus:
    """The GPUs the policy gave each placement it decided, by the placement's sorted (tool,
    option) pairs, in that order (as the monitor orders an outcome's calls); bounded."""

    def __init__(self, max_entries: int) -> None:
        self._table: LruTable[tuple[tuple[str, ...], Key], tuple[int | None, ...]] = LruTable(
            max_entries)

    def __len__(self) -> int:
        return len(self._table)

    def note(self, tools: Sequence[str], options: Sequence[DeviceOption],
             gpus: Sequence[int | None]) -> None:
        rows = sorted(zip(tools, options, gpus, strict=True), key=lambda r: (r[0], r[1]))
        key = tuple((str(t), str(o)) for t, o, _ in rows)
        self._table[(tuple(sorted(tools)), key)] = tuple(g for _, _, g in rows)

    def get(self, tools: Sequence[str], placement: Key) -> tuple[int | None, ...] | None:
        return self._table.get((tuple(sorted(tools)), placement))


def fit_gpu_shares(
    params: Mapping[str, ToolParams], device: DeviceState, replays: Sequence[Replay], *,
    oom_ms: float, model: ContentionModel | None = None,
) -> dict[str, float]:
    """The share of each GPU tool that shared a GPU in ``replays`` (see the module
    docstring), one pass over the tools in name order."""
    shared = sorted({t for r in replays for cid, t, o in r.calls
                     if is_gpu(o) and _beside(r, cid)})
    current = {t: p for t, p in params.items()}
    fitted: dict[str, float] = {}
    if not shared:
        return fitted
    for tool in shared:
        best: tuple[float, float] | None = None
        here = current[tool].gpu_share  # of equal losses, the value nearest the declared one
        for value in sorted(GRID, key=lambda v: (abs(v - here), -v)):
            trial = {**current, tool: current[tool].model_copy(update={"gpu_share": value})}
            loss = _loss(trial, device, replays, oom_ms, model)
            if best is None or loss < best[0] - 1e-12:
                best = (loss, value)
        assert best is not None
        fitted[tool] = best[1]
        current[tool] = current[tool].model_copy(update={"gpu_share": best[1]})
    return fitted


def _beside(replay: Replay, call_id: str) -> bool:
    """Whether another GPU call of ``replay`` ran on the same GPU as ``call_id``."""
    gpu = replay.gpus.get(call_id, 0)
    return any(cid != call_id and is_gpu(o) and replay.gpus.get(cid, 0) == gpu
               for cid, _, o in replay.calls)


def _loss(params: Mapping[str, ToolParams], device: DeviceState, replays: Sequence[Replay],
          oom_ms: float, model: ContentionModel | None) -> float:
    bed = gpus_twin(params, device, oom_ms=oom_ms, model=model, residency=False)
    total = 0.0
    for r in replays:
        record = bed.simulate(list(r.calls), noisy=False, gpus=dict(r.gpus))
        for call, seen in zip(record.calls, r.seen_ms, strict=True):
            if seen > 0:
                total += r.weight * (call.run_ms / seen - 1.0) ** 2
    return total
