"""What the scenario probes share: their context and result, small nodes, and gauges.

A probe builds its own `DeviceToolNode` (simulated testbed or a `LocalBackend` with a
declared `GpuConfig`), drives it, and says what it saw as a `ProbeResult`: how many faults
it injected, how many ended as expected, and a line per problem.

>>> g = Gauge()
>>> with g.held(300):
...     with g.held(200):
...         g.peak, g.now
(500.0, 500.0)
>>> g.now, g.peak, g.max_count
(0.0, 500.0, 2)
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from langgraph_devsched._dev.graphs import one_node_graph
from langgraph_devsched.executors.local import GpuConfig, LocalBackend
from langgraph_devsched.ledger import VramLedger
from langgraph_devsched.node import DeviceToolNode, StepReport
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

T = TypeVar("T")


@dataclass
class ProbeContext:
    """One probe run: which kind, after which step, on which backend, with which seed."""

    kind: str
    index: int
    backend: str
    seed: int
    tmp: Path
    node_timeout: bool = False
    """The node has ``call_timeout_s`` (the harness then also uses it)."""
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.tmp.mkdir(parents=True, exist_ok=True)


@dataclass
class ProbeResult:
    """What one probe saw: faults injected, outcomes as expected, problems (violations)."""

    injected: int = 0
    handled: int = 0
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def check(self, ok: bool, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return ok

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def case(self, ok: bool) -> None:
        """One injection, handled or not (its problems were recorded by `check`)."""
        self.injected += 1
        self.handled += bool(ok)


class Gauge:
    """Thread-safe "how much at once": VRAM (MB) or runs held by tools while they run."""

    def __init__(self) -> None:
        self.now = 0.0
        self.peak = 0.0
        self.count = 0
        self.max_count = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def held(self, amount: float = 1.0) -> Iterator[None]:
        with self._lock:
            self.now += amount
            self.count += 1
            self.peak = max(self.peak, self.now)
            self.max_count = max(self.max_count, self.count)
        try:
            yield
        finally:
            with self._lock:
                self.now -= amount
                self.count -= 1


def make_tool(
    name: str,
    func: Callable[..., str],
    coroutine: Callable[..., Awaitable[str]] | None = None,
) -> BaseTool:
    """A harness tool taking ``payload: str``; sync-only when ``coroutine`` is None (then
    ``ainvoke`` runs it in the event loop's default executor, as LangChain does)."""
    return StructuredTool.from_function(
        func=func, coroutine=coroutine, name=name,
        description=f"devsched stress probe tool {name}",
    )


def node_for(
    ctx: ProbeContext,
    tools: Sequence[BaseTool],
    hints: Mapping[str, Mapping[str, Any]],
    *,
    budget_mb: float = 8000.0,
    cpu_workers: int | None = None,
    queue_timeout_s: float | None = 0.05,
    backend: str | None = None,
    **kwargs: Any,
) -> tuple[DeviceToolNode, VramLedger | None]:
    """A node on the context's backend (or ``backend``); returns it and the local ledger."""
    where = backend or ctx.backend
    if where == "simulated":
        params = {
            t.name: ToolParams(
                cpu_ms=5.0, gpu_ms=1.0, vram_mb=float(hints.get(t.name, {}).get("vram_mb", 0.0))
            )
            for t in tools
        }
        bed = SimulatedTestbed(params, vram_budget_mb=budget_mb, cpu_cores=8, seed=ctx.seed)
        return DeviceToolNode(tools, hints=dict(hints), testbed=bed, **kwargs), None
    local = LocalBackend(
        gpu=GpuConfig(vram_budget_mb=budget_mb),
        cpu_workers=cpu_workers,
        queue_timeout_s=queue_timeout_s,
    )
    local.device_state()  # torch is imported here, not inside a timed section of the probe
    return DeviceToolNode(tools, hints=dict(hints), backend=local, **kwargs), local.ledger


def graph_of(node: DeviceToolNode) -> Any:
    return one_node_graph(node)


def step_input(
    calls: Sequence[tuple[str, str]], payloads: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """One AIMessage with ``(call id, tool)`` calls; each payload is its id unless given."""
    payloads = payloads or {}
    tool_calls = [
        {"name": tool, "args": {"payload": payloads.get(cid, cid)}, "id": cid, "type": "tool_call"}
        for cid, tool in calls
    ]
    return {"messages": [AIMessage("", tool_calls=tool_calls)]}


def answers(out: Mapping[str, Any] | None) -> dict[str, list[ToolMessage]]:
    """The step's ToolMessages by call id."""
    found: dict[str, list[ToolMessage]] = {}
    for m in (out or {}).get("messages", [])[1:]:
        if isinstance(m, ToolMessage):
            found.setdefault(m.tool_call_id, []).append(m)
    return found


def check_answered(
    result: ProbeResult, out: Mapping[str, Any] | None, ids: Sequence[str], what: str,
    *, expect: Callable[[str, ToolMessage], bool] | None = None,
) -> bool:
    """Every id answered exactly once (and as ``expect`` says); problems named by ``what``."""
    got = answers(out)
    ok = True
    for cid in ids:
        msgs = got.get(cid, [])
        if len(msgs) != 1:
            ok = result.check(False, f"{what}: call {cid} got {len(msgs)} answers")
        elif expect is not None and not expect(cid, msgs[0]):
            ok = result.check(False, f"{what}: call {cid} answered {str(msgs[0].content)[:120]!r}")
    stray = sorted(set(got) - set(ids))
    if stray:
        ok = result.check(False, f"{what}: answers for unknown ids {stray[:5]}")
    return ok


def reports_into(reports: list[StepReport]) -> Callable[[StepReport], None]:
    lock = threading.Lock()

    def add(report: StepReport) -> None:
        with lock:
            reports.append(report)

    return add


async def within(awaitable: Awaitable[T], limit_s: float) -> tuple[T | None, str | None]:
    """``(result, None)``, or ``(None, why)`` when it raised or ran past ``limit_s``."""
    try:
        return await asyncio.wait_for(awaitable, limit_s), None
    except asyncio.TimeoutError:
        return None, f"did not finish within {limit_s:g} s"
    except Exception as exc:
        return None, f"raised {type(exc).__name__}: {str(exc)[:200]}"


def call_within(fn: Callable[[], T], limit_s: float) -> tuple[T | None, str | None]:
    """`within` for a blocking call: run it in a daemon thread, wait ``limit_s`` at most."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="devsched-stress-call")
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        return None, f"did not finish within {limit_s:g} s"
    if "error" in box:
        exc = box["error"]
        return None, f"raised {type(exc).__name__}: {str(exc)[:200]}"
    return box["value"], None


async def wait_until(predicate: Callable[[], bool], limit_s: float, poll_s: float = 0.002) -> bool:
    """Poll ``predicate`` until true (True) or ``limit_s`` passed (False)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not predicate():
        if loop.time() > end:
            return False
        await asyncio.sleep(poll_s)
    return True


def ledger_idle(ledger: VramLedger | None) -> bool:
    return ledger is None or (
        abs(ledger.in_use_mb) <= 1e-6 and ledger.active == 0 and ledger.queued == 0
    )
