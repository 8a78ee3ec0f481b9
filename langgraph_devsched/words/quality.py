"""How well a forecaster predicts the tools of TaskBench requests, and `CombinedForecaster`.

`forecast_quality` reads a TaskBench directory (``data.json``: one record a line with
``instruction`` and ``task_nodes``; ``tool_desc.json``: ``{"nodes": [{"id", "desc"}]}``),
forecasts each request from its instruction over all the domain's tools, and compares the
tools at probability >= 0.5 with the ``task_nodes`` names: per request node precision,
recall and F1 (`base.node_scores`), averaged over requests (``mean_*``), and the micro
averages over all requests' tools (``micro_*``; TaskBench's own tables pool tools this way).
A record naming a tool not in ``tool_desc.json`` is skipped and counted
(``skipped_unknown``); a record without instruction or nodes is skipped and counted
(``skipped_malformed``). A forecast with ``error`` counts as an empty prediction and in
``errors``.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from langgraph_devsched.words.base import (
    DevicePrior,
    Forecaster,
    ToolCard,
    WordsForecast,
    node_scores,
    predicted,
)

THRESHOLD = 0.5


@dataclass(frozen=True)
class Request:
    """One TaskBench request: its id, instruction and true tool names."""

    id: str
    text: str
    truth: frozenset[str]


def taskbench_requests(
    taskbench_dir: str | Path,
) -> tuple[list[ToolCard], list[Request], dict[str, int]]:
    """The domain's tools, its usable requests, and how many records were skipped why, as
    `bench.taskbench.load_taskbench` reads them."""
    from langgraph_devsched.bench.taskbench import load_taskbench

    bench = load_taskbench(taskbench_dir)
    tools = [ToolCard(t.name, t.description) for t in bench.tools.values()]
    requests = [Request(r.id, r.instruction, frozenset(r.tools)) for r in bench.requests]
    unknown = sum(n for why, n in bench.skipped.items() if why.startswith("names a tool"))
    return tools, requests, {"unknown": unknown,
                             "malformed": sum(bench.skipped.values()) - unknown}


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class QualityReport:
    """A forecaster's node scores over TaskBench requests, and its latency."""

    source: str
    requests: int = 0
    mean_precision: float = 0.0
    mean_recall: float = 0.0
    mean_f1: float = 0.0
    micro_precision: float = 0.0
    micro_recall: float = 0.0
    micro_f1: float = 0.0
    mean_predicted: float = 0.0
    """Tools predicted per request, on average."""
    latency_p50_ms: float = 0.0
    latency_p95_ms: float = 0.0
    errors: int = 0
    skipped_unknown: int = 0
    skipped_malformed: int = 0
    threshold: float = THRESHOLD
    error_samples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def row(self) -> str:
        return (f"{self.source:<12} {self.requests:>4} {self.mean_precision:6.3f} "
                f"{self.mean_recall:6.3f} {self.mean_f1:6.3f} {self.micro_f1:6.3f} "
                f"{self.mean_predicted:5.2f} {self.latency_p50_ms:9.1f} "
                f"{self.latency_p95_ms:9.1f} {self.errors:>4}")

    HEADER = (f"{'forecaster':<12} {'n':>4} {'P':>6} {'R':>6} {'F1':>6} {'microF1':>6} "
              f"{'#pred':>5} {'p50 ms':>9} {'p95 ms':>9} {'err':>4}")


