"""What the stress harness checks after every step, and the counts it keeps.

`Checker.check_answers`: one answer per call, carrying its id and its own output (or the
error its fault calls for); `check_reports`: one `StepReport` per step (two for a cancelled
step that was closed by the cancellation, then retried), applied options within the hints,
the simulated ledger within budget and at zero, the step fault's expected fallback;
`check_ledger_at_rest`: the local `VramLedger` back at zero; `step_failed`: a step whose
graph run raised or overran its time limit (its calls count as lost).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage

from langgraph_devsched._dev.stress.faults import Tally
from langgraph_devsched._dev.stress.report import LedgerFigures
from langgraph_devsched._dev.stress.schedulers import LLM_FAULTS, FaultyScheduler, invalid_applied
from langgraph_devsched._dev.stress.tools import TOOL_HINTS, VRAM_BUDGET_MB
from langgraph_devsched.ledger import VramLedger
from langgraph_devsched.node import DeviceToolNode, StepReport


def _shape(text: str) -> str:
    """A violation's message with call ids, payloads and numbers blanked out.

    >>> _shape("call s12c3 (asr, fault hang): unexpected answer 'asr:s12c3@cpu' after 0.52 s")
    "call # (asr, fault hang): unexpected answer 'asr:#@cpu' after # s"
    """
    return re.sub(r"\d+(\.\d+)?|\b[a-z]*\d+[a-z\d]*\b", "#", text)[:80]


@dataclass
class Lane:
    """One node and what the harness watches on it."""

    name: str
    node: DeviceToolNode
    graph: Any
    scheduler: FaultyScheduler
    ledger: VramLedger | None
    figures: LedgerFigures
    reports: list[StepReport] = field(default_factory=list)
    more_ledgers: tuple[VramLedger, ...] = ()
    """The ledgers of GPUs 1, 2, ... of a local lane with several GPUs."""
    gpus: int = 1
    """GPUs of the lane's machine (several: the calls per device are counted)."""
    more_figures: list[LedgerFigures] = field(default_factory=list)
    """The figures of GPUs 1, 2, ... (``figures`` is GPU 0's), each against its own budget."""

    def all_figures(self) -> list[LedgerFigures]:
        """One `LedgerFigures` per GPU, index order."""
        return [self.figures, *self.more_figures]


