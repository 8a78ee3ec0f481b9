"""The benchmark's references on a testbed with several GPUs: a shortest path over (step,
resident models on every GPU and in host memory), every placement of each step simulated.

The batched simulator (`batchsim`, used by `bench.horizon` on one GPU) models one GPU, so
here each placement of a step is run on the testbed itself (`SimulatedTestbed.run_step` on a
noise-free testbed, its state and clock put back after): a placement is, per call, ``cpu``
or a GPU option (``gpu_queued``, ``gpu_now``) on one GPU its ``gpus`` hint allows, as the
oracle enumerates them (`schedulers.classic.oracle`). Equal end states are merged, keeping
the cheapest placement to each. Between two steps up to `MAX_PRELOADS` models may load within
the think time, into host memory or onto any GPU (evicting least recently used models, or
one chosen resident model of that GPU first: `SimulatedTestbed.with_loaded`), as the bench
lets a scheduler load while the agent thinks. Or one load starts with a step, beside its calls
(`SimulatedTestbed.beside`, as the bench runs a decision's ``background``): onto any GPU, on
one the placement uses into room beside the working memory of the calls placed there only
(`bench.preloads.beside_tools`), on an idle one evicting least recently used models or one
chosen resident model first; the next step waits for what it takes beyond the step's
makespan and the think time, and no load runs between those steps (one loader). Placements
to the same end state are then kept per calls on each GPU (a costlier one that leaves a GPU
idle can load more beside it), unless a cheaper one leaves at least as much room on every
GPU (no more calls on any).

* **Whole run**: dynamic programming over every step of every round from the start: per
  state, the least any sequence of placements (and loads) pays to reach it; the least over
  the last step's states is the reference. A state whose cost so far plus the later steps'
  bounds (each step's slowest call at its fastest, alone and warm) cannot beat the per-step
  optimum's plan is dropped: it cannot lead to a cheaper run, so the result stays exact.
* **Per round**: every state the earlier rounds can leave (the same dynamic programming
  without the cut), and from all of them at once the least a round can pay (the cut
  applies again): no scheduler can end the round below it. With one round it is the
  whole-run figure.

**Budget.** At most `MAX_GPU_STATES` states per step, and `MAX_PLACEMENTS` simulated
placements per search (each is a discrete-event run, ~0.3 ms here). Beyond either, the
cheapest states so far are kept (best first) and the result says ``exact=False``: it is then
a plan some scheduler could follow, not a proven bound.

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch
>>> from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
>>> bed = SimulatedTestbed({"asr": ToolParams(cpu_ms=2600, gpu_ms=220, vram_mb=700,
...     weights_mb=3100, load_gpu_ms=3000)}, gpus=[{"vram_mb": 2000}, {"vram_mb": 12000}])
>>> ref = gpus_reference(bed, [Batch.of([("a", "asr", ToolDeviceSpec())])], 3)
>>> ref.total_ms, ref.round_ms, ref.devices, ref.exact
(3440.0, (2600.0, 220.0, 220.0), {'a': 'cuda:1'}, True)

The whole run runs round 1 on the CPU (2,600 ms) while ``asr`` loads on GPU 1 beside it
(3,000 ms, so round 2 waits 400 ms; it does not fit on GPU 0) and runs it warm in rounds 2
and 3 (220 ms each): 3,440 ms, where loading it with round 1's call costs 3,660 ms and the
per-step optimum stays on the CPU (7,800 ms). Each round's own least: the CPU's 2,600 ms in
round 1, 220 ms after (a plan that loaded it before).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from langgraph_devsched import batchsim
from langgraph_devsched.bench.preloads import beside_tools
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.schedulers.classic.oracle import OracleScheduler
from langgraph_devsched.schedulers.policy.investments import MAX_PRELOADS
from langgraph_devsched.testbed import SimulatedTestbed

MAX_GPU_STATES = 512
"""Resident-model states (over every GPU) the search keeps per step."""
MAX_PLACEMENTS = 20_000
"""Placements (one discrete-event run each) one search simulates before it cuts."""

_SLACK = 1e-9
_Key = tuple[object, ...]
Placement = tuple[tuple[DeviceOption, int | None], ...]
"""Per call of a batch: its option and its GPU (None on the CPU)."""
_Entry = tuple[float, tuple[Placement, ...], batchsim.Residency]
"""A state reached: its least cost, the placements that pay it, the state."""
_Beside = tuple[tuple[int, tuple[str, ...]], ...]
"""Per GPU a placement uses, its calls' tools (sorted): what a load beside it leaves room for."""
_Move = tuple[float, Placement, batchsim.Residency, _Beside]
"""A placement of a step: its makespan, itself, the state it leaves, its calls per GPU."""


