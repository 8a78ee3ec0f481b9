"""Each contention physics is one rule with two forms (`_sim.physics`): the rows' form the
batched simulator applies to every mapping at once and the one-GPU form the testbed's event
simulation applies call by call. Both must give the same GPU demand and the same stalled
calls at any instant, bit for bit (the batched makespans are compared with the testbed's)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from langgraph_devsched._sim.physics import (
    PHYSICS,
    Contention,
    Mixed,
    MixedRows,
    event_rule,
    lockstep_rule,
)

np = pytest.importorskip("numpy")


@dataclass
class _P:
    gpu_share: float


@dataclass
class _Call:
    index: int
    p: _P
    mem_bound: float
    gpu_since: float


class _Rows:
    """The per-row fields a rule reads of the lockstep state."""

    def __init__(self, share, gpu_since) -> None:
        self.share, self.gpu_since = share, gpu_since
        self.m_physics = self.m_overhead = self.m_mem_bound = None

    def extend(self, **fields) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


def _instant(rng: random.Random, n: int, m: int):
    share = np.array([[rng.choice([0.1, 0.25, 0.3, 0.55, 0.8, 1.0]) for _ in range(n)]
                      for _ in range(m)])
    in_gpu = np.array([[rng.random() < 0.6 for _ in range(n)] for _ in range(m)])
    since = np.array([[float(rng.choice([0, 5, 5, 12, 40])) for _ in range(n)]
                      for _ in range(m)])
    return share, in_gpu, since


def _one_gpu(rule, share_row, in_row, since_row, mem_bound, base_share):
    computing = [_Call(j, _P(float(share_row[j])), mem_bound[j], float(since_row[j]))
                 for j in range(len(in_row)) if in_row[j]]
    demand, head = rule.one_gpu(base_share, computing)
    stalled = [bool(in_row[j]) and head is not None and j != head.index
               for j in range(len(in_row))]
    return demand, stalled


@pytest.mark.parametrize("physics", PHYSICS)
def test_rows_form_equals_one_gpu_form(physics: str) -> None:
    rng = random.Random(physics)
    for _ in range(40):
        n, m = rng.randint(1, 6), rng.randint(1, 8)
        base_share = rng.choice([0.0, 0.2, 0.5])
        overhead = rng.choice([0.0, 0.1, 0.3])
        mem_bound = tuple(rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(n))
        contention = Contention(physics, slice_overhead=overhead, mem_bound=mem_bound)  # type: ignore[arg-type]
        share, in_gpu, since = _instant(rng, n, m)
        rows = lockstep_rule(np, contention, None, n)
        demand, stalled = rows.demand(np, _Rows(share, since), in_gpu, base_share)
        one = event_rule(contention.physics, overhead)
        for i in range(m):
            d, s = _one_gpu(one, share[i], in_gpu[i], since[i], mem_bound, base_share)
            assert float(demand[i]) == d, (physics, i)
            assert (list(map(bool, stalled[i])) if stalled is not None else [False] * n) == s


def test_mixed_rows_equal_each_physics_alone() -> None:
    rng = random.Random(7)
    n, m = 5, 12
    models = [None, Contention("time_slicing", slice_overhead=0.1),
              Contention("idle_queue"), Contention("bandwidth", mem_bound=(0.5,) * n)]
    groups = np.array([i % len(models) for i in range(m)])
    share, in_gpu, since = _instant(rng, n, m)
    rule = MixedRows(Mixed(np, models, groups, n))
    state = _Rows(share, since)
    rule.attach(state)
    demand, stalled = rule.demand(np, state, in_gpu, 0.2)
    for i in range(m):
        alone = lockstep_rule(np, models[groups[i]], None, n)
        d, s = alone.demand(np, _Rows(share[i:i + 1], since[i:i + 1]), in_gpu[i:i + 1], 0.2)
        assert float(demand[i]) == float(d[0])
        expected = [False] * n if s is None else list(map(bool, s[0]))
        assert list(map(bool, stalled[i])) == expected


def test_bandwidth_needs_one_mem_bound_per_call() -> None:
    with pytest.raises(ValueError, match="mem_bound: 2 values for 3 calls"):
        lockstep_rule(np, Contention("bandwidth", mem_bound=(0.5, 0.5)), None, 3)
