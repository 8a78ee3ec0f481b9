"""Live model instances, counted by the harness's own loaders, and a ledger checked against them.

`LiveModels` builds `ResidentModel` handles whose ``load`` and ``release`` the harness owns:
a load is *loading* from the moment it starts, *live* once it returned, and gone once its
``release`` ran. Nothing here reads the cache's bookkeeping: what is on the (declared) GPU is
what these loaders say. A load may be made to raise, or to wait on a gate the probe opens.

`LiveLedger` is a `VramLedger` that compares itself with those instances at every grant and
release (and whenever a load starts, ends or is released):

* every loading or live GPU instance is counted: its model is resident in the ledger (or was
  just evicted by an admission whose caller is freeing it);
* what the instances really hold plus the running calls' working memory stays within the
  budget (an instance just evicted, that the admitting thread frees before its call runs,
  counts from the moment a load starts beside it);

and `LiveLedger.at_rest_problems` checks, once nothing runs and no load is in progress, that
the live GPU instances are exactly the ledger's resident models, with the same weights.

>>> models = LiveModels()
>>> ledger = LiveLedger(8000, models)
>>> a = models.handle("a", 3000)
>>> a.load("fake:0") is not None, models.live_gpu_mb()
(True, {'a': 3000.0})
>>> ledger.at_rest_problems()
["live instance(s) ['a'] not resident in the ledger (3000 MB uncounted)"]
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph_devsched.device import is_gpu_device
from langgraph_devsched.executors.local import GpuConfig, LocalBackend
from langgraph_devsched.ledger import Reservation, VramLedger
from langgraph_devsched.models import ResidentModel

_EPS = 1e-6
LOAD_LIMIT_S = 5.0
"""A gated load gives up waiting for its gate after this long (a probe always opens it)."""


class InjectedLoadError(RuntimeError):
    """A model load the harness made fail."""


@dataclass(eq=False)
class Instance:
    """One loaded model instance (what a tool gets from `ResidentModel.get`)."""

    token: int
    model: str
    device: str
    mb: float


@dataclass
class LoadPlan:
    """What the loads of one model do: call ``on_start``, wait on ``gate``, sleep
    ``delay_s``, then raise or return."""

    raises: bool = False
    gate: threading.Event | None = None
    delay_s: float = 0.0
    """Sleep this long before returning (a load slower than a deadline)."""
    on_start: Callable[[], None] | None = None


class LiveModels:
    """The instances the harness's loaders made, by state: loading, live, released."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._loading: dict[int, Instance] = {}
        self._live: dict[int, Instance] = {}
        self.plans: dict[str, LoadPlan] = {}
        self.loads = self.failed = self.released = 0
        self.problems: list[str] = []
        self.listeners: list[Callable[[str], None]] = []
        """Called (outside this registry's lock) after a load starts, ends, or a release."""
        self.load_started = threading.Event()

    # -- handles -------------------------------------------------------------------------------
    def handle(
        self, name: str, weights_mb: float, *, keep_warm: bool = False
    ) -> ResidentModel[Any]:
        """A resident model whose loads and releases this registry counts."""

        def load(device: str) -> Instance:
            return self._load(name, device, weights_mb)

        return ResidentModel(name, load, weights_mb=weights_mb, release=self._release,
                             keep_warm=keep_warm)

    def own_instance(self, name: str, device: str, mb: float) -> Instance:
        """An instance a tool loads its own way (not through a handle): live until released
        with `release_own`."""
        inst = Instance(next(self._tokens), name, device, mb)
        with self._lock:
            self._live[inst.token] = inst
            self.loads += 1
        self._tell("own load")
        return inst

    def release_own(self, inst: Instance) -> None:
        self._release(inst)

    # -- what the loaders do -------------------------------------------------------------------
    def _load(self, name: str, device: str, mb: float) -> Instance:
        inst = Instance(next(self._tokens), name, device, mb)
        plan = self.plans.get(name, LoadPlan())
        with self._lock:
            self._loading[inst.token] = inst
        self.load_started.set()
        self._tell(f"load of {name} started")
        try:
            if plan.on_start is not None:
                plan.on_start()
            if plan.gate is not None:
                plan.gate.wait(LOAD_LIMIT_S)
            if plan.delay_s > 0:
                time.sleep(plan.delay_s)
            if plan.raises:
                raise InjectedLoadError(f"injected load error: model {name!r} failed to load")
        except BaseException:
            with self._lock:
                self._loading.pop(inst.token, None)
                self.failed += 1
            self._tell(f"load of {name} failed")
            raise
        with self._lock:
            self._loading.pop(inst.token, None)
            self._live[inst.token] = inst
            self.loads += 1
        self._tell(f"load of {name} ended")
        return inst

    def _release(self, inst: Any) -> None:
        if not isinstance(inst, Instance):
            with self._lock:
                self.problems.append(f"release of {inst!r}, not an instance a loader made")
            return
        with self._lock:
            gone = self._live.pop(inst.token, None)
            if gone is None:
                self.problems.append(f"instance {inst.model}#{inst.token} released twice")
            else:
                self.released += 1
        self._tell(f"release of {inst.model}")

    def _tell(self, where: str) -> None:
        for listener in list(self.listeners):
            listener(where)

    # -- what is held --------------------------------------------------------------------------
    def is_live(self, inst: Instance) -> bool:
        with self._lock:
            return inst.token in self._live

    def loading(self) -> int:
        with self._lock:
            return len(self._loading)

    def held_gpu(self, device: str | None = None) -> list[Instance]:
        """GPU instances loading or live (what the device really holds); ``device``: on
        that GPU only."""
        with self._lock:
            both = [*self._loading.values(), *self._live.values()]
        return [i for i in both if is_gpu_device(i.device) and device in (None, i.device)]

    def live_gpu_mb(self, device: str | None = None) -> dict[str, float]:
        """Live GPU instances' weights by model (loads finished, not released); ``device``:
        on that GPU only."""
        with self._lock:
            live = list(self._live.values())
        out: dict[str, float] = {}
        for i in live:
            if is_gpu_device(i.device) and device in (None, i.device):
                out[i.model] = out.get(i.model, 0.0) + i.mb
        return out


