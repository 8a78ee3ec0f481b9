"""The README path end to end, as a new user walks it on a machine without a GPU: an app's own
three tools (a GPU-capable torch tool, a CPU-only pure-Python tool, a tool on a resident
model), profiled by ``devsched profile --hints-out`` (measured figures, none made up), the
node on those hints over a simulated GPU (the one assumption: how much faster that GPU is),
then ``devsched bench`` on one built-in scenario by name."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.messages import AIMessage
from langchain_core.tracers.context import collect_runs
from langgraph.graph import START, MessagesState, StateGraph

import langgraph_devsched
from langgraph_devsched import DeviceToolNode
from langgraph_devsched.profiling import simulated_gpu
from langgraph_devsched.tracing import decision_runs

DEVSCHED = Path(sys.executable).with_name("devsched")
PACKAGE_ROOT = str(Path(langgraph_devsched.__file__).resolve().parents[1])

APP = '''
import time
from typing import Annotated

import torch
from langchain_core.tools import tool

from langgraph_devsched import InjectedDevice, ResidentModel, device_hints

_vocabulary: set[str] = set()


@tool
def sharpen(seed: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Sharpen a generated image with a few torch convolutions."""
    image = torch.rand(1, 3, 256, 256, generator=torch.Generator().manual_seed(seed))
    kernel = torch.full((3, 1, 3, 3), 1 / 9, device=device)
    out = image.to(device)
    for _ in range(10):  # far heavier than the other two tools, on any machine
        out = torch.nn.functional.conv2d(out, kernel, padding=1, groups=3)
    return f"sharpened {seed} on {device}"


@device_hints(gpu_capable=False, idempotent=True)  # side-effect free: warmed up, repeated
@tool
def word_stats(text: str) -> str:
    """Count the words of a text (pure Python; the first call builds a vocabulary)."""
    if not _vocabulary:
        time.sleep(0.06)  # a slow first call that is no model load
        _vocabulary.update("the a an of".split())
    words = text.split()
    return f"{len(words)} words, {sum(w in _vocabulary for w in words)} stop words"


def _load(device: str) -> torch.nn.Module:
    time.sleep(0.06)  # reading the weights: 60 ms at least, on any machine
    return torch.nn.Linear(8, 4).to(device)


encoder = ResidentModel("readme_encoder", weights_mb=40, load=_load)


@device_hints(**encoder.hints(vram_mb=120, idempotent=True))
@tool
def encode(n: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Encode n rows with a model kept resident."""
    with torch.no_grad():
        rows = encoder.get()(torch.ones(n, 8, device=device))
    return f"{tuple(rows.shape)} on {device}"


sharpen.metadata = {"devsched_example_args": {"seed": 1}}
word_stats.metadata = {"devsched_example_args": {"text": "the cat of the house"}}
encode.metadata = {**(encode.metadata or {}), "devsched_example_args": {"n": 2}}
TOOLS = [sharpen, word_stats, encode]
'''


def devsched(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("LANGSMITH", "LANGCHAIN"))}
    # the package under test, not whichever one the environment installed (a checkout
    # beside the one the virtual environment was made from ran the other one's code)
    env["PYTHONPATH"] = PACKAGE_ROOT
    env["COLUMNS"] = "80"
    return subprocess.run([str(DEVSCHED), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def graph_of(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def test_the_readme_path_from_own_tools_to_a_bench(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    app = tmp_path / "my_app"
    app.mkdir()
    (app / "readme_app_tools.py").write_text(textwrap.dedent(APP), encoding="utf-8")

    # 1. measure the tools here (CPU only): figures measured, none made up
    done = devsched("profile", "--suite", "readme_app_tools:TOOLS", "--devices", "cpu",
                    "--repeats", "3", "--json", "prof.json", "--hints-out", "hints.yaml",
                    "--assume-idempotent", cwd=app)  # warmed up and repeated, as the README's
                    # figures: a single cold call of sharpen is no figure to compare with
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hints: hints.yaml" in done.stdout
    hints = yaml.safe_load((app / "hints.yaml").read_text())["tools"]
    assert set(hints["sharpen"]) == {"profile"} and set(hints["sharpen"]["profile"]) == {
        "cpu_ms"}  # GPU-capable, measured on the CPU only
    assert hints["word_stats"]["gpu_capable"] is False
    assert "load_ms" not in hints["word_stats"]  # its slow first call is no model load
    assert (hints["encode"]["model"], hints["encode"]["weights_mb"]) == ("readme_encoder", 40)
    assert hints["encode"]["load_ms"]["cpu_ms"] >= 50  # the resident model's load, measured

    # 2. the node on those hints, over a simulated GPU 10x faster than this CPU
    sys.path.insert(0, str(app))
    try:
        import readme_app_tools as tools  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(app))
    bed = simulated_gpu(app / "hints.yaml", vram_budget_mb=4000, gpu_speedup=10,
                        run_tools_on="cpu")
    node = DeviceToolNode(tools.TOOLS, hints=app / "hints.yaml", testbed=bed)
    graph = graph_of(node)
    traced: list[dict[str, Any]] = []
    for i in range(6):
        step = AIMessage("", tool_calls=[
            {"name": "sharpen", "args": {"seed": i}, "id": f"s{i}"},
            {"name": "word_stats", "args": {"text": "the end of it"}, "id": f"w{i}"},
            {"name": "encode", "args": {"n": 3}, "id": f"e{i}"},
        ])
        with collect_runs() as runs:
            result = graph.invoke({"messages": [step]})
        assert [m.content for m in result["messages"][1:]] == [
            f"sharpened {i} on cpu", "4 words, 2 stop words", "(3, 4) on cpu"]  # real code
        traced += [r.extra["metadata"] for r in decision_runs(runs.traced_runs)]
    placed = [{c.tool: c.device for c in report.record.calls} for report in node.history]
    assert placed[0]["sharpen"] == "cuda:0"  # tried on the GPU its profile says nothing of
    assert placed[-1]["sharpen"] == "cuda:0", placed  # and kept there: 10x faster
    assert all(p["word_stats"] == "cpu" for p in placed)
    sharpen_cpu = hints["sharpen"]["profile"]["cpu_ms"]
    last = node.history[-1].record
    assert last.makespan_ms < sharpen_cpu / 2  # not the CPU's time
    encodes = [m for m in traced if m["devsched.option"] and "devsched.model" in m]
    assert len(encodes) == 6 and {m["devsched.model"] for m in encodes} == {"readme_encoder"}
    assert encodes[-1]["devsched.model_warm"] is True

    # 3. a bench of one built-in scenario, by name
    bench = devsched("bench", "--scenarios", "serial_voice_assistant", "--schedulers",
                     "monitor,oracle", "--rounds", "3", "--json", "bench.json", cwd=tmp_path)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    assert "serial_voice_assistant" in bench.stdout
    import json

    doc = json.loads((tmp_path / "bench.json").read_text())
    assert [s["name"] for s in doc["scenarios"]] == ["serial_voice_assistant"]
