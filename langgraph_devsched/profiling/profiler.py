"""Measure tools on each available device: warm-up, repeated runs, transfers, peak VRAM.

Per tool and device: ``warmup`` calls (the first builds the tool's model: its latency is the
cold start, ``cold_ms``, and on CUDA the memory it leaves allocated is the resident weights,
``resident_mb``), then ``repeats`` timed calls (``perf_counter`` around ``tool.invoke``,
then a CUDA synchronize, so queued kernels are inside the time). Transfers are the copies
the tool makes through `to_device` (timed in isolation, see `transfer`), else the
``transfer_ms`` of its declared profile. Peak VRAM is ``torch.cuda.max_memory_allocated``
after ``reset_peak_memory_stats``, minus what was allocated before the tool's first call (so
other tools' cached models do not count). CPU threads are pinned with
``torch.set_num_threads`` for the whole run and restored.

>>> from langchain_core.tools import tool
>>> @tool
... def shout(text: str) -> str:
...     '''Upper-case a text.'''
...     return text.upper()
>>> p = profile_tools([shout], devices=["cpu"], repeats=2, args={"shout": {"text": "hi"}})
>>> row = p.tools[0]
>>> row.tool, row.runs["cpu"].latency.runs, row.tool_class, row.runs["cpu"].output_preview
('shout', 1, 'unknown', 'HI')
>>> row.ran_once  # not declared side-effect free: called once
True
>>> p = profile_tools([shout], devices=["cpu"], repeats=2, args={"shout": {"text": "hi"}},
...                   assume_idempotent=True)
>>> p.tools[0].runs["cpu"].latency.runs, p.tools[0].ran_once
(2, False)

An ``async def`` tool is awaited (`langgraph_devsched.profiling.invoke`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from langchain_core.tools import BaseTool

from langgraph_devsched.device import injected_device_args
from langgraph_devsched.hints import code_hints
from langgraph_devsched.profiling.classify import classify
from langgraph_devsched.profiling.invoke import ToolCaller
from langgraph_devsched.profiling.model import (
    DeviceRun,
    Profile,
    Thresholds,
    ToolProfile,
    TransferMethod,
    summarize,
)
from langgraph_devsched.profiling.transfer import recording_transfers
from langgraph_devsched.telemetry import cuda_status

EXAMPLE_ARGS_KEY = "devsched_example_args"
"""``tool.metadata`` key with the arguments the profiler calls a tool with."""

DEVICE_KINDS = ("cpu", "cuda")


def parse_devices(devices: Sequence[str] | str) -> list[str]:
    """Normalise ``"cpu,cuda"`` / ``["cpu", "cuda:1"]`` to device strings (cuda -> cuda:0)."""
    items = devices.split(",") if isinstance(devices, str) else list(devices)
    out: list[str] = []
    for raw in (d.strip() for d in items):
        if not raw:
            continue
        kind, _, index = raw.partition(":")
        digits = index.isascii() and index.isdigit()  # "²" passes isdigit, not int
        if kind not in DEVICE_KINDS or (index and (kind == "cpu" or not digits)):
            raise ValueError(f"unknown device {raw!r}; valid devices: cpu, cuda, cuda:<index>")
        dev = "cpu" if kind == "cpu" else f"cuda:{index or 0}"
        if dev not in out:
            out.append(dev)
    if not out:
        raise ValueError("no device given; valid devices: cpu, cuda, cuda:<index>")
    return out


def kind_of(device: str) -> str:
    """``'cpu'`` or ``'cuda'``: the key a device's run has in `ToolProfile.runs`."""
    return "cpu" if device == "cpu" else "cuda"


