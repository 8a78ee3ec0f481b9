"""Hedged calls: one call of a side-effect-free tool run on both sides, answered once.

A `Decision` may name, for a call of a tool whose hints say ``idempotent: true``, a second
option (``Decision.hedges``). Both runs start; the call is answered by the first that ends
without an error (the other's result is dropped, its failure never answers), and the other,
the *loser*, is cancelled at its bound: ``bound`` times the winner's run time (its model's
load apart) from the loser's own start (after its own load), never before the winner ends. A
loser that ends inside its bound is a complete measurement of its side; one cancelled there
is *censored*: its side takes at least that long. What the loser held (its device time, its
VRAM until it stopped) is the hedge's cost: the step lasts until the loser stopped.

`settle` turns the record of a step that ran every hedged call twice (the second run under
`hedge_id`) into the record of the step as the app sees it: one record per call, the
outcomes of the hedges in ``extra["hedges"]``.

>>> from langgraph_devsched.records import CallRecord, StepRecord
>>> gpu = CallRecord("c1", "fft", "gpu_now", "cuda:0", None, 0.0, 45.0, 300.0, 0)
>>> cpu = CallRecord(hedge_id("c1"), "fft", "cpu", "cpu", None, 0.0, 28.0, 0.0, 0)
>>> step = settle(StepRecord((gpu, cpu), 45.0), {"c1": "cpu"}, bound=2.0)
>>> [(c.call_id, c.option, c.end_ms) for c in step.calls], step.makespan_ms
([('c1', 'cpu', 28.0)], 45.0)
>>> h = step.extra["hedges"][0]
>>> h.loser.option, h.complete, h.bound_ms
('gpu_now', True, 56.0)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.options import DeviceOption, is_gpu
from langgraph_devsched.records import CallRecord, StepRecord

HEDGE_SUFFIX = "~hedge"
"""The second run of a hedged call carries the call's id with this suffix."""
HEDGE_BOUND = 1.5
"""Default bound: the loser may run up to this many times the winner's run time."""
HEDGES_KEY = "hedges"
"""Where `settle` puts the hedges' outcomes in ``StepRecord.extra``."""


def hedge_id(call_id: str) -> str:
    """The id of a hedged call's second run."""
    return f"{call_id}{HEDGE_SUFFIX}"


def hedge_ids(call_ids: Iterable[str], hedged: Iterable[str]) -> dict[str, str]:
    """The id of each hedged call's second run: `hedge_id`, unless a call of the step (or
    another second run) has it already (ids come from the model: any string may arrive);
    then with a number added.

    >>> hedge_ids(["a", "a~hedge"], ["a"])
    {'a': 'a~hedge~2'}
    """
    taken = set(call_ids)
    out: dict[str, str] = {}
    for cid in hedged:
        second, n = hedge_id(cid), 1
        while second in taken:  # at most len(taken) tries
            n += 1
            second = f"{hedge_id(cid)}~{n}"
        taken.add(second)
        out[cid] = second
    return out


@dataclass(frozen=True)
class HedgeOutcome:
    """How one hedged call's two runs ended."""

    call_id: str
    tool: str
    winner: CallRecord | None
    """The run that answered (under the call's own id); None for a run of its own (an
    idle-time calibration, which answers nothing)."""
    loser: CallRecord
    """The other run (its own id), its end clipped where it was cancelled."""
    complete: bool
    """The loser ended inside its bound: a complete measurement of its side."""
    bound_ms: float
    """The loser's bound on its run time (``bound`` times the winner's run time)."""

    @property
    def censored(self) -> bool:
        """The loser was cancelled at its bound (or failed): its side takes at least
        ``loser.run_ms``, nothing more is known."""
        return not self.complete

    @property
    def own_ms(self) -> float:
        """The loser's own time (its load apart): complete, or the censored lower bound."""
        return max(0.0, self.loser.run_ms - self.loser.load_ms)

    @property
    def loser_device_ms(self) -> float:
        """How long the loser held its device: the hedge's extra device time."""
        return max(0.0, self.loser.run_ms)


def check_hedges(
    hedges: Mapping[str, DeviceOption], mapping: Mapping[str, DeviceOption],
    *, scheduler: str = "scheduler",
) -> None:
    """`ValueError` when a hedge names a call the mapping lacks or repeats its option."""
    for cid, option in hedges.items():
        if cid not in mapping:
            raise ValueError(f"{scheduler} hedged call {cid!r}, which is not in its mapping; "
                             f"calls: {', '.join(map(repr, mapping))}")
        if option == mapping[cid]:
            raise ValueError(f"{scheduler} hedged call {cid!r} on its own option {option!r}; "
                             "a hedge runs the call on another option")


