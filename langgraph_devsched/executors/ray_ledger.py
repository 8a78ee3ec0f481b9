"""One ledger per GPU slot for every driver of a Ray cluster: a named, detached actor.

With ``RayBackend(cluster_slots=True)`` each GPU slot (GPU *k* of a node) has one ledger
actor, ``ledger-<node id>-<k>`` in the namespace ``devsched`` (`NAMESPACE`), got or created
atomically (``get_if_exists=True``) by whichever driver needs it first. It holds the slot's
`VramLedger`: every driver's reserve (admit-if-fits, or wait in FIFO order), release,
eviction and resident weights go through it, so the drivers share one budget per GPU and one
record of the models the slot's actor (``slot-<node id>-<k>``, `executors.ray_actor`) holds.

Every reservation is tagged with the job id of the driver that took it
(``ray.get_runtime_context().get_job_id()``). A reaper thread in the actor reads the GCS job
table every ``reclaim_s`` (1 s) while it holds reservations and releases those of jobs Ray
reports dead (a driver killed mid-call, ``SIGKILL`` included): liveness comes from Ray, never
from a wall-clock guess. The weights stay: they belong to the slot's actor, which holds the
model for every driver.

In a driver, `SlotLedgerClient` stands in for the slot's `VramLedger` (the backend's code is
the same over both): admission and release are remote calls, the read-only state (free room,
resident models, queue length) is the actor's last answer, refreshed at every step.

>>> ledger_name("n1", 0), slot_name("n1", 0)
('ledger-n1-0', 'slot-n1-0')
>>> body = SlotLedger(1000.0, reclaim_s=0)
>>> granted = body.try_reserve("job-a", "t1", 600.0, 0.5, None)
>>> granted.mb, body.view().in_use_mb, [h.job for h in body.view().held]
(600.0, 600.0, ['job-a'])
>>> body.reclaim_jobs({"job-a"}), body.view().in_use_mb
(1, 0.0)
"""

from __future__ import annotations

import contextlib
import threading
import uuid
import weakref
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from langgraph_devsched.ledger import (
    QueueTimeoutError,
    Reservation,
    VramLedger,
    VramOverBudgetError,
    WeightsNeed,
)
from langgraph_devsched.residency import WarmModel

NAMESPACE = "devsched"
"""The Ray namespace of the shared slot actors (``RayBackend(namespace=...)`` changes it)."""

LEDGER_CONCURRENCY = 256
"""Calls a ledger actor serves at once (queued reservations wait in its threads)."""

_CANCELLED_BOUND = 4096


def ledger_name(node_id: str, index: int) -> str:
    """The name of GPU ``index`` of node ``node_id``'s ledger actor."""
    return f"ledger-{node_id}-{index}"


def slot_name(node_id: str, index: int) -> str:
    """The name of GPU ``index`` of node ``node_id``'s model actor."""
    return f"slot-{node_id}-{index}"


@dataclass(frozen=True)
class Held:
    """One reservation the ledger actor holds: the driver's job, its ticket, its size."""

    job: str
    ticket: int
    mb: float
    model: str | None


@dataclass(frozen=True)
class LedgerView:
    """A slot ledger's state as the actor last answered it."""

    budget_mb: float
    in_use_mb: float
    weights_mb: float
    peak_mb: float
    active: int
    queued: int
    resident: tuple[WarmModel, ...]
    held: tuple[Held, ...]
    reclaimed: int
    """Reservations released because their driver's job died (since the actor started)."""

    @property
    def free_mb(self) -> float:
        return self.budget_mb - self.in_use_mb


@dataclass(frozen=True)
class Granted:
    """An admission: the reservation's fields and the ledger's state after it."""

    ticket: int
    mb: float
    share: float
    model: str | None
    loaded: bool
    evicted: tuple[str, ...]
    view: LedgerView


@dataclass(frozen=True)
class Refused:
    """A queued request that was not admitted (its error travels back as a value)."""

    error: Exception
    view: LedgerView


def dead_jobs(jobs: Iterable[str]) -> set[str]:
    """Those of ``jobs`` that the GCS job table reports dead (unknown ones count as alive)."""
    from ray._private import state

    wanted = set(jobs)
    return {str(j.get("JobID")) for j in state.jobs()
            if j.get("IsDead") and str(j.get("JobID")) in wanted}


