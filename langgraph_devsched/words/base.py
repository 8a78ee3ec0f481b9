"""Forecasting, from words, which of a node's tools the coming work calls.

A forecaster reads only the user's newest message text and each tool's name and description
(never tool arguments or outputs) and answers, per tool, a probability (`WordsForecast`).

Bounds, applied before any use:

- the message: at most `MAX_TEXT_CHARS` characters; a longer one keeps its first
  `TEXT_HEAD_CHARS` and last `TEXT_TAIL_CHARS` characters (joined by ``" ... "``), where a
  request usually states what it wants (`bound_text`);
- the tools: at most `MAX_TOOLS` (the first ones; the others get no probability and are
  named in nothing), each description cut to `MAX_DESCRIPTION_CHARS` (`bound_tools`).

Scoring (`node_scores`) follows TaskBench's node F1: the predicted set of tool names against
the true set.

>>> f = WordsForecast({"a": 0.9, "b": 0.2}, source="test")
>>> sorted(predicted(f)), node_scores({"a"}, {"a", "c"})
(['a'], (1.0, 0.5, 0.6666666666666666))
>>> len(bound_text("x" * 50_000)) <= MAX_TEXT_CHARS
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from langgraph_devsched.hints import DevicePrior

TEXT_HEAD_CHARS = 3072
TEXT_TAIL_CHARS = 1024
MAX_TEXT_CHARS = TEXT_HEAD_CHARS + TEXT_TAIL_CHARS + 5
"""A message longer than this keeps its first 3 KB and last 1 KB (characters)."""
MAX_TOOLS = 256
MAX_DESCRIPTION_CHARS = 1024
MAX_NAME_CHARS = 128


@dataclass(frozen=True)
class ToolCard:
    """What a forecaster may know of a tool: its name and description."""

    name: str
    description: str = ""


@dataclass(frozen=True)
class WordsForecast:
    """Per tool of the node, the probability that the coming work calls it.

    ``probabilities``: one value in [0, 1] per tool of the node (empty when ``error`` is
    set: the caller then uses its classical forecast). ``classes``: an optional device class
    per tool (a prior for tools whose hints declare none). ``source``: who forecast
    (``lexical``, ``llm``, ``combined``, ``oracle``...). ``latency_ms``: wall time of the
    forecast. ``error``: why there is no forecast (timeout, unparsable answer...).
    """

    probabilities: Mapping[str, float] = field(default_factory=dict)
    classes: Mapping[str, DevicePrior] = field(default_factory=dict)
    source: str = ""
    latency_ms: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class Forecaster(Protocol):
    """Forecasts from the newest message's text which of ``tools`` the coming work calls."""

    def forecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast: ...

    async def aforecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast: ...


def bound_text(text: str) -> str:
    """``text`` cut to at most `MAX_TEXT_CHARS`: its head and tail kept."""
    text = text or ""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    return f"{text[:TEXT_HEAD_CHARS]} ... {text[-TEXT_TAIL_CHARS:]}"


def bound_tools(tools: Sequence[ToolCard]) -> tuple[ToolCard, ...]:
    """The first `MAX_TOOLS` tools with distinct names, names and descriptions cut."""
    out: list[ToolCard] = []
    seen: set[str] = set()
    for tool in tools:
        name = str(tool.name)[:MAX_NAME_CHARS]
        if not name or name in seen:
            continue
        seen.add(name)
        out.append(ToolCard(name, str(tool.description or "")[:MAX_DESCRIPTION_CHARS]))
        if len(out) >= MAX_TOOLS:
            break
    return tuple(out)


def first_sentence(description: str, limit: int = 200) -> str:
    """The description's first sentence (at most ``limit`` characters).

    >>> first_sentence("Does X. Then Y.")
    'Does X.'
    """
    text = " ".join(description.split())
    for i, ch in enumerate(text):
        if ch in ".!?" and (i + 1 == len(text) or text[i + 1] == " "):
            return text[: i + 1][:limit]
    return text[:limit]


def predicted(forecast: WordsForecast, threshold: float = 0.5) -> set[str]:
    """The tools whose probability is at least ``threshold`` (none for an error)."""
    if forecast.error is not None:
        return set()
    return {name for name, p in forecast.probabilities.items() if p >= threshold}


def node_scores(predicted: set[str], truth: set[str]) -> tuple[float, float, float]:
    """(precision, recall, F1) of a predicted tool set against the true one (TaskBench's
    node metrics for one request). Both empty: all 1.0; one empty: all 0.0."""
    if not predicted and not truth:
        return 1.0, 1.0, 1.0
    hit = len(predicted & truth)
    precision = hit / len(predicted) if predicted else 0.0
    recall = hit / len(truth) if truth else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1
