"""The faults the stress harness injects, their default rates, and a thread-safe tally.

Call-level faults hit one tool call; step-level faults hit a whole step (its scheduler, its
run, or the monitor's persisted stats). Rates are probabilities per call or per step.

>>> parse_fault_rates(["tool_error=0.1", "hang=0"])["tool_error"]
0.1
>>> parse_fault_rates(["nope=0.1"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: --fault-rate 'nope=0.1': unknown fault kind 'nope'; valid kinds: tool_error, ...
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, cast, get_args

CallFault = Literal["tool_error", "gpu_oom", "slow", "hang", "bad_call"]
"""``tool_error``: the tool raises; ``gpu_oom``: the tool raises ``torch.cuda.OutOfMemoryError``
when placed on a GPU (local backend: rerun on the CPU); ``slow``: the tool sleeps a few ms;
``hang``: the tool blocks until the harness's call timeout releases it with an error;
``bad_call``: the call names an unknown tool or gives invalid arguments."""

StepFault = Literal[
    "cancel",
    "scheduler_error",
    "invalid_decision",
    "llm_garbage",
    "llm_error",
    "llm_hang",
    "corrupt_stats",
    "scheduler_returns",
]
"""``cancel``: the async graph run is cancelled mid-step, then the step is retried;
``scheduler_error``: the scheduler raises; ``invalid_decision``: it answers options the hints
forbid or no option at all; ``llm_*``: the agentic scheduler's chat model answers garbage,
raises, or hangs past its timeout; ``corrupt_stats``: garbage is written to the monitor's stats
file and loaded (it must start cold); ``scheduler_returns``: a custom scheduler returns
malformed output (``None``, a dict, ``mapping=None``, a list as mapping, ``predicted_ms=None``)
while a callback handler is attached to the run, so decision metadata is built."""

ProbeFault = Literal[
    "bad_stats",
    "separator_names",
    "cross_loop",
    "reused_ids",
    "cancel_gpu_sync",
    "oom_cpu_slots",
    "llm_hang_flood",
    "llm_garbage_flood",
    "stats_writers",
    "timeout",
    "max_concurrency",
    "resident_models",
    "loader_error",
    "slow_load",
    "cancel_load",
    "close_during_call",
    "kept_no_room",
    "deadline_queue",
    "cut_calibration",
    "cross_gpu_get",
    "cap_beside_idle",
    "evictable_only_fit",
    "hostile_ids",
]
"""Scenario faults (`langgraph_devsched._dev.stress.probes`): each runs its own small node after a
step, in its own thread and event loop, bounded in time. They are drawn independently of each
other and of the step's own faults (several may run after one step)."""

FaultKind = Literal[CallFault, StepFault, ProbeFault]

CALL_FAULTS: tuple[CallFault, ...] = get_args(CallFault)
STEP_FAULTS: tuple[StepFault, ...] = get_args(StepFault)
PROBE_FAULTS: tuple[ProbeFault, ...] = get_args(ProbeFault)
FAULT_KINDS: tuple[str, ...] = (*CALL_FAULTS, *STEP_FAULTS, *PROBE_FAULTS)

DEFAULT_RATES: dict[str, float] = {
    "tool_error": 0.03,
    "gpu_oom": 0.08,  # raises only when placed on the (local) GPU
    "slow": 0.03,
    "hang": 0.025,
    "bad_call": 0.02,
    "cancel": 0.13,  # async steps only
    "scheduler_error": 0.12,
    "invalid_decision": 0.12,
    "llm_garbage": 0.12,
    "llm_error": 0.12,
    "llm_hang": 0.12,
    "corrupt_stats": 0.12,
    "scheduler_returns": 0.12,
    # scenario faults, per step, each drawn on its own
    "bad_stats": 0.12,
    "separator_names": 0.12,
    "cross_loop": 0.04,  # each probe: 3 loops running the same step, one injection each
    "reused_ids": 0.12,
    "cancel_gpu_sync": 0.12,  # local backend only: 2 cancellations each
    "oom_cpu_slots": 0.12,  # local backend only
    "llm_hang_flood": 0.015,  # each flood: more hanging consultations than executor threads
    "llm_garbage_flood": 0.03,  # each flood: 4 garbage answers of 300,000 characters
    "stats_writers": 0.12,
    "timeout": 0.12,
    "max_concurrency": 0.12,
    "resident_models": 0.12,
    # issue 23: model loads, close() and room for resident models, deadlines in the queue;
    # each runs on one of the two backends per probe: these rates inject each kind over 100
    # times on each backend in a 10,000-call run
    "loader_error": 0.12,  # each probe: a declared and an undeclared model whose load raises
    "slow_load": 0.12,  # each probe: a sync tool's and a to_thread load past the deadline
    "cancel_load": 0.12,  # each probe: 2 of the 3 ways to load, cancelled during the load
    "close_during_call": 0.24,  # each probe: close() while the call runs, and while it loads
    "kept_no_room": 0.24,
    "deadline_queue": 0.24,
    # several GPUs, hedges and idle calibration: a probe on both backends runs on one of
    # them per probe (0.24), a local one always locally (0.12): each over 100 times
    "cut_calibration": 0.24,  # each probe: a sync tool's idle run cut, on the GPU or the CPU
    "cross_gpu_get": 0.12,  # local: a get() for another GPU, then a call beside its weights
    "cap_beside_idle": 0.12,  # local: gpu_concurrency=1, the roomiest GPU busy
    "evictable_only_fit": 0.24,  # the only GPU that fits holds an idle model
    "hostile_ids": 0.24,  # call ids like a hedge's second run, Unicode, separators, long
}
"""Rates that inject every kind well over 100 times in a 10,000-call run (about 1,200 steps;
a flood counts each of its hanging or garbage consultations, a cancel_gpu_sync probe its two
cancellations, a loader_error, slow_load or cancel_load probe its two loads)."""


def parse_fault_rates(
    items: Iterable[str], base: Mapping[str, float] | None = None,
    kinds: Sequence[str] = FAULT_KINDS,
) -> dict[str, float]:
    """``KIND=P`` strings over ``base`` (default `DEFAULT_RATES`), each KIND one of ``kinds``;
    errors name the valid kinds."""
    rates = dict(DEFAULT_RATES if base is None else base)
    for item in items:
        kind, sep, value = item.partition("=")
        kind = kind.strip()
        if not sep:
            raise ValueError(f"--fault-rate {item!r}: expected KIND=P, e.g. hang=0.02")
        if kind not in kinds:
            raise ValueError(
                f"--fault-rate {item!r}: unknown fault kind {kind!r}; "
                f"valid kinds: {', '.join(kinds)}"
            )
        try:
            p = float(value)
        except ValueError:
            raise ValueError(f"--fault-rate {item!r}: {value!r} is not a number") from None
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"--fault-rate {item!r}: a rate is a probability in [0, 1]")
        rates[kind] = p
    return rates


class Tally:
    """Thread-safe counters by name (faults injected, answers, violations)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + n

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts.get(name, 0)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))


def as_call_fault(value: object) -> CallFault | None:
    """``value`` as a call fault, or None for anything else (e.g. ``"none"``)."""
    return cast(CallFault, value) if value in CALL_FAULTS else None
