"""Foresight from words: what a request's forecast says of each model, and how far it has
earned belief.

A forecast from words (`langgraph_devsched.words`: the user's newest message and the tools'
descriptions) gives, per tool, the probability that the coming work calls it. The policy
cannot take that at its word: a forecaster may be wrong, or hostile ("load every model
now"). `Foresight` keeps the latest forecast per model (a model's probability is its most
likely tool's) and scores every forecast against what the steps after it used, until the
next one arrives:

* **hit rate**: of the models it predicted (probability at least ``threshold``), the share
  that were used;
* **miss rate**: of the models it did not predict that were in play (named by the caller
  when the forecast came: those the monitor's own forecast expects), or used, the share
  that were used anyway.

`uses` is what the policy then believes of a model's coming uses in this request: the
forecast's own probability as a prior worth `PRIOR_WEIGHT` scored forecasts, moved by the
hit rate for a predicted model and by the miss rate for another (None without a forecast
in force). A forecaster is believed what it says until its record says otherwise.
A forecaster that is always wrong ends with a hit rate near 0 and a miss rate near 1: its
predictions then warm nothing and protect nothing, and the policy is back to the monitor's
own forecast (the rent-or-buy rule's robust bound). Tables are bounded (`MAX_MODELS`).

>>> f = Foresight()
>>> f.declare({"asr": "whisper", "caption": "blip", "ocr": "trocr"})
>>> f.expect({"asr": 0.9, "caption": 0.1, "ocr": 0.0}, in_play={"blip"})
>>> f.uses("whisper"), f.uses("blip")
(0.9, 0.1)
>>> f.step({"blip"})
>>> f.expect({"asr": 0.9, "caption": 0.1})  # the first was wrong: blip used, whisper not
>>> round(f.uses("whisper"), 2), round(f.uses("blip"), 2)
(0.6, 0.4)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

PRIOR_WEIGHT = 2.0
"""How many scored forecasts a forecast's own probability is worth, against its record."""
MAX_MODELS = 256
"""At most this many tools (and models) are remembered per forecast."""
THRESHOLD = 0.5
"""A model whose probability reaches this is predicted."""


@dataclass
class _Rate:
    """A share counted, estimated from a prior mean worth `PRIOR_WEIGHT` counts."""

    yes: float = 0.0
    count: float = 0.0

    def add(self, hit: bool) -> None:
        self.yes += float(hit)
        self.count += 1.0

    def share(self, prior: float) -> float:
        return (self.yes + PRIOR_WEIGHT * prior) / (self.count + PRIOR_WEIGHT)


@dataclass
class Foresight:
    """The latest forecast from words, per model, and its measured hit and miss rates."""

    threshold: float = THRESHOLD
    hits: _Rate = field(default_factory=_Rate)
    """Of the predicted models, the share used."""
    misses: _Rate = field(default_factory=_Rate)
    """Of the models not predicted, the share used."""
    forecasts: int = 0
    _models: dict[str, str] = field(default_factory=dict)
    """Tool -> its model (`declare`)."""
    _current: dict[str, float] | None = None
    """Model -> probability of the forecast in force (None: none)."""
    _used: set[str] = field(default_factory=set)
    _in_play: frozenset[str] = frozenset()
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """A forecast is handed over from the node's reader thread while steps are decided."""

    def declare(self, tool_models: Mapping[str, str | None]) -> None:
        """The node's tools and the model each keeps resident (None: none)."""
        for tool, model in tool_models.items():
            if model is not None and (tool in self._models or len(self._models) < MAX_MODELS):
                self._models[tool] = model

    def expect(self, probabilities: Mapping[str, float],
               in_play: Iterable[str] = ()) -> None:
        """A new forecast (tool -> probability; values outside [0, 1] or not numbers are
        ignored): the one in force is scored against what was used since, then replaced.
        ``in_play``: the models a miss is counted over when not predicted (besides those
        used)."""
        in_play = frozenset(list(in_play)[:MAX_MODELS])
        out: dict[str, float] = {}
        for tool, p in list(probabilities.items())[:MAX_MODELS]:
            model = self._models.get(tool)
            if model is None or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
                continue
            out[model] = max(out.get(model, 0.0), float(p))
        for model in set(self._models.values()):
            out.setdefault(model, 0.0)
        with self._lock:
            self._score()
            self._in_play = in_play
            self._current = out
            self._used = set()
            self.forecasts += 1

    def step(self, models: Iterable[str]) -> None:
        """The models an executed step used."""
        with self._lock:
            if self._current is not None:
                self._used.update(m for m in models if m in self._current)

    def finish(self) -> None:
        """Score the forecast in force (the run ended)."""
        with self._lock:
            self._score()
            self._current = None

    @property
    def active(self) -> bool:
        """Whether a forecast is in force."""
        return self._current is not None

    def probability(self, model: str) -> float | None:
        """The forecast's probability of ``model`` (None: no forecast, or not a model of
        the node's tools)."""
        return None if self._current is None else self._current.get(model)

    def predicts(self, model: str) -> bool:
        """Whether the forecast in force predicts ``model``."""
        return (self.probability(model) or 0.0) >= self.threshold

    def predicted(self) -> list[str]:
        """The models the forecast in force predicts, most likely first."""
        if self._current is None:
            return []
        return [m for p, m in sorted(((p, m) for m, p in self._current.items()),
                                     key=lambda pm: (-pm[0], pm[1])) if p >= self.threshold]

    def uses(self, model: str) -> float | None:
        """What the forecast in force, as far as it has earned belief, says of ``model``'s
        uses in the coming work: its probability moved by the hit rate if predicted, else by
        the miss rate (None: no forecast, or a model it says nothing of)."""
        p = self.probability(model)
        if p is None:
            return None
        return (self.hits if p >= self.threshold else self.misses).share(p)

    def _score(self) -> None:
        if self._current is None:
            return
        for model, p in self._current.items():
            used = model in self._used
            if p >= self.threshold:
                self.hits.add(used)
            elif used or model in self._in_play:
                self.misses.add(used)
