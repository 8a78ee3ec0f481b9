"""A step report as text: the decision, then one line per call (option, device, times, VRAM).

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched._node.planning import StepReport
>>> from langgraph_devsched.records import CallRecord, StepRecord
>>> from langgraph_devsched.schedulers.base import Batch, Decision
>>> batch = Batch.of([("c1", "ocr", ToolDeviceSpec(vram_mb=900))])
>>> record = StepRecord((CallRecord("c1", "ocr", "gpu_now", "cuda:0", None, 0, 42.0, 900, 0),),
...                     42.0, 900)
>>> report = StepReport(batch, Decision({"c1": "gpu_now"}, reason="fits"), "monitor",
...                     record=record)
>>> print(format_step_report(report))  # doctest: +NORMALIZE_WHITESPACE
step: scheduler=monitor reason='fits'
  call  tool  option   device  start    end     vram  note
  c1    ocr   gpu_now  cuda:0  0.0ms    42.0ms   900
  makespan 42.0 ms | VRAM peak 900 MB
"""

from __future__ import annotations

import textwrap

from langgraph_devsched._node.planning import StepReport

WIDTH = 100
"""The report's first line (the decision's reason) wraps at this many columns."""


def format_step_report(report: StepReport, *, budget_mb: float | None = None) -> str:
    """The report of one step, as the demo prints it (``budget_mb``: shown beside the peak)."""
    decision = report.decision
    head = f"step: scheduler={decision.scheduler or report.scheduler} reason={decision.reason!r}"
    if decision.fallback:
        head += f" fallback={decision.fallback}"
    if decision.reused:
        head += " (reused)"
    head = "\n".join(textwrap.wrap(head, WIDTH, subsequent_indent="    ",
                                   break_on_hyphens=False)) or head
    record = report.record
    if record is None:
        return head + "\n  (still running)"
    rows = [
        (
            c.call_id,
            c.tool,
            c.option,
            c.device,
            f"{c.start_ms:.1f}ms",
            f"{c.end_ms:.1f}ms",
            f"{c.vram_reserved_mb:.0f}",
            "; ".join(
                x
                for x in (
                    f"fallback: {c.fallback}" if c.fallback else "",
                    f"error: {c.error}" if c.error else "",
                )
                if x
            ),
        )
        for c in record.calls
    ]
    header = ("call", "tool", "option", "device", "start", "end", "vram", "note")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {4, 5, 6}

    def line(cells: tuple[str, ...]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "  ".join(parts).rstrip()

    peak = f"VRAM peak {record.vram_peak_mb:.0f} MB"
    if budget_mb is not None:
        peak = f"VRAM peak {record.vram_peak_mb:.0f} of {budget_mb:.0f} MB"
    lines = [head, line(header), *(line(r) for r in rows)]
    lines.append(f"  makespan {record.makespan_ms:.1f} ms | {peak}")
    return "\n".join(lines)
