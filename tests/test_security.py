"""Security: what the scheduler sees, what files may do, what the node opens.

* The scheduler prompt never carries tool-call arguments or tool outputs (canaries through
  the node and the agentic scheduler, async and sync, over two steps with a shared monitor).
* Hint and scenario files go through safe loaders: a ``!!python/object`` payload never runs.
* Persisted monitor stats are data: a pickle file is rejected without being unpickled.
* Building and running nodes opens no listening socket in this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, GpuConfig, LocalBackend, device_hints
from langgraph_devsched._dev.stress import StressConfig, run_stress
from langgraph_devsched.bench.scenario import ScenarioError, load_scenario
from langgraph_devsched.hints import HintsError
from langgraph_devsched.monitor import RuntimeMonitor, load_file
from langgraph_devsched.monitor import persist as persist_module
from langgraph_devsched.monitor.persist import MonitorStatsWarning
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.agentic.observations import OBSERVATION_TOOL_NAMES
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
from tests.agentic_fakes import ToolScriptModel, submit, tool_call

ARG_CANARY = "CANARY-ARG-5f1e0c"
OUT_CANARY = "CANARY-OUT-a93b27"


@device_hints(vram_mb=1500, gpu_share=0.6)
@tool
def transcribe(audio: str) -> str:
    """Transcribe audio."""
    return f"{OUT_CANARY} heard {len(audio)} bytes"


@device_hints(vram_mb=800, gpu_share=0.4)
@tool
def caption(image: str) -> str:
    """Caption an image."""
    return f"{OUT_CANARY} a cat"


PARAMS = {
    "transcribe": ToolParams(cpu_ms=800, gpu_ms=60, vram_mb=1500, gpu_share=0.6),
    "caption": ToolParams(cpu_ms=300, gpu_ms=40, vram_mb=800, gpu_share=0.4),
}


def _look(turn: str) -> AIMessage:
    calls = [
        tool_call(n, {"tool": "transcribe"} if n == "tool_estimates" else {}, f"{turn}-{n}")
        for n in OBSERVATION_TOOL_NAMES
    ]
    return AIMessage("", tool_calls=calls)


def _text(message: BaseMessage) -> str:
    return json.dumps(message.model_dump(), default=str)


@pytest.mark.parametrize("use_async", [False, True])
def test_scheduler_prompt_carries_no_arguments_or_outputs(
    tmp_path: Path, use_async: bool
) -> None:
    model = ToolScriptModel(
        script=[_look("1"), submit({"a1": "gpu_now", "b1": "cpu"}, id="1"),
                _look("2"), submit({"a2": "gpu_queued", "b2": "gpu_now"}, id="2")]
    )
    scheduler = AgenticScheduler(model, fallback="static", timeout_s=10)
    monitor = RuntimeMonitor()
    node = DeviceToolNode(
        [transcribe, caption], testbed=SimulatedTestbed(PARAMS, vram_budget_mb=8000),
        scheduler=scheduler, monitor=monitor,
    )
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    history: list[Any] = []
    for step in ("1", "2"):
        calls = [
            {"name": "transcribe", "args": {"audio": f"{ARG_CANARY} wav {step}"}, "id": f"a{step}"},
            {"name": "caption", "args": {"image": f"{ARG_CANARY} png {step}"}, "id": f"b{step}"},
        ]
        if step == "2":
            scheduler.clear_cache()  # same shape: make it consult the model again
        inputs = {"messages": [*history, AIMessage("", tool_calls=calls)]}
        out = asyncio.run(graph.ainvoke(inputs)) if use_async else graph.invoke(inputs)
        history = out["messages"]
    answers = [m for m in history if isinstance(m, ToolMessage)]
    assert len(answers) == 4 and all(OUT_CANARY in str(m.content) for m in answers)
    assert len(model.received) == 4  # two consultations of two turns each: it was asked
    seen = "\n".join(_text(m) for prompt in model.received for m in prompt)
    assert "step_calls" in seen and "transcribe" in seen  # the observations did reach it
    assert ARG_CANARY not in seen and OUT_CANARY not in seen
    monitor.save(tmp_path / "stats.json")  # nor does anything persisted
    stats = (tmp_path / "stats.json").read_text()
    assert ARG_CANARY not in stats and OUT_CANARY not in stats
    for report in node.history:
        assert ARG_CANARY not in repr(report) and OUT_CANARY not in repr(report)


def _payloads(marker: Path) -> list[str]:
    return [
        f"!!python/object/apply:os.system ['touch {marker}']\n",
        f"tools: !!python/object/apply:os.system ['touch {marker}']\n",
        f"tools:\n  asr: !!python/object/new:os.system ['touch {marker}']\n",
        f"name: !!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path "
        f"['{marker}']]\n",
    ]


def test_hint_files_never_run_python_object_payloads(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for i, payload in enumerate(_payloads(marker)):
        path = tmp_path / f"hints{i}.yaml"
        path.write_text(payload, encoding="utf-8")
        with pytest.raises(HintsError, match="could not determine a constructor for the tag"):
            DeviceToolNode([transcribe], hints=path)
    assert not marker.exists()


def test_scenario_files_never_run_python_object_payloads(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for i, payload in enumerate(_payloads(marker)):
        path = tmp_path / f"scenario{i}.yaml"
        path.write_text(payload, encoding="utf-8")
        with pytest.raises(ScenarioError, match="could not determine a constructor for the tag"):
            load_scenario(path)
    assert not marker.exists()


class _Boom:
    """Unpickling this would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_persisted_stats_reject_a_pickle_without_unpickling_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "stats.json"
    path.write_bytes(pickle.dumps({"format": "x", "boom": _Boom(marker)}))

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the stats loader unpickled a file")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    with pytest.warns(MonitorStatsWarning, match="ignored, starting cold: cannot read it"):
        state = load_file(path)
    assert state.step == 0 and not state.stats
    assert not marker.exists()
    assert "pickle" not in Path(persist_module.__file__).read_text(encoding="utf-8").replace(
        "no pickle", ""
    )
    protocol0 = pickle.dumps({"step": 5}, protocol=0)  # ASCII pickle: valid UTF-8, not JSON
    path.write_bytes(protocol0)
    with pytest.warns(MonitorStatsWarning, match="not valid JSON"):
        assert RuntimeMonitor.load(path).state.step == 0


