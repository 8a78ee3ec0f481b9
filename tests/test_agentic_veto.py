"""A vetoed answer is the guard doing its job, not a failed consultation.

The model answered; the guard vetoed its mapping on the evidence (here an exploration the
shape's budget does not fund) and the policy's mapping ran. The step is recorded as a veto,
with its kind and both figures, never as ``scheduler_error`` nor as a fallback of the
consultation.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tracers.context import collect_runs
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

from langgraph_devsched import DeviceToolNode, SimulatedTestbed
from langgraph_devsched.bench.agentic_stats import format_agentic, summarize
from langgraph_devsched.decision_trace import DECIDE_RUN
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
from tests.agentic_fakes import ToolScriptModel
from tests.fakes import PARAMS, TOOLS, ScriptedChatModel
from tests.test_agentic import ByTool

PROFILED_HINTS = {
    tool: {"vram_mb": p.vram_mb, "profile": {"cpu_ms": p.cpu_ms, "gpu_ms": p.gpu_ms}}
    for tool, p in PARAMS.items()
}
ALL_CPU = {"asr": "cpu", "ocr": "cpu", "embed": "cpu"}


class Kept(AgenticScheduler):
    """Keeps each decision as it answered it (the node's report holds the checked copy)."""

    decided: list[Decision]

    def decide(self, batch: Batch, view: SchedulerView, *,
               config: RunnableConfig | None = None) -> Decision:
        decision = super().decide(batch, view, config=config)
        self.__dict__.setdefault("decided", []).append(decision)
        return decision


def _one_step(scheduler: AgenticScheduler) -> DeviceToolNode:
    """A graph whose agent asks for one step (asr and ocr) and then stops, run once."""
    outer = ScriptedChatModel(script=[
        AIMessage("", id="o1", tool_calls=[{"name": "asr", "args": {"text": "a"}, "id": "s1a"},
                                           {"name": "ocr", "args": {"text": "b"}, "id": "s1b"}]),
        AIMessage("done", id="o2"),
    ])
    node = DeviceToolNode(TOOLS, hints=PROFILED_HINTS, scheduler=scheduler,
                          testbed=SimulatedTestbed(PARAMS, vram_budget_mb=8000))
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda s: {"messages": [outer.invoke(s["messages"])]})
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "agent")
    builder.compile().invoke({"messages": [HumanMessage("go")]})
    return node


def test_an_unfunded_exploration_is_a_veto_with_its_evidence_not_a_failure() -> None:
    """Pick mode: the model picks the twin's best (asr and ocr on the GPU, predicted about
    700 ms faster than the policy's all-CPU mapping). It never ran and nothing funds an
    exploration (no allowance, nothing won yet): the guard vetoes it and the policy's
    mapping runs. Before this change the step was ``scheduler_error`` ("agentic consultation
    failed (guarded: ...)"), the answer counted as a whole-step fallback."""
    model = ToolScriptModel(script=[AIMessage('{"pick": 2}', id="p")])
    scheduler = Kept(model, mode="pick", fallback=ByTool(ALL_CPU))
    with collect_runs() as cb:
        node = _one_step(scheduler)
    [report] = node.history
    [decision] = scheduler.decided
    record = decision.consultation
    assert model.received and record.pick == 2  # asked, and it answered

    # the policy's mapping ran, and nothing fell back
    assert dict(report.decision.mapping) == {"s1a": "cpu", "s1b": "cpu"}
    assert report.decision.fallback is None and decision.fallback is None
    assert report.fallbacks == {} and {c.fallback for c in report.record.calls} == {None}
    assert scheduler.last_fallbacks == {"s1a": "vetoed", "s1b": "vetoed"}

    # recorded as a veto, with its kind and both figures (what the guard saw)
    veto = record.veto
    assert veto is not None and veto.kind == "budget"
    assert veto.answer_ms < -100.0 and veto.limit_ms == 0.0  # a predicted win, 0 ms funded
    assert record.cause is None and record.answered and not record.valid  # answered, not used
    assert report.decision.veto == veto.text() == (
        f"budget: exploration unfunded, predicted cost {veto.answer_ms:.1f} ms against 0.0 ms "
        "of budget left for this shape")
    assert "vetoed" in report.decision.reason and "failed" not in report.decision.reason
    assert veto.text() in report.decision.reason

    # the decision's traced run carries the veto as its own field
    [run] = [r for r in cb.traced_runs if r.name == DECIDE_RUN]
    assert run.outputs is not None and run.outputs["fallback"] is None
    assert run.outputs["veto"] == veto.text()

    # the bench's agentic summary: a veto, answered, no fallback
    summary = summarize([decision])
    assert summary is not None
    assert (summary.consultations, summary.answered, summary.valid_answers) == (1, 1, 0)
    assert summary.fallbacks == {} and summary.vetoes == {"budget": 1}
    assert "fallbacks none" in format_agentic("agentic", summary)


def test_a_veto_is_cached_like_a_failure_and_reused_as_a_veto() -> None:
    """The same situation again: the policy's mapping answers without asking (for
    ``retry_failed_after`` steps), the reuse says the earlier answer was vetoed and why, and
    the summary counts the one veto of the one consultation."""
    from tests.test_agentic_channels import PROFILED, PROFILED_VIEW

    model = ToolScriptModel(script=[AIMessage('{"c1": "cpu", "c2": "gpu_now"}')])
    scheduler = AgenticScheduler(model, guard_ratio=100.0, screen=False,
                                 fallback=ByTool({"asr": "gpu_now", "embed": "gpu_now"}))
    first = scheduler.decide(PROFILED, PROFILED_VIEW)
    again = scheduler.decide(PROFILED, PROFILED_VIEW)
    assert len(model.received) == 1 and again.llm_calls == 0
    assert first.veto is not None and again.veto == first.veto
    assert first.fallback is None and again.fallback is None
    assert dict(again.mapping) == dict(first.mapping) == {"c1": "gpu_now", "c2": "gpu_now"}
    assert again.consultation.cached and again.consultation.cause is None
    assert f"vetoed earlier ({first.veto})" in again.reason
    summary = summarize([first, again])
    assert summary is not None and summary.vetoes == {"budget": 1} and summary.fallbacks == {}
    assert (summary.consultations, summary.answered, summary.cached_decisions) == (1, 1, 1)
