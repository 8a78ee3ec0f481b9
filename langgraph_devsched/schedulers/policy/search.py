"""Bounded search for the best joint mapping of one batch, for any number of calls.

`search_mappings` scores mappings (one option per call) through a batched ``score`` function
and returns the best by the key ``(score, demand)`` (ties go to the least demanding options:
``cpu``, then ``gpu_queued``, then ``gpu_now``). How it searches depends on the size:

1. **exact** — at most ``exact_limit`` mappings: every one is scored.
2. **bound** — at most ``bound_limit`` mappings and a ``lower_bounds`` function: the seeds,
   then the mappings in increasing lower bound, a chunk at a time, until the next bound is
   above the best score (plus ``tie``): the optimum and its near-ties are exact. It may use
   half of ``budget_ms``; if it cannot finish, 3 follows from the best mapping found, then
   from the other seeds while time is left.
3. **local** — otherwise the best seed improves by single-call changes and, when none helps,
   by changing two calls at once (beyond 10 calls: exchanging two calls' options), until no
   move improves or ``budget_ms`` on ``clock`` is spent. The result is never worse than the
   best seed.

A mapping whose score may be *below* its lower bound (e.g. one whose observed makespan
overrides a prediction) must be among the seeds.

>>> costs = {"cpu": 3.0, "gpu_queued": 2.0, "gpu_now": 1.0}
>>> def score(ms):  # a toy model: the calls run one after another
...     return [sum(costs[o] for o in m) for m in ms]
>>> r = search_mappings(score, [("gpu_now", "cpu")] * 2)
>>> r.best, r.method, len(r.scores)
(('gpu_now', 'gpu_now'), 'exact', 4)
>>> r = search_mappings(score, [("gpu_now", "gpu_queued", "cpu")] * 12, exact_limit=10,
...                     seeds=[("cpu",) * 12])
>>> r.best == ("gpu_now",) * 12, r.method, r.complete
(True, 'local', False)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption

Mapping_ = tuple[DeviceOption, ...]
Score = Callable[[Sequence[Mapping_]], Sequence[float]]
"""Scores of many mappings at once (e.g. predicted makespans), in order."""
LowerBounds = Callable[[Any], Any]
"""Given option codes (numpy int8, one row per mapping), a lower bound on each row's score."""
SearchMethod = Literal["exact", "bound", "local"]

EXACT_LIMIT = 729
"""Up to this many mappings (3^6) every one is scored."""
BOUND_LIMIT = 59_049
"""Up to this many (3^10), branch and bound when a lower bound is given."""
DEMAND: dict[str, int] = {"cpu": 0, "gpu_queued": 1, "gpu_now": 2}


def demand(m: Mapping_) -> tuple[int, ...]:
    """The tie-break of a mapping: least demanding options first, call by call."""
    return tuple(map(DEMAND.__getitem__, m))


@dataclass
class SearchResult:
    """The best mapping found, every mapping scored, and how the search ended."""

    best: Mapping_
    scores: dict[Mapping_, float] = field(default_factory=dict)
    method: SearchMethod = "exact"
    complete: bool = True
    """True when ``best`` is provably the best of all mappings (exact or bound)."""
    out_of_time: bool = False


class _Scored:
    """Scores computed so far; new ones in batches through ``score``."""

    def __init__(self, score: Score) -> None:
        self.score = score
        self.values: dict[Mapping_, float] = {}

    def add(self, mappings: Iterable[Mapping_]) -> list[tuple[float, tuple[int, ...], Mapping_]]:
        """Score the new ones; return (score, demand, mapping) of all of them."""
        mappings = list(dict.fromkeys(mappings))
        todo = [m for m in mappings if m not in self.values]
        if todo:
            self.values.update(zip(todo, (float(x) for x in self.score(todo)), strict=True))
        return [(self.values[m], demand(m), m) for m in mappings]


def count_mappings(choices: Sequence[Sequence[DeviceOption]]) -> int:
    return math.prod(len(c) for c in choices)


def search_mappings(
    score: Score,
    choices: Sequence[Sequence[DeviceOption]],
    *,
    seeds: Iterable[Sequence[DeviceOption]] = (),
    lower_bounds: LowerBounds | None = None,
    exact_limit: int = EXACT_LIMIT,
    bound_limit: int = BOUND_LIMIT,
    budget_ms: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    chunk: int = 64,
    tie: float = 0.0,
) -> SearchResult:
    """The best mapping of ``choices`` by ``(score, demand)``; see the module docstring.

    ``clock`` returns seconds; ``budget_ms`` (None: unbounded) counts from the call.
    ``tie`` (a fraction) widens the bound stop so that mappings within ``tie`` of the best
    score are scored too.
    """
    start = clock()

    def spent() -> bool:
        return budget_ms is not None and (clock() - start) * 1000.0 >= budget_ms

    options = [tuple(c) for c in choices]
    if not options:
        return SearchResult(best=(), scores={(): 0.0})
    table = _Scored(score)
    total = count_mappings(options)
    valid = [tuple(s) for s in seeds if _allowed(s, options)]
    if total <= exact_limit:
        import itertools

        found = table.add(itertools.product(*options))
        return SearchResult(min(found)[2], table.values, "exact", True)
    seeded = valid or [tuple(c[0] for c in options)]
    boundable = lower_bounds is not None and total <= bound_limit
    ordered = None
    if boundable:
        assert lower_bounds is not None
        ordered = _Ordered(options, lower_bounds, chunk)
        # the first chunk (the lowest bounds, never above the optimum, so never skipped)
        # is scored with the seeds: one batched simulation instead of two
        table.add([*seeded, *ordered.rows(0)])
    starts = sorted(table.add(seeded))
    best = starts[0]
    if ordered is not None:
        # half of the budget for branch and bound from the best seed; if it cannot finish,
        # the local search takes the rest from the best mapping it found
        half = _share(start, budget_ms, clock, 0.5)
        result = _bound(table, ordered, best, half, tie)
        if result is not None:
            return result
        best = min(table.add(table.values))
    best, out = _local(table, options, best, spent, chunk)
    small = total <= BOUND_LIMIT  # (3^10): worth restarting from the other seeds
    for other in starts[1:] if small else ():  # best first, while time is left
        if out:
            break
        local, out = _local(table, options, other, spent, chunk)
        best = local if local < best else best
    return SearchResult(best[2], table.values, "local", False, out)


