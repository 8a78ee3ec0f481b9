"""Decisions on LangGraph's custom stream: what a caller of ``graph.stream(...,
stream_mode="custom")`` sees of each step.

With ``DeviceToolNode(..., stream_decisions=True)`` (or the middleware's), two events per
step, each a dict written with the node's `StreamWriter` (the one
``langgraph.config.get_stream_writer()`` returns) once per step, however many `Send` tasks
share it (off by default: the custom stream then carries only what the tools write, as with
`ToolNode`):

* ``{"devsched": "decision", ...}`` when the step is decided, before any call starts:
  ``scheduler`` (``forced`` when the node decided alone), ``reason``, and per call
  ``id``, ``tool``, ``option``, ``gpu`` (the GPU index the decision named, or None) and
  ``predicted_ms`` (None when the scheduler gave none);
* ``{"devsched": "step", ...}`` when its calls have answered: ``makespan_ms``, and per call
  ``id``, ``tool``, ``option``, ``device`` (where it ran), ``fallback`` and ``ms``.

A stream that did not ask for ``custom`` gets nothing, and nothing is built for it.

>>> from langgraph_devsched._node.planning import StepReport
>>> from langgraph_devsched.schedulers.base import Batch, Decision
>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> report = StepReport(Batch.of([("c1", "ocr", ToolDeviceSpec())]),
...                     Decision({"c1": "gpu_queued"}, "hints", scheduler="static"), "static")
>>> decision_event(report)["calls"]
[{'id': 'c1', 'tool': 'ocr', 'option': 'gpu_queued', 'gpu': None, 'predicted_ms': None}]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph_devsched._node.planning import PlannedStep, StepReport

StreamWriter = Callable[[Any], None]


def _no_op_writer() -> object:
    """The writer a graph hands a node when its caller did not ask for ``custom`` (another
    LangGraph layout: None, and every writer is called)."""
    import langgraph.runtime

    return getattr(langgraph.runtime, "_no_op_stream_writer", None)


_NO_OP = _no_op_writer()


def decision_event(report: StepReport) -> dict[str, Any]:
    """The ``decision`` event of a decided step."""
    decision = report.decision
    return {
        "devsched": "decision",
        "scheduler": decision.scheduler or report.scheduler,
        "reason": decision.reason,
        "calls": [
            {"id": c.call_id, "tool": c.tool, "option": decision.mapping.get(c.call_id),
             "gpu": decision.gpus.get(c.call_id),
             "predicted_ms": decision.predicted_ms.get(c.call_id)}
            for c in report.batch.calls
        ],
    }


def step_event(report: StepReport) -> dict[str, Any] | None:
    """The ``step`` event of a closed step (None while it runs)."""
    record = report.record
    if record is None:
        return None
    return {
        "devsched": "step",
        "makespan_ms": record.makespan_ms,
        "calls": [
            {"id": c.call_id, "tool": c.tool, "option": c.option, "device": c.device,
             "fallback": c.fallback, "ms": c.end_ms - c.start_ms}
            for c in record.calls
        ],
    }


def stream_step(step: PlannedStep | None, writer: StreamWriter | None) -> None:
    """Write ``step``'s events not written yet (its decision; its outcome once closed)."""
    if step is None or writer is None or writer is _NO_OP:
        return
    if not step.streamed_decision:
        step.streamed_decision = True
        writer(decision_event(step.report))
    if not step.streamed_outcome and (event := step_event(step.report)) is not None:
        step.streamed_outcome = True
        writer(event)
