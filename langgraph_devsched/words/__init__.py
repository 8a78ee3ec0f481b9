"""Forecasting from words which of a node's tools the coming work calls (`base`), by BM25
over the tools' descriptions (`lexical`), by a chat model (`llm`), or both (`quality`'s
`CombinedForecaster`); `quality` measures a forecaster against TaskBench."""

from langgraph_devsched.words.base import (
    DeviceClass,
    Forecaster,
    ToolCard,
    WordsForecast,
    bound_text,
    bound_tools,
    node_scores,
    predicted,
)
from langgraph_devsched.words.lexical import LexicalForecaster
from langgraph_devsched.words.llm import LLMForecaster
from langgraph_devsched.words.quality import (
    CombinedForecaster,
    QualityReport,
    forecast_quality,
    taskbench_requests,
)

__all__ = [
    "CombinedForecaster",
    "DeviceClass",
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