def _share(
    start: float, budget_ms: float | None, clock: Callable[[], float], fraction: float
) -> Callable[[], bool]:
    """A ``spent`` test for ``fraction`` of the budget."""
    if budget_ms is None:
        return lambda: False
    limit = budget_ms * fraction
    return lambda: (clock() - start) * 1000.0 >= limit


def _allowed(m: Sequence[DeviceOption], choices: Sequence[Sequence[DeviceOption]]) -> bool:
    return len(m) == len(choices) and all(o in c for o, c in zip(m, choices, strict=True))


class _Ordered:
    """Every mapping of ``choices`` as option codes, in increasing lower bound, scored
    ``step`` at a time by `_bound`."""

    def __init__(self, choices: list[tuple[DeviceOption, ...]], lower_bounds: LowerBounds,
                 chunk: int) -> None:
        from langgraph_devsched.batchsim import product_codes, require_numpy

        np = require_numpy()
        self.codes = product_codes(choices)
        self.lb = np.asarray(lower_bounds(self.codes), dtype=np.float64)
        self.order = np.argsort(self.lb, kind="stable")
        self.step = max(chunk, 256)

    def rows(self, lo: int) -> list[Mapping_]:
        """The mappings of the chunk starting at ``lo``."""
        rows = self.codes[self.order[lo:lo + self.step]]
        name = DEVICE_OPTIONS.__getitem__
        return [tuple(map(name, row)) for row in rows.tolist()]


def _bound(
    table: _Scored,
    ordered: _Ordered,
    best: tuple[float, tuple[int, ...], Mapping_],
    spent: Callable[[], bool],
    tie: float,
) -> SearchResult | None:
    """Branch and bound in one level; None when the budget ran out first."""
    lb, order, step = ordered.lb, ordered.order, ordered.step
    for lo in range(0, len(order), step):
        if lb[order[lo]] > best[0] * (1.0 + tie) + 1e-6:
            return SearchResult(best[2], table.values, "bound", True)
        if lo and spent():  # the first chunk was scored with the seeds
            return None
        found = table.add(ordered.rows(lo))
        best = min(best, *found)
    return SearchResult(best[2], table.values, "bound", True)


def _neighbours(m: Mapping_, choices: list[tuple[DeviceOption, ...]]) -> Iterator[Mapping_]:
    """Every mapping with one call's option changed."""
    for i, options in enumerate(choices):
        for o in options:
            if o != m[i]:
                yield (*m[:i], o, *m[i + 1:])


PAIR_MOVES_UP_TO = 10
"""Up to this many calls (3^10 mappings) the second neighbourhood changes any two calls'
options; beyond, it only exchanges the options of two calls (quadratic either way, with a
smaller factor)."""


def _exchanges(m: Mapping_, choices: list[tuple[DeviceOption, ...]]) -> Iterator[Mapping_]:
    """Every mapping with two calls' options changed (beyond `PAIR_MOVES_UP_TO` calls: the
    options of two calls exchanged, both allowed there)."""
    n = len(m)
    for i in range(n):
        for j in range(i + 1, n):
            if n <= PAIR_MOVES_UP_TO:
                for a in choices[i]:
                    for b in choices[j]:
                        if a != m[i] and b != m[j]:
                            out = list(m)
                            out[i], out[j] = a, b
                            yield tuple(out)
                continue
            a, b = m[i], m[j]
            if a != b and b in choices[i] and a in choices[j]:
                out = list(m)
                out[i], out[j] = b, a
                yield tuple(out)


PAIR_CHUNK = 256
"""Pair moves scored at once in the local search (a neighbourhood of 16 calls' exchanges,
120, is one simulation instead of two)."""


def _local(
    table: _Scored,
    choices: list[tuple[DeviceOption, ...]],
    best: tuple[float, tuple[int, ...], Mapping_],
    spent: Callable[[], bool],
    chunk: int,
) -> tuple[tuple[float, tuple[int, ...], Mapping_], bool]:
    """First improving chunk of the single-change, then the pair-move, neighbourhood (the
    pair moves `PAIR_CHUNK` at a time: a batched simulation costs about the same for 64 or
    256 mappings)."""
    while True:
        moved = False
        for moves in (_neighbours, _exchanges):
            pending = moves(best[2], choices)
            size = chunk if moves is _neighbours else max(chunk, PAIR_CHUNK)
            while not moved:
                if spent():
                    return best, True
                group = [m for _, m in zip(range(size), pending, strict=False)]
                if not group:
                    break
                candidate = min(table.add(group))
                if candidate < best:
                    best, moved = candidate, True
            if moved:
                break
        if not moved:
            return best, False
