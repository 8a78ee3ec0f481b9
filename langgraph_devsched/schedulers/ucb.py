"""UCB1 bandit whose arms are complete mappings of a batch shape.

Each batch shape (the sorted tool names) has its own bandit; an arm is one option per call,
the calls taken in shape order. Untried arms are pulled first, in order of a static estimate
from the declared hints (GPU calls back to back, CPU calls over the cores, a `gpu_now` whose
declared VRAM does not fit counted as CPU), so the likely good ones come early. Once every
arm has been tried, the arm with the best ``-mean_ms / worst_mean_ms + sqrt(2 ln N / n_arm)``
is pulled. It explores whole mappings, so it reaches the optimum only after paying for many probes.

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

import itertools
import math
from dataclasses import dataclass, field

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.schedulers.costs import declared_cost

Arm = tuple[DeviceOption, ...]


@dataclass
class _Bandit:
    arms: list[Arm]
    pulls: dict[Arm, int] = field(default_factory=dict)
    total_ms: dict[Arm, float] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return sum(self.pulls.values())

    def mean(self, arm: Arm) -> float:
        return self.total_ms[arm] / self.pulls[arm]


class UcbScheduler(SchedulerBase):
    """UCB1 over complete mappings, one bandit per batch shape."""

    name = "ucb"

    def __init__(self, *, exploration: float = 1.0) -> None:
        self.exploration = exploration
        self._bandits: dict[tuple[str, ...], _Bandit] = {}

    @staticmethod
    def _order(batch: Batch) -> list[int]:
        return sorted(range(len(batch.calls)), key=lambda i: (batch.calls[i].tool, i))

    def _bandit(self, batch: Batch, view: SchedulerView) -> _Bandit:
        shape = batch.shape
        if shape not in self._bandits:
            calls = [batch.calls[i] for i in self._order(batch)]
            gpu_ok = view.device.gpu_available
            choices = []
            for c in calls:
                allowed = c.spec.allowed_options()
                choices.append(("cpu",) if not gpu_ok and "cpu" in allowed else allowed)
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

            arms = list(itertools.product(*choices))
            order = sorted(range(len(arms)), key=lambda k: (estimate(arms[k]), k))
            self._bandits[shape] = _Bandit([arms[k] for k in order])
        return self._bandits[shape]

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        bandit = self._bandit(batch, view)
        untried = next((a for a in bandit.arms if a not in bandit.pulls), None)
        if untried is not None:
            arm, probe = untried, True
            reason = f"UCB1: untried arm ({len(bandit.pulls) + 1} of {len(bandit.arms)})"
        else:
            worst = max(bandit.mean(a) for a in bandit.arms) or 1.0
            log_n = math.log(bandit.n)

            def score(k: int) -> tuple[float, int]:
                a = bandit.arms[k]
                bonus = self.exploration * math.sqrt(2 * log_n / bandit.pulls[a])
                return (-(-bandit.mean(a) / worst + bonus), k)

            arm = bandit.arms[min(range(len(bandit.arms)), key=score)]
            best_mean = min(range(len(bandit.arms)), key=lambda k: (bandit.mean(bandit.arms[k]), k))
            probe = bandit.arms[best_mean] != arm
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
        if arm not in bandit.arms:
            return
        bandit.pulls[arm] = bandit.pulls.get(arm, 0) + 1
        bandit.total_ms[arm] = bandit.total_ms.get(arm, 0.0) + record.makespan_ms
