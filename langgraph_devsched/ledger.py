"""The VRAM ledger: reserve before a GPU start, release on every exit path, FIFO admission.

It tracks three things for one GPU: reserved VRAM (never above the budget), the declared
compute share of the calls on it, and the model weights resident on it. `gpu_now` takes
`try_reserve` (VRAM must fit now); `gpu_queued` takes `reserve`/`areserve`, which wait in
FIFO order until the VRAM fits and the GPU is not oversubscribed (the shares of the running
calls plus its own stay within 1, or nothing else runs).

Resident weights (`WeightsNeed`, see `langgraph_devsched.residency`) are long-lived: a call
that needs a model reserves its working memory and, when the model is not resident yet, its
weights; the call's release gives back the working memory only, the weights stay (idle)
until another admission needs their room: then `residency.plan_room` picks the least
recently used idle models (never one in use or kept warm; `demote` moves the models a step
uses only off this GPU to the front, `residency.demoted`), and the reservation names them
in ``evicted`` so that the caller frees them. A queued request that no eviction can ever
admit beside the weights kept warm is refused (`NeverFitsError`), never left at the head of
the queue. At every instant the ledger holds resident weights plus the working memory of the
running calls; `clear_weights` empties it at close.

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
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field

from langgraph_devsched.residency import WarmModel, plan_room

_EPS = 1e-9


class VramOverBudgetError(ValueError):
    """A reservation larger than the whole budget: it could never be admitted."""


class NeverFitsError(VramOverBudgetError):
    """A queued reservation that no eviction can ever admit: the weights kept warm on the GPU
    (never evicted for another model) leave it no room. Refused at once, never queued."""


class ForeignReservationError(ValueError):
    """A release of a reservation this ledger never granted (another GPU's): refused, the
    ledger unchanged. Give a reservation back with `Reservation.release` (its own ledger)."""


class QueueTimeoutError(TimeoutError):
    """A queued reservation was not admitted within its timeout."""


@dataclass(frozen=True)
class WeightsNeed:
    """The resident model a reservation's call runs on, and the VRAM its weights hold."""

    model: str
    mb: float
    keep_warm: bool = False


@dataclass(eq=False)
class Reservation:
    """One admitted reservation; give it back with `release` (to the ledger that granted
    it; idempotent). A ledger refuses to release one it never granted."""

    mb: float
    share: float
    ticket: int
    released: bool = False
    model: str | None = None
    """The resident model the call runs on (pinned until the release), or None."""
    loaded: bool = False
    """The model's weights were reserved by this admission (they must be loaded)."""
    evicted: tuple[str, ...] = ()
    """Idle models whose weights this admission evicted (the caller frees them)."""
    call: bool = True
    """A call's reservation (counted as active, against ``max_active``); False for weights
    alone (`try_hold_weights`)."""
    ledger: VramLedger | None = field(default=None, repr=False)
    """The ledger that granted it (on a machine with several GPUs: that GPU's)."""

    def release(self) -> None:
        """Give it back to the ledger that granted it (idempotent)."""
        if self.ledger is not None:
            self.ledger.release(self)


@dataclass(eq=False)
class _Weights:
    model: str
    mb: float
    keep_warm: bool
    in_use: int = 0


@dataclass(eq=False)
class _Waiter:
    mb: float
    share: float
    ticket: int
    need: WeightsNeed | None = None
    event: threading.Event | None = None
    future: asyncio.Future[None] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    reservation: Reservation | None = field(default=None)
    refused: NeverFitsError | None = None
    """Set instead of ``reservation`` when the request can no longer ever be admitted."""

    def granted(self) -> Reservation:
        """The reservation it was woken with, or the refusal it was woken with, raised."""
        if self.refused is not None:
            raise self.refused
        assert self.reservation is not None
        return self.reservation

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
        self._weights: dict[str, _Weights] = {}  # least recently used first

    # -- read-only state -------------------------------------------------------------------
    @property
    def in_use_mb(self) -> float:
        """VRAM held by calls, excluding the background reservation given at construction."""
        return self._in_use_mb - self._base_mb

    @property
    def weights_mb(self) -> float:
        """VRAM held by resident model weights (part of `in_use_mb`)."""
        return sum(w.mb for w in self._weights.values())

    @property
    def working_mb(self) -> float:
        """VRAM held by running calls' working memory (`in_use_mb` less the weights)."""
        return self.in_use_mb - self.weights_mb

    def resident(self) -> tuple[WarmModel, ...]:
        """The resident models, least recently used first."""
        with self._lock:
            return self._warm_locked()

    def _warm_locked(self) -> tuple[WarmModel, ...]:
        return tuple(WarmModel(w.model, w.mb, "gpu", w.in_use, w.keep_warm)
                     for w in self._weights.values())

    def _drop_locked(self, model: str) -> None:
        """Forget ``model``'s weights (the caller checked it is idle)."""
        self._in_use_mb -= self._weights.pop(model).mb

    def is_resident(self, model: str) -> bool:
        return model in self._weights

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

    def running(self) -> tuple[float, int, int | None]:
        """What runs on this GPU now, read at once: ``(working_mb, active, max_active)``."""
        with self._lock:
            return self.working_mb, self._active, self.max_active

    @property
    def share_in_use(self) -> float:
        return self._share

    def fits(self, mb: float) -> bool:
        """True if ``mb`` more would fit in the budget right now."""
        return self._in_use_mb + mb <= self.budget_mb + _EPS

    def _room_locked(self, mb: float, need: WeightsNeed | None) -> tuple[str, ...] | None:
        """The idle models to evict so that the call (and its weights, when not resident)
        fits now; None when it cannot."""
        extra = 0.0 if need is None or need.model in self._weights else need.mb
        if need is None and not self._weights:
            return () if self.fits(mb) else None
        protect = frozenset() if need is None else frozenset((need.model,))
        return plan_room(self._warm_locked(), need_mb=mb + extra, free_mb=self.free_mb,
                         protect=protect)

    def _never_fits_locked(self, mb: float, need: WeightsNeed | None) -> NeverFitsError | None:
        """Why no eviction can ever admit ``mb`` (plus ``need``'s weights when not resident)
        beside the weights kept warm, or None when some future state admits it."""
        kept = [w for w in self._weights.values()
                if w.keep_warm and (need is None or w.model != need.model)]
        if not kept:
            return None
        extra = 0.0 if need is None or need.model in self._weights else need.mb
        kept_mb = sum(w.mb for w in kept)
        if mb + extra <= self.capacity_mb - kept_mb + _EPS:
            return None
        names = ", ".join(repr(w.model) for w in kept)
        what = f"{mb:.0f} MB" + (f" plus {extra:.0f} MB of {need.model!r} weights"
                                 if need is not None and extra else "")
        return NeverFitsError(
            f"{what} can never fit beside the {kept_mb:.0f} MB kept warm by {names} "
            f"(budget {self.capacity_mb:.0f} MB): not queued")

    def admissible(self, mb: float, share: float, need: WeightsNeed | None = None) -> bool:
        """True if a queued call of this size would be admitted now (ignoring the queue)."""
        not_oversubscribed = self._active == 0 or self._share + share <= 1.0 + _EPS
        return (not_oversubscribed and not self.at_cap
                and self._room_locked(mb, need) is not None)

    @property
    def at_cap(self) -> bool:
        """True when ``max_active`` reservations are held (no more until one ends)."""
        return self.max_active is not None and self._active >= self.max_active

    # -- reserve / release -----------------------------------------------------------------
    def _check_size(self, mb: float, need: WeightsNeed | None = None) -> None:
        if mb < 0 or (need is not None and need.mb < 0):
            raise ValueError(f"a reservation must be >= 0 MB, got {mb}")
        total = mb + (need.mb if need is not None else 0.0)
        if total > self.capacity_mb + _EPS:
            what = f"reservation of {mb:.0f} MB" + (
                f" plus {need.mb:.0f} MB of {need.model!r} weights" if need else "")
            raise VramOverBudgetError(
                f"{what} can never fit: budget {self.budget_mb:.0f} MB, "
                f"{self._base_mb:.0f} MB held by the background"
            )

    def _grant_locked(self, mb: float, share: float, need: WeightsNeed | None = None,
                      *, call: bool = True) -> Reservation:
        evicted = self._room_locked(mb, need) or ()
        for name in evicted:
            self._drop_locked(name)
        loaded = False
        if need is not None:
            held = self._weights.pop(need.model, None)
            if held is None:
                held = _Weights(need.model, need.mb, need.keep_warm)
                self._in_use_mb += need.mb
                loaded = True
            held.in_use += 1
            self._weights[need.model] = held  # most recently used
        self._in_use_mb += mb
        self._share += share
        self._active += int(call)
        self._peak_mb = max(self._peak_mb, self._in_use_mb)
        return Reservation(mb=mb, share=share, ticket=next(self._tickets),
                           model=None if need is None else need.model, loaded=loaded,
                           evicted=evicted, call=call, ledger=self)

    def _admit_queue_locked(self) -> None:
        while self._queue:
            head = self._queue[0]
            refused = self._never_fits_locked(head.mb, head.need)
            if refused is None and not self.admissible(head.mb, head.share, head.need):
                return
            self._queue.popleft()
            if refused is not None:  # weights kept since it queued: never at the head
                head.refused = refused
            else:
                head.reservation = self._grant_locked(head.mb, head.share, head.need)
            head.wake()

    def try_reserve(
        self, mb: float, share: float = 0.0, need: WeightsNeed | None = None
    ) -> Reservation | None:
        """Reserve now if the VRAM fits, evicting idle weights where that makes room (the
        `gpu_now` rule), else return None."""
        self._check_size(mb, need)
        with self._lock:
            if self.at_cap or self._room_locked(mb, need) is None:
                return None
            return self._grant_locked(mb, share, need)

    def reserve(
        self, mb: float, share: float = 0.0, timeout: float | None = None,
        need: WeightsNeed | None = None,
    ) -> Reservation:
        """Wait in FIFO order for admission (the `gpu_queued` rule); raise on timeout, and
        `NeverFitsError` (at once, or as soon as it becomes so) for a request the weights
        kept warm leave no room for."""
        self._check_size(mb, need)
        with self._lock:
            self._refuse_never_fitting_locked(mb, need)
            if not self._queue and self.admissible(mb, share, need):
                return self._grant_locked(mb, share, need)
            waiter = _Waiter(mb, share, next(self._tickets), need, event=threading.Event())
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
        return waiter.granted()

    async def areserve(
        self, mb: float, share: float = 0.0, timeout: float | None = None,
        need: WeightsNeed | None = None,
    ) -> Reservation:
        """Async `reserve`: waits without blocking the event loop; cancellation is clean."""
        self._check_size(mb, need)
        loop = asyncio.get_running_loop()
        with self._lock:
            self._refuse_never_fitting_locked(mb, need)
            if not self._queue and self.admissible(mb, share, need):
                return self._grant_locked(mb, share, need)
            waiter = _Waiter(mb, share, next(self._tickets), need,
                             future=loop.create_future(), loop=loop)
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
        return waiter.granted()

    def _refuse_never_fitting_locked(self, mb: float, need: WeightsNeed | None) -> None:
        refused = self._never_fits_locked(mb, need)
        if refused is not None:
            raise refused

    def _abandon(self, waiter: _Waiter) -> None:
        with self._lock:
            if waiter.reservation is not None:
                self._release_locked(waiter.reservation)
            else:
                with contextlib.suppress(ValueError):
                    self._queue.remove(waiter)
                self._admit_queue_locked()

    def _release_locked(self, reservation: Reservation) -> None:
        if reservation.ledger is not None and reservation.ledger is not self:
            raise ForeignReservationError(
                f"a reservation of {reservation.mb:.0f} MB granted by another ledger: "
                "release it with Reservation.release (its own ledger)")
        if reservation.released:
            return
        reservation.released = True
        self._in_use_mb -= reservation.mb
        self._share -= reservation.share
        self._active -= int(reservation.call)
        held = self._weights.get(reservation.model) if reservation.model else None
        if held is not None:
            held.in_use -= 1
        if self._active == 0:  # wipe float drift at rest: only the weights stay
            self._in_use_mb = self._base_mb + self.weights_mb
            self._share = self._base_share
        self._admit_queue_locked()

    # -- resident weights ------------------------------------------------------------------
    def try_hold_weights(self, need: WeightsNeed, *, evict: bool = True) -> Reservation | None:
        """Pin ``need``'s model for a running call that did not declare it: its weights are
        reserved now when not resident (evicting idle models where that makes room), else
        None. Not a call: it counts against neither ``max_active`` nor the GPU share.
        ``evict=False`` (a load between steps): only into free room, evicting nothing, and
        never ahead of a queued call."""
        self._check_size(0.0, need)
        with self._lock:
            if not evict and need.model not in self._weights and (
                    self._queue or not self.fits(need.mb)):
                return None
            if self._room_locked(0.0, need) is None:
                return None
            return self._grant_locked(0.0, 0.0, need, call=False)

    def resize_weights(self, model: str, mb: float) -> bool:
        """Set a resident model's weights to ``mb`` (e.g. as measured after its load); a
        growth is taken only where it fits. Returns whether the ledger now holds ``mb``."""
        with self._lock:
            held = self._weights.get(model)
            if held is None or mb < 0:
                return False
            if mb > held.mb and not self.fits(mb - held.mb):
                return False
            self._in_use_mb += mb - held.mb
            held.mb = mb
            self._peak_mb = max(self._peak_mb, self._in_use_mb)
            self._admit_queue_locked()
            return True

    def set_background(self, mb: float) -> None:
        """Make the background reservation ``mb`` (at most the budget): what other processes
        hold on the GPU now (NVML's reading, `shared_ledger.background`). Admission follows at
        once; calls already admitted keep their memory."""
        mb = min(max(0.0, float(mb)), self.budget_mb)
        with self._lock:
            delta = mb - self._base_mb
            self._base_mb = mb
            self._in_use_mb += delta
            self._peak_mb += delta  # `peak_mb` counts calls only: unchanged
            self._admit_queue_locked()

    def evict(self, model: str) -> bool:
        """Drop an idle resident model's weights (not one in use). Returns whether it did."""
        with self._lock:
            held = self._weights.get(model)
            if held is None or held.in_use > 0:
                return False
            self._drop_locked(model)
            self._admit_queue_locked()
            return True

    def keep(self, model: str) -> None:
        """Never evict ``model``'s weights for another model again (until `clear_weights`)."""
        with self._lock:
            held = self._weights.get(model)
            if held is not None:
                held.keep_warm = True

    def demote(self, models: Iterable[str]) -> None:
        """Make these resident models the least recently used (their order kept): a step
        that uses them only off this GPU starts (`residency.demoted`), so they are the first
        evicted to make room. Models not resident are ignored."""
        names = frozenset(models)
        with self._lock:
            if not names.intersection(self._weights):
                return
            first = {m: w for m, w in self._weights.items() if m in names}
            self._weights = first | {m: w for m, w in self._weights.items() if m not in names}

    def clear_weights(self) -> tuple[str, ...]:
        """Drop every idle model's weights, kept warm or not (at close); models in use stay.
        Returns the dropped models."""
        with self._lock:
            idle = tuple(m for m, w in self._weights.items() if w.in_use == 0)
            for name in idle:
                self._drop_locked(name)
            if self._active == 0:
                self._in_use_mb = self._base_mb + self.weights_mb
            self._admit_queue_locked()
            return idle

    def release(self, reservation: Reservation) -> None:
        """Give a reservation back (idempotent) and admit queued waiters that now fit; one
        another ledger granted is refused (`ForeignReservationError`), this one unchanged."""
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
