"""What one running call holds (VRAM, a CPU slot), given back once, never while it still runs.

An executor opens a `Lease` when it places a call and ends it when the call's frame (or
coroutine) ends. A sync tool's thread cannot be stopped: when the node stops waiting for one
(a timeout, a cancelled ``ainvoke``), it first calls `Lease.outlive` with the thread's future,
and the lease then ends only when that thread really returns. The ledger never lies.

>>> from concurrent.futures import Future
>>> lease, log = Lease(), []
>>> work: Future[None] = Future()
>>> lease.outlive(work, then=lambda: log.append("step closed"))
>>> lease.end(lambda: log.append("released"))
>>> log
[]
>>> work.set_result(None)
>>> log
['released', 'step closed']
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

logger = logging.getLogger(__name__)


class Lease:
    """One call's resources; `end` runs its release now, or once outlived work returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work: Future[Any] | None = None
        self._then: list[Callable[[], object]] = []
        self._ended = False
        self.holding = False
        """True while the call holds a device resource (VRAM, a CPU slot) the executor set."""

    @property
    def outlived(self) -> bool:
        """True when the call's work still runs somewhere the node stopped waiting for."""
        work = self._work
        return work is not None and not work.done()

    def outlive(self, work: Future[Any], then: Callable[[], object] | None = None) -> None:
        """Keep the lease until ``work`` is done; ``then`` runs after the release."""
        with self._lock:
            self._work = work
            if then is not None:
                self._then.append(then)

    def end(self, release: Callable[[], None]) -> None:
        """Release (exactly once): now, or when the outlived work returns."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            work = self._work
        if work is None or work.done():
            self._run(release)
        else:
            work.add_done_callback(lambda _: self._run(release))

    def _run(self, release: Callable[[], object]) -> None:
        for fn in (release, *self._then):
            try:
                fn()
            except Exception:  # a callback must not take the others down
                logger.exception("lease callback %r failed", fn)


_LEASE: contextvars.ContextVar[Lease | None] = contextvars.ContextVar(
    "devsched_lease", default=None
)


def current_lease() -> Lease | None:
    """The lease of the call running in this context (set by the executor), or None."""
    return _LEASE.get()


class leased:
    """Make ``lease`` the current one for the block (the call's run under its placement; a
    class, not a generator: it runs on every tool call)."""

    __slots__ = ("_lease", "_token")

    def __init__(self, lease: Lease) -> None:
        self._lease = lease

    def __enter__(self) -> Lease:
        self._token = _LEASE.set(self._lease)
        return self._lease

    def __exit__(self, *exc: object) -> None:
        _LEASE.reset(self._token)
