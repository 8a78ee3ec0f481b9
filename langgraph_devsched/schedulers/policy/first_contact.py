"""The twin's model error on first contact, apart from measurement noise.

A twin fitted to the placements a batch shape executed predicts those well: the fit made it
so. What it does not know shows where it predicts a placement it never saw, for example
after a contention fit selected the wrong physics and predicts every new mapping at half
its real makespan. `FirstContact` keeps, per shape, the twin's prediction for each chosen
placement that never ran (`FirstContact.expect`); once that placement has run, the relative
miss of the prediction against its measured makespan, less what the measurement noise
explains, is recorded (`FirstContact.settle`). `FirstContact.last_miss` is the most recent
one: how far the twin's word on an untried mapping is to be trusted against a mapping
already measured (`policy.scheduler`: past `GUARD_ABOVE`, an untried best must beat the best
measured mapping by that margin).

>>> errors = FirstContact(max_shapes=4)
>>> shape = ("asr", "ocr")
>>> errors.expect(shape, (("asr", "gpu_now"), ("ocr", "gpu_now")), 100.0)
>>> errors.settle(shape, {(("asr", "gpu_now"), ("ocr", "gpu_now")): (150.0, 3)}, noise=0.0)
>>> errors.last_miss(shape)
0.5
>>> errors.forget(shape)  # the fit selected another contention model: a new twin
>>> errors.last_miss(shape)
0.0
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from langgraph_devsched.schedulers.lru import LruTable

PENDING = 16
"""Predictions kept per shape for placements chosen but not measured yet."""
NOISE_Z = 2.0
"""The part of a miss the measurement noise explains: this many standard errors."""
GUARD_ABOVE = 0.15
"""A last miss up to this is left to the overrides of measured mappings: a first run's
noise and a fit still settling miss by that much."""

Placement = tuple[tuple[str, str], ...]


RETRY_AFTER = 4
"""After this many decisions in a row in which the miss kept an executed mapping over the
twin's untried best, that best is run once (`FirstContact.retry`)."""
MAX_RETRIES = 2
"""At most this many such runs a shape (each is a first contact that revises the miss)."""


@dataclass
class _Shape:
    pending: dict[Placement, float] = field(default_factory=dict)
    last_miss: float = 0.0
    held: int = 0
    retries: int = 0


class FirstContact:
    """Per batch shape, the twin's predictions of placements before they first ran and its
    last miss once one ran (bounded: ``max_shapes`` shapes, `PENDING` predictions each)."""

    def __init__(self, max_shapes: int) -> None:
        self._shapes: LruTable[Hashable, _Shape] = LruTable(max_shapes)

    def __len__(self) -> int:
        return len(self._shapes)

    def expect(self, shape: Hashable, placement: Placement, predicted_ms: float) -> None:
        """The twin predicts ``placement``, which never ran, at ``predicted_ms``."""
        if predicted_ms <= 0 or not math.isfinite(predicted_ms):
            return
        entry = self._shapes.setdefault_with(shape, _Shape)
        if placement in entry.pending:
            return
        if len(entry.pending) >= PENDING:
            entry.pending.pop(next(iter(entry.pending)))
        entry.pending[placement] = predicted_ms

    def expects(self, shape: Hashable) -> bool:
        """Whether a prediction for ``shape`` waits for its placement's first run."""
        entry = self._shapes.get(shape)
        return entry is not None and bool(entry.pending)

    def settle(
        self, shape: Hashable, measured: Mapping[Placement, tuple[float, int]], *, noise: float
    ) -> None:
        """Placements that ran since they were predicted: ``measured`` maps a placement to
        its measured makespan and runs; the last one settled sets the last miss, less
        `NOISE_Z` standard errors of the ``noise`` (the relative spread of one run)."""
        entry = self._shapes.get(shape)
        if entry is None or not entry.pending:
            return
        for placement in [p for p in entry.pending if p in measured]:
            predicted = entry.pending.pop(placement)
            ms, runs = measured[placement]
            miss = abs(ms / predicted - 1.0) - NOISE_Z * noise / math.sqrt(max(1, runs))
            entry.last_miss = max(0.0, miss)
            entry.held = 0

    def retry(self, shape: Hashable) -> bool:
        """The miss kept an executed mapping over the twin's untried best once more: whether
        to run that best now, once. A miss is revised only by a new first contact, and
        while it holds no new mapping runs: with exact profiles `residency_cold_burst` kept
        a 1.02x mapping for good where its twin's best was the optimum (and under the
        bandwidth physics a budget-cut fit's 29 % miss kept 1.24x; run, its twin's best
        there is 1.11x). Every `RETRY_AFTER` holds in a row, at most `MAX_RETRIES` a shape."""
        entry = self._shapes.get(shape)
        if entry is None or entry.retries >= MAX_RETRIES:
            return False
        entry.held += 1
        if entry.held < RETRY_AFTER:
            return False
        entry.held = 0
        entry.retries += 1
        return True

    def forget(self, shape: Hashable) -> None:
        """The twin of ``shape`` changed (another contention model): its predictions and
        last miss were another twin's."""
        self._shapes.pop(shape, None)

    def last_miss(self, shape: Hashable) -> float:
        """The twin's last relative miss on first contact for ``shape`` (0 before any
        placement it predicted has run)."""
        entry = self._shapes.get(shape)
        return 0.0 if entry is None else entry.last_miss