def example_args(tool: BaseTool, given: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """The arguments to profile ``tool`` with: given, from its metadata, or {} if none needed."""
    if given and tool.name in given:
        return dict(given[tool.name])
    meta = tool.metadata or {}
    if EXAMPLE_ARGS_KEY in meta:
        return dict(meta[EXAMPLE_ARGS_KEY])
    schema: Any = tool.tool_call_schema
    has_schema = hasattr(schema, "model_json_schema")
    required = schema.model_json_schema().get("required", []) if has_schema else []
    if required:
        raise ValueError(
            f"no example arguments for tool {tool.name!r} (it requires {', '.join(required)}): "
            f"pass args={{{tool.name!r}: {{...}}}} (CLI: --example-args) or set "
            f"tool.metadata[{EXAMPLE_ARGS_KEY!r}]"
        )
    return {}


def load_tools(spec: str) -> list[BaseTool]:
    """Load ``MODULE:ATTR``: a tool, a list of tools, or a callable returning either."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:ATTR (e.g. my_app.tools:TOOLS), got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        hint = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]:
            cwd = os.getcwd()
            where = f", the working directory {cwd} included" if cwd in sys.path else ""
            hint = (
                f" (searched sys.path{where}: run from the folder that holds it, or add that "
                "folder to PYTHONPATH)"
            )
        raise ValueError(
            f"cannot import module {module_name!r} from {spec!r}: {exc}{hint}"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_name!r} has no attribute {attr!r} (from {spec!r})")
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, BaseTool):
        obj = obj()
    items = [obj] if isinstance(obj, BaseTool) else obj
    if not isinstance(items, (list, tuple)) or not all(isinstance(t, BaseTool) for t in items):
        raise ValueError(
            f"{spec!r} must be a BaseTool, a list of BaseTool, or a callable returning one; "
            f"got {type(obj).__name__}"
        )
    return list(items)


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[int]:
    try:
        import torch
    except ImportError:
        yield n or os.cpu_count() or 1
        return
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def _host_info(devices: Sequence[str]) -> dict[str, str]:
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpu_count": str(os.cpu_count() or 1),
    }
    with contextlib.suppress(ImportError):
        import torch

        info["torch"] = torch.__version__
        for dev in devices:
            if dev != "cpu" and torch.cuda.is_available():
                info[dev] = torch.cuda.get_device_name(torch.device(dev))
    return info


class _Cuda:
    """CUDA helpers, only touched for CUDA devices."""

    @staticmethod
    def sync(device: str) -> None:
        if device != "cpu":
            import torch

            torch.cuda.synchronize(device)

    @staticmethod
    def start_peak(device: str) -> float:
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return float(torch.cuda.memory_allocated(device))

    @staticmethod
    def allocated(device: str) -> float:
        import torch

        torch.cuda.synchronize(device)
        return float(torch.cuda.memory_allocated(device))

    @staticmethod
    def peak_mb(device: str, baseline: float) -> float:
        import torch

        torch.cuda.synchronize(device)
        return max(0.0, torch.cuda.max_memory_allocated(device) - baseline) / 2**20


def measure(
    tool: BaseTool,
    args: Mapping[str, Any],
    device: str,
    *,
    repeats: int,
    warmup: int,
    cpu_threads: int,
    clock: Callable[[], float] = time.perf_counter,
) -> DeviceRun:
    """Run ``tool`` on ``device``: ``warmup`` calls, then ``repeats`` timed ones."""
    injected = injected_device_args(tool)
    on_gpu = device != "cpu"
    baseline = _Cuda.start_peak(device) if on_gpu else 0.0
    out: Any = None
    cold_ms = resident_mb = None
    samples, copies_ms, copies_bytes = [], [], []
    with ToolCaller(tool) as invoke:  # an async tool: awaited, on one event loop
        for i in range(warmup):
            before = _Cuda.allocated(device) if on_gpu and i == 0 else 0.0
            start = clock()
            out = invoke(args, device, injected)
            _Cuda.sync(device)
            if i == 0:  # the cold start: the call that loads the tool's model
                cold_ms = (clock() - start) * 1000.0
                if on_gpu:
                    resident_mb = max(0.0, _Cuda.allocated(device) - before) / 2**20
        for _ in range(repeats):
            with recording_transfers() as log:
                start = clock()
                out = invoke(args, device, injected)
                _Cuda.sync(device)
                samples.append((clock() - start) * 1000.0)
            copies_ms.append(log.ms)
            copies_bytes.append(log.bytes)
    transfer_ms, transfer_mb, method = _transfer(tool, copies_ms, copies_bytes, on_gpu)
    return DeviceRun(
        device=device,
        latency=summarize(samples),
        samples_ms=[round(s, 4) for s in samples],
        transfer_ms=transfer_ms,
        transfer_mb=transfer_mb,
        transfer_method=method,
        peak_vram_mb=_Cuda.peak_mb(device, baseline) if on_gpu else None,
        cpu_threads=cpu_threads,
        output_preview=str(getattr(out, "content", out))[:120],
        cold_ms=None if cold_ms is None else round(cold_ms, 4),
        resident_mb=None if resident_mb is None else round(resident_mb, 3),
    )


def _transfer(
    tool: BaseTool, copies_ms: list[float], copies_bytes: list[int], on_gpu: bool
) -> tuple[float, float, TransferMethod]:
    if not on_gpu:
        return 0.0, 0.0, "none"
    if any(copies_bytes):
        ms = summarize(copies_ms).median_ms
        return ms, max(copies_bytes) / 2**20, "observed"
    declared = (code_hints(tool) or {}).get("profile")
    declared_ms = getattr(declared, "transfer_ms", None)
    if isinstance(declared, Mapping):
        declared_ms = declared.get("transfer_ms")
    if declared_ms:
        return float(declared_ms), 0.0, "declared"
    return 0.0, 0.0, "none"


def available_devices(requested: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Split parsed devices into the usable ones and ``{"cuda": why}`` for an unusable GPU."""
    usable: list[str] = []
    unavailable: dict[str, str] = {}
    for dev in requested:
        if dev == "cpu":
            usable.append(dev)
            continue
        ok, why = cuda_status(int(dev.partition(":")[2] or 0))
        if ok:
            usable.append(dev)
        else:
            unavailable["cuda"] = f"{dev} requested but unavailable ({why})"
    return usable, unavailable


ProgressHook = Callable[[str, str], None]
"""Called as ``hook(tool_name, device)`` after each (tool, device) measurement."""


def profile_tools(
    tools: Sequence[BaseTool],
    *,
    devices: Sequence[str] | str = ("cpu", "cuda"),
    repeats: int = 5,
    warmup: int = 1,
    cpu_threads: int | None = None,
    args: Mapping[str, Mapping[str, Any]] | None = None,
    thresholds: Thresholds | None = None,
    size: str | None = None,
    on_progress: ProgressHook | None = None,
    on_start: ProgressHook | None = None,
    time_budget_s: float | None = None,
    assume_idempotent: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> Profile:
    """Profile ``tools`` on each requested device that is available and classify them.

    A CUDA device that is not available is noted in ``Profile.notes`` and in each tool's
    ``skipped``; the CPU profile still runs. A tool that fails on a device (a missing package,
    an error) is recorded as skipped there with the reason; the others go on. Once
    ``time_budget_s`` has passed, the remaining tools are listed as skipped, not measured.

    A tool that does not declare itself side-effect free (``idempotent: true`` in its hints)
    is called once in all: one timed call, no warm-up, on the first requested device it can
    run on (`ToolProfile.ran_once`, and a line in ``Profile.notes``); ``assume_idempotent``
    warms up and repeats every tool on every device.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
    requested = parse_devices(devices)
    th = thresholds or Thresholds()
    usable, unavailable = available_devices(requested)
    rest = "cpu only" if "cpu" in requested else "nothing"
    notes = [f"{why}; profiled {rest}" for why in unavailable.values()]
    rows: list[ToolProfile] = []
    started = clock()
    with _threads(cpu_threads) as threads:
        for tool in tools:
            over = time_budget_s is not None and clock() - started > time_budget_s
            if over and not any(n.startswith("time budget") for n in notes):
                notes.append(f"time budget of {time_budget_s:g} s exhausted; later tools skipped")
            skip = dict(unavailable)
            if over:
                skip.update({kind_of(dev): "time budget exhausted" for dev in usable})
            rows.append(_profile_one(
                tool, [] if over else usable, skip, args, repeats, warmup, threads, th,
                on_progress, on_start, assume_idempotent,
            ))
            if over and on_progress:
                for dev in usable:
                    on_progress(tool.name, dev)
    once = [r.tool for r in rows if r.ran_once]
    if once:
        notes.append(
            f"called once (no warm-up, one device): {', '.join(once)}, not declared "
            "side-effect free; declare idempotent: true in their hints, or pass "
            "assume_idempotent=True (CLI: --assume-idempotent), to warm up and repeat them"
        )
    return Profile(
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        size=size,
        repeats=repeats,
        warmup=warmup,
        cpu_threads=threads,
        devices_requested=requested,
        devices_measured=[d for d in usable if any(kind_of(d) in r.runs for r in rows)],
        host=_host_info(usable),
        notes=notes,
        thresholds=th,
        tools=rows,
    )


def _profile_one(
    tool: BaseTool,
    usable: Sequence[str],
    unavailable: Mapping[str, str],
    given: Mapping[str, Mapping[str, Any]] | None,
    repeats: int,
    warmup: int,
    threads: int,
    th: Thresholds,
    on_progress: ProgressHook | None,
    on_start: ProgressHook | None,
    assume_idempotent: bool = False,
) -> ToolProfile:
    hints = dict(code_hints(tool) or {})
    # no hints: GPU-capable only if the tool asks for its device
    gpu_capable = bool(hints.get("gpu_capable", True)) if hints else bool(
        injected_device_args(tool)
    )
    share = hints.get("gpu_share")
    row = ToolProfile(
        tool=tool.name,
        gpu_capable=gpu_capable,
        declared_vram_mb=float(hints.get("vram_mb", 0.0)),
        declared_gpu_share=float(share) if share is not None else None,
        declared_model=hints.get("model"),
        declared_weights_mb=float(hints.get("weights_mb", 0.0)),
        declared_idempotent=hints.get("idempotent") is True,
    )
    row.skipped.update(unavailable)
    once = not (row.declared_idempotent or assume_idempotent)  # side effects: one call in all
    try:
        args = example_args(tool, given)
    except ValueError as exc:
        args = None
        for dev in usable:
            row.skipped[kind_of(dev)] = str(exc)
    for dev in usable:
        kind = kind_of(dev)
        if on_start:
            on_start(tool.name, dev)
        if args is None:
            pass
        elif kind == "cuda" and not gpu_capable:
            row.skipped[kind] = "not GPU-capable (gpu_capable=False, or no hints and no device arg)"
        elif once and row.ran_once:
            row.skipped[kind] = (
                "not called again: not declared side-effect free (idempotent: true), so it "
                "ran once, on the first device"
            )
        else:
            row.ran_once = once
            try:
                row.runs[kind] = measure(
                    tool, args, dev, repeats=1 if once else repeats,
                    warmup=0 if once else warmup, cpu_threads=threads,
                )
            except ImportError as exc:
                row.skipped[kind] = f"missing package: {exc}"
            except Exception as exc:
                row.skipped[kind] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
        if on_progress:
            on_progress(tool.name, dev)
    cpu, gpu = row.runs.get("cpu"), row.runs.get("cuda")
    missing = "; ".join(f"{k}: {v.split(' (')[0]}" for k, v in row.skipped.items())
    result = classify(
        cpu.latency if cpu else None,
        gpu.latency if gpu else None,
        transfer_ms=gpu.transfer_ms if gpu else 0.0,
        thresholds=th,
        missing_reason=missing,
    )
    row.tool_class, row.reason, row.gpu_speedup = (
        result.tool_class, result.reason, result.gpu_speedup,
    )
    return row
