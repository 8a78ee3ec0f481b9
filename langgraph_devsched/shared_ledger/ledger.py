"""`SharedVramLedger`: a `VramLedger` whose budget holds across every process of the machine.

It is the in-process ledger (FIFO queue, resident weights, eviction of its own idle models)
with one change: its lock is also the store's write lock. Every reserve, release, eviction or
read runs inside one ``BEGIN IMMEDIATE`` transaction of the `LedgerStore`; at its start the
ledger reads what every other process holds on its GPU (free room is the budget less its own
holds less theirs), and at its end it writes its own holds back (its running calls' working
memory, and one row per resident model with its owner). The admission decision and its
record are one atomic step, so two processes can never both take the last megabyte.

Because a commit holds the write lock, its own total plus what it read of the others is the
exact machine-wide total: the largest is kept as the GPU's ``peak_mb`` in the store.

* **Dead holders.** A watcher thread reads the holders every ``sweep_s`` and reclaims those
  whose process is gone (pid and start time from /proc, `procs`); every transaction sweeps
  too at that pace. A SIGKILLed process's holds are gone within about ``sweep_s`` while any
  other process uses the ledger.
* **Waiting across processes.** Room freed by another process wakes no local waiter: while
  calls wait in its queue, the watcher re-tries admission every ``poll_s``, and asks the
  owners of idle models (no call of theirs uses them, none kept warm) to evict as many as
  the call at the head of the queue needs (`LedgerStore.ask`).
* **Eviction requests.** An owner answers at its next transaction (a call's reservation or
  release, or its watcher within ``poll_s``): it evicts the model when no call pins or uses
  it and it is not kept warm (its `ModelCache` frees the instance: ``on_evicted``), else
  refuses. A request no one answers expires after ``request_ttl_s``.
* **Never waits forever.** A queued reservation waits at most ``max_wait_s`` (its own
  timeout when shorter); the store's lock at most ``lock_timeout_s``, after which the ledger
  admits nothing new until the store answers again (releases are written then).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType

from langgraph_devsched.ledger import _EPS, Reservation, VramLedger, WeightsNeed
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.shared_ledger.procs import ProcessId
from langgraph_devsched.shared_ledger.store import LedgerStore, Row

logger = logging.getLogger(__name__)
_SERIAL = itertools.count()
_Key = tuple[str, str]


class _MachineLock:
    """The ledger's thread lock, then the store's write lock: one transaction per block."""

    def __init__(self, ledger: SharedVramLedger) -> None:
        self.thread = threading.Lock()
        self._ledger = ledger

    def __enter__(self) -> None:
        self.thread.acquire()
        try:
            self._ledger._begin()
        except BaseException:
            self.thread.release()
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            dropped = self._ledger._commit()
        finally:
            self.thread.release()
        if dropped:
            self._ledger._evicted_by_request(dropped)


def _forget(path: str, holder: str) -> None:
    """At interpreter exit: delete a holder's rows (best effort; a crash leaves them to the
    sweep)."""
    try:
        store = LedgerStore(path, timeout_s=1.0)
        with store.transaction():
            store.forget_holder(holder)
        store.close()
    except Exception:
        pass


class SharedVramLedger(VramLedger):
    """A `VramLedger` for GPU ``gpu`` whose budget is shared with every process that opens
    the same ``store`` file (see the module)."""

    def __init__(
        self,
        budget_mb: float,
        *,
        store: str | os.PathLike[str],
        gpu: str,
        reserved_mb: float = 0.0,
        reserved_share: float = 0.0,
        max_active: int | None = None,
        poll_s: float = 0.01,
        sweep_s: float = 0.5,
        request_ttl_s: float = 2.0,
        max_wait_s: float = 60.0,
        lock_timeout_s: float = 5.0,
    ) -> None:
        for name, value in (("poll_s", poll_s), ("sweep_s", sweep_s),
                            ("request_ttl_s", request_ttl_s), ("max_wait_s", max_wait_s),
                            ("lock_timeout_s", lock_timeout_s)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0 (seconds), got {value}")
        super().__init__(budget_mb, reserved_mb=reserved_mb, reserved_share=reserved_share,
                         max_active=max_active)
        self.gpu = gpu
        """The GPU's name in the store (the same physical GPU: the same name everywhere)."""
        self.path = os.path.abspath(os.fspath(store))  # the finalizer may run elsewhere
        self.poll_s, self.sweep_s = poll_s, sweep_s
        self.request_ttl_s, self.max_wait_s = request_ttl_s, max_wait_s
        self.me = ProcessId.current()
        self.holder = f"{self.me.pid}.{self.me.start}.{next(_SERIAL)}"
        """This ledger's name in the store (pid, start time, a serial per process)."""
        self.on_evicted: Callable[[tuple[str, ...]], None] | None = None
        """Called (outside the lock) with the models it evicted for another process."""
        self.in_use: Callable[[str], bool] | None = None
        """Whether a call still uses the model's instance (the ledger's pin goes back a
        little before the call's end): such a model is not evicted on request."""
        self.machine_peak_mb = 0.0
        """The highest machine-wide total this process's commits left on its GPU."""
        self.others_mb = 0.0
        """What the other processes held at the last transaction (inf: store unreachable)."""
        self.reclaimed: list[str] = []
        """Holders this process found dead and reclaimed (the last 100)."""
        self._lock_timeout_s = lock_timeout_s
        self._store = LedgerStore(self.path, timeout_s=lock_timeout_s)
        self._reader = LedgerStore(self.path, timeout_s=lock_timeout_s)  # the watcher's reads
        self._written: dict[_Key, Row] | None = None
        self._dropped: list[str] = []
        self._online = False
        self._next_sweep = 0.0
        self._next_look = 0.0
        with self._store.transaction():
            self._store.declare_gpu(gpu, float(budget_mb))
            self._store.add_holder(self.holder, gpu, self.me)
            self._sweep_locked(time.monotonic())  # a newcomer reclaims the dead at once
        self._registered = True
        self._machine_lock = _MachineLock(self)
        self._lock = self._machine_lock  # type: ignore[assignment]
        self._stop = threading.Event()
        self._finalizer = weakref.finalize(self, _forget, self.path, self.holder)
        self._watcher = threading.Thread(target=_watch, args=(weakref.ref(self), self._stop),
                                         name=f"devsched-shared-ledger-{gpu}", daemon=True)
        self._watcher.start()

    # -- the machine-wide view -------------------------------------------------------------
    @property
    def free_mb(self) -> float:
        return self.budget_mb - self._in_use_mb - self.others_mb

    def fits(self, mb: float) -> bool:
        return self._in_use_mb + self.others_mb + mb <= self.budget_mb + _EPS

    def resident(self) -> tuple[WarmModel, ...]:
        """This process's resident models (a local read: no transaction)."""
        with self._machine_lock.thread:
            return self._warm_locked()

    def reserve(self, mb: float, share: float = 0.0, timeout: float | None = None,
                need: WeightsNeed | None = None) -> Reservation:
        """`VramLedger.reserve`, waiting at most ``max_wait_s``."""
        wait = self.max_wait_s if timeout is None else min(timeout, self.max_wait_s)
        return super().reserve(mb, share, wait, need)

    async def areserve(self, mb: float, share: float = 0.0, timeout: float | None = None,
                       need: WeightsNeed | None = None) -> Reservation:
        """`VramLedger.areserve`, waiting at most ``max_wait_s``."""
        wait = self.max_wait_s if timeout is None else min(timeout, self.max_wait_s)
        return await super().areserve(mb, share, wait, need)

    # -- one transaction per locked block --------------------------------------------------
    def _begin(self) -> None:
        if os.getpid() != self.me.pid:
            self._forked()
        store = self._store
        try:
            store.begin()
        except sqlite3.Error as exc:
            self._offline(exc)
            return
        try:
            if not self._registered:
                store.add_holder(self.holder, self.gpu, self.me)
                self._registered = True
            now = time.monotonic()
            if now >= self._next_sweep:
                self._sweep_locked(now)
            self.others_mb, _ = store.others(self.gpu, self.holder)
            for request, model in store.requests_for(self.holder):
                held = self._weights.get(model)
                served = (held is not None and held.in_use == 0 and not held.keep_warm
                          and not (self.in_use is not None and self.in_use(model)))
                if served:
                    self._drop_locked(model)
                    self._dropped.append(model)
                store.answer(request, served)
            self._online = True
        except sqlite3.Error as exc:
            store.rollback()
            self._offline(exc)

    def _forked(self) -> None:
        """A forked child (e.g. gunicorn ``--preload``): its own identity, connections and
        watcher; the parent's connections are left alone (SQLite forbids using them here).
        What the parent held (its calls, its resident models) stays the parent's: the child
        starts with nothing (its cache drops the copies of the parent's GPU models)."""
        self._dropped.extend(self._weights)
        self._weights = {}
        self._queue.clear()
        self._in_use_mb = self._peak_mb = self._base_mb
        self._share = self._base_share
        self._active = 0
        self.me = ProcessId.current()
        self.holder = f"{self.me.pid}.{self.me.start}.{next(_SERIAL)}"
        self._store = LedgerStore(self.path, timeout_s=self._lock_timeout_s)
        self._reader = LedgerStore(self.path, timeout_s=self._lock_timeout_s)
        self._written = None
        self._registered = False
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _forget, self.path, self.holder)
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=_watch, args=(weakref.ref(self), self._stop),
                                         name=f"devsched-shared-ledger-{self.gpu}", daemon=True)
        self._watcher.start()

    def _sweep_locked(self, now: float) -> None:
        self._next_sweep = now + self.sweep_s
        for gone in self._store.sweep(request_ttl_s=self.request_ttl_s, by=self.holder):
            self.reclaimed = [*self.reclaimed[-99:], gone.holder]
            logger.warning("shared ledger: process %d is gone; reclaimed its %.0f MB on %s",
                           gone.pid, gone.mb, gone.gpu or self.gpu)

    def _offline(self, exc: BaseException) -> None:
        """The store did not answer: admit nothing new (releases are written later)."""
        if self._online:
            logger.warning("shared ledger %s unreachable (%s): nothing new is admitted "
                           "until it answers", self.path, exc)
        self._online = False
        self.others_mb = math.inf
        self._written = None

    def _rows(self) -> dict[_Key, Row]:
        weights = 0.0
        rows: dict[_Key, Row] = {}
        old = self._written or {}
        for model, w in self._weights.items():
            weights += w.mb
            key = ("weights", model)
            prev = old.get(key)
            values = (w.mb, w.in_use, int(w.keep_warm))
            same = prev is not None and prev[:3] == values
            rows[key] = (*values, prev[3] if same and prev else self._store.next_seq())
        working = max(0.0, self._in_use_mb - self._base_mb - weights)
        rows[("work", "")] = (working, self._active, 0, 0)
        return rows

    def _commit(self) -> tuple[str, ...]:
        """Write this process's holds back and commit; the models evicted on request."""
        dropped, self._dropped = tuple(self._dropped), []
        if not self._online:
            return dropped
        store = self._store
        try:
            rows = self._rows()
            old = self._written
            if old is None:
                store.clear_holds(self.holder)
                old = {}
            changes: list[tuple[_Key, Row | None]] = [
                (k, v) for k, v in rows.items() if old.get(k) != v]
            changes += [(k, None) for k in old if k not in rows]
            if changes:
                store.write(self.holder, self.gpu, changes)
                total = self.others_mb + sum(r[0] for r in rows.values())
                if total > self.machine_peak_mb:
                    self.machine_peak_mb = total
                    store.raise_peak(self.gpu, total)
            store.commit()
            self._written = rows
        except sqlite3.Error as exc:
            store.rollback()
            self._offline(exc)
        return dropped

    def _evicted_by_request(self, models: tuple[str, ...]) -> None:
        if self.on_evicted is not None:
            try:
                self.on_evicted(models)
            except Exception:
                logger.exception("shared ledger: freeing %s failed", models)

    # -- waiting across processes ----------------------------------------------------------
    def _poll(self) -> None:
        """The watcher's turn: admit queued calls the others' releases made room for, ask
        for idle models when the head still waits, serve requests, sweep the dead."""
        queued = bool(self._queue)
        now = time.monotonic()
        dead = False
        if now >= self._next_look:
            self._next_look = now + self.sweep_s
            dead = not all(who.alive() for _, who in self._reader.holders())
        if dead:
            self._next_sweep = 0.0  # sweep in the transaction below
        elif not queued and not self._reader.requests_for(self.holder):
            return
        with self._lock:
            self._admit_queue_locked()
            if self._queue and self._online:
                self._ask_room_locked()

    def _ask_room_locked(self) -> None:
        """Ask other processes to evict idle models worth the head call's shortfall."""
        head = self._queue[0]
        if self.at_cap or not (self._active == 0 or self._share + head.share <= 1.0 + _EPS):
            return  # it waits for a slot or a share, not for memory
        need = head.need
        mb = head.mb + (need.mb if need is not None and need.model not in self._weights
                        else 0.0)
        local = sum(w.mb for m, w in self._weights.items()
                    if w.in_use == 0 and not w.keep_warm and (need is None or m != need.model))
        short = mb - self.free_mb - local
        if short <= _EPS:
            return
        pick, room = [], 0.0
        for idle in self._store.idle_weights(self.gpu, self.holder):
            pick.append(idle)
            room += idle.mb
            if room + _EPS >= short:
                break
        if room + _EPS < short:
            return  # even every idle model elsewhere would not make room: wait or time out
        for idle in pick:
            self._store.ask(self.gpu, idle.owner, idle.model, self.holder)

    def holder_pids(self) -> frozenset[int]:
        """The pids of every process holding its part in this store (NVML's background
        leaves them out: they are counted here already)."""
        with self._machine_lock.thread:
            return frozenset(who.pid for _, who in self._store.holders())

    # -- the end ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the watcher; with no call running, leave the store (rows and holder)."""
        self._stop.set()
        with self._machine_lock.thread:
            if self._active or self._queue:
                return
            try:
                with self._store.transaction():
                    self._store.forget_holder(self.holder)
            except sqlite3.Error:
                return
            self._written = None
            self._registered = False


def _watch(ref: weakref.ReferenceType[SharedVramLedger], stop: threading.Event) -> None:
    while True:
        ledger = ref()
        if ledger is None:
            return
        wait = ledger.poll_s if ledger._queue else min(ledger.sweep_s, 0.05)
        del ledger
        if stop.wait(wait):
            return
        ledger = ref()
        if ledger is None:
            return
        try:
            ledger._poll()
        except Exception:
            logger.exception("shared ledger watcher")
        del ledger
