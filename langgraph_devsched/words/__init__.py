"""Forecasting from words which of a node's tools the coming work calls (`base`), by BM25
over the tools' descriptions (`lexical`), by a chat model (`llm`), or both (`quality`'s
`CombinedForecaster`); `quality` measures a forecaster against TaskBench."""

import importlib
from typing import Any

from langgraph_devsched.words.base import (
    DevicePrior,
    Forecaster,
    ToolCard,
    WordsForecast,
    bound_text,
    bound_tools,
    node_scores,
    predicted,
)
from langgraph_devsched.words.lexical import LexicalForecaster

_LATER = {"LLMForecaster": "llm", "CombinedForecaster": "quality", "QualityReport": "quality",
          "forecast_quality": "quality", "taskbench_requests": "quality"}
"""Names imported when first used: the chat model's module builds on the agentic
scheduler's, which reads words itself (no import circle)."""


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "CombinedForecaster",
    "DevicePrior",
    "Forecaster",
    "LLMForecaster",
    "LexicalForecaster",
    "QualityReport",
    "ToolCard",
    "WordsForecast",
    "bound_text",
    "bound_tools",
    "forecast_quality",
    "node_scores",
    "predicted",
    "taskbench_requests",
]
