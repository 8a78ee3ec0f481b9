"""How often each resident model will be used next: a decaying, bounded use forecast.

A load is an investment that the following steps repay, so pricing it needs an estimate of
those steps' uses. The forecast reads only what a step shows (which models its calls used,
how many times) and keeps, per model:

* a **rate**: uses per step, an exponentially weighted mean (``decay`` per step) that is
  bias-corrected from the model's first step, so a model seen once forecasts what it was
  used then, and every step without a use decays it: a tool the agent stopped calling
  stops counting;
* a **next-step** rate per preceding step: which models follow a step that used a given
  set of models (a first-order transition table, decayed the same way), so that an agent
  that alternates a speech turn and a vision turn forecasts the vision model after the
  speech one, not both at half a use;
* an **age**: the steps since the model was first used. With no other knowledge of how
  long the run goes on, a run that has lasted ``age`` steps is expected to last about as
  long again (the Lindy estimate, at least `MIN_STEPS`, capped at ``horizon``): `coming` is
  the rate times that. The floor is a prior on agent runs: a tool the agent has just started
  calling is called for a few more steps.

Memory is bounded by ``max_models`` models and as many preceding sets (the least recently
used are dropped), and a model whose rate fell under ``MIN_RATE`` is forgotten.

>>> f = UseForecast(decay=0.5, horizon=8)
>>> f.step({"sst": 2})
>>> f.rate("sst"), f.coming("sst")
(2.0, 6.0)
>>> for _ in range(3):
...     f.step({"sst": 2})
>>> f.rate("sst"), f.coming("sst")
(2.0, 8.0)
>>> f.step({})
>>> round(f.rate("sst"), 3), f.coming("unknown")
(0.968, 0.0)
>>> turns = UseForecast()
>>> for _ in range(3):
...     turns.step({"asr": 1}); turns.step({"caption": 1})
>>> round(turns.rate("asr"), 2), turns.next_rate("asr"), turns.next_rate("caption")
(0.41, 1.0, 0.0)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

DECAY = 0.7
"""Weight the past keeps per step: a model unused for 6 steps forecasts a tenth of its rate."""
HORIZON = 16
"""At most this many coming steps are forecast (the run may end any time)."""
MIN_STEPS = 3
"""At least this many coming steps are forecast for a model in use (the Lindy estimate's
floor: an agent that starts calling a tool rarely stops at once)."""
MAX_MODELS = 64
"""At most this many models are remembered."""
MIN_RATE = 0.02
"""A model forecast fewer uses per step than this is forgotten."""


@dataclass
class _Use:
    """A bias-corrected exponentially weighted mean of uses per step."""

    mean: float = 0.0
    weight: float = 0.0
    age: int = 0

    def add(self, uses: float, decay: float) -> None:
        self.mean = decay * self.mean + (1 - decay) * uses
        self.weight = decay * self.weight + (1 - decay)
        self.age += 1

    @property
    def rate(self) -> float:
        return self.mean / self.weight if self.weight > 0 else 0.0


class UseForecast:
    """Per model, its uses per coming step and over the coming steps (see the module)."""

    def __init__(self, *, decay: float = DECAY, horizon: int = HORIZON,
                 max_models: int = MAX_MODELS) -> None:
        if not 0 <= decay < 1:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        if horizon < 1 or max_models < 1:
            raise ValueError("horizon and max_models must be >= 1")
        self.decay = decay
        self.horizon = horizon
        self.max_models = max_models
        self._uses: OrderedDict[str, _Use] = OrderedDict()
        self._next: OrderedDict[frozenset[str], dict[str, _Use]] = OrderedDict()
        self._last: frozenset[str] | None = None

    def __len__(self) -> int:
        return len(self._uses)

    def step(self, uses: Mapping[str, int]) -> None:
        """One step's model uses (model -> calls); every known model not in it decays."""
        for model in uses:
            if model not in self._uses:
                self._uses[model] = _Use()
            self._uses.move_to_end(model)
        for model, use in list(self._uses.items()):
            use.add(float(uses.get(model, 0)), self.decay)
            if use.rate < MIN_RATE:
                del self._uses[model]
        while len(self._uses) > self.max_models:
            self._uses.popitem(last=False)
        if self._last is not None:
            after = self._next.setdefault(self._last, {})
            self._next.move_to_end(self._last)
            for model in set(after) | set(uses):
                after.setdefault(model, _Use()).add(float(uses.get(model, 0)), self.decay)
            for model in [m for m, u in after.items() if u.rate < MIN_RATE]:
                del after[model]
            while len(self._next) > self.max_models:
                self._next.popitem(last=False)
        self._last = frozenset(m for m, n in uses.items() if n > 0)

    def rate(self, model: str) -> float:
        """Forecast uses in the next step (0: unknown or forgotten)."""
        use = self._uses.get(model)
        return use.rate if use is not None else 0.0

    def next_rate(self, model: str) -> float:
        """Forecast uses in the next step, given the last step's models: what followed
        them before, else `rate`."""
        after = self._next.get(self._last) if self._last is not None else None
        if not after:
            return self.rate(model)
        use = after.get(model)
        return use.rate if use is not None else 0.0

    def coming(self, model: str) -> float:
        """Forecast uses over the coming steps: the rate times the steps the model has been
        in use (at least `MIN_STEPS`), at most ``horizon``."""
        use = self._uses.get(model)
        if use is None:
            return 0.0
        return self.rate(model) * min(max(use.age, MIN_STEPS), self.horizon)

    def models(self) -> list[str]:
        """The remembered models, most recently used last."""
        return list(self._uses)
