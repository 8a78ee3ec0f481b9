"""The lockstep simulation: one step's discrete-event model run on many mappings at once.

Every numpy row is one mapping of the step's calls (option codes: 0 ``gpu_now``, 1
``gpu_queued``, 2 ``cpu``); all rows advance together, event by event, each by its own next
event. `Lockstep` mirrors `_sim.events.Simulation` operation by operation, so each row's times
are bit-identical to the testbed's (tests compare them on random mappings). Its steps:

1. ``launch``: ``cpu`` and ``gpu_now`` calls start in call order (a ``gpu_now`` call that does
   not fit waits out the OOM detection, then runs on the CPU), ``gpu_queued`` calls queue;
2. ``admit``: queued calls start, head of each row's queue first, while they fit;
3. ``events``, until every row is done: the rates of the moment (the physics' rule for the
   GPU, `_sim.physics`; the free cores for the CPU), the clock moved to each row's next
   event, the phases that end there moved on (transfer to GPU, a model load to its call),
   what the finished GPU calls held released and the queue admitted again.

Rows whose every call ended leave the arrays (``_State.keep``): late events cost only the
rows still running. Numpy arrives as ``np`` (imported where it is first needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from langgraph_devsched._sim.physics import Contention, Mixed, lockstep_rule
from langgraph_devsched._sim.residency_rows import Residency, row_models

EPS = 1e-9
# phases, as in _sim.events.Simulation (_LOAD: waiting for model weights, then the next phase)
_QUEUED, _TRANSFER, _GPU, _CPU, _OOM, _DONE, _LOAD = range(7)


class ToolParams(Protocol):
    """What the simulation reads of one tool (`testbed.ToolParams` is one)."""

    @property
    def cpu_ms(self) -> float: ...
    @property
    def gpu_ms(self) -> float: ...
    @property
    def transfer_ms(self) -> float: ...
    @property
    def vram_mb(self) -> float: ...
    @property
    def gpu_share(self) -> float: ...
    @property
    def cpu_threads(self) -> int: ...


class BackgroundLoad(Protocol):
    """What the simulation reads of the background load (`testbed.BackgroundLoad` is one)."""

    @property
    def vram_mb(self) -> float: ...
    @property
    def gpu_share(self) -> float: ...
    @property
    def cpu_threads(self) -> int: ...


class _State:
    """Per-mapping simulation state, one row per mapping still running."""

    def __init__(self, np: Any, m: int, n: int, base_mb: Any, base_share: float) -> None:
        self._extra: tuple[str, ...] = ()
        self.rows = np.arange(m)
        self.phase = np.full((m, n), _DONE, dtype=np.int8)
        self.remaining = np.zeros((m, n))
        self.ready_at = np.zeros((m, n))
        self.end = np.zeros((m, n))
        self.start = np.zeros((m, n))
        self.cpu_ms: Any = None
        self.gpu_ms: Any = None
        self.share: Any = None
        self.threads: Any = None
        self.in_use = np.array(np.broadcast_to(base_mb, (m,)), dtype=np.float64)
        self.base = self.in_use.copy()
        self.used_share = np.full(m, base_share)
        self.active_n = np.zeros(m, dtype=np.int64)
        self.now = np.zeros(m)
        self.gpu_load: Any = None
        self.dev_gpu: Any = None
        self.host_end: Any = None
        self.gpu_since: Any = None
        self.m_physics: Any = None  # each row's physics (mixed batches)
        self.m_overhead: Any = None
        self.m_mem_bound: Any = None
        self.queued_n: Any = None
        self.qorder: Any = None  # each row's queued calls in call order, then the others
        self.qpos: Any = None  # how many of them were admitted

    def extend(self, **fields: Any) -> None:
        """Per-row fields of the resident-model rule, dropped with their rows too."""
        for name, value in fields.items():
            setattr(self, name, value)
        self._extra += tuple(fields)

    def keep(self, live: Any) -> None:
        """Drop the rows whose simulation has ended."""
        for name in ("rows", "phase", "remaining", "ready_at", "end", "start", "in_use",
                     "used_share", "active_n", "now", "cpu_ms", "gpu_ms", "share", "threads",
                     "base", *self._extra):
            setattr(self, name, getattr(self, name)[live])


class Lockstep:
    """One lockstep run over the rows of ``codes`` (see the module's steps). ``rows``: any
    of `batchsim.ROW_FIELDS` per row and call, overriding ``params``; ``mixed``: each row's
    own contention physics."""

    def __init__(
        self,
        np: Any,
        params: Sequence[ToolParams],
        codes: Any,
        budget: float,
        cpu_cores: int,
        bg: BackgroundLoad,
        oom_ms: float,
        *,
        rows: dict[str, Any] | None = None,
        residency: Residency | None = None,
        contention: Contention | None = None,
        mixed: Mixed | None = None,
    ) -> None:
        m, n = codes.shape
        self.np, self.codes, self.m, self.n = np, codes, m, n
        self.rule = lockstep_rule(np, contention, mixed, n)
        self.fifo = self.rule.fifo
        self.budget, self.oom_ms = budget, oom_ms
        self.transfer = [p.transfer_ms for p in params]
        self.vram = [p.vram_mb for p in params]
        self.base_mb = float(bg.vram_mb)
        self.base_share = float(bg.gpu_share)
        self.capacity = budget - self.base_mb
        self.free_cores = max(1, cpu_cores - bg.cpu_threads)
        self.rm = None if residency is None or residency.idle else row_models(
            np, codes, residency, budget, self.base_mb, self.vram)
        rm = self.rm
        st = self.st = _State(np, m, n, self.base_mb if rm is None else rm.base_mb,
                              self.base_share)
        given = rows or {}

        def per_row(field: str, dtype: Any) -> Any:
            if field in given:
                return np.asarray(given[field], dtype=dtype).reshape(m, n)
            column = np.array([getattr(p, field) for p in params], dtype=dtype)
            return np.broadcast_to(column, (m, n))

        st.cpu_ms = per_row("cpu_ms", np.float64)
        st.gpu_ms = per_row("gpu_ms", np.float64)
        st.share = per_row("gpu_share", np.float64)
        st.threads = per_row("cpu_threads", np.int64)
        if rm is not None:
            st.extend(gpu_load=rm.gpu_load, dev_gpu=np.zeros((m, n), dtype=bool),
                      host_end=np.full((m, max(1, len(rm.cpu_load))), np.inf))
            self.capacity_rows = budget - rm.base_mb
        if self.fifo:  # when each call began computing (idle_queue serves the earliest)
            st.extend(gpu_since=np.full((m, n), np.inf))
        self.rule.attach(st)  # a mixed batch's per-row physics, dropped with its rows
        self.transfer_row = np.array(self.transfer, dtype=np.float64)
        self.transfer_on = self.transfer_row > 0
        self.vram_arr = np.array(self.vram, dtype=np.float64)
        self.queued_total = 0

    def run(self, times: tuple[Any, Any] | None = None) -> Any:
        """Each row's makespan; ``times``: (m, n) arrays that receive each call's start and
        end."""
        if self.rm is None:
            self.launch()
        else:
            self.launch_with_models()
        self.queue_up()
        self.admit()
        return self.events(times)

    # -- launch -----------------------------------------------------------------------------

    def start_gpu(self, rows: Any, j: int) -> None:
        np, st, rm, transfer = self.np, self.st, self.rm, self.transfer
        # masked writes (``where=``) into column views: the same values as ``a[rows, j] =``,
        # without gathering the rows first
        np.copyto(st.start[:, j], st.now, where=rows)
        if rm is not None:
            st.dev_gpu[rows, j] = True
            pre = np.maximum(0.0, st.gpu_load[rows, j] - st.now[rows])
            wait = pre > 0
            if wait.any():  # the call waits for its model's load, then moves on
                nxt = _TRANSFER if transfer[j] > 0 else _GPU
                first = transfer[j] * 1.0 if transfer[j] > 0 else st.gpu_ms[rows, j] * 1.0
                st.phase[rows, j] = np.where(wait, _LOAD, nxt)
                st.remaining[rows, j] = np.where(wait, pre, first)
                if self.fifo and nxt == _GPU:
                    # a call still waiting for its load has not begun computing: it must not
                    # be the head an idle queue serves
                    st.gpu_since[rows, j] = np.where(wait, np.inf, st.now[rows])
                return
        if transfer[j] > 0:
            np.copyto(st.phase[:, j], _TRANSFER, where=rows)
            np.copyto(st.remaining[:, j], transfer[j] * 1.0, where=rows)
        else:
            np.copyto(st.phase[:, j], _GPU, where=rows)
            np.copyto(st.remaining[:, j], st.gpu_ms[:, j], where=rows)
            if self.fifo:
                np.copyto(st.gpu_since[:, j], st.now, where=rows)

    def start_cpu(self, rows: Any, j: int) -> None:
        np, st, rm = self.np, self.st, self.rm
        k = -1 if rm is None else rm.model_index[j]
        if k < 0 or rm is None or rm.cpu_load[k] <= 0:
            st.phase[rows, j] = _CPU
            st.remaining[rows, j] = st.cpu_ms[rows, j] * 1.0
            return
        # the first call of a row to need a model in host memory starts its load; the
        # others of that row wait for the same end
        now = st.now[rows]
        end = st.host_end[rows, k]
        end = np.where(np.isinf(end), now + rm.cpu_load[k], end)
        st.host_end[rows, k] = end
        pre = np.maximum(0.0, end - now)
        wait = pre > 0
        st.phase[rows, j] = np.where(wait, _LOAD, _CPU)
        st.remaining[rows, j] = np.where(wait, pre, st.cpu_ms[rows, j] * 1.0)

    def grant(self, rows: Any, j: int) -> None:
        np, st = self.np, self.st
        np.add(st.in_use, self.vram[j], out=st.in_use, where=rows)
        np.add(st.used_share, st.share[:, j], out=st.used_share, where=rows)
        st.active_n += rows

    def launch(self) -> None:
        """The launch without resident models, a whole array at a time: only the VRAM and
        share granted to `gpu_now` calls accumulate in call order (the same additions as
        `grant`); each call's phase and remaining work as `start_cpu`/`start_gpu` set them
        (every start time is 0, as ``st.start`` begins)."""
        np, st, codes, vram, budget = self.np, self.st, self.codes, self.vram, self.budget
        m, n = self.m, self.n
        now_calls = codes == 0
        fits = np.zeros((m, n), dtype=bool)
        for j in range(n):
            if vram[j] > self.capacity:
                continue
            fits[:, j] = now_calls[:, j] & (st.in_use + vram[j] <= budget + EPS)
            np.add(st.in_use, vram[j], out=st.in_use, where=fits[:, j])
            np.add(st.used_share, st.share[:, j], out=st.used_share, where=fits[:, j])
        st.active_n += fits.sum(axis=1)
        moves = self.transfer_row > 0
        np.copyto(st.phase, np.where(moves, _TRANSFER, _GPU).astype(np.int8), where=fits)
        np.copyto(st.remaining, np.where(moves[None, :], self.transfer_row[None, :], st.gpu_ms),
                  where=fits)
        if self.fifo:
            np.copyto(st.gpu_since, 0.0, where=fits & ~moves[None, :])
        oom = now_calls & ~fits
        np.copyto(st.phase, _OOM, where=oom)
        np.copyto(st.ready_at, 0.0 + self.oom_ms, where=oom)
        queued = codes == 1
        to_cpu = (codes == 2) | (queued & (np.array(vram) > self.capacity)[None, :])
        np.copyto(st.phase, _CPU, where=to_cpu)
        np.copyto(st.remaining, st.cpu_ms, where=to_cpu)
        np.copyto(st.phase, _QUEUED, where=queued & ~to_cpu)

    def launch_with_models(self) -> None:
        """The launch with resident models, call by call: ``cpu`` and ``gpu_now`` in call
        order (a ``gpu_now`` call whose model gets no room in its row is out of memory),
        then ``gpu_queued`` in call order (to the CPU where its model gets no room)."""
        st, codes, vram, budget = self.st, self.codes, self.vram, self.budget
        rm = self.rm
        assert rm is not None
        n = self.n
        for j in range(n):
            col = codes[:, j]
            self.start_cpu(col == 2, j)
            now_rows = col == 0
            fits = (now_rows & ~rm.no_room[:, j] & ~(vram[j] > self.capacity_rows)
                    & (st.in_use + vram[j] <= budget + EPS))
            self.grant(fits, j)
            self.start_gpu(fits, j)
            oom = now_rows & ~fits
            st.phase[oom, j] = _OOM
            st.ready_at[oom, j] = 0.0 + self.oom_ms
        for j in range(n):
            queued = codes[:, j] == 1
            over = queued & (rm.no_room[:, j] | (vram[j] > self.capacity_rows))
            self.start_cpu(over, j)
            st.phase[queued & ~over, j] = _QUEUED

    # -- the GPU queue ----------------------------------------------------------------------

    def queue_up(self) -> None:
        """Calls enter the queue only at launch and leave it by admission, head first: once
        none is left, admission has nothing to do, and a row's head is the next of its
        queued calls in call order (``qorder``, from ``qpos``)."""
        np, st = self.np, self.st
        queued_at_launch = st.phase == _QUEUED
        st.extend(queued_n=queued_at_launch.sum(axis=1),  # per row
                  qorder=(~queued_at_launch).argsort(axis=1, kind="stable"),
                  qpos=np.zeros(self.m, dtype=np.int64))
        self.queued_total = int(st.queued_n.sum())

    def admit_rows(self, idx: Any, head: Any) -> None:
        """`grant` and `start_gpu` of call ``head[k]`` in row ``idx[k]`` (one call a row, no
        resident models): the same operations on those elements."""
        np, st = self.np, self.st
        st.in_use[idx] = st.in_use[idx] + self.vram_arr[head]
        st.used_share[idx] = st.used_share[idx] + st.share[idx, head]
        st.active_n[idx] += 1
        st.start[idx, head] = st.now[idx]
        moves = self.transfer_on[head]
        st.phase[idx, head] = np.where(moves, _TRANSFER, _GPU)
        st.remaining[idx, head] = np.where(moves, self.transfer_row[head], st.gpu_ms[idx, head])
        if self.fifo:
            st.gpu_since[idx, head] = np.where(moves, st.gpu_since[idx, head], st.now[idx])

    def admit(self, rows: Any = None) -> None:
        """Admit queued calls in the rows ``rows`` (None: all), head of each row's queue
        first, while they fit; a row that released nothing since its last admission would
        admit nothing now either. Works on those rows' indices only."""
        if not self.queued_total:
            return
        np, st, budget = self.np, self.st, self.budget
        waits = st.queued_n > 0
        idx = np.flatnonzero(waits if rows is None else rows & waits)
        while len(idx):
            head = st.qorder[idx, st.qpos[idx]]
            # a call fits where its VRAM fits and, unless the GPU is idle, its share too
            ok = (
                (st.in_use[idx] + self.vram_arr[head] <= budget + EPS)
                & ((st.active_n[idx] == 0)
                   | (st.used_share[idx] + st.share[idx, head] <= 1.0 + EPS))
            )
            if not np.logical_or.reduce(ok, axis=None):
                return
            idx, head = idx[ok], head[ok]
            self.queued_total -= len(idx)
            st.queued_n[idx] -= 1
            st.qpos[idx] += 1
            if self.rm is None:  # one call a row: grant and start them all at once
                self.admit_rows(idx, head)
            else:
                for j in np.unique(head):
                    admitted = np.zeros(len(st.rows), dtype=bool)
                    admitted[idx[head == j]] = True
                    self.grant(admitted, int(j))
                    self.start_gpu(admitted, int(j))
            # a row whose head fitted may fit its next call too (FIFO: never one behind a
            # head that does not fit, as the ledger admits)
            idx = idx[st.queued_n[idx] > 0]

    def release(self, rows: Any, cols: Any) -> None:
        """Give back what call ``cols[k]`` held in row ``rows[k]`` (pairs in row order,
        calls in call order within a row): per row, call by call in call order, the VRAM
        and share subtracted and, once no call computes, reset to the ledger's base."""
        np = self.np
        first = np.ones(len(rows), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        if first.all():  # most often one call a row: one level, the same operations
            self._release_level(rows, cols)
            return
        rank = np.arange(len(rows))
        rank -= np.maximum.accumulate(np.where(first, rank, 0))
        for level in range(int(rank.max()) + 1):  # a row's first call, then its second...
            at = rank == level
            self._release_level(rows[at], cols[at])

    def _release_level(self, r: Any, c: Any) -> None:
        """`release` of one call in each of the rows ``r`` (distinct rows)."""
        st = self.st
        st.in_use[r] = st.in_use[r] - self.vram_arr[c]
        st.used_share[r] = st.used_share[r] - st.share[r, c]
        st.active_n[r] -= 1
        # an idle GPU starts again from the ledger's base: no rounding left over from the
        # subtractions (the event simulation resets the same way)
        idle = r[st.active_n[r] == 0]
        st.in_use[idle] = self.base_mb if self.rm is None else st.base[idle]
        st.used_share[idle] = self.base_share

    # -- events -----------------------------------------------------------------------------

    def events(self, times: tuple[Any, Any] | None) -> Any:
        """Advance every row event by event until each row's calls all ended; each row's
        makespan (and, into ``times``, each call's start and end)."""
        np, st = self.np, self.st
        out = np.zeros(self.m)
        # per phase: does it progress (transfer, GPU, CPU, and a load), is it alive (or OOM)
        progresses = np.zeros(7, dtype=bool)
        progresses[[_TRANSFER, _GPU, _CPU]] = True
        progresses[_LOAD] = self.rm is not None
        alive = progresses.copy()
        alive[_OOM] = True
        ended = True  # a row can only end where a call just ended
        while True:
            if ended and self._retire(alive, out, times):
                break
            phase = st.phase
            active = progresses[phase]
            waiting = phase == _OOM
            in_gpu = phase == _GPU
            remaining = self._advance(phase, active, waiting, in_gpu)
            done = self._phase_ends(phase, active, remaining)
            ended = bool(np.logical_or.reduce(done, axis=None))
            if ended:
                self._finish(done, in_gpu)
        return out

    def _retire(self, alive: Any, out: Any, times: tuple[Any, Any] | None) -> bool:
        """Rows with no live call leave the arrays, their makespans (and times) written out;
        True when no row is left."""
        np, st = self.np, self.st
        live = np.logical_or.reduce(alive[st.phase], axis=1)
        if np.logical_and.reduce(live, axis=None):
            return False
        dead = ~live
        out[st.rows[dead]] = st.end[dead].max(axis=1)
        if times is not None:
            times[0][st.rows[dead]] = st.start[dead]
            times[1][st.rows[dead]] = st.end[dead]
        if not np.logical_or.reduce(live, axis=None):
            return True
        st.keep(live)
        return False

    def _advance(self, phase: Any, active: Any, waiting: Any, in_gpu: Any) -> Any:
        """Move each row's clock to its next event at the rates of the moment; the work left
        (not yet stored: `_phase_ends` moves the finished phases on first). Calls out of
        memory whose detection ended there go to the CPU."""
        np, st = self.np, self.st
        inf = np.inf
        now = st.now
        on_cpu = phase == _CPU
        demand, stalled = self.rule.demand(np, st, in_gpu, self.base_share)
        # 1/D where D > 1, else exactly 1.0 (1.0 / 1.0); the cores alike
        gpu_rate = 1.0 / np.maximum(demand, 1.0)
        used_threads = np.add.reduce(np.where(on_cpu, st.threads, 0), axis=1)
        cpu_rate = self.free_cores / np.maximum(used_threads, self.free_cores)
        rate = np.where(in_gpu, gpu_rate[:, None], np.where(on_cpu, cpu_rate[:, None], 1.0))
        remaining = st.remaining
        if stalled is None:
            dt = np.minimum.reduce(np.where(active, remaining / rate, inf), axis=1)
        else:
            rate = np.where(stalled, 0.0, rate)
            # a stalled call has rate 0: divided by 1.0 instead (its value is masked out), so
            # that numpy raises no division warning and no inf leaks into the minimum
            dt = np.where(active & ~stalled, remaining / np.where(stalled, 1.0, rate),
                          inf).min(axis=1)
        any_waiting = bool(np.logical_or.reduce(waiting, axis=None))
        if any_waiting:
            dt = np.minimum(dt, np.where(waiting, st.ready_at - now[:, None], inf).min(axis=1))
        # an OOM detection may end a rounding error behind the clock: time never runs back
        dt = np.maximum(dt, 0.0)
        now = now + dt
        st.now = now
        remaining = np.where(active, remaining - rate * dt[:, None], remaining)
        if any_waiting:
            ready = waiting & (st.ready_at <= (now + EPS)[:, None])
            if self.rm is None or not self.rm.host_loads:
                phase[ready] = _CPU
                remaining = np.where(ready, st.cpu_ms, remaining)
            else:  # in call order: the first call to start a host load sets when it ends
                st.remaining = remaining
                for j in np.flatnonzero(ready.any(axis=0)):
                    self.start_cpu(ready[:, j], int(j))
                remaining = st.remaining
        return remaining

    def _phase_ends(self, phase: Any, active: Any, remaining: Any) -> Any:
        """Move the phases that ended at the new clock on: a transfer to its GPU compute, a
        model load to its call's next phase; the calls that ended (their work done)."""
        np, st = self.np, self.st
        now = st.now
        # relative tolerance: after hours of virtual time an exact zero is not reached
        finished = active & ~(remaining > (EPS * np.maximum(1.0, now))[:, None])
        to_gpu = finished & (phase == _TRANSFER)
        phase[to_gpu] = _GPU
        remaining = np.where(to_gpu, st.gpu_ms, remaining)
        if self.fifo:
            st.gpu_since = np.where(to_gpu, now[:, None], st.gpu_since)
        loaded = None
        if self.rm is not None:
            loaded = finished & (phase == _LOAD)
            if np.logical_or.reduce(loaded, axis=None):
                transfer_row = self.transfer_row
                to_transfer = loaded & st.dev_gpu & (transfer_row > 0)[None, :]
                to_compute = loaded & st.dev_gpu & ~to_transfer
                to_cpu = loaded & ~st.dev_gpu
                phase[to_transfer] = _TRANSFER
                phase[to_compute] = _GPU
                phase[to_cpu] = _CPU
                remaining = np.where(to_transfer, transfer_row[None, :] * 1.0, remaining)
                remaining = np.where(to_compute, st.gpu_ms, remaining)
                if self.fifo:
                    st.gpu_since = np.where(to_compute, now[:, None], st.gpu_since)
                remaining = np.where(to_cpu, st.cpu_ms, remaining)
        st.remaining = remaining
        done = finished & ~to_gpu
        if loaded is not None:
            done &= ~loaded
        return done

    def _finish(self, done: Any, in_gpu: Any) -> None:
        """The calls in ``done`` end now; what the GPU calls among them held goes back, and
        the queue is admitted again in those rows (only there can something new fit)."""
        np, st = self.np, self.st
        released = done & in_gpu
        st.phase[done] = _DONE
        st.end = np.where(done, st.now[:, None], st.end)
        rel_rows, rel_cols = released.nonzero()  # row by row, calls in call order
        if len(rel_rows):
            self.release(rel_rows, rel_cols)
            if self.queued_total:
                self.admit(np.logical_or.reduce(released, axis=1))