class Checker:
    """Checks steps and counts: faults injected, outcomes, violations (with examples).

    ``fired`` maps a call's payload (its id) to the fault that actually fired in it.
    """

    def __init__(
        self, fired: Mapping[str, str], *, node_timeout: bool = False,
        node_deadline_s: float = 0.0,
    ) -> None:
        self.fired = fired
        self.node_timeout = node_timeout
        """True when the node's own ``call_timeout_s`` answers hanging calls."""
        self.node_deadline_s = node_deadline_s
        """That ``call_timeout_s``: no call may be recorded timed out before it."""
        self.faults = Tally()
        self.counts = Tally()
        self.violations = 0
        self.violation_examples: list[str] = []
        self.violations_by_kind = Tally()
        self._shapes = Tally()
        self.calls = self.answered = self.lost = self.duplicated = self.stray = 0
        self.error_answers = 0

    def violation(self, text: str, kind: str = "invariant") -> None:
        """Count one violation under ``kind`` (a fault kind, or "invariant"); the first
        examples of each kind are kept (20 invariants, 3 per fault kind, 60 in all), and the
        first of each new shape of message (ids and numbers aside) past that."""
        self.violations += 1
        self.violations_by_kind.add(kind)
        cap = 20 if kind == "invariant" else 3
        shape = f"{kind}:{_shape(text)}"  # a new kind of failure is kept even past the cap
        self._shapes.add(shape)
        new_shape = self._shapes.get(shape) == 1
        if len(self.violation_examples) < 60 and (
            self.violations_by_kind.get(kind) <= cap or new_shape
        ):
            self.violation_examples.append(text)

    def check_answers(
        self, calls: list[dict[str, Any]], planned: dict[str, str], messages: list[Any],
        *, lane: str = "",
    ) -> None:
        self.calls += len(calls)
        # a hanging sync call keeps its thread, its CPU slot or VRAM past its deadline: the
        # step's other calls may wait for that device until their own deadline (the node's
        # call_timeout_s covers the wait for a device, issue 23)
        behind_hang = self.node_timeout and any(
            self.fired.get(cid) == "hang" for cid in planned)
        by_id: dict[str, list[ToolMessage]] = {}
        for m in messages:
            if not isinstance(m, ToolMessage):
                self.violation(f"unexpected output message {type(m).__name__}")
                continue
            if m.tool_call_id not in planned:
                self.stray += 1
                self.violation(f"answer for unknown id {m.tool_call_id!r}")
                continue
            by_id.setdefault(m.tool_call_id, []).append(m)
        for call in calls:
            cid = call["id"]
            got = by_id.get(cid, [])
            if not got:
                self.lost += 1
                self.violation(f"call {cid} ({call['name']}, {planned[cid]}) got no answer")
                continue
            self.answered += 1
            self.duplicated += len(got) - 1
            if len(got) > 1:
                self.violation(f"call {cid} got {len(got)} answers")
            self.check_content(call, planned[cid], got[0], lane, behind_hang=behind_hang)

    def step_failed(
        self, calls: list[dict[str, Any]], what: str, *, lane: str = "", kind: str = "invariant"
    ) -> None:
        """A step's run raised (or timed out): a violation, and its calls are lost."""
        self.calls += len(calls)
        self.lost += len(calls)
        self.counts.add(f"steps_failed:{lane}")
        self.violation(what, kind)

    def check_content(
        self, call: dict[str, Any], fault: str, m: ToolMessage, lane: str = "",
        *, behind_hang: bool = False,
    ) -> None:
        text = str(m.content)
        error = m.status == "error"
        self.error_answers += error
        cid, tool = call["id"], call["name"]
        fired = "bad_call" if fault == "bad_call" else self.fired.get(cid)
        gpu_only = not TOOL_HINTS.get(tool, {}).get("cpu_allowed", True)
        # its deadline ended it before its own fault fired (it waited for a device that a
        # hanging call's thread or a stalled machine still held): the node's call_timeout_s
        # covers the wait for a device (issue 23); check_report sees it did not fire early
        waited = (
            self.node_timeout and error and fired in (None, "slow") and "timed out after" in text
        )
        ok: bool
        if fired == "bad_call":
            ok = error
        elif fired == "tool_error":
            ok = error and "injected tool error" in text
            # as for a hang: the fault fired in a cancelled step, whose retry found no room
            ok = ok or (error and gpu_only and "cannot run" in text)
        elif fired == "hang":
            ok = error and ("timed out" if self.node_timeout else "did not answer within") in text
            # a cancelled step's retry may find no room for a GPU-only tool that hung before
            ok = ok or (error and gpu_only and "cannot run" in text)
        elif fired == "gpu_oom":
            if gpu_only:
                ok = error and "out of gpu memory" in text.lower()
                # as for a hang: it fired in a cancelled step, whose retry found no room
                ok = ok or (error and "cannot run" in text)
            else:
                ok = not error and text == f"{tool}:{cid}@cpu"
        elif error and not waited:
            # only a GPU-only tool may fail to be placed (its VRAM does not fit, no CPU)
            ok = gpu_only and "cannot run" in text
            self.counts.add("placement_errors")
        elif error:
            ok = False  # counted below
        else:
            ok = text.startswith(f"{tool}:{cid}@")
            if gpu_only and text.endswith("@cpu"):
                # the simulated testbed reruns an OOM on the CPU whatever the hints say
                self.counts.add(f"cpu_forbidden_ran_on_cpu:{lane}")
        if not ok and waited:
            ok = True
            self.counts.add("timed_out_behind_a_hang" if behind_hang else "timed_out_waiting")
        if fired is not None and fired == fault:
            self.faults.add(fault)
            if ok:
                self.counts.add(f"handled:{fault}")
        if not ok:
            self.violation(
                f"{lane + ' ' if lane else ''}call {cid} ({tool}, fault {fault}): "
                f"unexpected answer {text[:160]!r}",
                fault if fault in self.fired.values() or fault == "bad_call" else "invariant",
            )

    def check_reports(
        self, lane: Lane, reports: list[StepReport], *, batch: bool, cancelled: bool
    ) -> None:
        """The step's report(s): a cancelled step whose calls had all started is closed
        (and reported) by the cancellation; its retry is planned and reported afresh."""
        if len(reports) > (2 if cancelled else 1):
            self.violation(f"{len(reports)} step reports for one step")
        if not reports:
            if batch:
                self.violation(
                    f"{lane.name} step never closed (no StepReport); fault {lane.scheduler.fired}"
                )
            return
        if cancelled and len(reports) == 2:
            self.counts.add("cancelled_steps_reported")
        for report in reports:
            # a report closed by the cancellation records its running calls as cancelled
            closed_by_cancel = cancelled and report is not reports[-1]
            self.check_report(lane, report, closed_by_cancel=closed_by_cancel)
        self.check_step_fault(lane, reports[-1])

    def check_report(
        self, lane: Lane, report: StepReport, *, closed_by_cancel: bool = False
    ) -> None:
        bad = invalid_applied(report.batch, report.decision)
        if bad:
            self.violation(f"applied options outside the hints: {bad}")
        for cause in report.fallbacks.values():
            self.counts.add(f"fallback:{cause}")
        record = report.record
        if record is not None:
            for rec in record.calls:
                if rec.fallback is not None:
                    self.counts.add(f"fallback:{rec.fallback}")
                if getattr(lane, "gpus", 1) > 1:  # a harness lane may be a bare namespace
                    self.counts.add(f"device:{lane.name}:{rec.device}")
                error = rec.error or ""
                timed_out = error.startswith("timeout") or rec.device == "none"  # or unplaced
                if closed_by_cancel and error == "cancelled":
                    timed_out = True
                if self.node_timeout and self.fired.get(rec.call_id) == "hang" and not timed_out:
                    self.violation(
                        f"hang {rec.call_id}: its CallRecord error is {rec.error!r}", "hang"
                    )
                # its clock starts at admission (the simulated lane records virtual times)
                early = self.node_deadline_s * 1000.0 * 0.95
                if lane.ledger is not None and error.startswith("timeout") and rec.end_ms < early:
                    self.violation(
                        f"call {rec.call_id} timed out after {rec.end_ms:.0f} ms, before its "
                        f"{self.node_deadline_s:g} s deadline"
                    )
            if lane.ledger is None:
                lane.figures.peak_mb = max(lane.figures.peak_mb, record.vram_peak_mb)
                end = float(record.extra.get("vram_end_mb", 0.0))  # type: ignore[arg-type]
                lane.figures.end_mb = end
                if record.vram_peak_mb > VRAM_BUDGET_MB + 1e-6 or abs(end) > 1e-6:
                    self.violation(f"simulated ledger: peak {record.vram_peak_mb}, end {end}")
                per_gpu: list[dict[str, float]] = record.extra.get("gpus", [])  # type: ignore[assignment]
                for i, gpu in enumerate(per_gpu):
                    peak, budget = gpu["vram_peak_mb"], gpu["vram_budget_mb"]
                    if i < len(lane.all_figures()):
                        fig = lane.all_figures()[i]
                        fig.peak_mb, fig.end_mb = max(fig.peak_mb, peak), gpu["vram_end_mb"]
                    if peak > budget + 1e-6 or abs(gpu["vram_end_mb"]) > 1e-6:
                        self.violation(f"simulated ledger of cuda:{i}: peak {peak} of {budget}, "
                                       f"end {gpu['vram_end_mb']}")

    def check_step_fault(self, lane: Lane, report: StepReport) -> None:
        fired = lane.scheduler.fired
        if fired is None:
            return
        decision, causes = report.decision, set(report.fallbacks.values())
        agentic = lane.scheduler.agentic
        if fired in LLM_FAULTS:
            for cause in agentic.last_fallbacks.values():
                self.counts.add(f"agentic:{cause}")
        checks: dict[str, Callable[[], bool]] = {
            "scheduler_error": lambda: causes == {"scheduler_error"}
            and len(report.fallbacks) == len(report.batch),
            "invalid_decision": lambda: "invalid_decision" in causes,
            "llm_error": lambda: decision.fallback == "scheduler_error"
            and set(agentic.last_fallbacks.values()) == {"llm_error"},
            "llm_hang": lambda: decision.fallback == "scheduler_error"
            and set(agentic.last_fallbacks.values()) == {"timeout"},
            "llm_garbage": lambda: decision.fallback is not None,
            "scheduler_returns": lambda: self._fell_back_whole(lane, report),
        }
        check = checks.get(fired)
        if check is None:
            return
        if check():
            self.counts.add(f"handled:{fired}")
        else:
            self.violation(
                f"{fired}: unexpected decision fallback={decision.fallback} causes={causes} "
                f"agentic={agentic.last_fallbacks}",
                fired,
            )

    @staticmethod
    def _fell_back_whole(lane: Lane, report: StepReport) -> bool:
        """A malformed scheduler answer: every call falls back (``scheduler_error`` or
        ``invalid_decision``); ``predicted_ms=None`` beside a valid mapping may also pass."""
        causes = set(report.fallbacks.values())
        if not causes <= {"scheduler_error", "invalid_decision"}:
            return False
        if lane.scheduler.returned == "predicted_none":
            return True
        return len(report.fallbacks) == len(report.batch)

    def ledger_zero(self, lane: Lane) -> bool:
        return all(ledger is None or (
            abs(ledger.in_use_mb) <= 1e-6 and ledger.active == 0 and ledger.queued == 0
        ) for ledger in (lane.ledger, *lane.more_ledgers))

    def check_ledger_at_rest(self, lane: Lane, when: str) -> bool:
        ledger = lane.ledger
        if ledger is None:
            return True
        for f, gpu in zip(lane.all_figures(), (ledger, *lane.more_ledgers), strict=False):
            f.peak_mb, f.end_mb = gpu.peak_mb, gpu.in_use_mb  # each GPU against its own budget
            f.end_active, f.end_queued = gpu.active, gpu.queued
        if not self.ledger_zero(lane):
            for i, gpu in enumerate((ledger, *lane.more_ledgers)):
                if abs(gpu.in_use_mb) <= 1e-6 and gpu.active == 0 and gpu.queued == 0:
                    continue
                self.violation(
                    f"local ledger{f' of cuda:{i}' if i else ''} not at rest {when}: "
                    f"{gpu.in_use_mb} MB, {gpu.active} active, {gpu.queued} queued"
                )
            return False
        return True

