"""Reading each new request in the background: the node's side of forecasts from words.

A scheduler that reads words (``forecast_words``: the agentic scheduler's sub-agent, the
monitor policy with ``forecast="lexical"``) is asked once per new request: the newest
`HumanMessage` of the graph's messages, read when a tool step arrives, or earlier where the
plugin sees the messages before the agent's model is called (the ``create_agent``
middleware), or handed over by the app (`DeviceToolNode.read_request`). It reads only that
message's text and the tools' names and descriptions.

The forecast runs in the reader's own thread, started with the node: a step only queues its
request (at most `MAX_QUEUED` wait), so no step waits for it. Each
stage it answers is handed to the scheduler (``expect``) as it comes; then, when no step is
running, the node's loads between steps are asked again (``on_forecast``), so a model the
request needs can load while the agent's LLM thinks.

What was read is kept, bounded (`MAX_KEPT`): `ReadRequest` per request (when, the latency,
the source, the predicted tools, an error), and `in_force` gives a step's report the
forecast it ran under, with which of its tools it predicted (hits) and which not (misses).
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

MAX_KEPT = 64
"""At most this many requests' readings are remembered."""
MAX_QUEUED = 4
"""At most this many requests wait to be read (behind a slow model); more are dropped."""
THRESHOLD = 0.5
"""A tool whose probability reaches this is predicted."""


@dataclass
class ReadRequest:
    """One request read: what the forecast said, and when."""

    key: str
    """A digest of the message's text (the same text handed over at the graph's entry and
    seen again at a step is one request)."""
    started_s: float
    stages: int = 0
    source: str = ""
    latency_ms: float | None = None
    """Until the last stage was handed over; None while it runs."""
    predicted: tuple[str, ...] = ()
    error: str | None = None


@dataclass
class RequestReader:
    """Asks ``scheduler.forecast_words`` once per new request, in the background (see the
    module). ``tools``: the node's tools as (name, description)."""

    scheduler: Any
    tools: Sequence[tuple[str, str]]
    on_forecast: Callable[[], None] | None = None
    clock: Callable[[], float] = time.monotonic
    history: deque[ReadRequest] = field(default_factory=lambda: deque(maxlen=MAX_KEPT))
    _last_key: str | None = None
    _in_force: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _worker: threading.Thread | None = None
    _todo: queue.Queue[tuple[str, ReadRequest]] = field(
        default_factory=lambda: queue.Queue(MAX_QUEUED))

    def __post_init__(self) -> None:
        self._names = frozenset(name for name, _ in self.tools)
        self._ensure_worker()  # at construction: no step ever waits for a thread to start

    def read(self, messages: Any) -> bool:
        """Read the newest human message of ``messages`` (a list, or a state with
        ``messages``) if it is new; True when a reading started."""
        found = newest_human(messages)
        if found is None:
            return False
        key, text = found
        return self.read_text(text, key=key)

    def read_text(self, text: str, *, key: str | None = None) -> bool:
        """Read ``text`` as a new request (unless it is the one read last); True when a
        reading started."""
        key = key or digest(text)
        with self._lock:
            if key == self._last_key:
                return False
            self._last_key = key
            reading = ReadRequest(key, self.clock())
            self.history.append(reading)
        self._ensure_worker()
        try:
            self._todo.put_nowait((text, reading))
        except queue.Full:  # readings pile up behind a slow model: the newest waits
            reading.error = "dropped: the readings before it had not ended"
            return False
        return True

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the readings under way (tests, a demo); True when none is left."""
        deadline = None if timeout is None else self.clock() + timeout
        while self._todo.unfinished_tasks:
            if deadline is not None and self.clock() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def _ensure_worker(self) -> None:
        """The one thread that reads, started once (again after a fork: threads do not
        survive one); a step only queues its request, it never waits for a thread."""
        worker = self._worker
        if worker is not None and worker.is_alive():
            return
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._serve, name="devsched-words",
                                                daemon=True)
                self._worker.start()

    def _serve(self) -> None:
        while True:
            text, reading = self._todo.get()
            try:
                self._run(text, reading)
            finally:
                self._todo.task_done()

    def in_force(self, tools: Iterable[str]) -> dict[str, Any] | None:
        """For a step's report: the forecast in force (its source, latency, predicted tools)
        and which of the step's ``tools`` it predicted (hits) and did not (misses); None
        before any forecast."""
        with self._lock:
            said = self._in_force
        if said is None:
            return None
        predicted = _predicted(said, self._names)
        step = list(dict.fromkeys(tools))
        return {"source": getattr(said, "source", ""),
                "latency_ms": getattr(said, "latency_ms", None),
                "predicted": predicted[:MAX_KEPT],
                "hits": [t for t in step if t in predicted],
                "misses": [t for t in step if t not in predicted]}

    def _run(self, text: str, reading: ReadRequest) -> None:
        ask = getattr(self.scheduler, "forecast_words", None)
        expect = getattr(self.scheduler, "expect", None)
        if ask is None or expect is None:
            return
        try:
            said = ask(text, list(self.tools))
            stages: Iterable[Any] = () if said is None else (
                [said] if hasattr(said, "probabilities") else said)
            for stage in stages:
                if getattr(stage, "error", None) is not None:
                    reading.error = str(stage.error)[:300]
                    continue
                expect(stage)
                with self._lock:
                    self._in_force = stage
                reading.stages += 1
                reading.source = str(getattr(stage, "source", ""))
                reading.predicted = tuple(_predicted(stage, self._names))
                if self.on_forecast is not None:
                    self.on_forecast()
        except Exception as exc:  # a forecaster's failure must not break the node
            reading.error = f"{type(exc).__name__}: {exc}"[:300]
            logger.warning("the forecast from words failed: %s", reading.error)
        finally:
            reading.latency_ms = (self.clock() - reading.started_s) * 1000.0


def reads_words(scheduler: Any) -> bool:
    """Whether ``scheduler`` forecasts from words (``forecast_words``, and ``reads_words``
    where it says whether it answers)."""
    return callable(getattr(scheduler, "forecast_words", None)) and bool(
        getattr(scheduler, "reads_words", True))


def newest_human(messages: Any) -> tuple[str, str] | None:
    """(key, text) of the newest human message of ``messages`` (a list of messages or
    dicts, or a state with ``messages``), or None."""
    if isinstance(messages, Mapping):
        messages = messages.get("messages")
    elif hasattr(messages, "messages") and not isinstance(messages, (list, tuple)):
        messages = messages.messages
    if not isinstance(messages, (list, tuple)):
        return None
    for message in reversed(messages):
        kind = (message.get("type") or message.get("role")) if isinstance(
            message, Mapping) else getattr(message, "type", None)
        if kind not in ("human", "user"):
            continue
        content = message.get("content") if isinstance(message, Mapping) else getattr(
            message, "content", "")
        text = _text(content)
        return digest(text), text
    return None


def digest(text: str) -> str:
    """A short key of a message's text."""
    return "sha1:" + hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]


def _text(content: Any) -> str:
    """A message's text (a string, or the text parts of a list of content blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p if isinstance(p, str) else str(p.get("text", ""))
                        for p in content if isinstance(p, (str, Mapping)))
    return ""


def _predicted(forecast: Any, names: frozenset[str]) -> list[str]:
    """The node's tools ``forecast`` predicts (a name the node lacks is dropped), sorted."""
    probs = getattr(forecast, "probabilities", None)
    if not isinstance(probs, Mapping):
        return []
    return sorted(t for t, p in probs.items() if t in names and _number(p) >= THRESHOLD)[
        :MAX_KEPT]


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value == value else 0.0
