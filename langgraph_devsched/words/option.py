"""The ``forecast=`` option of a scheduler that reads words: which forecaster, checked once.

>>> check_forecast("lexical"), check_forecast(None)
('lexical', None)
>>> check_forecast("bm25")
Traceback (most recent call last):
...
ValueError: forecast must be None, 'lexical', 'oracle' or a Forecaster ..., got 'bm25'
>>> f = words_forecast("lexical", "transcribe this recording",
...                    [("asr", "transcribe speech in a recording to text"),
...                     ("draw", "draw an image from a prompt"),
...                     ("ocr", "read the text of a scanned page")])
>>> max(f.probabilities, key=f.probabilities.__getitem__), f.source
('asr', 'lexical')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from langgraph_devsched.words.base import Forecaster, ToolCard, WordsForecast, predicted

FORECASTS = ("lexical", "oracle")
ForecastOption = Literal["lexical", "oracle"] | Forecaster | None
"""None (no forecast from words), ``"lexical"`` (BM25 over the tools' descriptions),
``"oracle"`` (the bench hands over the request's true tools: ground truth) or a
forecaster."""

_LEXICAL: list[Forecaster] = []


def check_forecast(value: object) -> ForecastOption:
    """``value`` as a `ForecastOption`, or a `ValueError` naming the valid ones."""
    if value is None or value in FORECASTS:
        return value  # type: ignore[return-value]
    if not isinstance(value, str) and callable(getattr(value, "forecast", None)):
        return value  # type: ignore[return-value]
    raise ValueError(f"forecast must be None, 'lexical', 'oracle' or a Forecaster ... (an "
                     f"object with forecast(text, tools)), got {value!r}")


def words_forecast(option: ForecastOption, text: str,
                   tools: Sequence[tuple[str, str]]) -> WordsForecast | None:
    """What ``option``'s forecaster says of ``text`` for ``tools`` (name, description);
    None for no forecaster or the oracle (the bench hands the truth over itself)."""
    if option is None or option == "oracle":
        return None
    if option == "lexical":
        if not _LEXICAL:  # one shared forecaster: its index cache is bounded
            from langgraph_devsched.words.lexical import LexicalForecaster

            _LEXICAL.append(LexicalForecaster())
        forecaster = _LEXICAL[0]
    else:
        forecaster = option
    cards = [ToolCard(str(name), str(desc)) for name, desc in tools]
    return forecaster.forecast(text, cards)


__all__ = ["FORECASTS", "ForecastOption", "check_forecast", "predicted", "words_forecast"]
