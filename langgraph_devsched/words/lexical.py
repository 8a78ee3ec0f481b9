"""`LexicalForecaster`: BM25 over the tools' names and descriptions, no model.

Each tool is one document: its name (counted `NAME_WEIGHT` times: a name is the densest
statement of what a tool does) and its description, lowercased, split on non-alphanumerics,
stop words dropped, each word lightly stemmed (`tokens`). The message is scored against them
with Okapi BM25 (the ``rank-bm25`` package). Scores become probabilities by one fixed rule
(`LexicalForecaster.probabilities`): with ``best`` the top score and ``r = score / best``,

    p = confidence(best) * r ** SHARPNESS,   confidence(best) = best / (best + HALF_SCORE)

so the best-matching tool passes 0.5 once its score reaches `HALF_SCORE`, and another tool
passes 0.5 only when it scores close to the best (how close grows with the confidence).
The constants are global, set once on the development split of TaskBench's Hugging Face
domain so that a typical request passes about two tools (not tuned per record). An empty
message, or one sharing no word with any tool (another language), scores 0 everywhere.

Indexes are cached per tool set (`CACHE_SIZE` sets, least recently used dropped).

>>> tools = [ToolCard("speech_to_text", "Transcribe recorded speech audio into text."),
...          ToolCard("draw_image", "Generate a picture from a prompt.")]
>>> f = LexicalForecaster().forecast("please transcribe this speech recording", tools)
>>> max(f.probabilities, key=f.probabilities.__getitem__)
'speech_to_text'
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from langgraph_devsched.words.base import ToolCard, WordsForecast, bound_text, bound_tools

NAME_WEIGHT = 3
HALF_SCORE = 1.5
SHARPNESS = 1.0
CACHE_SIZE = 64

_STOP_TEXT = """a an and are as at be been but by can could do does for from had has have he her his
    i if in into is it its me my of on or our please she so some such that the their them
    then there these they this those to us was we were what when which who will with would
    you your yours also any all just like want need help using use given task tasks model
    models one each other let able"""
STOP_WORDS = frozenset(_STOP_TEXT.split())

_WORD = re.compile(r"[a-z0-9]+")


def stem(word: str) -> str:
    """A light suffix stripper (enough to match transcribe/transcribing/transcription).

    >>> [stem(w) for w in ["images", "transcribing", "detected", "classification", "speech"]]
    ['imag', 'transcrib', 'detect', 'classif', 'speech']
    """
    for suffix in ("ications", "ication", "ations", "ation", "ings", "ing", "ions", "ion",
                   "ies", "ed", "es", "s", "e", "y"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def tokens(text: str) -> list[str]:
    """Lowercased, stop words dropped, stemmed; ``_`` and ``-`` split words."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def _bm25_class() -> Any:
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        raise ImportError(
            "LexicalForecaster needs the rank-bm25 package: pip install rank-bm25 "
            "(from a clone: pip install -e .)"
        ) from None
    return BM25Okapi


class LexicalForecaster:
    """BM25 over names and descriptions; deterministic, no I/O, about a millisecond."""

    source = "lexical"

    def __init__(
        self,
        *,
        half_score: float = HALF_SCORE,
        sharpness: float = SHARPNESS,
        name_weight: int = NAME_WEIGHT,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self.half_score = half_score
        self.sharpness = sharpness
        self.name_weight = name_weight
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[ToolCard, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        _bm25_class()  # fail at construction, not at the first forecast

    def _document(self, tool: ToolCard) -> list[str]:
        return tokens(tool.name) * self.name_weight + tokens(tool.description)

    def index(self, tools: tuple[ToolCard, ...]) -> Any:
        """The BM25 index of ``tools`` (cached)."""
        with self._lock:
            if tools in self._cache:
                self._cache.move_to_end(tools)
                return self._cache[tools]
        # rank-bm25 divides by the mean document length: keep every document non-empty
        index = _bm25_class()([self._document(t) or ["_"] for t in tools])
        with self._lock:
            self._cache[tools] = index
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return index

    def scores(self, text: str, tools: Sequence[ToolCard]) -> dict[str, float]:
        """Raw BM25 score per tool (bounded text and tools)."""
        cards = bound_tools(tools)
        if not cards:
            return {}
        query = tokens(bound_text(text))
        if not query:
            return {t.name: 0.0 for t in cards}
        raw = self.index(cards).get_scores(query)
        return {t.name: max(0.0, float(s)) for t, s in zip(cards, raw, strict=True)}

    def probabilities(self, scores: dict[str, float]) -> dict[str, float]:
        """The module's rule: ``best / (best + half_score) * (score / best) ** sharpness``."""
        best = max(scores.values(), default=0.0)
        if best <= 0.0:
            return {name: 0.0 for name in scores}
        confidence = best / (best + self.half_score)
        return {name: min(1.0, confidence * (s / best) ** self.sharpness)
                for name, s in scores.items()}

    def forecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        start = time.perf_counter()
        probabilities = self.probabilities(self.scores(text, tools))
        return WordsForecast(probabilities, source=self.source,
                             latency_ms=(time.perf_counter() - start) * 1000)

    async def aforecast(self, text: str, tools: Sequence[ToolCard]) -> WordsForecast:
        """As `forecast` (pure computation, about a millisecond: no thread needed)."""
        return self.forecast(text, tools)
