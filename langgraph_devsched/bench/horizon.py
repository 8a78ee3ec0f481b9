"""The benchmark's reference: an exact search over the rounds run, the resident-model state
carried from step to step.

With resident models a step's cost depends on what the earlier steps left resident (loads,
evictions), so a per-step brute force is greedy across steps: a load costs this step and
pays off in the next ones. The search here works on that state (which models are resident
on the GPU, in LRU order with their sizes, and in host memory):

1. **Reachable states.** From the testbed's starting state, every mapping the hints allow of
   each step, grouped by the state it leaves (`SimulatedTestbed.codes_residencies`: known at
   launch, so noise never changes it); equal states are merged. That gives, per round, every
   state the earlier rounds can leave.
2. **Each round's bound.** Dynamic programming over the round's batches from every one of
   those states: per state and batch, the cheapest mapping leading to each state it can
   leave, exactly (the batched simulator, `SimulatedTestbed.codes_makespans`). An upper bound
   (the per-batch optimum run from the most promising state) lets the admissible bound
   (`SimulatedTestbed.lower_bounds`, valid under every physics) skip every mapping that cannot
   beat it; the minimum and its ties stay exact.

Each round's reference is then the least any sequence of mappings can pay in that round, and
some sequence pays it: no scheduler can end a round below it. Rounds that start from the same
set of states share one search. Every physics and declare mode gets the same search (the
declared hints decide only which options a call may take, as for the oracle). Without
resident models there is one state, and the reference is the oracle's per-batch brute force,
figure for figure.

**Several GPUs.** The batched simulator models one GPU: on a testbed with several, both
references come from `bench.horizon_gpus`, which simulates every placement (option and GPU
of each call) from every state, with its own budget.

**Budget.** At most `MAX_STATES` states per step (and the oracle's limit on a batch's calls);
beyond it the first ones found are kept and the result says ``exact=False``: its figures are
then no longer proven bounds. The simulated makespans kept for reuse are bounded by
`MAX_CACHED_ROWS`.

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.testbed import ToolParams
>>> bed = SimulatedTestbed({"asr": ToolParams(cpu_ms=2600, gpu_ms=220, vram_mb=700,
...     weights_mb=3100, load_gpu_ms=3000)}, vram_budget_mb=12000)
>>> ref = horizon_reference(bed, [Batch.of([("a", "asr", ToolDeviceSpec())])], 3)
>>> ref.round_ms, ref.mapping, ref.states, ref.exact
((2600.0, 220.0, 220.0), {'a': 'gpu_queued'}, 2, True)

The per-step oracle runs ``asr`` on the CPU every round (2,600 ms < 3,220 ms with the load);
a scheduler that loads it once pays 220 ms from the second round on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched import batchsim
from langgraph_devsched.bench.horizon_gpus import (
    Idle,
    gpus_reference,
    idle_after,
    in_parts,
    later_models,
)
from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.schedulers.classic.oracle import OracleScheduler
from langgraph_devsched.schedulers.policy.investments import MAX_PRELOADS
from langgraph_devsched.testbed import SimulatedTestbed

MAX_STATES = 512
"""Resident-model states the search keeps per step; beyond it the result is inexact."""
MAX_CACHED_STATES = 4096
"""Idle-time expansions kept for reuse before the cache clears."""
MAX_CACHED_ROWS = 1 << 23
"""Simulated mappings (over every state and batch) kept for reuse before the cache clears."""
_SLACK = 1e-9

_Key = tuple[tuple[tuple[str, float], ...], frozenset[str]]
_Path = tuple[tuple[DeviceOption, ...], ...]


@dataclass(frozen=True)
class Reference:
    """The reference of one scenario over ``len(round_ms)`` rounds."""

    round_ms: tuple[float, ...]
    """Per round, the least any sequence of mappings can pay in that round."""
    mapping: dict[str, DeviceOption]
    """The mappings (every call id of a round) that pay the last round's ``round_ms``."""
    states: int
    """The most resident-model states one step of the search started from."""
    exact: bool
    """False when `MAX_STATES` cut the search (the figures are then not proven bounds)."""
    devices: dict[str, str] = field(default_factory=dict)
    """Several GPUs: the device of every call of ``mapping`` (``cuda:k`` or ``cpu``)."""


