"""UCB1 bandit whose arms are complete mappings of a batch shape.

Each batch shape (the sorted tool names) has its own bandit; an arm is one option per call,
the calls taken in shape order. Untried arms are pulled first, in order of a static estimate
from the declared hints (GPU calls back to back, CPU calls over the cores, a `gpu_now` whose
declared VRAM does not fit counted as CPU), so the likely good ones come early. Once every
arm has been tried, the arm with the best ``-mean_ms / worst_mean_ms + sqrt(2 ln N / n_arm)``
is pulled. It explores whole mappings, so it reaches the optimum only after paying for many probes.

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
from langgraph_devsched.schedulers.costs import declared_cost
from langgraph_devsched.schedulers.heft import HeftScheduler
from langgraph_devsched.schedulers.tables import LruTable

Arm = tuple[DeviceOption, ...]
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
    root: Arm, choices: list[tuple[DeviceOption, ...]], estimate: Callable[[Arm], float]
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
        if bandit is None:
            bandit = self._new_bandit(batch, view)
            self._bandits[shape] = bandit
        return bandit

    def _new_bandit(self, batch: Batch, view: SchedulerView) -> _Bandit:
        order = self._order(batch)
        calls = [batch.calls[i] for i in order]
        gpu_ok = view.device.gpu_available
        choices = []
        for c in calls:
            allowed = c.spec.allowed_options()
            choices.append(("cpu",) if not gpu_ok and "cpu" in allowed else tuple(allowed))
        cores = max(1, view.device.cpu_cores)
        gpu = [declared_cost(c.spec, "gpu", gpu_ok) for c in calls]
        cpu = [declared_cost(c.spec, "cpu", gpu_ok) for c in calls]
        vram = [c.spec.vram_mb for c in calls]
        free_mb = view.device.vram_budget_mb - view.device.vram_used_mb

        def estimate(arm: Arm) -> float:
            on_gpu, cpu_ms, held = 0.0, [], 0.0
            for g, x, mb, o in zip(gpu, cpu, vram, arm, strict=True):
                if o == "gpu_now" and held + mb > free_mb:
                    cpu_ms.append(x)  # declared VRAM does not fit: expect OOM, then CPU
                elif o != "cpu":
                    on_gpu += g
                    held += mb if o == "gpu_now" else 0.0
                else:
                    cpu_ms.append(x)
            return max(on_gpu, max(cpu_ms, default=0.0), sum(cpu_ms) / cores)

        total = math.prod(len(c) for c in choices)
        source: Iterator[Arm]
        if total <= self.enumerate_limit:
            arms = list(itertools.product(*choices))
            ranked = sorted(range(len(arms)), key=lambda k: (estimate(arms[k]), k))
            source = iter([arms[k] for k in ranked])
        else:
            heft = HeftScheduler().decide(batch, view).mapping
            root = tuple(
                heft[c.call_id] if heft[c.call_id] in opts else opts[0]
                for c, opts in zip(calls, choices, strict=True)
            )
            source = _best_first(root, choices, estimate)
        return _Bandit(source, self.max_arms, total=total)

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
        mapping = {batch.calls[i].call_id: o for i, o in zip(order, arm, strict=True)}
        mapping = {cid: mapping[cid] for cid in batch.call_ids}
        return self._decision(mapping, reason, probe=probe)

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        bandit = self._bandits.get(batch.shape)
        if bandit is None:
            return
        order = self._order(batch)
        arm = tuple(decision.mapping[batch.calls[i].call_id] for i in order)
        if arm not in bandit.pulls and (arm not in bandit.arms or (
                len(bandit.pulls) >= bandit.max_arms)):
            return
        bandit.pulls[arm] = bandit.pulls.get(arm, 0) + 1
        bandit.total_ms[arm] = bandit.total_ms.get(arm, 0.0) + record.makespan_ms
