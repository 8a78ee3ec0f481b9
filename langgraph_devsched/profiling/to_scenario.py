"""From a profile to benchmark scenarios (``devsched bench`` files, `bench.scenario.Scenario`).

A tool measured on both devices becomes a tool whose hidden parameters are its measurements:
``cpu_ms`` = CPU median, ``transfer_ms`` = GPU transfer median, ``gpu_ms`` = GPU median minus
transfer (the testbed adds the transfer back), ``vram_mb`` = peak VRAM (else the declared
estimate), ``gpu_share`` = the declared share, ``cpu_threads`` = the threads it was measured
with. The testbed noise is the median relative IQR of the measurements (clipped to 1-30%).

Three scenarios come out: ``<prefix>_serial`` (every tool, one after the other),
``<prefix>_parallel`` (up to 10 tools, classes interleaved, in one batch, VRAM to spare) and
``<prefix>_memory`` (the same batch under a VRAM budget of half its total need).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from langgraph_devsched.profiling.model import Profile, ToolProfile

CpuOnlyPolicy = Literal["skip", "pin"]
"""Tools measured on the CPU only: left out (``skip``) or kept with ``gpu_capable: false``."""

CLASS_ORDER = ("gpu_preferred", "cpu_preferred", "ambiguous", "device_neutral", "unknown")
MAX_BATCH = 10


def _params(row: ToolProfile, threads: int) -> dict[str, Any] | None:
    cpu, gpu = row.cpu, row.gpu
    if cpu is None:
        return None
    cpu_ms = max(cpu.latency.median_ms, 1e-3)
    if gpu is None:
        return {"cpu_ms": cpu_ms, "gpu_ms": cpu_ms, "vram_mb": 0.0, "cpu_threads": threads}
    vram = gpu.peak_vram_mb if gpu.peak_vram_mb else row.declared_vram_mb
    return {
        "cpu_ms": cpu_ms,
        "gpu_ms": max(gpu.latency.median_ms - gpu.transfer_ms, 0.0),
        "transfer_ms": gpu.transfer_ms,
        "vram_mb": round(vram, 1),
        "cpu_threads": threads,
    }


def _noise(profile: Profile) -> float:
    rel = [
        run.latency.iqr_ms / run.latency.median_ms
        for row in profile.tools
        for run in row.runs.values()
        if run.latency.median_ms > 0
    ]
    return round(min(max(statistics.median(rel) if rel else 0.05, 0.01), 0.3), 3)


def _interleave(rows: Sequence[ToolProfile], limit: int) -> list[str]:
    by_class = {c: sorted(r.tool for r in rows if r.tool_class == c) for c in CLASS_ORDER}
    picked: list[str] = []
    while len(picked) < min(limit, len(rows)):
        for cls in CLASS_ORDER:
            if by_class[cls] and len(picked) < limit:
                picked.append(by_class[cls].pop(0))
    return picked


def profile_to_scenarios(
    profile: Profile,
    *,
    prefix: str = "profiled",
    gpu_shares: dict[str, float] | None = None,
    cpu_only: CpuOnlyPolicy = "skip",
    rounds: int = 20,
) -> list[Any]:
    """Build the serial, parallel and memory `Scenario` objects (validated) from ``profile``.

    ``gpu_shares`` overrides the GPU share per tool (default: the declared hint, else 0.5).
    Raises `ValueError` when no tool is usable (e.g. a CPU-only profile with ``cpu_only="skip"``).
    """
    from langgraph_devsched.bench.scenario import Scenario

    if cpu_only not in ("skip", "pin"):
        raise ValueError(f"unknown cpu_only policy {cpu_only!r}; valid: skip, pin")
    threads = profile.cpu_threads
    tools: dict[str, dict[str, Any]] = {}
    rows = []
    for row in profile.tools:
        params = _params(row, threads)
        if params is None or (row.gpu is None and cpu_only == "skip"):
            continue
        share = (gpu_shares or {}).get(row.tool, row.declared_gpu_share or 0.5)
        params["gpu_share"] = min(max(share, 0.01), 1.0)
        entry: dict[str, Any] = {"params": params}
        if row.gpu is None:
            entry["hints"] = {"gpu_capable": False}
        if row.declared_idempotent:  # the tool's own statement, which --declare none keeps
            entry.setdefault("hints", {})["idempotent"] = True
        tools[row.tool] = entry
        rows.append(row)
    if not tools:
        raise ValueError(
            "no tool in this profile was measured on both cpu and cuda, so no ground truth "
            "can be built: profile with --devices cpu,cuda on a CUDA machine, or keep CPU-only "
            "tools pinned to the CPU with `devsched profile --cpu-only pin` "
            "(Python: profile_to_scenarios(..., cpu_only='pin'))"
        )
    batch = _interleave(rows, MAX_BATCH)
    total_vram = sum(tools[t]["params"]["vram_mb"] for t in batch)
    largest = max(tools[t]["params"]["vram_mb"] for t in batch)
    cores = int(profile.host.get("cpu_count", "8") or 8)
    testbed = {"cpu_cores": cores, "noise": _noise(profile), "seed": 0}
    where = f"{profile.size or 'custom'} profile of {profile.created}"
    specs = [
        ("serial", "serial", {"kind": "serial", "calls": sorted(tools)},
         max(total_vram, largest, 1.0) * 1.5, f"Every profiled tool once, in a chain ({where})."),
        ("parallel", "parallel", {"kind": "parallel", "calls": batch},
         max(total_vram * 1.5, 1.0), f"Up to {MAX_BATCH} profiled tools in one batch ({where})."),
        ("memory", "memory", {"kind": "parallel", "calls": batch},
         max(total_vram * 0.5, largest * 1.05, 1.0),
         f"The parallel batch under half its VRAM need ({where})."),
    ]
    out = []
    for suffix, category, workload, budget, description in specs:
        out.append(Scenario.model_validate({
            "name": f"{prefix}_{suffix}",
            "category": category,
            "description": description,
            "testbed": {**testbed, "vram_budget_mb": round(budget, 1)},
            "tools": tools,
            "workload": {**workload, "rounds": rounds},
        }))
    return out


def write_scenarios(scenarios: Sequence[Any], folder: str | Path) -> list[Path]:
    """Write each scenario as ``<folder>/<name>.yaml``; returns the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in scenarios:
        data = s.model_dump(mode="json", exclude_none=True)
        path = folder / f"{s.name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths
