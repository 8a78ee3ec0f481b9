"""Bounded exploration: a deviation from the policy is a probe, priced beforehand, capped per shape.

A model's answer that is not the classical policy's mapping is a deviation. Where its mapping
never ran (an exploration), it runs once as a probe: its cost is predicted beforehand (the
twin's prediction against the policy's mapping, or both measurements), and it runs only while
the shape's budget covers it (`ExplorationLedger.check`), and only while the budget is
positive: a predicted win is still a prediction. One that nothing can price (no twin, no
measurement: several GPUs, a tool without a profile) runs while the shape has not lost,
``max_probes`` at most. The budget of a shape is
``allowance_ms`` plus what its judged deviations won (negative when they lost), less what the
deviations still running were predicted to cost; at most ``max_probes`` explorations per shape.
An adversarial model therefore cannot spend what the sub-agent has not won: exploration is
funded by deviations that measured faster than the policy's mapping (or by an operator's
allowance), and once a probe lost, the shape's exploration ends until a deviation wins it
back. A measured deviation (its mapping ran) whose measurement is worse than the policy's
measured mapping is priced the same way, and so is a tie (cost 0): unfunded, only a
predicted win runs. The scheduler prices a win only where every piece of evidence sees it,
beyond one run's noise and 2 % of the policy's makespan (`AgenticScheduler._price`); judged
exactly, the ties and the smaller wins it ran before lost a few ms each.

What measurement refuted (the mapping ran slower than the fastest measured mapping of its shape
by more than the noise, `guard.measured_guard`) is vetoed outright; that veto ends when the
monitor's measurements of the shape change (a new warm mean, a device state that measures
differently).

Every veto is a `Veto` with both figures, in the decision's reason and record. A veto is the
guard doing its job, not a failed consultation: the model answered, the policy's mapping runs.

>>> ledger = ExplorationLedger(allowance_ms=0.0, max_probes=2)
>>> ledger.check(("asr", "ocr"), 120.0, explores=True).text()
'budget: exploration unfunded, predicted cost 120.0 ms against 0.0 ms of budget left for this shape'
>>> ledger.check(("asr", "ocr"), -15.0, explores=True).kind   # predicted to win: unfunded
'budget'
>>> ledger.check(("asr", "ocr"), -15.0, explores=False) is None   # measured to win
True
>>> ledger.check(("asr", "ocr"), 0.0, explores=False).kind   # a tie: unfunded
'budget'
>>> ledger.started(("asr", "ocr"), -15.0, explores=False)
>>> ledger.settled(("asr", "ocr"), -15.0, won_ms=30.0)
>>> ledger.check(("asr", "ocr"), 20.0, explores=True) is None   # funded by that win
True
>>> ledger.started(("asr", "ocr"), 20.0)
>>> ledger.budget_ms(("asr", "ocr"))
10.0
>>> ledger.settled(("asr", "ocr"), 20.0, won_ms=-45.0)
>>> ledger.budget_ms(("asr", "ocr")), ledger.check(("asr", "ocr"), -5.0, explores=True).kind
(-15.0, 'budget')
"""

from __future__ import annotations

from dataclasses import dataclass

from langgraph_devsched.schedulers.lru import LruTable

MAX_SHAPES = 1024
"""Shapes whose exploration the ledger keeps (least recently used dropped)."""


@dataclass(frozen=True)
class Veto:
    """Why the guard vetoed an answer, with both figures: ``refuted`` (its measured ms
    against the fastest measured mapping's), ``budget`` (its predicted cost against the
    shape's exploration budget left) or ``twin`` (the twin's prediction for it against the
    guard's limit, ``guard_ratio`` times the best mapping the twin knows). The text starts
    with the kind."""

    kind: str
    answer_ms: float
    limit_ms: float

    def text(self) -> str:
        if self.kind == "refuted":
            return (f"refuted: the answer's mapping measured {self.answer_ms:.1f} ms vs "
                    f"{self.limit_ms:.1f} ms for the fastest measured mapping of this shape")
        if self.kind == "twin":
            return (f"twin: predicts {self.answer_ms:.1f} ms for the answer, over the guard's "
                    f"limit of {self.limit_ms:.1f} ms")
        return (f"budget: exploration unfunded, predicted cost {self.answer_ms:.1f} ms against "
                f"{self.limit_ms:.1f} ms of budget left for this shape")


