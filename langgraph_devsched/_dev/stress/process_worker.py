"""One OS process of ``devsched stress --processes N``: an app process on the shared GPU.

It builds its own `LocalBackend(shared=path)` on the declared GPU and a `DeviceToolNode`
over four tools on three resident models, then runs its steps one after another through a
compiled graph, writing each step's answers as one JSON line (flushed) to its log. A step's
faults are the tools' ``fault`` argument:

* ``kill_call`` — the tool SIGKILLs its own process while it runs (its reservation held);
* ``kill_load`` — the ``doomed`` tool's model load SIGKILLs the process (its weights
  pinned; the tool asks for a model of its own each call, so that there is always a load);
* ``error`` — the tool raises (an error answer);
* ``slow`` — the tool runs 20 ms instead of about 1.

Before a kill it logs ``{"kill": step, "mode": ..., "at": wall time, "pid": ...}``. At the
end, at rest, it compares its rows in the store with the model instances its caches hold
(``{"rest": ...}``), then idles until told to stop, as a queue worker waits for work (its
ledger's watcher keeps sweeping), and closes the backend.

Spawned (``multiprocessing`` spawn): `worker_main` and its argument are importable and
picklable.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

BUDGET_MB = 2000.0
QUEUE_TIMEOUT_S = 2.0
IDLE_LIMIT_S = 600.0
"""The longest a worker idles once its steps are done (the harness always stops it)."""
MODELS = {"emb": 300.0, "asr": 700.0, "big": 1100.0}
DOOMED_MB = 200.0
"""The weights of the model the ``doomed`` tool loads (a new one each call: always a load)."""
TOOLS: dict[str, tuple[str | None, float, str]] = {  # tool -> (model, working MB, option)
    "embed": ("emb", 100.0, "gpu_now"),
    "transcribe": ("asr", 200.0, "gpu_queued"),
    "generate": ("big", 300.0, "gpu_queued"),
    "doomed": (None, 50.0, "gpu_queued"),
}


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process runs."""

    store: str
    log: str
    steps: list[tuple[int, list[tuple[str, str, str]]]] = field(default_factory=list)
    """Each step: its number and its calls (call id, tool, fault)."""
    slot: int = 0
    done: Any = None
    """A queue the worker puts its slot on once its steps are answered (then it idles, as
    a queue worker waits for work: its ledger's watcher still runs)."""
    stop: Any = None
    """An event that ends the idle wait (then the worker closes its backend and exits)."""


class _Log:
    def __init__(self, fh: TextIO) -> None:
        self._fh = fh

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()


def _die(log: _Log, step: int, mode: str) -> None:
    log.write({"kill": step, "mode": mode, "at": time.time(), "pid": os.getpid()})
    os.kill(os.getpid(), signal.SIGKILL)


def worker_main(spec: WorkerSpec) -> None:
    """Run ``spec``'s steps (see the module)."""
    import logging

    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import StructuredTool

    from langgraph_devsched._dev.graphs import one_node_graph
    from langgraph_devsched.device import current_device
    from langgraph_devsched.executors.local import GpuConfig, LocalBackend
    from langgraph_devsched.models import ResidentModel
    from langgraph_devsched.node import DeviceToolNode
    from langgraph_devsched.shared_ledger import LedgerStore

    logging.getLogger("langgraph_devsched").setLevel(logging.CRITICAL)
    with open(spec.log, "a", encoding="utf-8") as fh:
        log = _Log(fh)
        current: dict[str, Any] = {"step": -1, "fault": ""}

        def loader(name: str) -> Any:
            def load(device: str) -> dict[str, str]:
                if name.startswith("doomed") and current["fault"] == "kill_load":
                    _die(log, current["step"], "load")
                return {"model": name, "device": device}
            return load

        handles = {m: ResidentModel(m, loader(m), weights_mb=mb) for m, mb in MODELS.items()}

        def make(tool: str) -> StructuredTool:
            model = TOOLS[tool][0]

            def run(text: str, fault: str = "") -> str:
                handle = handles[model] if model is not None else ResidentModel(
                    f"doomed-{text}", loader(f"doomed-{text}"), weights_mb=DOOMED_MB)
                instance = handle.get()
                if fault == "kill_call":
                    _die(log, current["step"], "call")
                if fault == "error":
                    raise ValueError(f"injected error in {text}")
                time.sleep(0.02 if fault == "slow" else 0.001)
                return f"{text}@{current_device()}:{instance['model']}"

            return StructuredTool.from_function(run, name=tool, description=f"Run {tool}.")

        hints = {t: handles[m].hints(vram_mb=mb, pinned=opt) if m is not None
                 else {"vram_mb": mb, "pinned": opt} for t, (m, mb, opt) in TOOLS.items()}
        backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=BUDGET_MB), shared=spec.store,
                               queue_timeout_s=QUEUE_TIMEOUT_S)
        node = DeviceToolNode([make(t) for t in TOOLS], hints=hints, backend=backend,
                              handle_tool_errors=True)
        graph = one_node_graph(node)
        for number, calls in spec.steps:
            current["step"] = number
            current["fault"] = next((f for _, t, f in calls if t == "doomed" and f), "")
            message = AIMessage("", tool_calls=[
                {"name": t, "args": {"text": c, "fault": f}, "id": c} for c, t, f in calls])
            out = graph.invoke({"messages": [message]})
            answers = [[m.tool_call_id, str(m.content), m.status] for m in out["messages"]
                       if isinstance(m, ToolMessage)]
            log.write({"step": number, "answers": answers})
        ledger = backend.ledger
        assert ledger is not None
        held = LedgerStore(spec.store).snapshot().held_by(getattr(ledger, "holder", ""))
        weights = sorted(m for k, m, _mb, _u in held if k == "weights")
        named = {m for k, m, _mb, _u in held if k == "weights"} | set(MODELS)
        instances = sorted(m for m in named if backend.models.holds(m, "gpu"))
        work = [mb for k, _m, mb, _u in held if k == "work"]
        log.write({"rest": {"store_weights": weights, "instances": instances,
                            "work_mb": sum(work), "in_use": sum(u for *_x, u in held),
                            "active": ledger.active, "queued": ledger.queued,
                            "machine_peak_mb": getattr(ledger, "machine_peak_mb", 0.0)}})
        if spec.done is not None:
            spec.done.put(spec.slot)
        if spec.stop is not None:
            spec.stop.wait(IDLE_LIMIT_S)
        backend.close()
