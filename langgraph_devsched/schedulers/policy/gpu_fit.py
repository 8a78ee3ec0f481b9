"""The monitor policy's contention fit on a machine with several GPUs.

The one-GPU fit (`contention_fit.fit_contention`) replays executed placements on one GPU; on
several it would read two calls that ran on different GPUs as sharing one. Here each
executed placement is replayed where it ran: the policy keeps the runs of each placement
with its GPUs (`PlacedRuns`, bounded), and `fit_gpu_shares` sets each GPU tool's share, one
tool at a time over `GRID`, to the value whose replay in the twin of every GPU
(`gpu_placement.gpus_twin`) comes closest to the observed run times (relative squared
error, weighted by the runs, as the one-GPU fit; of equal losses the value nearest the
current one: the declared share, then the last fit's), at most `MAX_SIMS` replays a fit.
Only a tool that ran beside another call on the same GPU is fitted; the others keep their
declared share.

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from langgraph_devsched.gpus import gpu_index
from langgraph_devsched.options import DeviceOption, is_gpu
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.schedulers.policy.gpu_placement import Spot, gpus_twin
from langgraph_devsched.schedulers.policy.model import ContentionModel
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import ToolParams

GRID: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""The shares tried per tool (the one-GPU fit's grid, coarser: each value is a replay)."""
MAX_REPLAYS = 4
"""The executed placements kept (and replayed) per shape."""
MAX_SIMS = 72
"""Replays simulated per fit at most (one tool over `GRID` with `MAX_REPLAYS` placements
takes 36); a refit goes on with the tools the last one left."""

Spots = tuple[tuple[str, DeviceOption, int | None], ...]


@dataclass(frozen=True)
class Replay:
    """One executed placement: its calls (id, tool, option), their GPUs, the observed run
    time of each call and how much it weighs (its runs, at most 5)."""

    calls: Sequence[tuple[str, str, DeviceOption]]
    gpus: Mapping[str, int]
    seen_ms: Sequence[float]
    weight: float


class PlacedRuns:
    """Per shape, the placements that ran on the GPUs (each call's tool, option and GPU),
    each call's mean run time there without its model's load (what `Replay` needs, which the
    monitor's outcomes, by option only, cannot tell apart) and their mean makespan. Bounded: the
    ``max_shapes`` most recent shapes, the `MAX_REPLAYS` most recent placements of each."""

    def __init__(self, max_shapes: int) -> None:
        self._table: LruTable[tuple[str, ...], dict[Spots, tuple[int, list[float], float]]] = (
            LruTable(max_shapes))

    def __len__(self) -> int:
        return len(self._table)

    def add(self, record: StepRecord) -> None:
        """Take one step's runs (none of a step with an error or a fallback: not a
        placement that ran as placed)."""
        calls = record.calls
        if not calls or any(c.error is not None or c.fell_back for c in calls):
            return
        rows = sorted(((c.tool, c.option, gpu_index(c.device), c.run_ms - c.load_ms)
                       for c in calls), key=lambda r: _order(r[:3]))
        key = tuple((t, o, g) for t, o, g, _ in rows)
        shape = tuple(sorted(c.tool for c in calls))
        kept = self._table.get(shape)
        if kept is None:
            kept = self._table[shape] = {}
        count, means, span = kept.pop(key, (0, [0.0] * len(rows), 0.0))
        count += 1
        kept[key] = (count, [m + (r[3] - m) / count for m, r in zip(means, rows, strict=True)],
                     span + (record.makespan_ms - span) / count)
        while len(kept) > MAX_REPLAYS:
            kept.pop(next(iter(kept)))

    def observed(self, tools: Sequence[str]) -> Callable[[Sequence[Spot]], float | None]:
        """The mean makespan of a placement (per call in ``tools`` order: option and GPU)
        where it ran, else None."""
        kept = self._table.get(tuple(sorted(tools))) or {}

        def mean(placement: Sequence[Spot]) -> float | None:
            key = tuple(sorted(((t, o, g) for t, (o, g) in zip(tools, placement, strict=True)),
                               key=_order))
            hit = kept.get(key)
            return None if hit is None else hit[2]

        return mean

    def shared(self, tools: Sequence[str]) -> set[str]:
        """The tools of the shape seen starting at once (``gpu_now``) beside another such
        call on the same GPU: whose share its runs can tell."""
        out: set[str] = set()
        for key in self._table.get(tuple(sorted(tools))) or {}:
            now = [(t, g) for t, o, g in key if o == "gpu_now" and g is not None]
            out.update(t for i, (t, g) in enumerate(now)
                       if any(h == g for j, (_, h) in enumerate(now) if j != i))
        return out

    def replays(self, tools: Sequence[str]) -> list[Replay]:
        """The shape's placements as replays, the most run first."""
        kept = self._table.get(tuple(sorted(tools))) or {}
        out = []
        for key, (count, means, _) in sorted(kept.items(), key=lambda kv: -kv[1][0]):
            calls = [(f"c{k}", t, o) for k, (t, o, _) in enumerate(key)]
            gpus = {f"c{k}": g for k, (_, _, g) in enumerate(key) if g is not None}
            out.append(Replay(calls, gpus, tuple(means), float(min(count, 5))))
        return out


def _order(row: tuple[str, DeviceOption, int | None]) -> tuple[str, str, int]:
    """How a placement's calls are ordered in its key: tool, option, GPU (the CPU first)."""
    return row[0], row[1], -1 if row[2] is None else row[2]


def fit_gpu_shares(
    params: Mapping[str, ToolParams], device: DeviceState, replays: Sequence[Replay], *,
    oom_ms: float, model: ContentionModel | None = None,
    start: Mapping[str, float] | None = None, max_sims: int = MAX_SIMS,
) -> dict[str, float]:
    """The share of each GPU tool that shared a GPU in ``replays`` (see the module
    docstring), one pass over the tools from the shares of ``start`` (a previous fit's
    answer): the tools it did not fit first, by name, then in its order (the ones it left
    first), while at most ``max_sims`` replays are simulated; the tools left keep their
    ``start`` share."""
    shared = {t for r in replays for cid, t, o in r.calls if is_gpu(o) and _beside(r, cid)}
    before = dict(start or {})
    current = {t: p if t not in before else p.model_copy(update={"gpu_share": before[t]})
               for t, p in params.items()}
    fitted = {t: v for t, v in before.items() if t in shared}
    per_tool, sims, refit = len(GRID) * len(replays), 0, []
    order = sorted(t for t in shared if t not in before) + [t for t in before if t in shared]
    for tool in order:
        if sims and sims + per_tool > max_sims:
            break
        sims += per_tool
        refit.append(tool)
        best: tuple[float, float] | None = None
        here = current[tool].gpu_share  # of equal losses, the one nearest the current value
        for value in sorted(GRID, key=lambda v: (abs(v - here), -v)):
            trial = {**current, tool: current[tool].model_copy(update={"gpu_share": value})}
            loss = _loss(trial, device, replays, oom_ms, model)
            if best is None or loss < best[0] - 1e-12:
                best = (loss, value)
        assert best is not None
        fitted[tool] = best[1]
        current[tool] = current[tool].model_copy(update={"gpu_share": best[1]})
    # the tools refitted now go last: the next refit starts with those it left
    return {**{t: v for t, v in fitted.items() if t not in refit},
            **{t: fitted[t] for t in refit}}


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