@dataclass
class _Shape:
    won_ms: float = 0.0
    pending_ms: float = 0.0
    probes: int = 0


class ExplorationLedger:
    """Per shape, what deviations won or lost, and the explorations run and running."""

    def __init__(self, *, allowance_ms: float = 0.0, max_probes: int = 2,
                 max_shapes: int = MAX_SHAPES) -> None:
        if allowance_ms < 0 or max_probes < 0:
            raise ValueError(
                f"allowance_ms and max_probes must be >= 0, got {allowance_ms}, {max_probes}")
        self.allowance_ms = allowance_ms
        self.max_probes = max_probes
        self._shapes: LruTable[tuple[str, ...], _Shape] = LruTable(max_shapes)

    def _of(self, shape: tuple[str, ...]) -> _Shape:
        return self._shapes.setdefault_with(tuple(sorted(shape)), _Shape)

    def budget_ms(self, shape: tuple[str, ...]) -> float:
        """What the shape may still spend on deviations predicted to cost."""
        s = self._of(shape)
        return self.allowance_ms + s.won_ms - s.pending_ms

    def probes(self, shape: tuple[str, ...]) -> int:
        return self._of(shape).probes

    def left_ms(self, shape: tuple[str, ...]) -> float:
        """What a probe of an unmeasured mapping of ``shape`` may still cost (0: none runs,
        `check` vetoes every exploration): the budget, while probes are left."""
        if self._of(shape).probes >= self.max_probes:
            return 0.0
        return max(0.0, self.budget_ms(shape))

    def check(self, shape: tuple[str, ...], cost_ms: float | None, *,
              explores: bool) -> Veto | None:
        """The veto on a deviation predicted to cost ``cost_ms`` (<= 0: predicted to win;
        None: nothing can predict it, no twin and no measurement); ``explores``: its mapping
        never ran. None: it may run. An unpriced exploration runs while the shape has not
        lost (its probes counted); a priced one only where funded."""
        budget = self.budget_ms(shape)
        if explores and self._of(shape).probes >= self.max_probes:
            return Veto("budget", max(cost_ms or 0.0, 0.0), min(budget, 0.0))
        if cost_ms is None:
            return Veto("budget", 0.0, budget) if budget < -1e-9 else None
        if cost_ms > 0 and cost_ms > budget + 1e-9:
            return Veto("budget", cost_ms, budget)
        if cost_ms >= 0 and budget <= 1e-9:
            return Veto("budget", cost_ms, budget)  # no win predicted, nothing funds a tie
        if explores and budget <= 1e-9:
            # unfunded: a predicted win is a prediction (the twin once predicted 37 ms won
            # where the probe lost 71 ms); what measurement has not paid for does not run
            return Veto("budget", cost_ms, budget)
        return None

    def started(self, shape: tuple[str, ...], cost_ms: float | None, *,
                explores: bool = True) -> None:
        """A deviation predicted to cost ``cost_ms`` runs: held against the budget until it
        is settled."""
        s = self._of(shape)
        s.pending_ms += max(cost_ms or 0.0, 0.0)
        if explores:
            s.probes += 1

    def settled(self, shape: tuple[str, ...], cost_ms: float | None, *,
                won_ms: float | None) -> None:
        """The deviation ran: its prediction released, what it won (or lost) kept."""
        s = self._of(shape)
        s.pending_ms = max(0.0, s.pending_ms - max(cost_ms or 0.0, 0.0))
        if won_ms is not None:
            s.won_ms += won_ms