class SlotLedger:
    """The body of a slot's ledger actor: a `VramLedger` whose reservations carry their
    driver's job id, and a reaper that releases a dead job's reservations."""

    def __init__(self, budget_mb: float, reclaim_s: float = 1.0) -> None:
        self.ledger = VramLedger(budget_mb)
        self._held: dict[int, tuple[str, str, Reservation]] = {}
        """By ticket: the driver's job, the request's token, the reservation."""
        self._tokens: dict[str, int] = {}
        self._cancelled: deque[str] = deque(maxlen=_CANCELLED_BOUND)
        self._lock = threading.Lock()
        self.reclaimed = 0
        self._stop = threading.Event()
        if reclaim_s > 0:
            threading.Thread(target=self._reap, args=(reclaim_s,), daemon=True,
                             name="devsched-ledger-reaper").start()

    # -- admission ---------------------------------------------------------------------------
    def _keep(self, job: str, token: str, res: Reservation) -> Granted | None:
        with self._lock:
            if token in self._cancelled:  # the driver gave up waiting before the grant
                self._cancelled.remove(token)
                self.ledger.release(res)
                return None
            self._held[res.ticket] = (job, token, res)
            self._tokens[token] = res.ticket
        return Granted(res.ticket, res.mb, res.share, res.model, res.loaded, res.evicted,
                       self.view())

    def try_reserve(self, job: str, token: str, mb: float, share: float,
                    need: WeightsNeed | None) -> Granted | None:
        """Reserve now if it fits (evicting idle weights for room), else None."""
        res = self.ledger.try_reserve(mb, share, need)
        return None if res is None else self._keep(job, token, res)

    def reserve(self, job: str, token: str, mb: float, share: float, wait: float | None,
                need: WeightsNeed | None) -> Granted | Refused:
        """Wait in FIFO order (at most ``wait`` s) for admission."""
        try:
            res = self.ledger.reserve(mb, share, wait, need)
        except (QueueTimeoutError, VramOverBudgetError) as exc:
            return Refused(exc, self.view())
        granted = self._keep(job, token, res)
        if granted is None:
            return Refused(QueueTimeoutError("the driver stopped waiting"), self.view())
        return granted

    def cancel(self, token: str) -> None:
        """A driver stopped waiting for ``token``: release it if granted, else refuse it
        when it is."""
        with self._lock:
            if token not in self._tokens:
                self._cancelled.append(token)
                return
        self.release(token)

    def _pop_locked(self, ticket: int) -> Reservation | None:
        held = self._held.pop(ticket, None)
        if held is None:
            return None
        self._tokens.pop(held[1], None)
        return held[2]

    def release(self, token: str) -> LedgerView:
        """Release the reservation granted to request ``token`` (unique across actors, so
        a release can never hit another actor's reservation; unknown: nothing to do)."""
        with self._lock:
            ticket = self._tokens.get(token)
            res = None if ticket is None else self._pop_locked(ticket)
        if res is not None:
            self.ledger.release(res)
        return self.view()

    def admissible(self, mb: float, share: float, need: WeightsNeed | None) -> bool:
        return self.ledger.admissible(mb, share, need)

    # -- weights -----------------------------------------------------------------------------
    def evict(self, model: str) -> LedgerView:
        self.ledger.evict(model)
        return self.view()

    def keep(self, model: str) -> LedgerView:
        self.ledger.keep(model)
        return self.view()

    def demote(self, models: tuple[str, ...]) -> None:
        self.ledger.demote(models)

    def clear_weights(self) -> tuple[str, ...]:
        return self.ledger.clear_weights()

    # -- state and reclaim -------------------------------------------------------------------
    def view(self) -> LedgerView:
        with self._lock:
            held = tuple(Held(job, t, r.mb, r.model) for t, (job, _, r) in self._held.items())
        lg = self.ledger
        return LedgerView(lg.capacity_mb, lg.in_use_mb, lg.weights_mb, lg.peak_mb, lg.active,
                          lg.queued, lg.resident(), held, self.reclaimed)

    def reclaim_jobs(self, dead: set[str]) -> int:
        """Release every reservation of the ``dead`` jobs; returns how many."""
        with self._lock:
            gone = [t for t, (job, _, _) in self._held.items() if job in dead]
        count = 0
        for ticket in gone:
            with self._lock:
                res = self._pop_locked(ticket)
            if res is not None:
                self.ledger.release(res)
                count += 1
        with self._lock:
            self.reclaimed += count
        return count

    def reclaim(self) -> int:
        """Release the reservations of every job the GCS reports dead, now."""
        with self._lock:
            jobs = {job for job, _, _ in self._held.values()}
        return self.reclaim_jobs(dead_jobs(jobs)) if jobs else 0

    def _reap(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            with contextlib.suppress(Exception):  # the GCS briefly unreachable: next round
                self.reclaim()

    def stop(self) -> None:
        self._stop.set()


def ledger_actor(node_id: str, index: int, budget_mb: float, namespace: str) -> Any:
    """The slot's ledger actor, got or created atomically (named, detached, pinned to the
    slot's node: it goes with its GPU)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(SlotLedger).options(
        name=ledger_name(node_id, index),
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=LEDGER_CONCURRENCY,
        max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(budget_mb)


class SlotLedgerClient(VramLedger):
    """A driver's stand-in for a slot's shared ledger: the `VramLedger` calls the backend
    makes, answered by the slot's ledger actor (reads: its last answer, `sync` refreshes)."""

    def __init__(self, node_id: str, index: int, budget_mb: float, namespace: str) -> None:
        super().__init__(budget_mb)
        import ray

        self._ray = ray
        self._key = (node_id, index, budget_mb, namespace)
        self.actor = ledger_actor(node_id, index, budget_mb, namespace)
        self.job = ray.get_runtime_context().get_job_id()
        self._tokens: weakref.WeakKeyDictionary[Reservation, str] = weakref.WeakKeyDictionary()
        """Each held reservation's request token (what the actor releases it by)."""
        self._view = ray.get(self.actor.view.remote())

    def _get(self, method: str, *args: Any) -> Any:
        """``actor.<method>(*args)``, answered; a dead actor is replaced once (its
        reservations went with it) and asked again."""
        try:
            return self._ray.get(getattr(self.actor, method).remote(*args))
        except self._ray.exceptions.RayActorError:
            self.actor = ledger_actor(*self._key)
            return self._ray.get(getattr(self.actor, method).remote(*args))

    def sync(self) -> LedgerView:
        """Re-read the actor's state (a dead actor: a new one takes the slot)."""
        self._view = self._get("view")
        return self._view

    @property
    def view(self) -> LedgerView:
        return self._view

    # -- reads: the actor's last answer ------------------------------------------------------
    @property
    def capacity_mb(self) -> float:
        return self._view.budget_mb

    @property
    def free_mb(self) -> float:
        return self._view.free_mb

    @property
    def in_use_mb(self) -> float:
        return self._view.in_use_mb

    @property
    def weights_mb(self) -> float:
        return self._view.weights_mb

    @property
    def peak_mb(self) -> float:
        return self._view.peak_mb

    @property
    def active(self) -> int:
        return self._view.active

    @property
    def queued(self) -> int:
        return self._view.queued

    def resident(self) -> tuple[WarmModel, ...]:
        return self._view.resident

    def is_resident(self, model: str) -> bool:
        return any(w.model == model for w in self._view.resident)

    def admissible(self, mb: float, share: float, need: WeightsNeed | None = None) -> bool:
        return bool(self._get("admissible", mb, share, need))

    # -- admission and release ---------------------------------------------------------------
    def _reservation(self, granted: Granted, token: str) -> Reservation:
        self._view = granted.view
        res = Reservation(granted.mb, granted.share, granted.ticket, model=granted.model,
                          loaded=granted.loaded, evicted=granted.evicted, ledger=self)
        self._tokens[res] = token
        return res

    def try_reserve(self, mb: float, share: float = 0.0,
                    need: WeightsNeed | None = None) -> Reservation | None:
        self._check_size(mb, need)
        token = uuid.uuid4().hex
        granted = self._get("try_reserve", self.job, token, mb, share, need)
        return None if granted is None else self._reservation(granted, token)

    def _answer(self, answer: Granted | Refused, token: str) -> Reservation:
        if isinstance(answer, Refused):
            self._view = answer.view
            raise answer.error
        return self._reservation(answer, token)

    def reserve(self, mb: float, share: float = 0.0, timeout: float | None = None,
                need: WeightsNeed | None = None) -> Reservation:
        self._check_size(mb, need)
        token = uuid.uuid4().hex
        ref = self.actor.reserve.remote(self.job, token, mb, share, timeout, need)
        try:
            answer = self._ray.get(ref)
        except BaseException:
            with contextlib.suppress(Exception):
                self.actor.cancel.remote(token)
            raise
        return self._answer(answer, token)

    async def areserve(self, mb: float, share: float = 0.0, timeout: float | None = None,
                       need: WeightsNeed | None = None) -> Reservation:
        self._check_size(mb, need)
        token = uuid.uuid4().hex
        ref = self.actor.reserve.remote(self.job, token, mb, share, timeout, need)
        try:
            answer = await ref
        except BaseException:  # cancelled while queued: the actor refuses or releases it
            with contextlib.suppress(Exception):
                self.actor.cancel.remote(token)
            raise
        return self._answer(answer, token)

    def release(self, reservation: Reservation) -> None:
        if reservation.released:
            return
        reservation.released = True
        token = self._tokens.pop(reservation, None)
        if token is None:  # not granted by this client
            return
        # a dead actor's reservations went with it
        with contextlib.suppress(self._ray.exceptions.RayActorError):
            self._view = self._ray.get(self.actor.release.remote(token))

    def evict(self, model: str) -> bool:
        was = self.is_resident(model)
        self._view = self._get("evict", model)
        return was and not self.is_resident(model)

    def keep(self, model: str) -> None:
        self._view = self._get("keep", model)

    def demote(self, models: Iterable[str]) -> None:
        self._get("demote", tuple(models))

    def clear_weights(self) -> tuple[str, ...]:
        dropped: tuple[str, ...] = self._get("clear_weights")
        self.sync()
        return dropped

    # -- not on a shared slot ----------------------------------------------------------------
    def _local_only(self, what: str) -> NotImplementedError:
        return NotImplementedError(f"{what} is not available on a cluster-shared slot ledger")

    def try_hold_weights(self, need: WeightsNeed, *, evict: bool = True) -> Reservation | None:
        raise self._local_only("try_hold_weights")

    def resize_weights(self, model: str, mb: float) -> bool:
        raise self._local_only("resize_weights")

    def set_background(self, mb: float) -> None:
        raise self._local_only("set_background")

    @contextlib.contextmanager
    def hold(self, mb: float, share: float = 0.0, timeout: float | None = None,
             need: WeightsNeed | None = None) -> Iterator[Reservation]:
        raise self._local_only("hold")
        yield  # pragma: no cover

    @contextlib.asynccontextmanager
    async def ahold(self, mb: float, share: float = 0.0, timeout: float | None = None,
                    need: WeightsNeed | None = None) -> AsyncIterator[Reservation]:
        raise self._local_only("ahold")
        yield  # pragma: no cover


def cluster_slot_views(namespace: str = NAMESPACE) -> dict[str, LedgerView]:
    """Every shared slot ledger of the connected cluster in ``namespace``, by actor name."""
    import ray

    out: dict[str, LedgerView] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = str(entry.get("name", ""))
        if entry.get("namespace") != namespace or not name.startswith("ledger-"):
            continue
        with contextlib.suppress(Exception):  # a dead one: skipped
            actor: Any = ray.get_actor(name, namespace=namespace)
            out[name] = ray.get(actor.view.remote())
    return out


def close_cluster_slots(namespace: str = NAMESPACE) -> int:
    """Kill every shared slot actor (ledgers and model actors) in ``namespace``: their
    models go with them. For an operator, when no driver uses them. Returns how many."""
    import ray

    count = 0
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = str(entry.get("name", ""))
        if entry.get("namespace") != namespace or not name.startswith(("ledger-", "slot-")):
            continue
        with contextlib.suppress(Exception):
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
            count += 1
    return count


__all__ = [
    "NAMESPACE",
    "Granted",
    "Held",
    "LedgerView",
    "Refused",
    "SlotLedger",
    "SlotLedgerClient",
    "close_cluster_slots",
    "cluster_slot_views",
    "ledger_name",
    "slot_name",
]