def hedged_calls(
    calls: Sequence[tuple[str, str, DeviceOption]], hedges: Mapping[str, DeviceOption]
) -> list[tuple[str, str, DeviceOption]]:
    """The step's calls followed by the hedged ones' second runs (under `hedge_id`)."""
    extra = [(hedge_id(cid), tool, hedges[cid]) for cid, tool, _ in calls if cid in hedges]
    return [*calls, *extra]


def settle(
    record: StepRecord, hedges: Mapping[str, DeviceOption], *, bound: float = HEDGE_BOUND,
    seconds: Mapping[str, str] | None = None,
) -> StepRecord:
    """The step as answered: each hedged call's winner under its own id, the losers cut at
    their bound, the makespan up to the last loser's stop; ``extra["hedges"]``: the
    outcomes (`HedgeOutcome`). ``seconds``: each hedged call's second run id (`hedge_ids`;
    default `hedge_id`). A record without hedges is returned as it is."""
    if not hedges:
        return record
    if bound < 1.0:
        raise ValueError(f"hedge bound must be >= 1 (a multiple of the winner's time), "
                         f"got {bound}")
    runs = record.by_id()
    answered: list[CallRecord] = []
    outcomes: list[HedgeOutcome] = []
    stops = []
    second_of = dict(seconds) if seconds is not None else {c: hedge_id(c) for c in hedges}
    second_ids = {second_of[cid] for cid in hedges if cid in second_of}
    for rec in record.calls:
        if rec.call_id in second_ids:  # a second run (a call's own id may end like one too)
            continue
        second = runs.get(second_of.get(rec.call_id, ""))
        if rec.call_id not in hedges or second is None:
            answered.append(rec)
            continue
        first_wins = (rec.error is not None, rec.end_ms) <= (second.error is not None,
                                                             second.end_ms)
        winner, loser = (rec, second) if first_wins else (second, rec)
        cap = bound * max(0.0, winner.run_ms - winner.load_ms)  # the tool's own time
        if loser.start_ms >= winner.end_ms:  # never started before the answer came
            stop, complete = winner.end_ms, False
        else:
            stop = max(winner.end_ms, loser.start_ms + loser.load_ms + cap)
            complete = loser.error is None and loser.end_ms <= stop
            stop = min(stop, loser.end_ms)
        clipped = dataclasses.replace(
            loser, call_id=loser.call_id if loser is second else second_of[rec.call_id],
            start_ms=min(loser.start_ms, stop), end_ms=stop)
        answered.append(dataclasses.replace(winner, call_id=rec.call_id))
        outcomes.append(HedgeOutcome(rec.call_id, rec.tool, answered[-1], clipped, complete,
                                     cap))
        stops.append(stop)
    span = max([c.end_ms for c in answered] + stops, default=0.0)
    extra = dict(record.extra)
    extra[HEDGES_KEY] = tuple(outcomes)
    return StepRecord(tuple(answered), span, record.vram_peak_mb, extra)


def hedge_outcomes(record: StepRecord) -> tuple[HedgeOutcome, ...]:
    """The hedges' outcomes `settle` left in ``record`` (none for a step without hedges)."""
    found = record.extra.get(HEDGES_KEY, ())
    return tuple(found) if isinstance(found, tuple) else ()


def checked_hedges(
    raw: object, specs: Mapping[str, ToolDeviceSpec], mapping: Mapping[str, DeviceOption],
    *, gpu: bool,
) -> dict[str, DeviceOption]:
    """The hedges of a scheduler's answer that may run: a call of the step (``specs``: its
    hints per call id) whose tool is side-effect free (``idempotent``), on an option its
    hints allow, on the other side than its mapped option (a GPU one only with a GPU).
    Anything else is dropped: a hedge is an offer, never a reason to run a call twice."""
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, DeviceOption] = {}
    for cid, option in raw.items():
        spec = specs.get(cid) if isinstance(cid, str) else None
        if spec is None or not spec.idempotent or cid not in mapping:
            continue
        if not isinstance(option, str) or option not in spec.allowed_options():
            continue
        if is_gpu(option) == is_gpu(mapping[cid]) or (is_gpu(option) and not gpu):
            continue
        out[cid] = option
    return out
