"""The suite's models are `ResidentModel` handles: hints name them, a node's backend loads each
once and keeps it warm, the host side is bounded, ``node.close()`` frees them, and the declared
``weights_mb`` covers what the built models hold.

On the CPU only (a declared `GpuConfig` with a fake device cannot run torch): the GPU side of
the same path is checked on CUDA by ``scripts/gpu_residency_check.py``.
"""

from __future__ import annotations

import importlib.util
import json
import py_compile
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import BaseTool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from langgraph_devsched import DeviceToolNode, LocalBackend  # noqa: E402
from langgraph_devsched.hints import code_hints  # noqa: E402
from langgraph_devsched.models import ModelCache, default_cache  # noqa: E402
from langgraph_devsched.schedulers import Batch, Decision, SchedulerView  # noqa: E402
from langgraph_devsched.schedulers.base import SchedulerBase  # noqa: E402
from langgraph_devsched.suite import (  # noqa: E402
    DEVICE_NEUTRAL_TOOLS,
    EXAMPLE_ARGS_KEY,
    SUITE_SIZES,
    builtin_tools,
    clear_cache,
    suite_models,
)
from langgraph_devsched.suite.data import mlp_model  # noqa: E402
from langgraph_devsched.suite.vision import vision_model  # noqa: E402