class LiveLedger(VramLedger):
    """A `VramLedger` compared with `LiveModels` at every grant and release (see module)."""

    def __init__(self, budget_mb: float, models: LiveModels, *,
                 max_active: int | None = None, device: str | None = None) -> None:
        super().__init__(budget_mb, max_active=max_active)
        self.live_models = models
        self.device = device
        """The GPU whose instances it is compared with (None: every GPU instance)."""
        self.problems: list[str] = []
        self.checks = 0
        self._freeing: set[str] = set()
        """Models an admission evicted whose instances the caller is about to free."""
        self._check_lock = threading.Lock()
        models.listeners.append(self.compare)

    def _note(self, problem: str) -> None:
        if len(self.problems) < 20 and problem not in self.problems:
            self.problems.append(problem)

    def _compare_locked(self, where: str) -> None:
        self.checks += 1
        resident = {w.model for w in self._warm_locked()}
        held = self.live_models.held_gpu(self.device)
        freed_now = {m for m in self._freeing if all(i.model != m for i in held)}
        self._freeing -= freed_now | resident
        uncounted = [i for i in held if i.model not in resident and i.model not in self._freeing]
        if uncounted:
            mb = sum(i.mb for i in uncounted)
            self._note(f"{where}: instance(s) {sorted({i.model for i in uncounted})} on the GPU "
                       f"not counted by the ledger ({mb:.0f} MB)")
        # an instance an admission just evicted is freed by the admitting thread before its
        # call runs: it counts against the budget when a load starts beside it (then both
        # really are on the device), not at the grant that evicted it
        load_starts = where.endswith("started")
        really = sum(i.mb for i in held if load_starts or i.model not in self._freeing)
        really += max(0.0, self.working_mb)
        if really > self.capacity_mb + _EPS:
            what = ", ".join(f"{i.model}{' (evicted)' if i.model in self._freeing else ''}"
                             for i in held)
            self._note(f"{where}: {really:.0f} MB really held (instances + working memory) on "
                       f"a {self.capacity_mb:.0f} MB budget: {what}, "
                       f"{self.working_mb:.0f} MB working")

    def compare(self, where: str) -> None:
        """Compare the ledger with the live instances now (from any thread)."""
        with self._lock:
            self._compare_locked(where)

    def _grant_locked(self, *args: Any, **kwargs: Any) -> Reservation:
        res = super()._grant_locked(*args, **kwargs)
        self._compare_locked("grant")
        return res

    def _drop_locked(self, model: str) -> None:
        super()._drop_locked(model)
        self._freeing.add(model)  # evicted or cleared: its instance is freed right after

    def _release_locked(self, *args: Any, **kwargs: Any) -> None:
        super()._release_locked(*args, **kwargs)
        self._compare_locked("release")

    def at_rest_problems(self) -> list[str]:
        """At rest (no call running, no load in progress): live GPU instances == residents."""
        out: list[str] = []
        with self._lock:
            resident = {w.model: w.weights_mb for w in self._warm_locked()}
            working, active = self.working_mb, self.active
        live = self.live_models.live_gpu_mb(self.device)
        if active or abs(working) > _EPS:
            out.append(f"not at rest: {active} active, {working:.0f} MB working memory")
        phantom = sorted(set(resident) - set(live))
        if phantom:
            out.append(f"resident in the ledger with no instance: {phantom} "
                       f"({sum(resident[m] for m in phantom):.0f} MB phantom)")
        uncounted = sorted(set(live) - set(resident))
        if uncounted:
            out.append(f"live instance(s) {uncounted} not resident in the ledger "
                       f"({sum(live[m] for m in uncounted):.0f} MB uncounted)")
        for m in sorted(set(live) & set(resident)):
            if abs(live[m] - resident[m]) > _EPS:
                out.append(f"{m}: {live[m]:.0f} MB live, {resident[m]:.0f} MB in the ledger")
        return out


