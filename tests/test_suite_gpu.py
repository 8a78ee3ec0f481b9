"""The suite and the profiler on a real CUDA GPU (skipped without one)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from langgraph_devsched.telemetry import cuda_status

HAS_CUDA, WHY = cuda_status()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not HAS_CUDA, reason=f"needs a CUDA GPU: {WHY}"),
]


def _tools() -> dict[str, Any]:
    from langgraph_devsched.suite import EXAMPLE_ARGS_KEY, builtin_tools

    return {t.name: (t, dict(t.metadata[EXAMPLE_ARGS_KEY])) for t in builtin_tools("small")}


def _call(name: str, device: str) -> dict[str, Any]:
    tool, args = _tools()[name]
    return json.loads(tool.invoke({**args, "device": device}))  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", sorted(_tools()) if HAS_CUDA else ["(none)"])
def test_every_tool_runs_unchanged_on_cuda(name: str) -> None:
    gpu, cpu = _call(name, "cuda:0"), _call(name, "cpu")
    assert gpu.keys() == cpu.keys()


def test_deterministic_tools_agree_across_devices() -> None:
    for name in ("scan_archive", "tokenize_text", "extract_patterns", "hash_text",
                 "detect_voice_activity"):
        assert _call(name, "cuda:0") == _call(name, "cpu"), name
    assert _call("estimate_pitch", "cuda:0")["f0_hz"] == pytest.approx(
        _call("estimate_pitch", "cpu")["f0_hz"], abs=1.0
    )
    assert _call("vector_search", "cuda:0")["ids"][0] == 4242


def test_to_device_records_the_copy() -> None:
    import torch

    from langgraph_devsched.profiling import recording_transfers, to_device

    x = torch.ones(1024, 1024)
    with recording_transfers() as log:
        y = to_device(x, "cuda:0")
    assert y.device.type == "cuda"
    assert (log.copies, log.bytes) == (1, 4 * 2**20) and log.ms > 0


def test_profiler_measures_transfer_and_vram_on_cuda() -> None:
    from langgraph_devsched.profiling import profile_tools

    tools = _tools()
    p = profile_tools([tools["scan_archive"][0], tools["hash_text"][0]],
                      devices="cpu,cuda", repeats=3, warmup=1)
    scan, hashing = p.tools
    assert p.devices_measured == ["cpu", "cuda:0"] and p.notes == []
    gpu = scan.runs["cuda"]
    assert gpu.transfer_method == "observed" and gpu.transfer_mb == pytest.approx(32.0)
    assert gpu.transfer_ms > 0 and gpu.peak_vram_mb is not None and gpu.peak_vram_mb >= 32
    assert scan.tool_class in ("cpu_preferred", "ambiguous")
    assert hashing.runs["cuda"].transfer_method == "none"
    assert hashing.tool_class in ("device_neutral", "ambiguous")