# tools without a model: pure Python, DSP on synthesised inputs, a host buffer copied per call
MODEL_FREE = {*DEVICE_NEUTRAL_TOOLS, "estimate_pitch", "detect_voice_activity",
              "audio_spectrogram", "scan_archive"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class OnCpu(SchedulerBase):
    name = "on_cpu"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return self._decision({c.call_id: "cpu" for c in batch.calls}, "cpu")


def tools(size: str = "small") -> dict[str, BaseTool]:
    return {t.name: t for t in builtin_tools(size)}


def node_of(names: list[str], backend: LocalBackend) -> tuple[DeviceToolNode, Any]:
    node = DeviceToolNode([tools()[n] for n in names], backend=backend, scheduler=OnCpu())
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    return node, graph


def run(graph: Any, name: str, i: int = 0) -> dict[str, Any]:
    args = dict(tools()[name].metadata[EXAMPLE_ARGS_KEY])
    msg = AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"{name}-{i}"}])
    out = graph.invoke({"messages": [msg]})
    (answer,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert answer.status != "error", answer.content
    return json.loads(str(answer.content))  # type: ignore[no-any-return]


def direct(name: str) -> dict[str, Any]:
    tool = tools()[name]
    args = dict(tool.metadata[EXAMPLE_ARGS_KEY])
    return json.loads(tool.invoke({**args, "device": "cpu"}))  # type: ignore[no-any-return]


def instance_in(cache: ModelCache, handle: Any) -> Any:
    """The instance ``cache`` holds for ``handle`` on the CPU (a hit, or a load)."""
    with cache.scope("cpu"):
        return handle.get()


def on_meta(module: Any) -> bool:
    return all(p.device.type == "meta" for p in module.parameters())


@pytest.mark.parametrize("size", SUITE_SIZES)
def test_every_model_tool_names_its_own_resident_model_in_its_hints(size: str) -> None:
    named: dict[str, str] = {}
    for name, tool in tools(size).items():
        hints = code_hints(tool) or {}
        if name in MODEL_FREE:
            assert "model" not in hints and "weights_mb" not in hints, name
            continue
        assert hints["weights_mb"] > 0 and hints["vram_mb"] > 0, name
        assert "gpu_share" in hints and EXAMPLE_ARGS_KEY in tool.metadata, name  # kept
        named[name] = hints["model"]
    assert len(named) == 19 - len(MODEL_FREE) == len(set(named.values()))
    handles = {h.name: h for h in suite_models()}
    for name, model in named.items():
        assert handles[model].weights_mb == (code_hints(tools(size)[name]) or {})["weights_mb"]
    assert named["embed_texts"] == "minilm"  # the same model at both sizes: one handle
    assert named["transcribe_speech"] == f"whisper:{size}"


def test_the_vector_index_is_the_resident_part_of_the_searchs_memory() -> None:
    hints = code_hints(tools()["vector_search"]) or {}
    corpus_mb = 100_000 * 128 * 4 / 2**20
    assert hints["weights_mb"] == pytest.approx(corpus_mb, abs=1)
    assert hints["weights_mb"] + hints["vram_mb"] == pytest.approx(1.2 * corpus_mb, abs=1)


def _resident_mb(obj: Any) -> float:
    items = obj if isinstance(obj, tuple) else (obj,)
    seen: set[int] = set()
    total = 0
    for item in items:
        if isinstance(item, torch.Tensor):
            tensors = [item]
        elif isinstance(item, torch.nn.Module):
            tensors = [*item.parameters(), *item.buffers()]
        else:
            continue
        for t in tensors:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.nelement() * t.element_size()
    return total / 2**20


def _check_declared(size: str) -> None:
    tools(size)  # makes the handles of that size
    for handle in suite_models():
        if not (handle.name.endswith(f":{size}") or handle.name == "minilm"):
            continue
        built = handle.load("cpu")
        mb = _resident_mb(built)
        assert handle.weights_mb is not None
        # declared = the built bytes rounded up to the MB
        assert mb <= handle.weights_mb < mb + 1.0, (handle.name, mb, handle.weights_mb)
        assert handle.release is not None
        handle.release(built)
        modules = [x for x in (built if isinstance(built, tuple) else (built,))
                   if isinstance(x, torch.nn.Module)]
        assert all(on_meta(m) for m in modules), handle.name


def test_declared_weights_are_the_built_small_models_bytes_rounded_up() -> None:
    _check_declared("small")


@pytest.mark.slow
def test_declared_weights_are_the_built_full_models_bytes_rounded_up() -> None:
    _check_declared("full")


def test_a_model_loads_once_per_backend_is_warm_and_node_close_frees_it() -> None:
    backend = LocalBackend(gpu=False)
    node, graph = node_of(["tabular_predict", "generate_image"], backend)
    first = run(graph, "tabular_predict", 0)
    second = run(graph, "tabular_predict", 1)
    assert first == second == direct("tabular_predict")  # same seeds, same outputs
    cold, warm = (r.record.calls[0] for r in list(node.history)[:2])
    assert cold.model == warm.model == "tabular-mlp:small"
    assert cold.loaded and cold.load_ms > 0
    assert not warm.loaded and warm.load_ms == 0
    assert backend.models.loads == 1
    state = backend.device_state()
    assert state.warm("tabular-mlp:small", "cpu") and not state.warm("tabular-mlp:small")
    mlp = instance_in(backend.models, mlp_model("small"))
    assert not on_meta(mlp) and mlp is not instance_in(default_cache(), mlp_model("small"))
    node.close()
    assert backend.models.resident() == () and backend.device_state().resident == ()
    assert on_meta(mlp)  # released: its parameters freed
    again = run(graph, "tabular_predict", 2)  # the node stays usable: it loads again
    assert again == first and node.history[-1].record.calls[0].loaded
    node.close()


def test_the_host_side_keeps_at_most_max_models_and_frees_the_least_recent() -> None:
    backend = LocalBackend(gpu=False, max_models=1)
    node, graph = node_of(["read_text", "generate_image"], backend)
    run(graph, "read_text")
    crnn = instance_in(backend.models, vision_model("crnn", "small"))
    run(graph, "generate_image")
    assert [w.model for w in backend.models.resident()] == ["unet:small"]
    assert on_meta(crnn)
    assert node.history[-1].record.calls[0].loaded
    node.close()


def test_outside_a_node_tools_load_into_the_default_cache_and_clear_cache_frees() -> None:
    out = direct("classify_image")
    cache = default_cache()
    assert any(w.model == "resnet:small" for w in cache.resident())
    resnet = instance_in(cache, vision_model("resnet", "small"))
    loads = cache.loads
    assert direct("classify_image") == out and cache.loads == loads  # a warm hit
    clear_cache()
    assert on_meta(resnet)
    assert all(w.model not in {h.name for h in suite_models()} for w in cache.resident())
    assert direct("classify_image") == out  # rebuilt from the same seed
    assert cache.loads == loads + 1


# -- scripts/gpu_residency_check.py: its host path here, its CUDA path on a GPU machine -------

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_residency_check.py"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_residency_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_gpu_scripts_parse() -> None:
    py_compile.compile(str(SCRIPT), doraise=True)
    res = subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu_check.sh")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "gpu_residency_check.py --device cuda" in (REPO / "scripts/gpu_check.sh").read_text()


def test_the_residency_check_passes_on_the_host(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "residency.json"
    assert _script().main(["--device", "cpu", "--size", "small", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    passed = {line.split(":")[0].removeprefix("PASS ") for line in out.splitlines()
              if line.startswith("PASS ")}
    assert {"cold load", "warm hit", "eviction", "evicted instance released", "close"} <= passed
    doc = json.loads(report.read_text())
    assert doc["figures"]["device"] == "cpu" and all(c["ok"] for c in doc["checks"])


def test_the_residency_check_fails_when_an_evicted_model_is_not_freed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from langgraph_devsched.suite.text import reranker_model

    monkeypatch.setattr(reranker_model("small"), "release", None)
    assert _script().main(["--device", "cpu", "--size", "small"]) == 1
    assert "FAIL evicted instance released" in capsys.readouterr().out