def forecast_quality(
    forecaster: Forecaster,
    taskbench_dir: str | Path,
    *,
    limit: int | None = None,
    threshold: float = THRESHOLD,
    progress: Any = None,
) -> QualityReport:
    """``forecaster``'s node scores on the first ``limit`` usable requests (all: None).
    ``progress``: called with (index, request, forecast) after each request."""
    tools, requests, skipped = taskbench_requests(taskbench_dir)
    if limit is not None:
        requests = requests[:limit]
    report = QualityReport(getattr(forecaster, "source", type(forecaster).__name__),
                           skipped_unknown=skipped["unknown"],
                           skipped_malformed=skipped["malformed"], threshold=threshold)
    scores: list[tuple[float, float, float]] = []
    latencies: list[float] = []
    hits = n_pred = n_true = 0
    for i, request in enumerate(requests):
        forecast = forecaster.forecast(request.text, tools)
        guess = predicted(forecast, threshold)
        scores.append(node_scores(guess, set(request.truth)))
        latencies.append(forecast.latency_ms)
        hits += len(guess & request.truth)
        n_pred += len(guess)
        n_true += len(request.truth)
        if forecast.error is not None:
            report.errors += 1
            if len(report.error_samples) < 5:
                report.error_samples.append(forecast.error[:200])
        if progress is not None:
            progress(i, request, forecast)
    n = len(scores)
    report.requests = n
    if n:
        report.mean_precision = statistics.fmean(s[0] for s in scores)
        report.mean_recall = statistics.fmean(s[1] for s in scores)
        report.mean_f1 = statistics.fmean(s[2] for s in scores)
        report.mean_predicted = n_pred / n
        report.micro_precision = hits / n_pred if n_pred else 0.0
        report.micro_recall = hits / n_true if n_true else 0.0
        mp, mr = report.micro_precision, report.micro_recall
        report.micro_f1 = 2 * mp * mr / (mp + mr) if mp + mr else 0.0
        report.latency_p50_ms = _percentile(latencies, 0.5)
        report.latency_p95_ms = _percentile(latencies, 0.95)
    return report


Rule = Literal["max", "mean"]


class CombinedForecaster:
    """Two forecasters' probabilities combined per tool (``max`` or ``mean``); when one
    fails the other's forecast stands alone (``b`` failing: ``a``'s, typically the lexical
    forecast standing in for a late or garbled LLM). Latency: both together (the lexical one
    is about a millisecond; `aforecast` runs them concurrently)."""

    def __init__(self, a: Forecaster, b: Forecaster, *, rule: Rule = "max") -> None:
        if rule not in ("max", "mean"):
            raise ValueError(f"unknown rule {rule!r}; valid: max, mean")
        self.a, self.b, self.rule = a, b, rule
        self.source = f"combined:{rule}"

    def _combine(self, fa: WordsForecast, fb: WordsForecast, start: float) -> WordsForecast:
        latency = (time.perf_counter() - start) * 1000
        if fa.error is not None and fb.error is not None:
            return WordsForecast(source=self.source, latency_ms=latency,
                                 error=f"both failed: {fa.error}; {fb.error}"[:300])
        if fb.error is not None or fa.error is not None:
            alone = fa if fb.error is not None else fb
            return WordsForecast(alone.probabilities, alone.classes,
                                 f"{self.source}({alone.source} alone)", latency)
        probabilities: dict[str, float] = {}
        for name in fa.probabilities.keys() | fb.probabilities.keys():
            pa, pb = fa.probabilities.get(name, 0.0), fb.probabilities.get(name, 0.0)
            probabilities[name] = max(pa, pb) if self.rule == "max" else (pa + pb) / 2
        classes: dict[str, DevicePrior] = {**fa.classes, **fb.classes}
        return WordsForecast(probabilities, classes, self.source, latency)

    def forecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        start = time.perf_counter()
        return self._combine(self.a.forecast(text, tools), self.b.forecast(text, tools), start)

    async def aforecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        start = time.perf_counter()
        fa, fb = await asyncio.gather(self.a.aforecast(text, tools),
                                      self.b.aforecast(text, tools))
        return self._combine(fa, fb, start)


class Recorded:
    """A forecaster that replays forecasts recorded from another (to combine an LLM's
    forecasts with others' without asking the model again): keyed by the request text."""

    def __init__(self, forecasts: dict[str, WordsForecast], source: str) -> None:
        self.forecasts, self.source = forecasts, source

    def forecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        return self.forecasts.get(text) or WordsForecast(source=self.source,
                                                         error="not recorded")

    async def aforecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        return self.forecast(text, tools)


def iter_requests(taskbench_dir: str | Path, limit: int | None = None) -> Iterator[Request]:
    """The usable requests of a TaskBench directory (see `taskbench_requests`)."""
    _, requests, _ = taskbench_requests(taskbench_dir)
    yield from requests[:limit] if limit is not None else requests
