"""A bounded set of consultation threads: a hung chat model can hold a slot, never more.

A synchronous chat model that hangs cannot be stopped from outside its thread. So each
consultation that must run in a thread gets one of ``size`` slots (a daemon thread of its
own, never the event loop's default executor); while every slot is held by a model still
running, `ConsultationSlots.start` returns None at once and the scheduler falls back
(cause ``busy``) instead of queueing behind the hung ones.

>>> slots = ConsultationSlots(1)
>>> slots.start(lambda: 42).result(timeout=5)
42
>>> import threading
>>> gate = threading.Event()
>>> held = slots.start(gate.wait)
>>> slots.start(lambda: 1) is None, slots.in_use
(True, 1)
>>> gate.set(); held.result(timeout=5)
True
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class ConsultationSlots:
    """At most ``size`` consultation threads alive at once."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self._free = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._in_use = 0

    @property
    def in_use(self) -> int:
        """Slots held now (by running or hung consultations)."""
        with self._lock:
            return self._in_use

    def start(self, fn: Callable[[], T], *, name: str = "devsched-agentic") -> Future[T] | None:
        """Run ``fn`` in a daemon thread of its own if a slot is free, else None at once.

        The caller's context variables (tracing callbacks) go with it. The slot is given
        back as soon as ``fn`` returns, before its result is set.
        """
        if not self._free.acquire(blocking=False):
            return None
        with self._lock:
            self._in_use += 1
        future: Future[T] = Future()
        future.set_running_or_notify_cancel()  # running: a waiter's cancel() cannot drop it
        ctx = contextvars.copy_context()

        def run() -> None:
            result: T | None = None
            error: BaseException | None = None
            try:
                result = ctx.run(fn)
            except BaseException as exc:  # handed to the waiting caller
                error = exc
            finally:
                with self._lock:
                    self._in_use -= 1
                self._free.release()
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        threading.Thread(target=run, daemon=True, name=name).start()
        return future
