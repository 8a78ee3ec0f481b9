"""The machine-wide ledger's store: one SQLite file in WAL mode, every change in a
``BEGIN IMMEDIATE`` transaction.

Tables (all bounded by the processes alive and the models they hold):

* ``gpus`` — one budget per GPU (the first process to open it declares it), and the highest
  machine-wide total any commit ever left (``peak_mb``: exact, see `SharedVramLedger`);
* ``holders`` — one row per ledger of a live process: pid, start time, boot id;
* ``holds`` — what each holder holds on its GPU: one ``work`` row (its running calls'
  working memory) and one ``weights`` row per resident model (``in_use``, ``keep_warm``);
* ``requests`` — eviction requests, one per (requester, owner, model), answered (and
  deleted) by the owner at its next transaction, or expired after ``request_ttl_s``;
* ``reclaimed`` — the last `RECLAIM_LOG` holders found dead and what was taken back;
* ``counters`` — evictions requested, served, refused and expired.

A transaction holds SQLite's write lock, an ``fcntl`` lock the kernel drops when its holder
dies: a process killed mid-transaction leaves no lock and no half-written row (the WAL rolls
it back). ``timeout_s`` bounds the wait for that lock (`sqlite3.OperationalError` past it).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from langgraph_devsched.shared_ledger.procs import ProcessId

RECLAIM_LOG = 1000
"""Rows kept in the ``reclaimed`` table (the oldest go first)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS gpus(gpu TEXT PRIMARY KEY, budget_mb REAL NOT NULL,
    peak_mb REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS holders(holder TEXT PRIMARY KEY, gpu TEXT NOT NULL,
    pid INTEGER NOT NULL, start INTEGER NOT NULL, boot TEXT NOT NULL, since REAL NOT NULL);
CREATE TABLE IF NOT EXISTS holds(holder TEXT NOT NULL, gpu TEXT NOT NULL, kind TEXT NOT NULL,
    model TEXT NOT NULL, mb REAL NOT NULL, in_use INTEGER NOT NULL, keep_warm INTEGER NOT NULL,
    seq INTEGER NOT NULL, PRIMARY KEY(holder, kind, model));
CREATE INDEX IF NOT EXISTS holds_gpu ON holds(gpu);
CREATE TABLE IF NOT EXISTS requests(id INTEGER PRIMARY KEY, gpu TEXT NOT NULL,
    owner TEXT NOT NULL, model TEXT NOT NULL, requester TEXT NOT NULL, made REAL NOT NULL,
    UNIQUE(requester, owner, model));
CREATE INDEX IF NOT EXISTS requests_owner ON requests(owner);
CREATE TABLE IF NOT EXISTS reclaimed(id INTEGER PRIMARY KEY, holder TEXT NOT NULL,
    pid INTEGER NOT NULL, gpu TEXT NOT NULL, mb REAL NOT NULL, at REAL NOT NULL,
    by TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, n INTEGER NOT NULL);
"""

Row = tuple[float, int, int, int]
"""A hold's values: MB, in use, kept warm (0/1), sequence (when it was last written)."""


class BudgetMismatchError(ValueError):
    """A process declared another budget for a GPU than the shared ledger holds."""


@dataclass(frozen=True)
class Reclaimed:
    """A holder found dead and what was taken back from it."""

    holder: str
    pid: int
    gpu: str
    mb: float
    at: float
    """Wall time (``time.time``) of the reclaim."""
    by: str = ""
    """The holder whose transaction reclaimed it ("" : none, e.g. a supervisor's sweep)."""


@dataclass(frozen=True)
class IdleWeights:
    """Another holder's resident model that no call of its uses now (an eviction candidate)."""

    owner: str
    model: str
    mb: float


class LedgerStore:
    """One connection to the SQLite file at ``path`` (created when absent).

    Not thread-safe by itself: its user serializes calls (`SharedVramLedger` does so under
    its lock)."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise ValueError(
                f"shared ledger: the folder of {str(self.path)!r} does not exist; give a file "
                "path in an existing folder (every process on the machine must name the same)")
        self._clock = clock
        self._db = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=OFF")
        self._seq = 0
        self._db.executescript(_SCHEMA)  # idempotent: every process may run it

    def close(self) -> None:
        self._db.close()

    # -- transactions ----------------------------------------------------------------------
    def begin(self) -> None:
        """Take the write lock (waits at most ``timeout_s``; `sqlite3.OperationalError`)."""
        self._db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self._db.execute("COMMIT")

    def rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    class _Tx:
        def __init__(self, store: LedgerStore) -> None:
            self._s = store

        def __enter__(self) -> LedgerStore:
            self._s.begin()
            return self._s

        def __exit__(self, kind: object, *rest: object) -> None:
            if kind is None:
                self._s.commit()
            else:
                self._s.rollback()

    def transaction(self) -> LedgerStore._Tx:
        """``with store.transaction():`` — BEGIN IMMEDIATE, COMMIT (ROLLBACK on error)."""
        return LedgerStore._Tx(self)

    # -- registration (in a transaction) ---------------------------------------------------
    def declare_gpu(self, gpu: str, budget_mb: float) -> None:
        """Record ``gpu``'s budget, or check it against the one recorded."""
        row = self._db.execute("SELECT budget_mb FROM gpus WHERE gpu=?", (gpu,)).fetchone()
        if row is None:
            self._db.execute("INSERT INTO gpus(gpu, budget_mb) VALUES(?, ?)", (gpu, budget_mb))
        elif abs(row[0] - budget_mb) > 1e-6:
            raise BudgetMismatchError(
                f"the shared ledger {str(self.path)!r} holds a budget of {row[0]:.0f} MB for "
                f"GPU {gpu!r}; this process declares {budget_mb:.0f} MB: every process must "
                "declare the same budget for a GPU (or use another ledger file)")

    def add_holder(self, holder: str, gpu: str, who: ProcessId) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO holders(holder, gpu, pid, start, boot, since) "
            "VALUES(?, ?, ?, ?, ?, ?)", (holder, gpu, who.pid, who.start, who.boot, self._clock()))

    def has_holder(self, holder: str) -> bool:
        return self._db.execute("SELECT 1 FROM holders WHERE holder=?",
                                (holder,)).fetchone() is not None

    def forget_holder(self, holder: str) -> None:
        """Delete a holder, its holds and the requests to or from it."""
        self._db.execute("DELETE FROM holds WHERE holder=?", (holder,))
        self._db.execute("DELETE FROM requests WHERE owner=? OR requester=?", (holder, holder))
        self._db.execute("DELETE FROM holders WHERE holder=?", (holder,))

    # -- the hot path (in a transaction) ---------------------------------------------------
    def others(self, gpu: str, holder: str) -> tuple[float, float]:
        """What every other holder holds on ``gpu`` (MB), and the GPU's recorded peak."""
        row = self._db.execute(
            "SELECT (SELECT COALESCE(SUM(mb), 0) FROM holds WHERE gpu=? AND holder<>?), "
            "(SELECT peak_mb FROM gpus WHERE gpu=?)", (gpu, holder, gpu)).fetchone()
        return float(row[0]), float(row[1] or 0.0)

    def write(self, holder: str, gpu: str,
              changes: Iterable[tuple[tuple[str, str], Row | None]]) -> None:
        """Upsert (a row) or delete (None) this holder's holds, each keyed (kind, model)."""
        for (kind, model), row in changes:
            if row is None:
                self._db.execute("DELETE FROM holds WHERE holder=? AND kind=? AND model=?",
                                 (holder, kind, model))
            else:
                self._db.execute(
                    "INSERT OR REPLACE INTO holds(holder, gpu, kind, model, mb, in_use, "
                    "keep_warm, seq) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                    (holder, gpu, kind, model, *row))

    def clear_holds(self, holder: str) -> None:
        self._db.execute("DELETE FROM holds WHERE holder=?", (holder,))

    def raise_peak(self, gpu: str, total_mb: float) -> None:
        self._db.execute("UPDATE gpus SET peak_mb=? WHERE gpu=? AND peak_mb<?",
                         (total_mb, gpu, total_mb))

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- eviction requests -----------------------------------------------------------------
    def requests_for(self, owner: str) -> list[tuple[int, str]]:
        """Open eviction requests to ``owner``: (id, model)."""
        return [(int(i), str(m)) for i, m in self._db.execute(
            "SELECT id, model FROM requests WHERE owner=?", (owner,))]

    def answer(self, request_id: int, served: bool) -> None:
        self._db.execute("DELETE FROM requests WHERE id=?", (request_id,))
        self.count("served" if served else "refused")

    def idle_weights(self, gpu: str, holder: str) -> list[IdleWeights]:
        """Other holders' resident models on ``gpu`` that no call uses and none keeps warm,
        idle the longest first."""
        return [IdleWeights(str(o), str(m), float(mb)) for o, m, mb in self._db.execute(
            "SELECT holder, model, mb FROM holds WHERE gpu=? AND holder<>? AND kind='weights' "
            "AND in_use=0 AND keep_warm=0 ORDER BY seq", (gpu, holder))]

    def ask(self, gpu: str, owner: str, model: str, requester: str) -> bool:
        """Post a request (one per requester, owner and model); True when it is new."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO requests(gpu, owner, model, requester, made) "
            "VALUES(?, ?, ?, ?, ?)", (gpu, owner, model, requester, self._clock()))
        if cur.rowcount:
            self.count("requested")
        return bool(cur.rowcount)

    def count(self, name: str, n: int = 1) -> None:
        self._db.execute("INSERT INTO counters(name, n) VALUES(?, ?) "
                         "ON CONFLICT(name) DO UPDATE SET n=n+excluded.n", (name, n))

    # -- reclaiming the dead ---------------------------------------------------------------
    def holders(self) -> list[tuple[str, ProcessId]]:
        """Every registered holder (a read: no transaction needed)."""
        return [(str(h), ProcessId(int(p), int(s), str(b))) for h, p, s, b in self._db.execute(
            "SELECT holder, pid, start, boot FROM holders")]

    def sweep(self, *, request_ttl_s: float, by: str = "") -> list[Reclaimed]:
        """Reclaim every holder whose process is dead (pid gone, or reused: another start
        time, or another boot), holds left by no holder, and expired requests."""
        now = self._clock()
        out: list[Reclaimed] = []
        for holder, who in self.holders():
            if who.alive():
                continue
            gpu, mb = self._db.execute(
                "SELECT COALESCE(MAX(gpu), ''), COALESCE(SUM(mb), 0) FROM holds "
                "WHERE holder=?", (holder,)).fetchone()
            self.forget_holder(holder)
            out.append(Reclaimed(holder, who.pid, str(gpu), float(mb), now, by))
            self._db.execute("INSERT INTO reclaimed(holder, pid, gpu, mb, at, by) "
                             "VALUES(?, ?, ?, ?, ?, ?)", (holder, who.pid, gpu, mb, now, by))
        if out:
            self._db.execute("DELETE FROM reclaimed WHERE id <= "
                             "(SELECT MAX(id) FROM reclaimed) - ?", (RECLAIM_LOG,))
        self._db.execute("DELETE FROM holds WHERE holder NOT IN (SELECT holder FROM holders)")
        expired = self._db.execute("DELETE FROM requests WHERE made < ?",
                                   (now - request_ttl_s,)).rowcount
        if expired:
            self.count("expired", expired)
        return out

    # -- reading (monitoring, checks) ------------------------------------------------------
    def snapshot(self) -> StoreSnapshot:
        """Budgets, peaks, holds per GPU and holder, reclaim log and counters, read at once."""
        with self.transaction():
            gpus = {str(g): (float(b), float(p)) for g, b, p in self._db.execute(
                "SELECT gpu, budget_mb, peak_mb FROM gpus")}
            holds = [(str(h), str(g), str(k), str(m), float(mb), int(u)) for h, g, k, m, mb, u
                     in self._db.execute(
                         "SELECT holder, gpu, kind, model, mb, in_use FROM holds")]
            holders = {h: w for h, w in self.holders()}
            reclaimed = [Reclaimed(str(h), int(p), str(g), float(mb), float(a), str(b))
                         for h, p, g, mb, a, b in self._db.execute(
                             "SELECT holder, pid, gpu, mb, at, by FROM reclaimed ORDER BY id")]
            counters = {str(n): int(c) for n, c in self._db.execute(
                "SELECT name, n FROM counters")}
            requests = int(self._db.execute("SELECT COUNT(*) FROM requests").fetchone()[0])
        return StoreSnapshot(gpus, holds, holders, reclaimed, counters, requests)


@dataclass(frozen=True)
class StoreSnapshot:
    """What the store held at one instant (`LedgerStore.snapshot`)."""

    gpus: dict[str, tuple[float, float]]
    """Per GPU: (budget MB, peak machine-wide MB)."""
    holds: list[tuple[str, str, str, str, float, int]]
    """(holder, gpu, kind, model, MB, in use) rows."""
    holders: dict[str, ProcessId]
    reclaimed: list[Reclaimed]
    counters: dict[str, int]
    open_requests: int

    def total_mb(self, gpu: str) -> float:
        """Everything held on ``gpu`` machine-wide now."""
        return sum(r[4] for r in self.holds if r[1] == gpu)

    def held_by(self, holder: str) -> list[tuple[str, str, float, int]]:
        """(kind, model, MB, in use) of one holder's rows."""
        return [(k, m, mb, u) for h, _g, k, m, mb, u in self.holds if h == holder]