def _key(state: batchsim.Residency) -> _Key:
    return state.gpu, state.host


def _evictions(state: batchsim.Residency) -> list[tuple[str, ...]]:
    """What a load onto the GPU may evict first: nothing (least recently used models then
    make room), or any one resident model."""
    return [(), *((m,) for m, _ in state.gpu)]


@dataclass
class _Step:
    """One batch from one state: each mapping's end state, bound and (lazily) makespan."""

    state: batchsim.Residency
    index: Any
    """Per mapping (row of the batch's codes), the index of its end state in ``ends``."""
    ends: list[batchsim.Residency]
    lb: Any = None
    spans: Any = None
    """Simulated makespans; NaN where not simulated yet."""
    cpu_row: int | None = None
    """The mapping that runs every call on the CPU (the GPU idle), if the hints allow it."""


@dataclass
class _Search:
    bed: SimulatedTestbed
    batches: Sequence[Batch]
    think_ms: float | Sequence[Idle] = 0.0
    """Idle time after every step, or after each batch (one per batch, maybe in parts), in
    which models may load (`SimulatedTestbed.with_loaded`)."""
    wrap: bool = False
    """More than one round: after the last batch the first comes again."""
    oracle: OracleScheduler = field(init=False)
    tools: list[list[str]] = field(init=False)
    codes: list[Any] = field(init=False)
    steps: dict[tuple[_Key, int], _Step] = field(default_factory=dict)
    rows: int = 0
    idles: dict[tuple[_Key, float, int], list[batchsim.Residency]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.segments = idle_after(self.think_ms, len(self.batches))
        self.after_ms = [sum(parts) for parts in self.segments]
        self.later = later_models(self.bed, self.batches, self.wrap)
        self.oracle = OracleScheduler(testbed=self.bed)
        view = SchedulerView(device=self.bed.device_state())
        self.tools = [[c.tool for c in b.calls] for b in self.batches]
        self.codes = [batchsim.product_codes(self.oracle.choices(b, view)) for b in self.batches]
        np = batchsim.require_numpy()
        cpu = DEVICE_OPTIONS.index("cpu")
        self.cpu_rows = [next(iter(np.flatnonzero((c == cpu).all(axis=1)).tolist()), None)
                         for c in self.codes]
        self.loads = self.bed.model_loads("gpu") if self.bed.gpu_count == 1 else {}

    def step(self, state: batchsim.Residency, b: int) -> _Step:
        key = (_key(state), b)
        found = self.steps.get(key)
        if found is None:
            if self.rows > MAX_CACHED_ROWS:
                self.steps.clear()
                self.rows = 0
            self.bed.restore(state)
            index, ends = self.bed.codes_residencies(self.tools[b], self.codes[b])
            found = self.steps[key] = _Step(state, index, ends, cpu_row=self.cpu_rows[b])
            self.rows += len(self.codes[b])
        return found

    def idle(self, state: batchsim.Residency, think_ms: Idle,
             b: int = -1) -> list[batchsim.Residency]:
        """`_idle_one` over each part of an idle time (`in_parts`)."""
        return in_parts(state, think_ms, lambda s, part: self._idle_one(s, part, b))

    def _idle_one(self, state: batchsim.Residency, think_ms: float,
                  b: int = -1) -> list[batchsim.Residency]:
        """``state`` and the states loads between two steps can leave from it: up to
        `MAX_PRELOADS` models loaded one after another within ``think_ms``, each into host
        memory or onto the GPU (evicting least recently used models, or one chosen resident
        model first); one GPU."""
        key = _key(state)
        found = self.idles.get((key, think_ms, b))
        if found is not None:
            return found
        out = {key: state}
        if think_ms > 0 and self.bed.gpu_count == 1:
            loads = {side: {m: ms for m, ms in self.bed.model_loads(side).items()
                            if m in self.later[b]} for side in ("gpu", "cpu")}
            level = [(state, 0.0)]
            for _ in range(MAX_PRELOADS):
                nxt = []
                for s, spent in level:
                    evictions = _evictions(s)
                    for side, times in loads.items():
                        for model, ms in times.items():
                            if spent + ms > think_ms:
                                continue
                            for evict in evictions if side == "gpu" else ((),):
                                after = self.bed.with_loaded(
                                    s, model, 0, evict, side="gpu" if side == "gpu" else "cpu")
                                if after is not None and _key(after) not in out:
                                    out[_key(after)] = after
                                    nxt.append((after, spent + ms))
                level = nxt
        if len(self.idles) > MAX_CACHED_STATES:
            self.idles.clear()
        found = self.idles[(key, think_ms, b)] = list(out.values())
        return found

    def beside(self, end: batchsim.Residency, b: int, busy: bool,
               ) -> list[tuple[batchsim.Residency, float]]:
        """The states a load in the background of batch ``b`` can leave from its end state
        ``end`` (`SimulatedTestbed.beside`), each with its load time: on the GPU a mapping
        uses (``busy``) into room beside the step only, else evicting any one resident
        model first or least recently used ones (one GPU)."""
        out = []
        evictions = [()] if busy else _evictions(end)
        for model, ms in self.loads.items():
            if model not in self.later[b]:
                continue  # never used again: loading it only takes room
            for evict in evictions:
                after = self.bed.beside(end, model, 0, evict, self.tools[b], busy)
                if after is not None:
                    out.append((after, ms))
        return out

    def after(self, end: batchsim.Residency, span: float, b: int,
              options: tuple[DeviceOption, ...]) -> list[tuple[batchsim.Residency, float]]:
        """The states the time after batch ``b``'s mapping ``options`` (ending in ``end`` in
        ``span`` ms) can leave before the next batch, each with the delay it adds: loads
        between steps (`idle`), or one load started with the step (the next step waits
        for what it takes beyond the step and the think time; then no load between steps:
        one loader)."""
        think = self.after_ms[b]
        out = [(s, 0.0) for s in self.idle(end, self.segments[b], b)]
        busy = any(o != "cpu" for o in options)
        for after, ms in self.beside(end, b, busy):
            out.append((after, max(0.0, ms - span - think)))
        return out

    def reachable(self, step: _Step, b: int) -> list[batchsim.Residency]:
        """Every state batch ``b`` from ``step``'s state and the time after it can leave."""
        out = [s for end in step.ends for s in self.idle(end, self.segments[b], b)]
        out += [s for end in step.ends for s, _ in self.beside(end, b, busy=True)]
        if step.cpu_row is not None:
            end = step.ends[int(step.index[step.cpu_row])]
            out += [s for s, _ in self.beside(end, b, busy=False)]
        return out

    def greedy(self, state: batchsim.Residency) -> tuple[float, _Path]:
        """The round paid by the per-batch optimum from ``state`` (an upper bound)."""
        total, path, _ = self.greedy_round(state)
        return total, path

    def greedy_round(
        self, state: batchsim.Residency
    ) -> tuple[float, _Path, batchsim.Residency]:
        """`greedy`, and the state the round leaves."""
        np = batchsim.require_numpy()
        total, path = 0.0, []
        for b, codes in enumerate(self.codes):
            step = self.step(state, b)
            self.bed.restore(state)
            spans = self.bed.codes_makespans(self.tools[b], codes, prune=True)
            row = int(np.argmin(spans))
            total += float(spans[row])
            path.append(tuple(DEVICE_OPTIONS[int(c)] for c in codes[row]))
            state = step.ends[int(step.index[row])]
        return total, tuple(path), state

    def moves(
        self, step: _Step, b: int, limit: float
    ) -> list[tuple[batchsim.Residency, float, tuple[DeviceOption, ...]]]:
        """From ``step``'s state, the cheapest mapping to each end state whose cost is within
        ``limit`` (exact: every mapping whose bound is within it is simulated)."""
        np = batchsim.require_numpy()
        codes, tools = self.codes[b], self.tools[b]
        if step.lb is None:
            self.bed.restore(step.state)
            step.lb = self.bed.lower_bounds(tools, codes)
            step.spans = np.full(len(codes), np.nan)
        todo = np.flatnonzero((step.lb <= limit) & np.isnan(step.spans))
        if len(todo):
            self.bed.restore(step.state)
            step.spans[todo] = self.bed.codes_makespans(tools, codes[todo])
        within = np.flatnonzero(step.spans <= limit)  # NaN compares False
        rows = []
        for g in np.unique(step.index[within]).tolist():
            group = within[step.index[within] == g]
            rows.append(int(group[np.argmin(step.spans[group])]))  # the first of the cheapest
        cpu = step.cpu_row  # the GPU idle: a load beside it may evict (see `after`)
        if self.loads and cpu is not None and cpu not in rows and step.spans[cpu] <= limit:
            rows.append(cpu)
        return [(step.ends[int(step.index[row])], float(step.spans[row]),
                 tuple(DEVICE_OPTIONS[int(c)] for c in codes[row])) for row in rows]

    def round(self, start: list[batchsim.Residency]) -> tuple[float, _Path]:
        """The least a round pays from any of ``start``, and the mappings that pay it."""
        np = batchsim.require_numpy()
        first = [self.step(s, 0) for s in start]
        if len(start) == 1 and self._forced(start[0]):
            return self.greedy(start[0])
        for step in first:  # the most promising start state gives the upper bound
            if step.lb is None:
                self.bed.restore(step.state)
                step.lb = self.bed.lower_bounds(self.tools[0], self.codes[0])
                step.spans = np.full(len(self.codes[0]), np.nan)
        lead = min(range(len(start)), key=lambda i: float(first[i].lb.min()))
        upper, path = self.greedy(start[lead])
        limit = upper * (1 + _SLACK) + _SLACK
        level: dict[_Key, tuple[float, _Path, batchsim.Residency]] = {
            _key(s): (0.0, (), s) for s in start}
        for b in range(len(self.batches)):
            nxt: dict[_Key, tuple[float, _Path, batchsim.Residency]] = {}
            for spent, done, state in level.values():
                for end, span, options in self.moves(self.step(state, b), b, limit - spent):
                    ways = (self.after(end, span, b, options) if b + 1 < len(self.batches)
                            else [(end, 0.0)])
                    for after, delay in ways:
                        cost = spent + span + delay
                        seen = nxt.get(_key(after))
                        if cost <= limit and (seen is None or cost < seen[0]):
                            nxt[_key(after)] = (cost, (*done, options), after)
            level = nxt
        best = min(level.values(), key=lambda v: v[0], default=None)
        if best is None or best[0] > upper:  # float slack only: the greedy path is the bound
            return upper, path
        return best[0], best[1]

    def _forced(self, state: batchsim.Residency) -> bool:
        """Whether every batch of a round from ``state`` leaves one state whatever the
        mapping (then the per-batch optimum is the round's)."""
        for b in range(len(self.batches)):
            step = self.step(state, b)
            if len(step.ends) != 1 or len(self.reachable(step, b)) != 1:
                return False
            state = step.ends[0]
        return True


def horizon_reference(
    bed: SimulatedTestbed, batches: Sequence[Batch], rounds: int,
    think_ms: float | Sequence[Idle] = 0.0, before_ms: Idle = 0.0,
) -> Reference:
    """The exact reference of ``rounds`` rounds of ``batches`` (each round runs them in
    order) on ``bed`` from its current resident-model state (see the module docstring); the
    testbed is left in that state, its clock untouched. ``think_ms``: the idle time after
    every step, or after each batch (one figure per batch), in which models may load (the
    states it can leave are reachable too); ``before_ms``: the idle time before the first
    step, likewise."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not batches:
        return Reference((0.0,) * rounds, {}, 1, True)
    if bed.gpu_count > 1:  # every placement simulated (`horizon_gpus`)
        g = gpus_reference(bed, batches, rounds, think_ms, before_ms)
        return Reference(g.round_ms, g.mapping, g.states, g.exact, devices=g.devices)
    search = _Search(bed, batches, think_ms, wrap=rounds > 1)
    origin = bed.residency()
    start = {_key(s): s for s in search.idle(origin, before_ms)}
    known: dict[frozenset[_Key], tuple[float, _Path]] = {}
    round_ms: list[float] = []
    path: _Path = ()
    most, exact = 1, True
    for _ in range(rounds):
        seen = frozenset(start)
        if seen not in known:
            known[seen] = search.round(list(start.values()))
        spent, path = known[seen]
        round_ms.append(spent)
        level = start
        for b in range(len(batches)):  # the states the round can leave
            nxt: dict[_Key, batchsim.Residency] = {}
            for state in level.values():
                for after in search.reachable(search.step(state, b), b):
                    nxt.setdefault(_key(after), after)
            if len(nxt) > MAX_STATES:
                nxt, exact = dict(list(nxt.items())[:MAX_STATES]), False
            most = max(most, len(nxt))
            level = nxt
        start = level
    bed.restore(origin)
    mapping: dict[str, DeviceOption] = {}
    for batch, options in zip(batches, path, strict=True):
        mapping.update(zip(batch.call_ids, options, strict=True))
    return Reference(tuple(round_ms), mapping, most, exact)


@dataclass(frozen=True)
class WholeRun:
    """The best single sequence of mappings over a whole run, resident models carried."""

    total_ms: float
    """The least the rounds' makespans can add up to, over every sequence of mappings (and
    loads between steps); what no scheduler's total can go below."""
    exact: bool
    """False when the search hit its state budget (then it is not a proven bound)."""
    states: int
    """The most states one step of the search kept."""


