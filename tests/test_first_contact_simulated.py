"""First contact with the simulated GPU: a user's real PyTorch tools scheduled on a simulated
GPU while their code runs on this CPU-only machine; a testbed built from hints or a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, InjectedDevice, current_device
from langgraph_devsched.executors import SimulatedBackend
from langgraph_devsched.hints import HintsError
from langgraph_devsched.profiling import profile_tools
from langgraph_devsched.profiling.to_testbed import simulated_gpu
from langgraph_devsched.telemetry import cuda_status

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(cuda_status()[0], reason="checks a machine without CUDA")

HINTS = {
    "matmul": {"vram_mb": 1000, "gpu_share": 0.5,
               "profile": {"cpu_ms": 300, "gpu_ms": 25, "transfer_ms": 5}},
    "where": {"vram_mb": 100, "gpu_share": 0.5, "profile": {"cpu_ms": 10, "gpu_ms": 30}},
}


@tool
def matmul(n: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Multiply an n x n matrix by itself."""
    m = torch.ones(n, n, device=device)
    return f"{float((m @ m).sum()):.0f} on {device}"


@tool
def where() -> str:
    """Say where the call runs (context device)."""
    return current_device("none")


STEP = AIMessage("", tool_calls=[
    {"name": "matmul", "args": {"n": 3}, "id": "a"},
    {"name": "where", "args": {}, "id": "b"},
])


def run_step(node: DeviceToolNode) -> list[str]:
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    return [m.content for m in graph.invoke({"messages": [STEP]})["messages"][1:]]


def test_by_default_a_torch_tool_gets_the_simulated_cuda_device_and_fails_here() -> None:
    bed = simulated_gpu(HINTS, vram_budget_mb=8000)
    node = DeviceToolNode([matmul, where], hints=HINTS, testbed=bed, scheduler="all_gpu")
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        run_step(node)


@pytest.mark.parametrize("how", ["backend", "testbed"])
def test_run_tools_on_cpu_runs_the_code_here_and_keeps_the_simulation(how: str) -> None:
    if how == "backend":
        bed = simulated_gpu(HINTS, vram_budget_mb=8000)
        node = DeviceToolNode([matmul, where], hints=HINTS, scheduler="all_gpu",
                              backend=SimulatedBackend(bed, run_tools_on="cpu"))
    else:
        bed = simulated_gpu(HINTS, vram_budget_mb=8000, run_tools_on="cpu")
        node = DeviceToolNode([matmul, where], hints=HINTS, scheduler="all_gpu", testbed=bed)
    assert run_step(node) == ["27 on cpu", "cpu"]
    record = node.history[-1].record
    assert [(c.option, c.device, c.vram_reserved_mb) for c in record.calls] == [
        ("gpu_now", "cuda:0", 1000.0), ("gpu_now", "cuda:0", 100.0)]
    # the declared gpu_ms (25, its 5 ms transfer included), not the real CPU time
    assert [c.latency_ms for c in record.calls] == [25.0, 30.0]
    assert record.makespan_ms == 30.0 and bed.vram_peak_mb == 1100.0


def test_run_tools_on_lists_the_valid_values() -> None:
    bed = simulated_gpu(HINTS, vram_budget_mb=8000)
    with pytest.raises(ValueError, match="unknown run_tools_on 'gpu'; valid: simulated, cpu"):
        SimulatedBackend(bed, run_tools_on="gpu")  # type: ignore[arg-type]


def test_a_testbed_from_a_cpu_only_profile_needs_a_gpu_speedup(tmp_path: Path) -> None:
    profile = profile_tools([matmul, where], devices="cpu", repeats=1, warmup=0,
                            args={"matmul": {"n": 2}})
    path = profile.save(tmp_path / "p.json")
    with pytest.raises(HintsError, match=r"tool 'matmul' has no profile.gpu_ms .*gpu_speedup="):
        simulated_gpu(path, vram_budget_mb=8000)
    bed = simulated_gpu(path, vram_budget_mb=8000, gpu_speedup=4)
    cpu_ms = profile.tool("matmul").runs["cpu"].latency.median_ms
    gpu_step = bed.simulate([("a", "matmul", "gpu_now")])
    assert gpu_step.makespan_ms == pytest.approx(round(cpu_ms, 4) / 4)
    assert bed.simulate([("b", "where", "cpu")]).calls[0].device == "cpu"


def test_a_testbed_needs_cpu_ms_for_every_tool() -> None:
    with pytest.raises(HintsError, match=r"tool 'x' has no profile.cpu_ms"):
        simulated_gpu({"x": {"vram_mb": 10}}, vram_budget_mb=100)
