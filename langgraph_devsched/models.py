"""The model cache: weights a tool keeps resident on a device, loaded on demand, evicted LRU.

A tool owns its model through a `ResidentModel` handle and asks it, while it runs, for the
instance on the device its call was placed on::

    detector = ResidentModel("detr", load=lambda device: load_detr().to(device),
                             weights_mb=160)

    @device_hints(**detector.hints(vram_mb=300, profile={"cpu_ms": 900, "gpu_ms": 40}))
    @tool
    def detect(path: str) -> str:
        '''Find the objects in an image.'''
        return run(detector.get(), path)

Inside the node the backend's `ModelCache` answers `get()`: a hit returns the instance, a
miss loads it (timed; on CUDA its weights measured by ``torch.cuda.memory_allocated``) and
keeps it. The GPU weights are long-lived reservations in the backend's `VramLedger`, taken
when the call is admitted (see `ledger`), so a call never over-commits the budget; when an
admission needs their room the ledger names the idle least-recently-used models to evict and
the cache frees them (the handle's ``release``, then ``torch.cuda.empty_cache``). Host-side
instances are kept up to ``max_models``. Outside the node (a plain script, a test) ``get()``
loads on `current_device()` into a process-wide cache without a ledger.

>>> calls = []
>>> tiny = ResidentModel("tiny", load=lambda device: calls.append(device) or f"tiny@{device}")
>>> cache = ModelCache()
>>> with cache.scope("cpu") as used:
...     tiny.get(), tiny.get()
('tiny@cpu', 'tiny@cpu')
>>> calls, used.loaded, cache.resident()[0].model
(['cpu'], True, 'tiny')
>>> cache.clear(); cache.resident()
()
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langgraph_devsched.device import (
    Placement,
    current_device,
    is_gpu_device,
    reset_placement,
    set_placement,
)
from langgraph_devsched.ledger import Reservation, VramLedger, WeightsNeed
from langgraph_devsched.residency import ModelSide, WarmModel

M = TypeVar("M")
MAX_MODELS = 64
"""Default bound on the instances a cache keeps (GPU and host side together)."""


class ModelRoomError(MemoryError):
    """A model's weights found no room on the GPU (treated like a CUDA OOM: CPU rerun)."""