def whole_run_reference(
    bed: SimulatedTestbed, batches: Sequence[Batch], rounds: int,
    think_ms: float | Sequence[Idle] = 0.0, round_bounds: Sequence[float] | None = None,
    before_ms: Idle = 0.0,
) -> WholeRun:
    """The whole-run reference: a shortest path over (step, resident-model state) from the
    testbed's current state, every mapping of each step (the declared hints' options) and,
    between steps, the loads ``think_ms`` allows (`_Search.idle`; one figure, or one per
    batch), and before the first step those ``before_ms`` allows. ``round_bounds``: each
    round's lower bound (`horizon_reference`'s ``round_ms`` with the same ``think_ms``),
    with which the search skips every path that cannot beat a feasible plan (one GPU; on
    several, `horizon_gpus.gpus_reference` simulates every placement of every state).
    The testbed is left in its state, its clock untouched.

    Unlike the per-round ``round_ms``, this is a plan a scheduler can follow: round 1 pays
    its load, and round 2 is warm only because round 1 (or the idle time after it) loaded.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not batches:
        return WholeRun(0.0, True, 1)
    if bed.gpu_count > 1:  # every placement simulated (`horizon_gpus`)
        g = gpus_reference(bed, batches, rounds, think_ms, before_ms)
        return WholeRun(g.total_ms, g.exact, g.states)
    search = _Search(bed, batches, think_ms, wrap=rounds > 1)
    origin = bed.residency()
    after = [sum(round_bounds[r + 1:]) if round_bounds is not None else 0.0
             for r in range(rounds)]
    upper = _greedy_total(search, origin, rounds)
    limit = upper * (1 + _SLACK) + _SLACK
    level = {_key(s): (0.0, s) for s in search.idle(origin, before_ms)}
    exact, most = True, 1
    for r in range(rounds):
        for b in range(len(batches)):
            last = r + 1 == rounds and b + 1 == len(batches)
            nxt: dict[_Key, tuple[float, batchsim.Residency]] = {}
            for spent, state in level.values():
                room = limit - spent - after[r]
                if room < 0:
                    continue
                for end, span, options in search.moves(search.step(state, b), b, room):
                    for st, delay in ([(end, 0.0)] if last
                                      else search.after(end, span, b, options)):
                        cost = spent + span + delay
                        seen = nxt.get(_key(st))
                        if seen is None or cost < seen[0]:
                            nxt[_key(st)] = (cost, st)
            if len(nxt) > MAX_STATES:
                kept = sorted(nxt.items(), key=lambda kv: kv[1][0])[:MAX_STATES]
                nxt, exact = dict(kept), False
            most = max(most, len(nxt))
            level = nxt
    bed.restore(origin)
    best = min((c for c, _ in level.values()), default=upper)
    return WholeRun(min(best, upper), exact, most)


def _greedy_total(search: _Search, state: batchsim.Residency, rounds: int) -> float:
    """The total of the per-step optimum run step after step (a feasible plan: an upper
    bound on the whole-run reference)."""
    total = 0.0
    for _ in range(rounds):
        spent, _, state = search.greedy_round(state)
        total += spent
    return total