def _key(state: batchsim.Residency) -> _Key:
    return state.gpu, state.others, state.host


@dataclass(frozen=True)
class GpuReference:
    """The references of one scenario on several GPUs."""

    round_ms: tuple[float, ...]
    """Per round, the least any sequence of placements can pay in that round."""
    total_ms: float
    """The least the rounds can add up to (the whole-run reference)."""
    mapping: dict[str, DeviceOption]
    """Every call's option in the placements that pay the last round's ``round_ms``."""
    devices: dict[str, str]
    """Their device (``cuda:k`` or ``cpu``)."""
    states: int
    """The most states one step of the search kept."""
    exact: bool
    """False when a budget (`MAX_GPU_STATES`, `MAX_PLACEMENTS`) cut the search."""
    placements: int
    """Placements simulated."""


@dataclass
class _Search:
    bed: SimulatedTestbed
    batches: Sequence[Batch]
    think_ms: float | Sequence[Idle] = 0.0
    """Idle time after every step, or after each batch (one per batch, maybe in parts)."""
    wrap: bool = False
    """More than one round: after the last batch the first comes again."""
    placements: list[list[Placement]] = field(init=False)
    moves_of: dict[tuple[_Key, int], list[_Move]] = field(default_factory=dict)
    idles: dict[tuple[_Key, float, int], list[batchsim.Residency]] = field(default_factory=dict)
    simulated: int = 0
    exact: bool = True
    most: int = 1

    def __post_init__(self) -> None:
        self.segments = idle_after(self.think_ms, len(self.batches))
        self.after_ms = [sum(parts) for parts in self.segments]
        self.later = later_models(self.bed, self.batches, self.wrap)
        oracle = OracleScheduler(testbed=self.bed)
        view = SchedulerView(device=self.bed.device_state())
        k = self.bed.gpu_count
        self.loads = self.bed.model_loads("gpu")
        self.placements = []
        for batch in self.batches:
            per_call = []
            for call, options in zip(batch.calls, oracle.choices(batch, view), strict=True):
                pins = call.spec.gpus
                allowed = [g for g in range(k) if pins is None or g in pins] or list(range(k))
                per_call.append([(o, None) if o == "cpu" else (o, g)
                                 for o in options for g in ((None,) if o == "cpu" else allowed)])
            self.placements.append(list(itertools.product(*per_call)))

    def cost(self, states: int, b: int) -> int:
        """Placements ``states`` new states would simulate in step ``b``."""
        return states * len(self.placements[b])

    def moves(self, state: batchsim.Residency, b: int) -> list[_Move]:
        """From ``state``, the cheapest placement of batch ``b`` to each end state and calls
        per GPU, less those a cheaper one to the same end state dominates: no more calls on
        any GPU (everything a load beside it can do, the cheaper one can too)."""
        key = (_key(state), b)
        found = self.moves_of.get(key)
        if found is not None:
            return found
        bed, batch = self.bed, self.batches[b]
        clock, peak = bed.now_ms, bed.vram_peak_mb
        ends: dict[tuple[_Key, _Beside], _Move] = {}
        for placement in self.placements[b]:
            bed.restore(state)
            calls = [(c.call_id, c.tool, o) for c, (o, _) in zip(batch.calls, placement,
                                                                   strict=True)]
            gpus = {c.call_id: g for c, (_, g) in zip(batch.calls, placement, strict=True)
                    if g is not None}
            span = bed.run_step(calls, gpus=gpus).makespan_ms
            end = bed.residency()
            used = beside_tools([c.tool for c in batch.calls], [o for o, _ in placement],
                                gpus, batch.call_ids)
            on = tuple(sorted((g, tuple(sorted(ts))) for g, ts in used.items()))
            seen = ends.get((_key(end), on))
            if seen is None or span < seen[0]:
                ends[(_key(end), on)] = (span, placement, end, on)
        bed.restore(state)
        bed.now_ms, bed.vram_peak_mb = clock, peak
        self.simulated += len(self.placements[b])
        kept: dict[_Key, list[_Move]] = {}
        for move in sorted(ends.values(), key=lambda m: m[0]):  # the cheapest first
            same = kept.setdefault(_key(move[2]), [])
            if not any(_fewer(other[3], move[3]) for other in same):
                same.append(move)
        found = self.moves_of[key] = [m for same in kept.values() for m in same]
        return found

    def idle(self, state: batchsim.Residency, think_ms: Idle,
             b: int = -1) -> list[batchsim.Residency]:
        """`_idle_one` over each part of an idle time (`in_parts`)."""
        return in_parts(state, think_ms, lambda s, part: self._idle_one(s, part, b))

    def _idle_one(self, state: batchsim.Residency, think_ms: float,
                  b: int = -1) -> list[batchsim.Residency]:
        """``state`` and the states up to `MAX_PRELOADS` loads within ``think_ms`` leave:
        each model into host memory, or onto any GPU (evicting least recently used models,
        or one chosen resident model of that GPU first)."""
        key = _key(state)
        found = self.idles.get((key, think_ms, b))
        if found is not None:
            return found
        out = {key: state}
        if think_ms > 0:
            bed = self.bed
            loads = {side: {m: ms for m, ms in bed.model_loads(side).items()
                            if m in self.later[b]} for side in ("gpu", "cpu")}
            level = [(state, 0.0)]
            for _ in range(MAX_PRELOADS):
                nxt = []
                for s, spent in level:
                    for side, times in loads.items():
                        for model, ms in times.items():
                            if spent + ms > think_ms:
                                continue
                            for gpu in range(bed.gpu_count) if side == "gpu" else (0,):
                                weights = s.gpu if gpu == 0 else s.others[gpu - 1]
                                evictions = [(), *((m,) for m, _ in weights)]
                                for evict in evictions if side == "gpu" else ((),):
                                    after = bed.with_loaded(s, model, gpu, evict,
                                                            side="gpu" if side == "gpu"
                                                            else "cpu")
                                    if after is not None and _key(after) not in out:
                                        out[_key(after)] = after
                                        nxt.append((after, spent + ms))
                level = nxt
        found = self.idles[(key, think_ms, b)] = list(out.values())
        return found

    def beside(self, end: batchsim.Residency, used: _Beside,
               b: int) -> list[tuple[batchsim.Residency, float]]:
        """The states one load started with a step can leave from its end state ``end``
        (`SimulatedTestbed.beside`), each with its load time: on any GPU, on one the
        placement uses (a GPU of ``used``) into room beside the calls placed there only, on
        an idle one evicting least recently used models or any one resident model first."""
        out = []
        on = dict(used)
        for gpu in range(self.bed.gpu_count):
            busy = gpu in on
            weights = end.gpu if gpu == 0 else end.others[gpu - 1]
            evictions = [()] if busy else [(), *((m,) for m, _ in weights)]
            for model, ms in self.loads.items():
                if model not in self.later[b]:
                    continue  # never used again: loading it only takes room
                for evict in evictions:
                    after = self.bed.beside(end, model, gpu, evict, on.get(gpu, ()), busy)
                    if after is not None:
                        out.append((after, ms))
        return out

    def after(self, move: _Move, b: int) -> list[tuple[batchsim.Residency, float]]:
        """The states the time after a step's placement ``move`` can leave before the
        next batch, each with the delay it adds: loads between steps (`idle`), or one load
        started with the step (the next step waits for what it takes beyond the step's
        makespan and the think time; then no load between steps: one loader). ``b``: the
        batch the move runs (the idle time after it)."""
        span, _, end, used = move
        think = self.after_ms[b]
        out = [(s, 0.0) for s in self.idle(end, self.segments[b], b)]
        out += [(s, max(0.0, ms - span - think)) for s, ms in self.beside(end, used, b)]
        return out

    def solo_bounds(self) -> list[float]:
        """Per batch, a lower bound on its makespan from any state: its slowest call's
        fastest solo run (each option on each GPU it may take, its model already resident
        there and in host memory, nothing else running beside it but the background)."""
        bed, origin = self.bed, self.bed.residency()
        empty = dataclasses.replace(origin, gpu=(), others=((),) * (bed.gpu_count - 1),
                                    host=frozenset(), host_order=())
        clock, peak = bed.now_ms, bed.vram_peak_mb
        fastest: dict[tuple[str, DeviceOption, int | None], float] = {}
        out = []
        for batch, placements in zip(self.batches, self.placements, strict=True):
            worst = 0.0
            for i, call in enumerate(batch.calls):
                best = float("inf")
                for option, gpu in {p[i] for p in placements}:
                    key = (call.tool, option, gpu)
                    if key not in fastest:
                        fastest[key] = self._solo(empty, call.tool, option, gpu)
                    best = min(best, fastest[key])
                worst = max(worst, best)
            out.append(worst)
        bed.restore(origin)
        bed.now_ms, bed.vram_peak_mb = clock, peak
        return out

    def _solo(self, empty: batchsim.Residency, tool: str, option: DeviceOption,
              gpu: int | None) -> float:
        """The call alone from the state where its model is resident (on ``gpu`` and in
        host memory); its model is not known here, so every model is tried and the fastest
        kept (a state without the call's model only slows it)."""
        bed, best = self.bed, float("inf")
        calls = [("solo", tool, option)]
        for model in (None, *bed.model_loads()):
            state = empty
            if model is not None:
                state = bed.with_loaded(state, model, side="cpu") or state
                if gpu is not None:
                    state = bed.with_loaded(state, model, gpu) or state
            bed.restore(state)
            span = bed.run_step(calls, gpus={} if gpu is None else {"solo": gpu}).makespan_ms
            best = min(best, span)
        return best

    def greedy(self, state: batchsim.Residency, steps: Sequence[int]) -> float:
        """What the per-step optimum pays over ``steps`` from ``state`` (no loads between
        steps): a feasible plan, so an upper bound."""
        total = 0.0
        for b in steps:
            span, _, state, _ = min(self.moves(state, b), key=lambda m: m[0])
            total += span
        return total

    def run(
        self, start: Sequence[batchsim.Residency], steps: Sequence[int],
        bounds: Sequence[float] | None, levels: list[dict[_Key, _Entry]] | None = None,
    ) -> _Entry:
        """The least any sequence of placements (and loads between steps or beside a step,
        not after the last) pays over ``steps`` (batch indices) from any state of ``start``, and the
        placements that pay it: dynamic programming over the states each step can leave.
        With ``bounds`` (each batch's least makespan), a state whose cost so far and the
        later steps' bounds cannot beat the per-step optimum's plan from ``start[0]`` is
        dropped (exactly: it cannot lead to a better one); without, every reachable state
        is kept, and ``levels`` (when given) gets the states of every step boundary."""
        limit = float("inf")
        after = [0.0] * len(steps)
        if bounds is not None:
            upper = self.greedy(start[0], steps)
            limit = upper * (1 + _SLACK) + _SLACK
            after = [sum(bounds[b] for b in steps[i + 1:]) for i in range(len(steps))]
        level: dict[_Key, _Entry] = {_key(s): (0.0, (), s) for s in start}
        if levels is not None:
            levels.append(level)
        for i, b in enumerate(steps):
            level = self._budget(level, b)
            nxt: dict[_Key, _Entry] = {}
            last = i + 1 == len(steps)
            for spent, done, state in level.values():
                for move in self.moves(state, b):
                    span, placement, end, _ = move
                    if spent + span + after[i] > limit:
                        continue
                    for st, delay in [(end, 0.0)] if last else self.after(move, b):
                        cost = spent + span + delay
                        seen = nxt.get(_key(st))
                        if cost + after[i] <= limit and (seen is None or cost < seen[0]):
                            nxt[_key(st)] = (cost, (*done, placement), st)
            if len(nxt) > MAX_GPU_STATES:
                nxt, self.exact = _cheapest(nxt, MAX_GPU_STATES), False
            self.most = max(self.most, len(nxt))
            level = nxt
            if levels is not None:
                levels.append(level)
        return min(level.values(), key=lambda v: v[0])

    def _budget(self, level: dict[_Key, _Entry], b: int) -> dict[_Key, _Entry]:
        """``level``, cut to its cheapest states when simulating the new ones would pass
        `MAX_PLACEMENTS` (at least one is kept)."""
        new = [k for k in level if (k, b) not in self.moves_of]
        room = MAX_PLACEMENTS - self.simulated
        if self.cost(len(new), b) <= room:
            return level
        self.exact = False
        keep = max(1, room // max(1, len(self.placements[b])))
        cached = {k: v for k, v in level.items() if (k, b) in self.moves_of}
        fresh = _cheapest({k: level[k] for k in new}, keep)
        return {**cached, **fresh}


def _fewer(a: _Beside, b: _Beside) -> bool:
    """Whether ``a`` has no more calls than ``b`` on any GPU (multisets of tools)."""
    on = dict(b)
    return all(g in on and not Counter(ts) - Counter(on[g]) for g, ts in a)


def _cheapest(level: dict[_Key, _Entry], n: int) -> dict[_Key, _Entry]:
    return dict(sorted(level.items(), key=lambda kv: kv[1][0])[:n])


def placements_per_state(bed: SimulatedTestbed, batches: Sequence[Batch]) -> int:
    """The most placements one batch has (what the search simulates per state and step); a
    search is worth starting only where it is well under `MAX_PLACEMENTS` (see
    `SEARCHABLE`)."""
    return max((len(p) for p in _Search(bed, batches).placements), default=0)


SEARCHABLE = MAX_PLACEMENTS // 16
"""The most placements per batch for which the bench starts the search (beyond it the
budget would cut it after a few states: the per-step optimum stands in, labelled inexact)."""


def later_models(bed: SimulatedTestbed, batches: Sequence[Batch],
                 wrap: bool) -> list[frozenset[str]]:
    """Per batch, the models a later batch uses (``wrap``: every batch's, the rounds going
    on), and last (index -1) every batch's: the only loads a reference need try after it (a
    model never used again only takes room)."""
    used = [frozenset(m for c in batch.calls if (m := bed.model_of(c.tool)) is not None)
            for batch in batches]
    every = frozenset().union(*used)
    later = [every if wrap else frozenset().union(*used[b + 1:]) for b in range(len(used))]
    return [*later, every]


Idle = float | tuple[float, ...]
"""An idle time, or one in parts (a request arriving in it: loads before it, then after)."""


def in_parts(state: batchsim.Residency, think_ms: Idle,
             one: Callable[[batchsim.Residency, float], list[batchsim.Residency]],
             ) -> list[batchsim.Residency]:
    """The states ``one`` (loads within one idle time) leaves from ``state`` over each part
    of ``think_ms`` in turn (a request arriving in it: loads before the arrival, then
    after), equal states merged; ``state`` first."""
    states = [state]
    for part in think_ms if isinstance(think_ms, tuple) else (think_ms,):
        out: dict[_Key, batchsim.Residency] = {}
        for s in states:
            for after in one(s, part):
                out.setdefault(_key(after), after)
        states = list(out.values())
    return states


def idle_after(think_ms: float | Sequence[Idle], batches: int) -> tuple[tuple[float, ...], ...]:
    """The idle time after each of ``batches`` batches, in parts: ``think_ms`` after every
    one, or one figure (or tuple of parts) per batch.

    >>> idle_after(3000.0, 2), idle_after([500.0, (2000.0, 900.0)], 2)
    (((3000.0,), (3000.0,)), ((500.0,), (2000.0, 900.0)))
    """
    if isinstance(think_ms, (int, float)):
        return ((float(think_ms),),) * batches
    out = tuple(tuple(float(p) for p in v) if isinstance(v, tuple) else (float(v),)
                for v in think_ms)
    if len(out) != batches:
        raise ValueError(f"think_ms: one idle time per batch ({batches}), got {len(out)}")
    return out


def gpus_reference(
    bed: SimulatedTestbed, batches: Sequence[Batch], rounds: int,
    think_ms: float | Sequence[Idle] = 0.0, before_ms: Idle = 0.0,
) -> GpuReference:
    """The whole-run and per-round references of ``rounds`` rounds of ``batches`` on
    ``bed`` (several GPUs, noise-free) from its current state (see the module docstring);
    the testbed is left in that state, its clock untouched. ``think_ms``: the idle time
    after every step, or after each batch; ``before_ms``: before the first step (loads
    may run in it)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not batches:
        return GpuReference((0.0,) * rounds, 0.0, {}, {}, 1, True, 0)
    origin = bed.residency()
    search = _Search(bed, batches, think_ms, wrap=rounds > 1)
    n = len(batches)
    bounds = search.solo_bounds()
    first = search.idle(origin, before_ms)  # loads before the first step (origin first)
    total, path, _ = search.run(first, [b for _ in range(rounds) for b in range(n)], bounds)
    round_ms = [total]
    last = path[-n:]
    if rounds > 1:  # each round from every state the earlier rounds can leave
        levels: list[dict[_Key, _Entry]] = []
        search.run(first, [b for _ in range(rounds) for b in range(n)], None, levels)
        known: dict[frozenset[_Key], _Entry] = {}
        round_ms = []
        for r in range(rounds):
            start = levels[r * n]
            seen = frozenset(start)
            if seen not in known:
                known[seen] = search.run([v[2] for v in start.values()], range(n), bounds)
            round_ms.append(known[seen][0])
            last = known[seen][1]
    bed.restore(origin)
    mapping: dict[str, DeviceOption] = {}
    devices: dict[str, str] = {}
    for batch, placement in zip(batches, last, strict=True):
        for call, (option, gpu) in zip(batch.calls, placement, strict=True):
            mapping[call.call_id] = option
            devices[call.call_id] = "cpu" if gpu is None else f"cuda:{gpu}"
    return GpuReference(tuple(round_ms), total, mapping, devices, search.most, search.exact,
                        search.simulated)