class ResidentModel(Generic[M]):
    """A model a tool keeps resident, one instance per device, loaded on first use there.

    ``load(device)`` builds the instance on ``device`` (``"cpu"``, ``"cuda:0"``);
    ``release(instance)``, when given, frees it (e.g. moves it off the GPU) before the cache
    drops its reference; ``weights_mb`` is what its weights hold on the GPU (declared; the
    cache measures it on CUDA); ``keep_warm`` keeps it from being evicted for another model.
    """

    def __init__(
        self,
        name: str,
        load: Callable[[str], M],
        *,
        weights_mb: float | None = None,
        release: Callable[[M], None] | None = None,
        keep_warm: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a resident model needs a non-empty name, got {name!r}")
        if not callable(load):
            raise TypeError(f"load must be a callable load(device) -> model, got {load!r}")
        if weights_mb is not None and not weights_mb >= 0:
            raise ValueError(f"weights_mb must be >= 0 MB, got {weights_mb!r}")
        self.name = name
        self.load = load
        self.weights_mb = weights_mb
        self.release = release
        self.keep_warm = keep_warm
        _HANDLES[name] = self

    def get(self, device: str | None = None) -> M:
        """The instance on ``device`` (default: where the running call was placed)."""
        scope = _SCOPE.get()
        if scope is not None:
            return scope.instance(self, device)
        return default_cache().instance(self, device or current_device())

    def hints(self, **fields: Any) -> dict[str, Any]:
        """Device hints naming this model (``model``, ``weights_mb``, ``keep_warm``) plus
        ``fields``, for `device_hints` or a hints mapping."""
        out: dict[str, Any] = {"model": self.name}
        if self.weights_mb is not None:
            out["weights_mb"] = self.weights_mb
        if self.keep_warm:
            out["keep_warm"] = True
        return {**out, **fields}

    def __repr__(self) -> str:
        return f"ResidentModel({self.name!r}, weights_mb={self.weights_mb})"


_HANDLES: weakref.WeakValueDictionary[str, ResidentModel[Any]] = weakref.WeakValueDictionary()
"""The live handles by model name (the latest of a name; the cache keys instances by name
alike): what a load between steps runs (`known_model`). Bounded by the live handles."""


def known_model(name: str) -> ResidentModel[Any] | None:
    """The live `ResidentModel` named ``name`` (the latest made), or None."""
    return _HANDLES.get(name)


@dataclass(frozen=True)
class Preloaded:
    """A load between steps that ran (`ModelCache.preload`)."""

    device: str
    load_ms: float
    evicted: tuple[str, ...] = ()


def side_of(device: str) -> ModelSide:
    return "gpu" if is_gpu_device(device) else "cpu"


@dataclass
class CallModels:
    """What one call did with resident models (filled in while it runs)."""

    device: str
    model: str | None = None
    declared: str | None = None
    """The model the call's hints name (its reservation pins it on the GPU)."""
    loaded: bool = False
    load_ms: float = 0.0
    evicted: tuple[str, ...] = ()
    asked: set[str] = field(default_factory=set)
    """Models the tool asked for through `ResidentModel.get`."""
    pinned: set[str] = field(default_factory=set)
    """Models the hints do not name, pinned on the GPU for this call (`extra`)."""
    fresh: set[str] = field(default_factory=set)
    """Models whose GPU weights were reserved anew for this call: an instance still cached
    from before their eviction is stale and loads again."""
    extra: list[Reservation] = field(default_factory=list)
    """Weights reserved during the call for a model its hints did not declare (given back
    when the call really ends: `ModelCache.finish`)."""
    held: set[tuple[str, str]] = field(default_factory=set)
    """The (model, device) instances handed to the call (in use until it ends)."""
    ended: bool = False
    """`ModelCache.finish` ran: a load the call started that ends later holds nothing."""
    elsewhere: dict[str, tuple[ModelCache, CallModels]] = field(default_factory=dict)
    """What the call did with models on other devices (a tool on ``cuda:0`` asking for
    ``get("cuda:1")``), per device: that device's cache and record, finished with this one."""


class _Scope:
    def __init__(self, cache: ModelCache, record: CallModels) -> None:
        self.cache = cache
        self.record = record

    def instance(self, handle: ResidentModel[M], device: str | None) -> M:
        return self.cache.instance(handle, device or self.record.device, self.record)


class CallScope:
    """`ModelCache.scope` for a call that declares no model (a plain CPU call): its
    `CallModels` record is made only when the tool asks for a model, and ``finish`` runs
    only then (a class, not a generator: it runs on every lean call). With ``placement``,
    it is also the call's current placement (`device.placed`) inside."""

    __slots__ = ("_placed", "_token", "cache", "device", "placement", "record")

    def __init__(self, cache: ModelCache, device: str,
                 placement: Placement | None = None) -> None:
        self.cache = cache
        self.device = device
        self.placement = placement
        self.record: CallModels | None = None
        """None until the call asked for a model: then what it did with it."""

    def instance(self, handle: ResidentModel[M], device: str | None) -> M:
        if self.record is None:
            self.record = CallModels(self.device)
        return self.cache.instance(handle, device or self.device, self.record)

    def __enter__(self) -> CallScope:
        self._token = _SCOPE.set(self)
        if self.placement is not None:
            self._placed = set_placement(self.placement)
        return self

    def __exit__(self, *exc: object) -> None:
        _SCOPE.reset(self._token)
        if self.placement is not None:
            reset_placement(self._placed)
        if self.record is not None:
            self.cache.finish(self.record)


_SCOPE: contextvars.ContextVar[_Scope | CallScope | None] = contextvars.ContextVar(
    "devsched_models", default=None
)


@dataclass
class _Entry:
    handle: ResidentModel[Any]
    instance: Any
    device: str
    weights_mb: float


class ModelCache:
    """Resident model instances per (model, device); GPU weights accounted in ``ledger``
    (one GPU: the backend's)."""

    def __init__(
        self,
        *,
        ledger: VramLedger | None = None,
        max_models: int = MAX_MODELS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if max_models < 1:
            raise ValueError(f"max_models must be >= 1, got {max_models}")
        self.ledger = ledger
        self.max_models = max_models
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._loading: dict[tuple[str, str], threading.Lock] = {}
        self._users: dict[tuple[str, str], int] = {}
        """Running calls per instance handed out (an instance in use is never freed)."""
        self._closing: set[tuple[str, str]] = set()
        """Instances `clear` found in use (or still loading): freed once no call uses them."""
        self._cleared = 0
        """How many times `clear` ran: a load that started before the last one ends closed."""
        self._measured: dict[str, float] = {}
        self.route: Callable[[str], ModelCache] | None = None
        """The cache of a device's instances (a backend with several GPUs sets it): a
        `ResidentModel.get` for another device loads there, its weights in that GPU's
        ledger."""
        self.loads = 0
        self.hits = 0
        self.evictions = 0

    # -- what the executor asks ------------------------------------------------------------
    def need(self, model: str | None, declared_mb: float, keep_warm: bool) -> WeightsNeed | None:
        """The GPU weights a call on ``model`` needs reserved: the larger of the declared and
        the measured size."""
        if model is None:
            return None
        return WeightsNeed(model, max(declared_mb, self._measured.get(model, 0.0)), keep_warm)

    @contextlib.contextmanager
    def scope(self, device: str, model: str | None = None,
              evicted: tuple[str, ...] = (), *, cold: bool = False,
              until_finish: bool = False) -> Iterator[CallModels]:
        """The block runs one call on ``device`` on its declared ``model`` (``cold``: whose
        weights its admission reserved anew): `ResidentModel.get` answers from here and the
        returned record says what it loaded. What the call holds (instances in use, pins of
        undeclared models) is given back at the end of the block, or, ``until_finish``, only
        when `finish` says the call really ended (a sync tool's thread may outlive it)."""
        record = CallModels(device, model, declared=model, evicted=evicted)
        if cold and model is not None and side_of(device) == "gpu":
            record.fresh.add(model)
        token = _SCOPE.set(_Scope(self, record))
        try:
            yield record
        finally:
            _SCOPE.reset(token)
            if not until_finish:
                self.finish(record)

    def call_scope(self, device: str) -> CallScope:
        """`scope` for a call on ``device`` that declares no model, its record made only if
        the tool asks for one (`CallScope`; the lean path of plain calls)."""
        return CallScope(self, device)

    def finish(self, record: CallModels) -> None:
        """The call of ``record`` has really ended (its thread returned) and its GPU
        reservation is given back: its instances are no longer in use, its pins of
        undeclared models go back, and weights without an instance are settled."""
        for res in record.extra:  # each to the ledger (GPU) that pinned it
            res.release()
        record.extra.clear()
        elsewhere = list(record.elsewhere.values())
        record.elsewhere.clear()
        for cache, used in elsewhere:  # what it used on other devices, in their caches
            cache.finish(used)
        with self._lock:
            record.ended = True
            for key in record.held:
                left = self._users.get(key, 0) - 1
                if left > 0:
                    self._users[key] = left
                else:
                    self._users.pop(key, None)
            record.held.clear()
        self._settle(record)
        self._free_closing()

    def drop(self, models: Iterable[str], side: ModelSide = "gpu", *,
             idle_only: bool = False) -> None:
        """Free the instances of ``models`` on ``side`` (the ledger already evicted them);
        ``idle_only``: not those a running call uses (a ledger in another process evicted
        them, and a later call may already have loaded them again)."""
        names = set(models)
        freed = []
        with self._lock:
            for key in [k for k in self._entries if k[0] in names and side_of(k[1]) == side
                        and not (idle_only and k in self._users)]:
                freed.append(self._entries.pop(key))
                self.evictions += 1
        self._free(freed)

    def _settle(self, record: CallModels) -> None:
        """After a call on the GPU: weights the ledger holds that no instance of the cache
        stands for are either given back (the tool asked the cache for the model and its
        load failed; `VramLedger.evict` keeps them while another call or a load in flight
        holds them) or never evicted (the call's declared model, which the tool never asked
        for: it keeps its weights its own way, which the cache cannot free)."""
        ledger = self.ledger
        if side_of(record.device) != "gpu" or ledger is None:
            return
        models = set(record.asked)
        if record.declared is not None:
            models.add(record.declared)
        for model in models:
            if self.holds(model, "gpu") or not ledger.is_resident(model):
                continue
            if model in record.asked:
                ledger.evict(model)
            else:
                ledger.keep(model)

    def _free_closing(self) -> None:
        """Free the instances `clear` left to their running calls, once none uses them."""
        if not self._closing:
            return
        with self._lock:
            done = [k for k in self._closing if k not in self._users]
            freed = [self._entries.pop(k) for k in done if k in self._entries]
            self._closing.difference_update(done)
        if self.ledger is not None:
            for name, device in done:
                if side_of(device) == "gpu":
                    self.ledger.evict(name)
        self._free(freed)

    def in_use(self, model: str, side: ModelSide = "gpu") -> bool:
        """Whether a call still uses an instance of ``model`` on ``side`` (until `finish`)."""
        with self._lock:
            return any(n == model and side_of(d) == side for n, d in self._users)

    def holds(self, model: str, side: ModelSide) -> bool:
        """Whether an instance of ``model`` is cached on ``side``."""
        with self._lock:
            return any(n == model and side_of(d) == side for n, d in self._entries)

    def resident(self) -> tuple[WarmModel, ...]:
        """GPU weights (from the ledger, least recently used first), then host instances."""
        gpu = self.ledger.resident() if self.ledger is not None else ()
        with self._lock:
            host = tuple(WarmModel(n, e.weights_mb, "cpu") for (n, d), e in self._entries.items()
                         if side_of(d) == "cpu")
            if self.ledger is None:
                gpu = tuple(WarmModel(n, e.weights_mb, "gpu")
                            for (n, d), e in self._entries.items() if side_of(d) == "gpu")
        return gpu + host

    def clear(self) -> None:
        """Drop every instance and every idle model's weights (at close). An instance a
        running call uses (its weights pinned in the ledger) stays until that call ends,
        then goes too."""
        if self.ledger is not None:
            self.ledger.clear_weights()
        with self._lock:
            busy = {k for k in self._entries if k in self._users}
            freed = [e for k, e in self._entries.items() if k not in busy]
            self._entries = OrderedDict((k, e) for k, e in self._entries.items() if k in busy)
            self._closing |= busy
            self._cleared += 1
        self._free(freed)

    # -- loading ---------------------------------------------------------------------------
    def preload(self, handle: ResidentModel[Any], device: str,
                evict: Iterable[str] = ()) -> Preloaded | None:
        """Load ``handle`` on ``device`` while no step needs it (a load between steps), as a
        call's `ResidentModel.get` would: on a GPU its weights are reserved in the ledger
        before the load starts and stay pinned until it returns, after evicting only the
        idle models named in ``evict`` and only into free room (never ahead of a queued
        call). A call that asks for the model meanwhile waits for this load (one load).
        None when there is nothing to do or no room (nothing changed then but ``evict``)."""
        name, side = handle.name, side_of(device)
        if self.holds(name, side):
            return None
        ledger = self.ledger if side == "gpu" else None
        pin: Reservation | None = None
        evicted: list[str] = []
        if ledger is not None:
            if ledger.is_resident(name):  # a call holds (and loads) it: nothing to add
                return None
            need = self.need(name, handle.weights_mb or 0.0, handle.keep_warm)
            assert need is not None
            resident = {w.model: w for w in ledger.resident()}
            named = [resident[m] for m in dict.fromkeys(evict) if m in resident]
            if any(w.in_use or w.keep_warm for w in named) or (
                    need.mb > ledger.free_mb + sum(w.weights_mb for w in named)):
                return None
            evicted = [w.model for w in named if ledger.evict(w.model)]
            self.drop(evicted)
            try:
                pin = ledger.try_hold_weights(need, evict=False)
            except ValueError:  # larger than the whole budget
                pin = None
            if pin is None:
                return None
        record = CallModels(device, declared=name)
        try:
            self.instance(handle, device, record)
        finally:
            if pin is not None:
                pin.release()
            self.finish(record)
            if ledger is not None and not self.holds(name, "gpu"):  # failed, or closed
                ledger.evict(name)
        if not record.loaded:  # a call loaded it first (this waited on that load)
            return None
        return Preloaded(device, record.load_ms, tuple(evicted))

    def instance(
        self, handle: ResidentModel[M], device: str, record: CallModels | None = None
    ) -> M:
        """The instance of ``handle`` on ``device``, loaded (once, also under concurrent
        calls) when absent; by the cache of ``device`` (`route`) when that is another."""
        owner = self.route(device) if self.route is not None else self
        if owner is not self:
            return owner.instance(handle, device, _elsewhere(record, owner, device))
        side = side_of(device)
        key = (handle.name, device)
        name = handle.name
        if record is not None:
            record.asked.add(name)
            if (side == "gpu" and self.ledger is not None and name != record.declared
                    and name not in record.pinned):
                self._pin(handle, record)
        stale: list[_Entry] = []
        with self._lock:
            if record is not None and name in record.fresh and key in self._entries:
                stale.append(self._entries.pop(key))  # evicted since: its weights went
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                self._use_locked(key, record)
                return entry.instance
            gate = self._loading.setdefault(key, threading.Lock())
        self._free(stale)
        with gate:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None:
                    self.hits += 1
                    self._use_locked(key, record)
                    return entry.instance
            # the load itself pins the weights (reserved when not resident) until it ends,
            # however the call that started it ends meanwhile (a timeout, a cancellation)
            pin = self._hold(handle) if side == "gpu" and self.ledger is not None else None
            with self._lock:
                cleared = self._cleared
            try:
                started = self._clock()
                before = _cuda_allocated(device)
                instance = handle.load(device)
                after = _cuda_allocated(device)
            except BaseException:
                self._unpin_failed(name, pin)
                raise
            load_ms = (self._clock() - started) * 1000.0
            measured = after - before if before is not None and after is not None else None
            weights = measured if measured is not None and measured > 0 else (
                handle.weights_mb or 0.0)
            if side == "gpu" and measured is not None and measured > 0:
                self._measured[handle.name] = measured
                if self.ledger is not None:
                    self.ledger.resize_weights(handle.name, measured)
            with self._lock:
                self._entries[key] = _Entry(handle, instance, device, weights)
                self._loading.pop(key, None)
                self.loads += 1
                self._use_locked(key, record)
                over = self._over_bound()
                if self._cleared != cleared:  # closed while it loaded: goes once unused
                    self._closing.add(key)
            if pin is not None:
                pin.release()
            if record is not None:
                record.loaded = True
                record.load_ms += load_ms
                record.model = record.model or name
                record.fresh.discard(name)
            self._free(over)
            if record is None or record.ended:  # no call will `finish` it
                self._free_closing()
            return instance

    def _use_locked(self, key: tuple[str, str], record: CallModels | None) -> None:
        """``record``'s call uses the instance at ``key`` until `finish`."""
        if record is not None and not record.ended and key not in record.held:
            record.held.add(key)
            self._users[key] = self._users.get(key, 0) + 1

    def _hold(self, handle: ResidentModel[Any]) -> Reservation:
        """Pin ``handle``'s GPU weights for a load (reserved when not resident, evicting
        idle models), or `ModelRoomError`."""
        ledger = self.ledger
        assert ledger is not None
        need = self.need(handle.name, handle.weights_mb or 0.0, handle.keep_warm)
        assert need is not None
        try:
            res = ledger.try_hold_weights(need)
        except ValueError as exc:  # larger than the whole budget
            raise ModelRoomError(str(exc)) from None
        if res is None:
            raise ModelRoomError(
                f"no room on the GPU for the {need.mb:.0f} MB of {handle.name!r} weights "
                f"({ledger.free_mb:.0f} MB free, the rest in use)")
        if res.evicted:
            self.drop(res.evicted)
        return res

    def _unpin_failed(self, name: str, pin: Reservation | None) -> None:
        """A load that raised: its pin goes back, and weights no instance stands for with
        it (unless a call still pins them: that call's end settles them)."""
        if pin is None or self.ledger is None:
            return
        pin.release()
        if not self.holds(name, "gpu"):
            self.ledger.evict(name)

    def _pin(self, handle: ResidentModel[Any], record: CallModels) -> None:
        """A model the call's hints do not name, on the GPU: pinned for the call's duration,
        its weights reserved when not resident (evicting idle models), or `ModelRoomError`."""
        res = self._hold(handle)
        record.extra.append(res)
        record.pinned.add(handle.name)
        record.evicted += res.evicted
        if res.loaded:
            record.fresh.add(handle.name)

    def _over_bound(self) -> list[_Entry]:
        """Host instances beyond ``max_models`` (least recently used first); GPU instances
        are bounded by the ledger's budget."""
        over: list[_Entry] = []
        while len(self._entries) > self.max_models:
            key = next((k for k in self._entries if k not in self._users
                        and (side_of(k[1]) == "cpu" or self.ledger is None)),
                       None)
            if key is None:
                break
            over.append(self._entries.pop(key))
        return over

    def _free(self, entries: list[_Entry]) -> None:
        cuda = False
        for entry in entries:
            if entry.handle.release is not None:
                with contextlib.suppress(Exception):
                    entry.handle.release(entry.instance)
            cuda = cuda or entry.device.startswith("cuda")
            entry.instance = None
        if cuda:
            _empty_cuda_cache()


def _elsewhere(record: CallModels | None, cache: ModelCache, device: str) -> CallModels | None:
    """The record of what a call does on ``device`` (another cache's): made on first use,
    finished with the call's own record."""
    if record is None:
        return None
    if record.ended:  # the call already ended: nothing will finish a new record
        return None
    found = record.elsewhere.get(device)
    if found is None:
        found = (cache, CallModels(device))
        record.elsewhere[device] = found
    return found[1]


def _cuda_allocated(device: str) -> float | None:
    """``torch.cuda.memory_allocated`` in MB on a CUDA device, None elsewhere (torch is
    consulted only when already imported)."""
    torch = sys.modules.get("torch")
    if torch is None or not device.startswith("cuda"):
        return None
    try:
        return float(torch.cuda.memory_allocated(device)) / 2**20
    except Exception:
        return None


def _empty_cuda_cache() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()


_DEFAULT: ModelCache | None = None
_DEFAULT_LOCK = threading.Lock()


def default_cache() -> ModelCache:
    """The process-wide cache `ResidentModel.get` uses outside the node (no ledger)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = ModelCache()
        return _DEFAULT
