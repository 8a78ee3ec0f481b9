"""Loads between steps on a node: while the agent's LLM thinks, load the models its scheduler
expects next, so the next step finds them warm.

After a step, a scheduler with a ``preloads(device, idle_ms)`` method (the monitor policy's:
`schedulers.policy.investments`) is asked which loads are worth running before the next step, given
the device state now and the idle time the node expects. The node cannot see the agent's
LLM, so it expects what it measured: the median of the last `MAX_GAPS` gaps between its
steps (a gap: from the moment no call of the node runs to the next step's arrival), at most
`MAX_IDLE_MS`. None before two steps (no gap measured yet), and nothing is asked while that
median is under `MIN_IDLE_MS`: a program that drives the graph in a loop leaves no think time
to load in. The median (not a low quantile): a step that arrives during a load it needs
waits only for the rest of that load, which it would have paid whole.

A step's decision may also name loads to start beside its calls (``Decision.background``: a
model the next steps need, loading while this step runs on the CPU); `beside` starts them
with the step, through the same loader, and the step does not wait for them.

Each load (at most `MAX_PRELOADS` between two steps, one after another, none once a step has
arrived) runs in a thread of its own through the backend (`LocalBackend.preload_model`): a
GPU load through that GPU's model cache, its weights reserved in that GPU's ledger before it
starts and pinned until its loader returns, after evicting only the idle models the
scheduler named, only into free room; or a host-side load. When a step arrives meanwhile, a
call that needs the model waits for the rest of that load (the model loads once), a call
that needs the room sees it held (it queues, or runs on the CPU), and a load's thread is
never cut. `close` waits for a load in flight (at most `CLOSE_WAIT_S`; one still running
after that frees what it loaded when it returns).

What the loads did is recorded: each step's ``StepRecord.extra["preloads"]`` lists the
loads that started since the previous step (`BackgroundLoad`: model, device, ms, whether this
step used it warm), ``extra["preloads_wasted"]`` the earlier ones found wasted (evicted or
failed before any step used them); the traced runs of the next step carry
``devsched.preloaded`` and ``devsched.preloads_wasted``; the totals are on the node's
`Preloader` (``node.preload``).
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_devsched._node.call_runner import spawn
from langgraph_devsched.models import known_model
from langgraph_devsched.records import StepRecord

logger = logging.getLogger(__name__)

MAX_GAPS = 16
"""The idle-time estimate is the median of at most this many recent gaps between steps."""
MIN_IDLE_MS = 500.0
"""Below this expected idle time (ms), no loads between steps."""
MAX_IDLE_MS = 60_000.0
"""The idle-time estimate never exceeds this (ms)."""
FIRST_TURN_MS = 2000.0
"""The idle time expected after a request arrives, before any gap between steps is
measured: the agent's first LLM turn (seconds, as a rule)."""
MAX_PRELOADS = 1
"""At most this many loads between two steps (the policy's and the bench's bound)."""
MAX_KEPT = 64
"""Loads remembered: not yet used (pending) and the recent ones (`history`)."""
CLOSE_WAIT_S = 30.0
"""`close` waits at most this long for a load in flight."""
PRELOADS_KEY = "preloads"
WASTED_KEY = "preloads_wasted"


@dataclass
class BackgroundLoad:
    """One load between steps."""

    model: str
    side: str
    device: str = ""
    load_ms: float | None = None
    """Its load time; None while it runs (or when it failed)."""
    evicted: tuple[str, ...] = ()
    used: bool = False
    """A step's call then ran on it warm (it did not load it)."""
    wasted: bool = False
    """Evicted, failed, or left unused at close, before any step used it."""
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.load_ms is not None or self.error is not None


