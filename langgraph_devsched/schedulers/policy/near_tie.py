"""Trying a near-tie the twin cannot rank: the cheapest probe there is.

When the twin scores a mapping that never ran within the tie tolerance of its best, the two
are equal to it: what separates them is what the twin does not model (a copy that sharing
does not slow, a thread count, a physics it assumed). Measuring the other one costs at most
the tie (0.5 % of the step) once, and can gain what the twin cannot see. Of the untried
near-ties the one farthest from the best (most calls placed otherwise) is tried: it differs
most in what the twin guessed, so its measurement says the most. Equal calls swapped are not
another mapping. Each batch shape tries at most `MAX_TRIES` near-ties over the policy's
life (a bounded table of shapes), each up to `TRIAL_RUNS` times, and only in its first
`NEAR_TIES_UNTIL` runs, so a shape whose near-ties the twin keeps tied settles.

>>> ties = NearTies(max_shapes=4)
>>> tools, best = ["a", "a"], ("gpu_queued", "gpu_queued")
>>> scores = {best: 48.0, ("gpu_now", "gpu_now"): 48.1, ("gpu_now", "gpu_queued"): 48.1,
...           ("cpu", "cpu"): 300.0}
>>> class Runs:
...     def __init__(self, count): self.count = count
>>> ran = {canon(zip(tools, best)): Runs(9)}
>>> ties.trial(("a", "a"), tools, scores, best, 48.3, seen={}) is None  # best never ran
True
>>> ties.trial(("a", "a"), tools, scores, best, 48.3, seen=ran)
('gpu_now', 'gpu_now')
>>> ran[canon(zip(tools, ("gpu_now", "gpu_now")))] = Runs(1)  # once: again
>>> ties.trial(("a", "a"), tools, scores, best, 48.3, seen=ran)
('gpu_now', 'gpu_now')
>>> ran[canon(zip(tools, ("gpu_now", "gpu_now")))] = Runs(3)  # enough: the other one
>>> ties.trial(("a", "a"), tools, scores, best, 48.3, seen=ran)
('gpu_now', 'gpu_queued')
>>> ran[canon(zip(tools, ("gpu_now", "gpu_queued")))] = Runs(3)
>>> ties.trial(("a", "a"), tools, scores, best, 48.3, seen=ran) is None  # tried twice
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.schedulers.policy.scores import canon
from langgraph_devsched.schedulers.policy.search import Mapping_, demand

MAX_TRIES = 2
"""Near-ties a batch shape tries over the policy's life."""
NEAR_TIES_UNTIL = 10
"""Near-ties are tried only in a shape's first runs (its executed placements' runs in all):
where the policy is still learning, not once it settled."""
TRIAL_RUNS = 3
"""A tried near-tie runs again while it is still a near-tie, until it has this many runs:
one noisy run cannot outvote the best's many (`monitor_policy._observed_tie_break`)."""


class NearTies:
    """How many near-ties each batch shape has tried (the last ``max_shapes`` shapes)."""

    def __init__(self, max_shapes: int) -> None:
        self._tried: LruTable[tuple[str, ...], tuple[int, Mapping_]] = LruTable(max_shapes)

    def __len__(self) -> int:
        return len(self._tried)

    def trial(
        self, shape: tuple[str, ...], tools: Sequence[str], scores: Mapping[Mapping_, float],
        best: Mapping_, below: float, *, seen: Mapping[Any, Any],
    ) -> Mapping_ | None:
        """The untried near-tie to run instead of ``best`` (scored under ``below``, its
        placement not in ``seen``), farthest from ``best`` first; None when there is none,
        ``best`` never ran itself or the shape has tried `MAX_TRIES`. The last one tried
        runs again while it is a near-tie with fewer than `TRIAL_RUNS` runs (``seen``: the
        executed placements, each with its ``count`` of runs). A new trial is counted."""
        tried, last = self._tried.get(shape) or (0, ())
        mine = canon(zip(tools, best, strict=True))
        if mine not in seen:  # the best itself never ran: it is tried first
            return None
        if last and last != best and scores.get(last, below) < below:
            ran = seen.get(canon(zip(tools, last, strict=True)))
            if getattr(ran, "count", 0) < TRIAL_RUNS:
                return last
        if tried >= MAX_TRIES:
            return None
        untried = [m for m, score in scores.items()
                   if score < below and (p := canon(zip(tools, m, strict=True))) != mine
                   and p not in seen]
        if not untried:
            return None
        choice = max(untried, key=lambda m: (
            sum(a != b for a, b in zip(m, best, strict=True)), demand(m), m))
        self._tried[shape] = (tried + 1, choice)
        return choice
