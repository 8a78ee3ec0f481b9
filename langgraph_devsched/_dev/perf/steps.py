"""Per-step time and memory over many steps through `DeviceToolNode` on the testbed.

30 generated tools (cheap functions; their device times are simulated) behind one
``DeviceToolNode(tools, hints=..., testbed=SimulatedTestbed(...))`` with its default
scheduler, compiled in a one-node graph. Each step invokes the graph with one AI message of
1-4 parallel calls, drawn from ``shapes`` recurring batch shapes (an agent repeats itself),
and is timed around ``invoke`` (decision, simulated execution, monitor, messages). The
process's resident memory (RSS) is read every ``every`` steps.

>>> from langgraph_devsched._dev.perf.steps import measure_steps
>>> r = measure_steps(steps=20, every=10)
>>> r["steps"], len(r["windows"]), len(r["rss_mb"])
(20, 2, 3)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from langgraph_devsched._dev.graphs import one_node_graph
from langgraph_devsched._dev.perf.decisions import declared
from langgraph_devsched._dev.perf.generate import generate_tools
from langgraph_devsched.bench.runner import percentile
from langgraph_devsched.monitor.growth import rss_mb
from langgraph_devsched.testbed import SimulatedTestbed

TOOLS = 30


def _tool(name: str) -> Any:
    from langchain_core.tools import StructuredTool

    def run(text: str) -> str:
        return text

    return StructuredTool.from_function(run, name=name, description=f"generated tool {name}")


def measure_steps(
    *, steps: int = 50_000, every: int = 1000, shapes: int = 20, seed: int = 0,
    scheduler: str | None = None, clock: Callable[[], float] = time.perf_counter,
    on_progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` steps; per-step time percentiles by window of ``every`` steps, RSS."""
    from langchain_core.messages import AIMessage

    from langgraph_devsched.node import DeviceToolNode

    params = generate_tools(TOOLS, seed=seed)
    names = list(params)
    bed = SimulatedTestbed(params, vram_budget_mb=24000, cpu_cores=8, noise=0.05, seed=seed)
    kwargs: dict[str, Any] = {} if scheduler is None else {"scheduler": scheduler}
    node = DeviceToolNode([_tool(n) for n in names], hints={n: declared(p) for n, p in
                                                            params.items()},
                          testbed=bed, **kwargs)
    graph = one_node_graph(node)
    rng = random.Random(seed)
    shape_list = [rng.sample(names, rng.randint(1, 4)) for _ in range(shapes)]
    times: list[float] = []
    windows: list[dict[str, float]] = []
    rss = [round(rss_mb(), 1)]
    for step in range(1, steps + 1):
        shape = shape_list[rng.randrange(len(shape_list))]
        message = AIMessage("", tool_calls=[
            {"name": t, "args": {"text": "x"}, "id": f"s{step}-{i}"} for i, t in enumerate(shape)
        ])
        t0 = clock()
        graph.invoke({"messages": [message]})
        times.append((clock() - t0) * 1000.0)
        if step % every == 0 or step == steps:
            window = times[-(step - (len(windows) * every)):]
            windows.append({"p50_ms": round(percentile(window, 50), 4),
                            "p95_ms": round(percentile(window, 95), 4)})
            rss.append(round(rss_mb(), 1))
            if on_progress is not None:
                on_progress(step)
    return {
        "steps": steps,
        "tools": TOOLS,
        "shapes": shapes,
        "every": every,
        "step_p50_ms": round(percentile(times, 50), 4),
        "step_p95_ms": round(percentile(times, 95), 4),
        "first_window": windows[0] if windows else None,
        "last_window": windows[-1] if windows else None,
        "windows": windows,
        "rss_mb": rss,
        "rss_growth_mb": round(rss[-1] - rss[1], 1) if len(rss) > 2 else 0.0,
    }