class Preloader:
    """A node's loads between steps (see the module)."""

    def __init__(self, *, scheduler: Any, backend: Any,
                 clock: Callable[[], float] | None = None) -> None:
        self._scheduler = scheduler
        self._backend = backend
        self.clock: Callable[[], float] = clock or backend.clock
        """The clock gaps between steps are measured on (seconds; the backend's)."""
        self._lock = threading.Lock()
        self._active = 0
        self._idle_since: float | None = None
        self._gaps: deque[float] = deque(maxlen=MAX_GAPS)
        self._thread: Any = None
        self._fresh: list[BackgroundLoad] = []
        """Loads started since the last step closed (reported with the next one)."""
        self._pending: deque[BackgroundLoad] = deque()
        """Loads done, not yet used by a step nor found wasted."""
        self._wasted_new: list[BackgroundLoad] = []
        """Found wasted since the last step closed (its record lists them)."""
        self._wasted_traced: list[BackgroundLoad] = []
        """Found wasted since the last step was planned (its traces list them)."""
        self.history: deque[BackgroundLoad] = deque(maxlen=MAX_KEPT)
        """The recent loads, oldest first."""
        self.loads = 0
        """Loads run (complete)."""
        self.device_ms = 0.0
        """Their device time (ms)."""
        self.used = 0
        self.saved_ms = 0.0
        """The load time of the models a step then used warm (the loads it did not pay)."""
        self.wasted = 0
        self.wasted_ms = 0.0
        self.failed = 0

    # -- the idle time ----------------------------------------------------------------------
    @property
    def idle_ms(self) -> float | None:
        """The idle time expected before the next step (see the module), or None."""
        with self._lock:
            if not self._gaps:
                return None
            return min(MAX_IDLE_MS, statistics.median(self._gaps))

    @property
    def running(self) -> bool:
        """Whether a load between steps is under way."""
        thread = self._thread
        return thread is not None and not thread.done()

    def arrive(self) -> None:
        """A step's invocation starts (the gap since the node went idle ends)."""
        with self._lock:
            self._active += 1
            if self._active == 1 and self._idle_since is not None:
                self._gaps.append(max(0.0, (self.clock() - self._idle_since) * 1000.0))
                self._idle_since = None

    def leave(self) -> None:
        """A step's invocation ended: once none runs, the loads between steps start."""
        with self._lock:
            self._active = max(0, self._active - 1)
            if self._active:
                return
            self._idle_since = self.clock()
        self.start()

    # -- running ----------------------------------------------------------------------------
    def start(self, idle_ms: float | None = None) -> None:
        """Ask the scheduler for the loads worth running now and start them in a thread
        (nothing while a load runs, a step runs, or too little idle time is expected);
        ``idle_ms``: the idle time expected (default: the measured one, `idle_ms`)."""
        idle = self.idle_ms if idle_ms is None else idle_ms
        if idle is None or idle < MIN_IDLE_MS or self.running:
            return
        try:
            asked = list(self._scheduler.preloads(self._backend.device_state(), idle))
        except Exception:  # a scheduler's failure must not break the node
            logger.exception("the scheduler's preloads failed; no loads between steps")
            return
        if asked:
            self._thread = spawn(lambda: self._run(asked[:MAX_PRELOADS]))

    def again(self) -> None:
        """Something the scheduler knows changed while the node is idle (a forecast from
        words came in: a request arrived, the agent's LLM turn is under way): ask for loads
        again, unless a step runs; before any gap is measured, that turn is expected to
        last `FIRST_TURN_MS`."""
        with self._lock:
            if self._active:
                return
        self.start(idle_ms=self.idle_ms or FIRST_TURN_MS)

    def beside(self, asked: Sequence[Any]) -> None:
        """Start a step's background loads (``Decision.background``) now, beside its calls
        (nothing while a load runs: one loader). The ledger gives them only free room, behind
        any queued call, and they evict only idle models the scheduler named."""
        if asked and not self.running:
            self._thread = spawn(lambda: self._run(list(asked[:MAX_PRELOADS]), during=True))

    def _run(self, asked: list[Any], *, during: bool = False) -> None:
        for p in asked:
            handle = known_model(p.model)
            with self._lock:
                if (self._active and not during) or handle is None:  # a step arrived: stop
                    return
                load = BackgroundLoad(p.model, p.side,
                                      "cpu" if p.side == "cpu" else f"cuda:{p.gpu}")
                self._keep_locked(self._fresh, load)
                self.history.append(load)
            try:
                done = self._backend.preload_model(handle, p.gpu, tuple(p.evict), p.side)
            except Exception as exc:  # the loader's own error: recorded, wasted
                logger.debug("load of %s between steps failed: %s", p.model, exc)
                with self._lock:
                    load.error = f"{type(exc).__name__}: {exc}"
                    self.failed += 1
                    self._waste_locked(load)
                continue
            with self._lock:
                if done is None:  # resident already, or no room: nothing ran
                    load.error = "not run: resident already, or no room"
                    if load in self._fresh:
                        self._fresh.remove(load)
                    continue
                load.device, load.load_ms, load.evicted = done.device, done.load_ms, done.evicted
                self.loads += 1
                self.device_ms += done.load_ms
                if load.used:  # a step that arrived during it used it
                    self.saved_ms += done.load_ms
                else:
                    self._keep_locked(self._pending, load)

    def _keep_locked(self, kept: Any, load: BackgroundLoad) -> None:
        """Append ``load`` to ``kept``, the oldest beyond `MAX_KEPT` dropped (a pending one
        then counts as wasted)."""
        kept.append(load)
        while len(kept) > MAX_KEPT:
            old = kept.pop(0) if isinstance(kept, list) else kept.popleft()
            if kept is self._pending:
                self._waste_locked(old)

    def _waste_locked(self, load: BackgroundLoad) -> None:
        load.wasted = True
        self.wasted += 1
        self.wasted_ms += load.load_ms or 0.0
        for kept in (self._wasted_new, self._wasted_traced):
            kept.append(load)
            del kept[:-MAX_KEPT]

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the loads under way end (at most ``timeout`` s); whether they did."""
        thread = self._thread
        if thread is None:
            return True
        try:
            thread.result(timeout)
        except TimeoutError:
            return False
        except Exception:  # recorded by the load itself
            pass
        return True

    def close(self) -> None:
        """Wait for the load in flight (at most `CLOSE_WAIT_S`); loads never used are
        wasted."""
        self.join(CLOSE_WAIT_S)
        with self._lock:
            while self._pending:
                self._waste_locked(self._pending.popleft())
            self._wasted_new.clear()
            self._wasted_traced.clear()

    # -- recording --------------------------------------------------------------------------
    def trace(self) -> dict[str, object]:
        """The metadata of the coming step's traced runs: the loads since the previous
        step closed (model, device, ms: None while it runs) and those found wasted since the
        previous step was planned (at that step's close, or failed)."""
        with self._lock:
            out: dict[str, object] = {}
            if self._fresh:
                out["devsched.preloaded"] = [
                    {"model": b.model, "device": b.device, "load_ms": b.load_ms}
                    for b in self._fresh]
            if self._wasted_traced:
                out["devsched.preloads_wasted"] = [b.model for b in self._wasted_traced]
                self._wasted_traced = []
            return out

    def record(self, record: StepRecord) -> None:
        """A step closed: the loads it used warm are repaid, those no longer resident are
        wasted; its record's ``extra`` lists the loads since the previous step and those
        wasted."""
        warm = {(c.model, c.device) for c in record.calls if c.model and not c.loaded}
        with self._lock:
            for load in [b for b in self._fresh if not b.done and not b.used]:
                if (load.model, load.device) in warm:  # it waited for it (saved: at its end)
                    load.used = True
                    self.used += 1
            for load in list(self._pending):
                if (load.model, load.device) in warm:
                    load.used = True
                    self.used += 1
                    self.saved_ms += load.load_ms or 0.0
                    self._pending.remove(load)
                elif not self._resident(load):
                    self._pending.remove(load)
                    self._waste_locked(load)
            if self._fresh:
                record.extra[PRELOADS_KEY] = tuple(self._fresh)
            if self._wasted_new:
                record.extra[WASTED_KEY] = tuple(self._wasted_new)
            self._fresh = []
            self._wasted_new = []

    def _resident(self, load: BackgroundLoad) -> bool:
        cache = self._backend.cache_for(load.device)
        return bool(cache.holds(load.model, "gpu" if load.side == "gpu" else "cpu"))
