"""The bench's side of forecasts from words: each request's forecast asked at its arrival,
in force only once its latency has passed, in virtual time.

A scenario's sequence may name users' requests (`bench.scenario.Request`): a request arrives
``arrival_ms`` before its first step (the agent's first LLM turn). A scheduler that reads
words (the ``forecast_words`` hook: the monitor policy with ``forecast="lexical"``, the
agentic scheduler's sub-agent) is asked then, with the request's text and the tools' names
and descriptions, nothing else. Its answer carries its latency (a real server's measured
wall time, a scripted model's declared one): the answer is handed to the scheduler
(``expect``) only once the run's virtual time passes the arrival plus that latency. No step
waits for it; a step that comes first runs on what the scheduler knew before.

The **oracle forecast** (``forecast="oracle"``) is the request's true tool set, handed over
at its arrival with no latency: the upper bound of what words can give, and ground truth
no real scheduler has (the bench says so).

`WordsRun` counts what happened: forecasts asked, their latencies, how many were in force
before their request's first step, and per request the predicted tools (probability at
least one half) against the true ones: precision, recall and F1 of the node set.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched.bench.scenario import Request, Scenario
from langgraph_devsched.schedulers.protocols import capabilities
from langgraph_devsched.words.base import WordsForecast, node_scores, predicted

MAX_KEPT = 10_000
"""At most this many per-request figures are kept per run (the counts go on)."""


@dataclass(frozen=True)
class _Said:
    """A forecast the scheduler answered, with the virtual time it is in force from."""

    ready_ms: float
    forecast: Any
    request: Request


@dataclass
class WordsRun:
    """One scheduler's forecasts from words over one run (see the module)."""

    scheduler: Any
    tools: Sequence[tuple[str, str]]
    """The node's tools as (name, description)."""
    now_ms: float = 0.0
    asked: int = 0
    failed: int = 0
    in_time: int = 0
    """Forecasts in force before their request's first step."""
    oracle: bool = False
    latencies_ms: list[float] = field(default_factory=list)
    scores: list[tuple[float, float, float]] = field(default_factory=list)
    """Per request: (precision, recall, F1) of the predicted tools against the true ones."""
    classes: Counter[str] = field(default_factory=Counter)
    """Device classes said for the node's undeclared tools (`WordsForecast.classes`), per
    class, over the requests (each request's last stage)."""
    pending: list[_Said] = field(default_factory=list)
    _last: Request | None = None
    _final: Any = None
    """The last stage of ``_last``'s forecast (the one scored)."""

    def __post_init__(self) -> None:
        caps = capabilities(self.scheduler)  # read once: a step is no place to inspect
        self._ask, self._expect = caps.forecast_words, caps.expect

    @classmethod
    def of(cls, scheduler: Any, scenario: Scenario) -> WordsRun | None:
        """The run's words, or None where the scenario has no requests or the scheduler
        reads none."""
        if not scenario.workload.requests:
            return None
        caps = capabilities(scheduler)
        if caps.expect is None:
            return None
        oracle = getattr(scheduler, "forecast", None) == "oracle"
        if caps.forecast_words is None and not oracle:
            return None
        # the node's tools: those the workload calls (what the runner declares to the
        # scheduler); a forecast reads their descriptions, as the node's reader does
        called = {tool for batch in scenario.batches() for tool in batch}
        tools = [(name, e.description) for name, e in scenario.tools.items() if name in called]
        return cls(scheduler, tools, oracle=oracle)

    def arrive(self, request: Request, in_ms: float) -> None:
        """``request`` arrives ``in_ms`` from now: the scheduler is asked (now, in wall
        time; its answer counts from the arrival plus its latency). A scheduler may answer
        in stages (a list: e.g. words without a model at once, then the model's): each is
        handed over after its own latency; the last is the one scored."""
        if self.oracle:
            truth = set(request.tools)
            said: Any = WordsForecast({name: 1.0 if name in truth else 0.0
                                       for name, _ in self.tools}, source="oracle")
        else:
            said = self._ask(request.text, self.tools) if self._ask is not None else None
            if said is None:
                return
        stages = list(said) if isinstance(said, (list, tuple)) else [said]
        if not stages:
            return
        self.asked += 1
        last = stages[-1]
        if len(self.latencies_ms) < MAX_KEPT:
            self.latencies_ms.append(_latency(last))
        if getattr(last, "error", None) is not None:
            self.failed += 1
        elif len(self.scores) < MAX_KEPT:
            self.scores.append(node_scores(predicted(last), set(request.tools)))
        said_classes = getattr(last, "classes", None)
        if isinstance(said_classes, Mapping):
            self.classes.update(str(c) for c in list(said_classes.values())[:MAX_KEPT])
        self._final = last
        for stage in stages:
            if getattr(stage, "error", None) is None:
                self._last = request
                self.pending.append(_Said(self.now_ms + in_ms + _latency(stage), stage,
                                          request))

    def advance(self, ms: float) -> None:
        """Virtual time passes: forecasts whose latency has passed are handed over."""
        self.now_ms += max(0.0, ms)
        for said in [s for s in self.pending if s.ready_ms <= self.now_ms + 1e-9]:
            self.pending.remove(said)
            if self._expect is not None:
                self._expect(said.forecast)

    def ready_in(self, window_ms: float) -> float | None:
        """How long from now until the first pending forecast is in force, if within
        ``window_ms`` (None otherwise)."""
        waits = [max(0.0, s.ready_ms - self.now_ms) for s in self.pending]
        wait = min(waits, default=None)
        return wait if wait is not None and wait <= window_ms else None

    def first_step(self, request: Request) -> None:
        """``request``'s first step starts now: count whether its forecast (its last stage)
        is in force."""
        if self._last is request and not any(s.forecast is self._final for s in self.pending):
            self.in_time += 1

    def summary(self) -> dict[str, Any] | None:
        """The run's figures for the bench JSON (None where no forecast was asked: the
        scheduler has no forecaster)."""
        if not self.asked:
            return None
        lat = sorted(self.latencies_ms)
        p = [s[0] for s in self.scores]
        r = [s[1] for s in self.scores]
        f = [s[2] for s in self.scores]
        return {
            "asked": self.asked, "failed": self.failed, "in_time": self.in_time,
            "oracle": self.oracle,
            "latency_ms_p50": statistics.median(lat) if lat else None,
            "latency_ms_p95": lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else None,
            "precision": statistics.fmean(p) if p else None,
            "recall": statistics.fmean(r) if r else None,
            "f1": statistics.fmean(f) if f else None,
            "classes": dict(sorted(self.classes.items())),
        }


def _latency(forecast: Any) -> float:
    value = getattr(forecast, "latency_ms", 0.0)
    return max(0.0, float(value)) if isinstance(value, (int, float)) and value == value else 0.0
