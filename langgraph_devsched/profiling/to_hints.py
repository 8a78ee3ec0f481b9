"""From a profile to device hints: what ``devsched profile --hints-out`` writes and what
``DeviceToolNode(hints="profile.json")`` reads.

Per tool: ``profile.cpu_ms`` = CPU median, ``profile.gpu_ms`` = GPU median (transfers
included, as the profiler measures it), ``profile.transfer_ms`` = GPU transfer median,
``vram_mb`` = peak VRAM measured on the GPU (else the declared estimate), ``gpu_share`` = the
declared share, ``gpu_capable: false`` for a tool the profiler found CPU-only; ``weights_mb`` =
the CUDA memory the first call left allocated (else the declared weights), ``load_ms`` = per
side, what the first (cold) call cost over the warm median where that is a real load (over
`LOAD_FLOOR_MS` and `LOAD_FLOOR_RATIO` of the median, for a tool with a model: declared, or
weights declared or measured), ``model`` as declared, ``idempotent: true`` where the tool
declared itself side-effect free. A tool measured nowhere keeps only what it declared.

>>> from langgraph_devsched.profiling.model import DeviceRun, Profile, ToolProfile, summarize
>>> run = DeviceRun(device="cpu", latency=summarize([4.0, 6.0]), samples_ms=[4.0, 6.0],
...                 cpu_threads=1)
>>> row = ToolProfile(tool="ocr", declared_vram_mb=900, runs={"cpu": run})
>>> p = Profile(created="now", repeats=2, warmup=0, cpu_threads=1, devices_requested=["cpu"],
...             devices_measured=["cpu"], tools=[row])
>>> profile_hints(p)
{'ocr': {'vram_mb': 900.0, 'profile': {'cpu_ms': 5.0}}}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from langgraph_devsched.profiling.model import Profile, ToolProfile


def looks_like_profile(data: object) -> bool:
    """True for the JSON `Profile` format (``tools`` is a list of rows), not a hints file."""
    return (
        isinstance(data, Mapping)
        and isinstance(data.get("tools"), list)
        and "devices_measured" in data
    )


def tool_hints(row: ToolProfile) -> dict[str, Any]:
    """The hints one profiled tool gets (see the module docstring)."""
    hints: dict[str, Any] = {}
    if not row.gpu_capable:
        hints["gpu_capable"] = False
    gpu = row.gpu
    peak = gpu.peak_vram_mb if gpu is not None else None
    vram = peak if peak else row.declared_vram_mb
    if vram:
        hints["vram_mb"] = round(float(vram), 1)
    if row.declared_gpu_share is not None:
        hints["gpu_share"] = row.declared_gpu_share
    solo: dict[str, float] = {}
    if row.cpu is not None:
        solo["cpu_ms"] = round(row.cpu.latency.median_ms, 4)
    if gpu is not None:
        solo["gpu_ms"] = round(gpu.latency.median_ms, 4)
        if gpu.transfer_ms:
            solo["transfer_ms"] = round(gpu.transfer_ms, 4)
    if solo:
        hints["profile"] = solo
    hints.update(_residency(row))
    if row.declared_idempotent:  # what the tool states, kept: it may be measured twice
        hints["idempotent"] = True
    return hints


LOAD_FLOOR_MS = 5.0
"""A cold start counts as a model load above this many ms over a warm call ..."""
LOAD_FLOOR_RATIO = 0.5
"""... and above this fraction of the warm median (JIT and caches make any first call slower)."""


def _residency(row: ToolProfile) -> dict[str, Any]:
    """``model``, ``weights_mb`` and ``load_ms`` from the cold starts and resident memory."""
    out: dict[str, Any] = {}
    load: dict[str, float] = {}
    for side, run in (("cpu_ms", row.cpu), ("gpu_ms", row.gpu)):
        extra = run.load_ms if run is not None else None
        if run is not None and extra is not None and extra > max(
                LOAD_FLOOR_MS, LOAD_FLOOR_RATIO * run.latency.median_ms):
            load[side] = round(extra, 1)
    weights = row.gpu.resident_mb if row.gpu is not None else None
    weights = weights if weights and weights >= 1.0 else row.declared_weights_mb
    if row.declared_model:
        out["model"] = row.declared_model
    if weights:
        out["weights_mb"] = round(float(weights), 1)
    if load and (row.declared_model or weights):  # a slow first call of a tool with no
        out["load_ms"] = load  # model (imports, caches) is no model load
    return out


def profile_hints(profile: Profile | Mapping[str, Any] | str | Path) -> dict[str, dict[str, Any]]:
    """Hints for every tool of ``profile`` (a `Profile`, its JSON data, or its file)."""
    if isinstance(profile, (str, Path)):
        profile = Profile.load(profile)
    elif not isinstance(profile, Profile):
        profile = Profile.model_validate(dict(profile))
    return {row.tool: tool_hints(row) for row in profile.tools}


def write_hints(
    hints: Mapping[str, Mapping[str, Any]], path: str | Path, *, comments: Sequence[str] = ()
) -> Path:
    """Write ``{"tools": hints}`` as YAML (or JSON for ``*.json``): a file the node accepts.
    ``comments`` become ``#`` lines under the YAML header (JSON has none)."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"tools": {name: dict(fields) for name, fields in hints.items()}}
    if path.suffix == ".json":
        text = json.dumps(data, indent=2) + "\n"
    else:
        header = "# device hints measured by `devsched profile` (see docs/hints.md)\n"
        header += "".join(f"# {line}\n" for line in comments)
        text = header + yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path
