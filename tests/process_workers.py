"""Worker processes for the machine-wide ledger tests (spawned: importable, top level).

Each builds its own `LocalBackend(shared=path)` on a declared GPU and drives a compiled
graph, as a separate app process on the same machine would.
"""

from __future__ import annotations

import os
import signal
from typing import Annotated, Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, GpuConfig, InjectedDevice, LocalBackend
from langgraph_devsched.models import ResidentModel

BUDGET_MB = 1000.0
WAIT_S = 60.0
"""How long a worker waits for the test's signal (a test always sends it)."""


def graph(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def ask(graph_: Any, tool_name: str, call_id: str) -> str:
    """Run one call of ``tool_name``; its answer (the device it ran on)."""
    out = graph_.invoke({"messages": [AIMessage("", tool_calls=[
        {"name": tool_name, "args": {"text": call_id}, "id": call_id}])]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answers) == 1
    return str(answers[0].content)


def backend(path: str, **options: Any) -> LocalBackend:
    return LocalBackend(gpu=GpuConfig(vram_budget_mb=BUDGET_MB), shared=path, **options)


def hold_on_gpu(path: str, entered: Any, go: Any, results: Any, *, die: bool = False) -> None:
    """Run one 700 MB ``gpu_now`` call that stays on the GPU until ``go`` (or, ``die``, is
    SIGKILLed there: mid-call)."""

    @tool
    def hold(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Hold 700 MB of VRAM until told."""
        entered.set()
        if die:
            os.kill(os.getpid(), signal.SIGKILL)
        go.wait(WAIT_S)
        return device

    node = DeviceToolNode([hold], hints={"hold": {"vram_mb": 700, "pinned": "gpu_now"}},
                          backend=backend(path))
    results.put(ask(graph(node), "hold", "h1"))


def keep_idle_model(path: str, loaded: Any, go: Any, results: Any, *, keep_warm: bool) -> None:
    """Load a 600 MB model with one call, then stay idle (the model resident, no call on
    it) until ``go``; report whether the cache still holds it and whether it was released."""
    released: list[str] = []
    asr = ResidentModel("asr", lambda device: {"on": device}, weights_mb=600,
                        release=lambda m: released.append(m["on"]), keep_warm=keep_warm)

    @tool
    def transcribe(text: str) -> str:
        """Transcribe with the resident model."""
        return str(asr.get()["on"])

    b = backend(path)
    node = DeviceToolNode([transcribe], backend=b,
                          hints={"transcribe": asr.hints(vram_mb=50, pinned="gpu_now")})
    first = ask(graph(node), "transcribe", "t1")
    loaded.set()
    go.wait(WAIT_S)
    results.put((first, b.models.holds("asr", "gpu"), released))


def reserve_in_fork(backend_: LocalBackend, results: Any) -> None:
    """In a forked child of a process that built ``backend_``: reserve 300 MB and report
    who holds what in the store."""
    from langgraph_devsched.shared_ledger import LedgerStore

    ledger = backend_.ledger
    assert ledger is not None
    held = ledger.try_reserve(300)
    snap = LedgerStore(backend_.shared or "").snapshot()
    results.put((held is not None, os.getpid(),
                 sorted((who.pid, snap.total_mb("gpu0")) for who in snap.holders.values())))
