"""Call ids come from the model: any string may arrive, the id of a hedge's second run
included. A step with calls ``a`` and ``a~hedge``, ``a`` hedged: both calls keep their own
decision and their own record entry, under ``invoke`` and ``ainvoke``."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    InjectedDevice,
    LocalBackend,
    StepReport,
    device_hints,
)
from langgraph_devsched.hedging import hedge_outcomes
from langgraph_devsched.schedulers.base import Decision, SchedulerBase

HOSTILE = ["a~hedge", "a~hedge~2", "a~hedge~3"]


class HedgeFirst(SchedulerBase):
    """Every call on the GPU; the first one hedged on the CPU."""

    name = "hedge_first"

    def decide(self, batch, view):  # type: ignore[no-untyped-def]
        first = batch.call_ids[0]
        return Decision(dict.fromkeys(batch.call_ids, "gpu_now"), "gpu, first hedged",
                        hedges={first: "cpu"}, hedge_bound=1.5)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
@pytest.mark.parametrize("others", [HOSTILE[:1], HOSTILE])
async def test_a_call_id_like_a_hedge_id_keeps_its_own_decision_and_record(mode, others):
    ran: list[tuple[str, str]] = []

    @device_hints(vram_mb=100, idempotent=True)
    @tool
    def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Embed a text."""
        ran.append((text, device))
        return f"{text} on {device}"

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode([embed], scheduler=HedgeFirst(), backend=backend,
                          on_step=reports.append)
    ids = ["a", *others]
    calls = [{"name": "embed", "args": {"text": i}, "id": i} for i in ids]
    app = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    state: Any = {"messages": [AIMessage("", tool_calls=calls)]}
    out = app.invoke(state) if mode == "invoke" else await app.ainvoke(state)
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in answers] == ids
    for other in others:  # decided gpu_now on a free GPU: ran there, recorded there
        assert (other, "cuda:0") in ran
        assert f"{other} on cuda:0" in [m.content for m in answers]
    (report,) = reports
    assert report.record is not None
    by_id = {c.call_id: c for c in report.record.calls}
    assert list(by_id) == ids  # one entry per call, none merged with a second run
    assert all(by_id[o].device == "cuda:0" and by_id[o].option == "gpu_now" for o in others)
    assert [h.call_id for h in hedge_outcomes(report.record)] == ["a"]
    assert backend.ledger is not None and backend.ledger.in_use_mb == 0
