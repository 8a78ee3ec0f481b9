"""The VRAM ledger: reserve before a GPU start, release on every exit path, FIFO admission.

It tracks two things for one GPU: reserved VRAM (never above the budget) and the declared
compute share of the calls on it. `gpu_now` takes `try_reserve` (VRAM must fit now);
`gpu_queued` takes `reserve`/`areserve`, which wait in FIFO order until the VRAM fits and the
GPU is not oversubscribed (the shares of the running calls plus its own stay within 1, or
nothing else runs).

>>> ledger = VramLedger(budget_mb=1000)
>>> with ledger.hold(600) as r:
...     ledger.in_use_mb
600.0
>>> ledger.try_reserve(500) is not None, ledger.in_use_mb
(True, 500.0)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

_EPS = 1e-9


class VramOverBudgetError(ValueError):
    """A reservation larger than the whole budget: it could never be admitted."""


class QueueTimeoutError(TimeoutError):
    """A queued reservation was not admitted within its timeout."""


@dataclass(eq=False)
class Reservation:
    """One admitted reservation; give it back with `VramLedger.release` (idempotent)."""

    mb: float
    share: float
    ticket: int
    released: bool = False


@dataclass(eq=False)
class _Waiter:
    mb: float
    share: float
    ticket: int
    event: threading.Event | None = None
    future: asyncio.Future[None] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    reservation: Reservation | None = field(default=None)

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()
        if self.future is not None and self.loop is not None:
            fut = self.future

            def _done() -> None:
                if not fut.done():
                    fut.set_result(None)

            with contextlib.suppress(RuntimeError):  # loop closed: the waiter is gone
                self.loop.call_soon_threadsafe(_done)


class VramLedger:
    """Thread- and asyncio-safe reservation ledger for one GPU's VRAM budget."""

    def __init__(
        self,
        budget_mb: float,
        *,
        reserved_mb: float = 0.0,
        reserved_share: float = 0.0,
        max_active: int | None = None,
    ):
        if max_active is not None and max_active < 1:
            raise ValueError(f"max_active must be >= 1 or None, got {max_active}")
        self.max_active = max_active
        """At most this many reservations at once (a GPU concurrency cap), or None."""
        if budget_mb < 0:
            raise ValueError(f"budget_mb must be >= 0, got {budget_mb}")
        if not 0 <= reserved_mb <= budget_mb:
            raise ValueError(f"reserved_mb must be within [0, {budget_mb}], got {reserved_mb}")
        self.budget_mb = float(budget_mb)
        self._base_mb = float(reserved_mb)
        self._base_share = float(reserved_share)
        self._lock = threading.Lock()
        self._queue: deque[_Waiter] = deque()
        self._tickets = itertools.count()
        self._in_use_mb = self._base_mb
        self._share = self._base_share
        self._active = 0
        self._peak_mb = self._base_mb

    # -- read-only state -------------------------------------------------------------------
    @property
    def in_use_mb(self) -> float:
        """VRAM held by calls, excluding the background reservation given at construction."""
        return self._in_use_mb - self._base_mb

    @property
    def capacity_mb(self) -> float:
        """The budget less the background reservation: the most any call could get."""
        return self.budget_mb - self._base_mb

    @property
    def free_mb(self) -> float:
        return self.budget_mb - self._in_use_mb

    @property
    def peak_mb(self) -> float:
        """Highest VRAM ever held by calls at once (background excluded)."""
        return self._peak_mb - self._base_mb

    @property
    def active(self) -> int:
        return self._active

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def share_in_use(self) -> float:
        return self._share

    def fits(self, mb: float) -> bool:
        """True if ``mb`` more would fit in the budget right now."""
        return self._in_use_mb + mb <= self.budget_mb + _EPS

    def admissible(self, mb: float, share: float) -> bool:
        """True if a queued call of this size would be admitted now (ignoring the queue)."""
        not_oversubscribed = self._active == 0 or self._share + share <= 1.0 + _EPS
        return self.fits(mb) and not_oversubscribed and not self.at_cap

    @property
    def at_cap(self) -> bool:
        """True when ``max_active`` reservations are held (no more until one ends)."""
        return self.max_active is not None and self._active >= self.max_active

    # -- reserve / release -----------------------------------------------------------------
    def _check_size(self, mb: float) -> None:
        if mb < 0:
            raise ValueError(f"a reservation must be >= 0 MB, got {mb}")
        if mb > self.capacity_mb + _EPS:
            raise VramOverBudgetError(
                f"reservation of {mb:.0f} MB can never fit: budget {self.budget_mb:.0f} MB, "
                f"{self._base_mb:.0f} MB held by the background"
            )

    def _grant_locked(self, mb: float, share: float) -> Reservation:
        self._in_use_mb += mb
        self._share += share
        self._active += 1
        self._peak_mb = max(self._peak_mb, self._in_use_mb)
        return Reservation(mb=mb, share=share, ticket=next(self._tickets))

    def _admit_queue_locked(self) -> None:
        while self._queue and self.admissible(self._queue[0].mb, self._queue[0].share):
            waiter = self._queue.popleft()
            waiter.reservation = self._grant_locked(waiter.mb, waiter.share)
            waiter.wake()

    def try_reserve(self, mb: float, share: float = 0.0) -> Reservation | None:
        """Reserve now if the VRAM fits (the `gpu_now` rule), else return None."""
        self._check_size(mb)
        with self._lock:
            if not self.fits(mb) or self.at_cap:
                return None
            return self._grant_locked(mb, share)

    def reserve(self, mb: float, share: float = 0.0, timeout: float | None = None) -> Reservation:
        """Wait in FIFO order for admission (the `gpu_queued` rule); raise on timeout."""
        self._check_size(mb)
        with self._lock:
            if not self._queue and self.admissible(mb, share):
                return self._grant_locked(mb, share)
            waiter = _Waiter(mb, share, next(self._tickets), event=threading.Event())
            self._queue.append(waiter)
        assert waiter.event is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not waiter.event.wait(
                None if deadline is None else max(0.0, deadline - time.monotonic())
            ):
                if deadline is not None and time.monotonic() >= deadline:
                    raise QueueTimeoutError(
                        f"not admitted to the GPU within {timeout}s ({mb:.0f} MB)"
                    )
        except BaseException:
            self._abandon(waiter)
            raise
        assert waiter.reservation is not None
        return waiter.reservation

    async def areserve(
        self, mb: float, share: float = 0.0, timeout: float | None = None
    ) -> Reservation:
        """Async `reserve`: waits without blocking the event loop; cancellation is clean."""
        self._check_size(mb)
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._queue and self.admissible(mb, share):
                return self._grant_locked(mb, share)
            waiter = _Waiter(mb, share, next(self._tickets), future=loop.create_future(), loop=loop)
            self._queue.append(waiter)
        assert waiter.future is not None
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except asyncio.TimeoutError:
            self._abandon(waiter)
            raise QueueTimeoutError(
                f"not admitted to the GPU within {timeout}s ({mb:.0f} MB)"
            ) from None
        except BaseException:
            self._abandon(waiter)
            raise
        assert waiter.reservation is not None
        return waiter.reservation

    def _abandon(self, waiter: _Waiter) -> None:
        with self._lock:
            if waiter.reservation is not None:
                self._release_locked(waiter.reservation)
            else:
                with contextlib.suppress(ValueError):
                    self._queue.remove(waiter)
                self._admit_queue_locked()

    def _release_locked(self, reservation: Reservation) -> None:
        if reservation.released:
            return
        reservation.released = True
        self._in_use_mb -= reservation.mb
        self._share -= reservation.share
        self._active -= 1
        if self._active == 0:  # wipe float drift at rest
            self._in_use_mb = self._base_mb
            self._share = self._base_share
        self._admit_queue_locked()

    def release(self, reservation: Reservation) -> None:
        """Give a reservation back (idempotent) and admit queued waiters that now fit."""
        with self._lock:
            self._release_locked(reservation)

    @contextlib.contextmanager
    def hold(
        self, mb: float, share: float = 0.0, timeout: float | None = None
    ) -> Iterator[Reservation]:
        """``reserve`` for the duration of a block, released on every exit path."""
        reservation = self.reserve(mb, share, timeout)
        try:
            yield reservation
        finally:
            self.release(reservation)

    @contextlib.asynccontextmanager
    async def ahold(
        self, mb: float, share: float = 0.0, timeout: float | None = None
    ) -> AsyncIterator[Reservation]:
        """Async `hold`."""
        reservation = await self.areserve(mb, share, timeout)
        try:
            yield reservation
        finally:
            self.release(reservation)
