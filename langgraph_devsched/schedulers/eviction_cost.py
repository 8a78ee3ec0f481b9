"""What a step's evictions cost the steps after it: the reload of a model still in use.

A step's makespan does not show what it evicts. Placing a small call on the GPU can be
free for this step and evict a model that the next step needs again, which then pays its
whole load (seen: `residency_visual_suite` with noisy profiles reloaded a diffusion model on
every step, 2.2x the optimum, because its VQA call was 100 ms faster on the GPU). The
policy therefore charges each mapping the GPU load time of every resident model it evicts
that a recent step used (`RELOAD_HORIZON` decisions): the model is likely needed again and
will pay that load then. A model no recent step used costs nothing to evict. A load time is
learned where it is seen (the policy feeds every GPU load of an executed step), not only
when its model's batch is decided: with nothing declared, two alternating shapes each saw
the other's model as free to evict (its load unknown when that batch was decided).

>>> use = RecentModels(horizon=2)
>>> use.note(["sd"]); use.learn({"sd": 2900.0})
>>> use.note(["vqa"]); use.learn({"vqa": 1100.0})
>>> use.reload_ms(("sd",)), use.reload_ms(("vqa", "old"))
(2900.0, 1100.0)
>>> use.note([]); use.note([])
>>> use.reload_ms(("sd", "vqa"))
0.0
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

RELOAD_HORIZON = 4
"""A model used by a batch of one of the last this many decisions counts as in use."""

MAX_MODELS = 64
"""At most this many models are remembered (least recently used dropped)."""


class RecentModels:
    """Which models recent decisions' batches used, and each one's estimated GPU load time;
    bounded by `MAX_MODELS`."""

    def __init__(self, horizon: int = RELOAD_HORIZON, max_models: int = MAX_MODELS) -> None:
        self.horizon = horizon
        self.max_models = max_models
        self._step = 0
        self._last: OrderedDict[str, int] = OrderedDict()
        """Per model, the decision that last used it, least recent first."""
        self._load: dict[str, float] = {}
        """Per remembered model, its estimated GPU load time."""

    def __len__(self) -> int:
        return len(self._last)

    def note(self, models: Iterable[str]) -> None:
        """One decision's batch uses these models."""
        self._step += 1
        for model in models:
            self._last[model] = self._step
            self._last.move_to_end(model)
        while len(self._last) > self.max_models:
            self._load.pop(self._last.popitem(last=False)[0], None)

    def learn(self, load_gpu_ms: Mapping[str, float]) -> None:
        """The current GPU load time estimates of remembered models (0, no estimate yet,
        keeps one learned before: a load seen on an earlier step)."""
        for model, ms in load_gpu_ms.items():
            if model in self._last and (ms > 0 or model not in self._load):
                self._load[model] = max(0.0, float(ms))

    def reload_ms(self, evicted: Iterable[str]) -> float:
        """The load time the steps after pay again for evicting these models: the sum over
        those a batch of the last `horizon` decisions used."""
        total = 0.0
        for model in evicted:
            last = self._last.get(model)
            if last is not None and self._step - last < self.horizon:
                total += self._load.get(model, 0.0)
        return total
