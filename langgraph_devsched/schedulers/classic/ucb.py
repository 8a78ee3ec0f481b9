"""UCB1 bandit whose arms are complete mappings of a batch shape.

Each batch shape (the sorted tool names) has its own bandit; an arm is one option per call,
the calls taken in shape order. Untried arms are pulled first, in order of a static estimate
from the declared hints (GPU calls back to back, CPU calls over the cores, a `gpu_now` whose
declared VRAM does not fit counted as CPU), so the likely good ones come early. Once every
arm has been tried, the arm with the best ``-mean_ms / worst_mean_ms + sqrt(2 ln N / n_arm)``
is pulled. It explores whole mappings, so it reaches the optimum only after paying for many probes.

On a machine with several GPUs (``SchedulerView.devices``) an arm also names the GPU of each
GPU-placed call: a call's choices are ``cpu`` and each GPU option on each GPU its ``gpus``
hint allows (2k + 1 with k GPUs), and the static estimate takes each GPU apart (its calls'
declared GPU time over its declared ``speed``, plus their model's declared load where it is
cold there, a ``gpu_now`` counted as CPU where it does not fit that GPU's room, its idle
models evicted: ``GpuDevice.room_mb``, or the GPU runs its cap of calls now; of arms
alike in that estimate, the one with less work in all, loads included, first). The
decision names the arm's GPUs (``Decision.gpus``). One GPU: the arms and the decisions of
before, exactly (no GPU named).

Bounded: up to ``enumerate_limit`` mappings the arms are every mapping, sorted by the static
estimate; beyond that they are built incrementally, best first (from the HEFT mapping, each
new arm the best-estimated single-call change of one already built), so 3^n is never
enumerated. At most ``max_arms`` arms are tried per shape (then UCB1 runs over those), and
the ``max_shapes`` most recently used shapes keep their bandits.

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.telemetry import DeviceState
>>> spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=300, gpu_ms=50))
>>> batch = Batch.of([("a", "ocr", spec)])
>>> view = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0, 4))
>>> ucb = UcbScheduler()
>>> [ucb.decide(batch, view).mapping["a"] for _ in range(2)]  # untried arms first
['gpu_now', 'gpu_now']
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.schedulers.classic.heft import HeftScheduler
from langgraph_devsched.schedulers.costs import declared_cost
from langgraph_devsched.schedulers.gpu_workers import allowed_gpus, gpu_load_cost
from langgraph_devsched.schedulers.lru import LruTable

Choice = tuple[DeviceOption, int | None]
"""One call's option and, on a machine with several GPUs, the GPU of a GPU option."""
Arm = tuple[Choice, ...]
ENUMERATE_LIMIT = 6561
"""Up to this many mappings (3^8) the arms are all enumerated and sorted."""
MAX_ARMS = 256
MAX_SHAPES = 256
_FRONTIER = 2048


@dataclass
class _Bandit:
    source: Iterator[Arm]
    max_arms: int
    arms: list[Arm] = field(default_factory=list)
    """The arms built so far, in estimate order."""
    total: int = 0
    """How many mappings the shape has."""
    pulls: dict[Arm, int] = field(default_factory=dict)
    total_ms: dict[Arm, float] = field(default_factory=dict)
    gpus: int = 1
    """How many GPUs the arms place on (more than one: they name the GPU)."""

    @property
    def n(self) -> int:
        return sum(self.pulls.values())

    def mean(self, arm: Arm) -> float:
        return self.total_ms[arm] / self.pulls[arm]

    def untried(self) -> Arm | None:
        """The best-estimated arm never pulled, while fewer than ``max_arms`` were tried."""
        if len(self.pulls) >= self.max_arms:
            return None
        for arm in self.arms:
            if arm not in self.pulls:
                return arm
        arm_ = next(self.source, None)
        if arm_ is not None:
            self.arms.append(arm_)
        return arm_

    def tried(self) -> list[Arm]:
        return [a for a in self.arms if a in self.pulls]