def live_backend(
    models: LiveModels,
    *,
    budget_mb: float = 8000.0,
    queue_timeout_s: float | None = None,
    gpu_concurrency: int | None = None,
) -> tuple[LocalBackend, LiveLedger]:
    """A `LocalBackend` on a declared GPU whose ledger is a `LiveLedger` over ``models``.

    torch is imported here when present: the backend's OOM path imports it (to empty the
    CUDA cache) and the first import takes seconds, which must not fall inside a timed step.
    """
    with contextlib.suppress(ImportError):
        importlib.import_module("torch")
    backend = LocalBackend(gpu=GpuConfig(budget_mb, device="fake:0"),
                           queue_timeout_s=queue_timeout_s, gpu_concurrency=gpu_concurrency)
    ledger = LiveLedger(budget_mb, models, max_active=gpu_concurrency)
    backend.stand_in_ledger(ledger)
    return backend, ledger


def live_gpus_backend(
    models: LiveModels,
    budgets: list[float],
    *,
    queue_timeout_s: float | None = None,
    gpu_concurrency: int | None = None,
) -> tuple[LocalBackend, list[LiveLedger]]:
    """A `LocalBackend` on declared GPUs ``cuda:0``, ``cuda:1``, ... (one budget each), each
    GPU's ledger a `LiveLedger` compared with the live instances on that GPU alone."""
    with contextlib.suppress(ImportError):
        importlib.import_module("torch")
    backend = LocalBackend(gpu=[GpuConfig(mb, f"cuda:{i}") for i, mb in enumerate(budgets)],
                           queue_timeout_s=queue_timeout_s, gpu_concurrency=gpu_concurrency)
    ledgers = []
    for i, mb in enumerate(budgets):
        ledger = LiveLedger(mb, models, max_active=gpu_concurrency, device=f"cuda:{i}")
        lane = backend.lane(i)
        lane.ledger = ledger  # the checked ledger stands in for the GPU's own
        lane.models.ledger = ledger
        ledgers.append(ledger)
    return backend, ledgers
