"""Running latency statistics with an outlier rule: one slow run does not poison an estimate.

A `RunningStat` keeps the mean and spread of one (tool, option, context) key by Welford's
method, the number of samples, and when it was last fed (a step number and a clock time).

Outlier rule (StarPU-style discard plus a dask-style reset): once a key has ``min_samples``
samples, a new sample farther from the mean than ``max(k * std, rel_floor * mean)`` is set
aside and counted in ``outliers`` instead of being averaged in. If ``reset_after`` such samples
arrive in a row on the same side of the mean, the world has changed (drift, a new background
load), and the estimate restarts from those samples.

>>> s = RunningStat()
>>> for x in (100.0, 110.0, 90.0):
...     s = s.add(x, step=1)
>>> s.mean, s.count, round(s.std, 3)
(100.0, 3, 10.0)
>>> s = s.add(400.0, step=2)         # one slow run: set aside
>>> s.mean, s.count, s.outliers
(100.0, 3, 1)
>>> s = s.add(405.0, step=3)         # a second one in a row: the regime changed, restart
>>> s.mean, s.count, s.outliers
(402.5, 2, 0)
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat

OUTLIER_K = 3.0
"""A sample more than this many standard deviations from the mean is an outlier..."""
OUTLIER_REL_FLOOR = 0.5
"""...provided it is also more than this fraction of the mean away (noise-free keys have std 0)."""
OUTLIER_MIN_SAMPLES = 3
"""The rule applies only once a key has this many samples."""
RESET_AFTER = 2
"""This many outliers in a row on the same side restart the estimate from them."""


class RunningStat(BaseModel):
    """Mean, spread, count and freshness of one latency series (immutable; `add` returns new)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    count: int = Field(default=0, ge=0)
    mean: float = Field(default=0.0, ge=0, description="mean of the samples (times: >= 0)")
    m2: float = Field(default=0.0, ge=0, description="sum of squared deviations (Welford)")
    outliers: int = Field(default=0, ge=0, description="samples set aside by the outlier rule")
    pending: tuple[NonNegativeFloat, ...] = Field(
        default=(), description="outliers in a row on one side, kept to restart from"
    )
    last_step: int = Field(
        default=-1, ge=-1, description="monitor step of the last sample, -1 if none")
    last_time: float | None = Field(default=None, description="clock time of the last sample")

    @property
    def known(self) -> bool:
        return self.count > 0

    @property
    def variance(self) -> float:
        return self.m2 / (self.count - 1) if self.count > 1 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    @property
    def cv(self) -> float:
        """Relative spread (std / mean); 0 for fewer than two samples."""
        return self.std / self.mean if self.mean > 0 else 0.0

    def is_outlier(self, x: float) -> bool:
        if self.count < OUTLIER_MIN_SAMPLES:
            return False
        tolerance = max(OUTLIER_K * self.std, OUTLIER_REL_FLOOR * abs(self.mean))
        return abs(x - self.mean) > tolerance

    def add(self, x: float, *, step: int, time: float | None = None) -> RunningStat:
        """This stat with sample ``x`` taken (or set aside by the outlier rule)."""
        if self.is_outlier(x):
            side = x > self.mean
            same_side = all((p > self.mean) == side for p in self.pending)
            pending = (*self.pending, x) if same_side else (x,)
            if len(pending) >= RESET_AFTER:
                fresh = RunningStat()
                for p in pending:
                    fresh = fresh._welford(p)
                return fresh.model_copy(update={"last_step": step, "last_time": time})
            return self.model_copy(
                update={"outliers": self.outliers + 1, "pending": pending,
                        "last_step": step, "last_time": time}
            )
        count = self.count + 1  # Welford's step, inline: `add` runs for every sample
        delta = x - self.mean
        mean = self.mean + delta / count
        m2 = self.m2 + delta * (x - mean)
        return self.model_copy(update={"count": count, "mean": mean, "m2": max(0.0, m2),
                                       "pending": (), "last_step": step, "last_time": time})

    def _welford(self, x: float) -> RunningStat:
        count = self.count + 1
        delta = x - self.mean
        mean = self.mean + delta / count
        m2 = self.m2 + delta * (x - mean)
        return self.model_copy(update={"count": count, "mean": mean, "m2": max(0.0, m2)})