def _best_first(
    root: Arm, choices: list[tuple[Choice, ...]],
    estimate: Callable[[Arm], tuple[float, float]]
) -> Iterator[Arm]:
    """Arms in (roughly) increasing estimate: the root, then repeatedly the best-estimated
    single-call change of an arm already given. The frontier is bounded."""
    counter = itertools.count()
    heap = [(estimate(root), next(counter), root)]
    seen = {hash(root)}
    while heap:
        _, _, arm = heapq.heappop(heap)
        yield arm
        for i, options in enumerate(choices):
            for o in options:
                if o == arm[i]:
                    continue
                new = (*arm[:i], o, *arm[i + 1:])
                h = hash(new)
                if h not in seen:
                    seen.add(h)
                    heapq.heappush(heap, (estimate(new), next(counter), new))
        if len(heap) > _FRONTIER:
            heap = heapq.nsmallest(_FRONTIER // 2, heap)
            heapq.heapify(heap)


class UcbScheduler(SchedulerBase):
    """UCB1 over complete mappings, one bandit per batch shape."""

    name = "ucb"

    def __init__(
        self, *, exploration: float = 1.0, max_arms: int = MAX_ARMS,
        max_shapes: int = MAX_SHAPES, enumerate_limit: int = ENUMERATE_LIMIT,
    ) -> None:
        if max_arms < 1:
            raise ValueError(f"max_arms must be >= 1, got {max_arms}")
        self.exploration = exploration
        self.max_arms = max_arms
        self.enumerate_limit = enumerate_limit
        self._bandits: LruTable[tuple[str, ...], _Bandit] = LruTable(max_shapes)

    def state_sizes(self) -> dict[str, int]:
        """Bandits kept, and the most arms built and tried in one of them (all bounded)."""
        bandits = self._bandits.values()
        return {"bandits": len(bandits),
                "max_arms_built": max((len(b.arms) for b in bandits), default=0),
                "max_arms_tried": max((len(b.pulls) for b in bandits), default=0)}

    @staticmethod
    def _order(batch: Batch) -> list[int]:
        return sorted(range(len(batch.calls)), key=lambda i: (batch.calls[i].tool, i))

    def _bandit(self, batch: Batch, view: SchedulerView) -> _Bandit:
        shape = batch.shape
        bandit = self._bandits.get(shape)
        if bandit is None or bandit.gpus != max(1, len(view.devices)):  # GPUs came or went
            bandit = self._new_bandit(batch, view)
            self._bandits[shape] = bandit
        return bandit

    def _new_bandit(self, batch: Batch, view: SchedulerView) -> _Bandit:
        order = self._order(batch)
        calls = [batch.calls[i] for i in order]
        gpu_ok = view.device.gpu_available
        devices = view.devices if len(view.devices) > 1 else ()
        by_index = {d.index: d for d in devices}
        choices: list[tuple[Choice, ...]] = []
        for c in calls:
            allowed = c.spec.allowed_options()
            options = ("cpu",) if not gpu_ok and "cpu" in allowed else tuple(allowed)
            gpus: list[int | None] = [None]  # one GPU: the arms name none
            if devices:
                gpus = [d.index for d in allowed_gpus(c.call_id, c.spec, devices)]
            choices.append(tuple((o, None if o == "cpu" else g) for o in options
                                 for g in ([None] if o == "cpu" else gpus)))
        cores = max(1, view.device.cpu_cores)
        gpu = [declared_cost(c.spec, "gpu", gpu_ok) for c in calls]
        cpu = [declared_cost(c.spec, "cpu", gpu_ok) for c in calls]
        vram = [c.spec.vram_mb for c in calls]
        free_mb = view.device.vram_budget_mb - view.device.vram_used_mb

        def estimate(arm: Arm) -> tuple[float, float]:
            cpu_ms: list[float] = []
            on_gpu: dict[int | None, float] = {}
            held: dict[int | None, float] = {}
            loaded: set[tuple[str, int]] = set()
            for c, g, x, mb, (o, k) in zip(calls, gpu, cpu, vram, arm, strict=True):
                device = by_index.get(k) if k is not None else None
                free = free_mb if device is None else device.room_mb  # idle models go
                if o == "gpu_now" and (held.get(k, 0.0) + mb > free
                                       or (device is not None and device.at_cap)):
                    cpu_ms.append(x)  # does not fit, or its GPU is at its cap: then CPU
                elif o != "cpu":
                    if device is not None:  # several GPUs: its speed, a cold model's load
                        g = g / device.speed + gpu_load_cost(c.spec, c.tool, device, loaded)
                        model = c.spec.model_name(c.tool)
                        if model is not None:
                            loaded.add((model, device.index))
                    on_gpu[k] = on_gpu.get(k, 0.0) + g
                    held[k] = held.get(k, 0.0) + (mb if o == "gpu_now" else 0.0)
                else:
                    cpu_ms.append(x)
            span = max(max(on_gpu.values(), default=0.0), max(cpu_ms, default=0.0),
                       sum(cpu_ms) / cores)
            # several GPUs: of arms alike in span (the slowest resource), less work first
            return span, (sum(on_gpu.values()) + sum(cpu_ms)) if devices else 0.0

        total = math.prod(len(c) for c in choices)
        source: Iterator[Arm]
        if total <= self.enumerate_limit:
            arms = list(itertools.product(*choices))
            ranked = sorted(range(len(arms)), key=lambda k: (estimate(arms[k]), k))
            source = iter([arms[k] for k in ranked])
        else:
            heft = HeftScheduler().decide(batch, view)
            root = tuple(
                pick if (pick := (heft.mapping[c.call_id], heft.gpus.get(c.call_id)
                                  if devices and heft.mapping[c.call_id] != "cpu" else None))
                in opts else opts[0]
                for c, opts in zip(calls, choices, strict=True)
            )
            source = _best_first(root, choices, estimate)
        return _Bandit(source, self.max_arms, total=total, gpus=max(1, len(devices)))

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        bandit = self._bandit(batch, view)
        untried = bandit.untried()
        if untried is not None:
            arm, probe = untried, True
            reason = f"UCB1: untried arm ({len(bandit.pulls) + 1} of {bandit.total})"
        else:
            arms = bandit.tried()
            worst = max(bandit.mean(a) for a in arms) or 1.0
            log_n = math.log(bandit.n)

            def score(k: int) -> tuple[float, int]:
                a = arms[k]
                bonus = self.exploration * math.sqrt(2 * log_n / bandit.pulls[a])
                return (-(-bandit.mean(a) / worst + bonus), k)

            arm = arms[min(range(len(arms)), key=score)]
            best_mean = min(range(len(arms)), key=lambda k: (bandit.mean(arms[k]), k))
            probe = arms[best_mean] != arm
            reason = f"UCB1: best upper bound, mean {bandit.mean(arm):.1f} ms"
        order = self._order(batch)
        mapping = {batch.calls[i].call_id: o for i, (o, _) in zip(order, arm, strict=True)}
        mapping = {cid: mapping[cid] for cid in batch.call_ids}
        gpus = {batch.calls[i].call_id: k for i, (_, k) in zip(order, arm, strict=True)
                if k is not None}
        return self._decision(mapping, reason, probe=probe, gpus=gpus)

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        bandit = self._bandits.get(batch.shape)
        if bandit is None:
            return
        order = self._order(batch)
        several = bandit.gpus > 1
        arm = tuple(
            (o, decision.gpus.get(cid) if several and o != "cpu" else None)
            for cid, o in ((batch.calls[i].call_id, decision.mapping[batch.calls[i].call_id])
                           for i in order))
        if arm not in bandit.pulls and (arm not in bandit.arms or (
                len(bandit.pulls) >= bandit.max_arms)):
            return
        bandit.pulls[arm] = bandit.pulls.get(arm, 0) + 1
        bandit.total_ms[arm] = bandit.total_ms.get(arm, 0.0) + record.makespan_ms