_SOCKET = re.compile(r"socket:\[(\d+)\]")


def _own_socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            match = _SOCKET.match(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if match:
            inodes.add(match.group(1))
    return inodes


def _listening_in(table: str, text: str, own: set[str]) -> set[tuple[str, str]]:
    """(table, local address) of the sockets in one /proc/net table that listen (TCP
    ``0A``) or are bound (UDP ``07``) and belong to ``own`` inodes."""
    found = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        listening = state == "0A" if table.startswith("tcp") else state == "07"
        if listening and inode in own:
            found.add((table, local))
    return found


def _listening(own: set[str]) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        path = Path("/proc/net") / table
        if path.exists():
            found |= _listening_in(table, path.read_text(), own)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net")
def test_building_and_running_nodes_opens_no_listening_socket() -> None:
    before = _listening(_own_socket_inodes())
    model = ToolScriptModel(script=[submit({"a": "gpu_now"}, id="1")])
    nodes = [
        DeviceToolNode([transcribe], testbed=SimulatedTestbed(PARAMS, vram_budget_mb=8000),
                       scheduler=AgenticScheduler(model, fallback="static", timeout_s=10),
                       monitor=RuntimeMonitor()),
        DeviceToolNode([transcribe], backend=LocalBackend(gpu=GpuConfig(vram_budget_mb=8000))),
    ]
    for node in nodes:
        graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools")
        call = {"name": "transcribe", "args": {"audio": "x"}, "id": "a"}
        out = graph.compile().invoke({"messages": [AIMessage("", tool_calls=[call])]})
        assert isinstance(out["messages"][-1], ToolMessage)
    report = run_stress(StressConfig(calls=40, seed=5))
    assert report.ok
    after = _listening(_own_socket_inodes())
    assert after == before, f"new listening sockets: {after - before}"


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1
   1: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 4243 1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1
"""


def test_the_socket_probe_sees_a_listening_socket() -> None:
    """The probe above must be able to fail (checked on a /proc/net/tcp sample, so that
    the test itself listens on nothing): our LISTEN socket is seen, a connected one and
    another process's listener are not."""
    own = {"4242", "4243"}
    assert _listening_in("tcp", PROC_NET_TCP, own) == {("tcp", "0100007F:1F90")}
    assert _listening_in("tcp", PROC_NET_TCP, set()) == set()
