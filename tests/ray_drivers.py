"""Driver processes for the several-drivers Ray tests (spawned: importable, top level).

Each connects to the test's local Ray head (``ray.init(address=...)``), builds its own
`RayBackend(cluster_slots=True)` and drives a compiled graph, as a separate app on the same
cluster would. The model's loader appends a line to a file per load (a counting loader that
works across processes), and a holding call stays in the shared slot actor until a flag file
appears.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, current_device
from langgraph_devsched.models import ResidentModel

WEIGHTS_MB = 3000.0
CALL_MB = 500.0
WAIT_S = 120.0
"""How long a holding call waits for the test's flag (a test always writes it)."""


def count_load(counter: str, device: str) -> dict[str, Any]:
    """Load the model: one line in ``counter`` per load, whichever process loads it."""
    with open(counter, "a") as f:
        f.write(f"{os.getpid()} {device}\n")
    return {"pid": os.getpid(), "device": device}


def ask(graph: Any, text: str, call_id: str, use_async: bool = False) -> str:
    state = {"messages": [AIMessage("", tool_calls=[
        {"name": "embed", "args": {"text": text}, "id": call_id}])]}
    out = asyncio.run(graph.ainvoke(state)) if use_async else graph.invoke(state)
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answers) == 1
    return str(answers[0].content)


def drive(address: str, counter: str, flags: str, texts: list[str], results: Any,
          queued: bool = False) -> None:
    """Run one call per entry of ``texts`` (``"hold"``: stay in the tool until ``flags``/go
    exists), putting ``("job", id)`` and then each answer on ``results``; ``queued``: the
    calls are ``gpu_queued`` and run through the graph's async path."""
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    from langgraph_devsched.executors import RayBackend

    model = ResidentModel("shared", functools.partial(count_load, counter),
                          weights_mb=WEIGHTS_MB)

    @tool
    def embed(text: str) -> str:
        """Embed with the shared model; ``hold`` waits for the test's flag."""
        loaded = model.get()
        if text == "hold":
            Path(flags, "started").write_text("started")
            end = time.monotonic() + WAIT_S
            while not Path(flags, "go").exists() and time.monotonic() < end:
                time.sleep(0.05)
        return json.dumps({"actor_pid": os.getpid(), "loaded_by": loaded["pid"],
                           "device": current_device()})

    results.put(("job", ray.get_runtime_context().get_job_id()))
    node = DeviceToolNode([embed], backend=RayBackend(cluster_slots=True),
                          hints={"embed": model.hints(
        vram_mb=CALL_MB, pinned="gpu_queued" if queued else "gpu_now")})
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(
        START, "tools").compile()
    for i, text in enumerate(texts):
        results.put(("answer", ask(graph, text, f"c{i}", use_async=queued)))
    node.close()
    results.put(("done", ""))
