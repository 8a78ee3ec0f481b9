"""Several GPUs on one machine: device strings and the one default rule for which GPU.

A `Decision` names an option per call (``gpu_now`` / ``gpu_queued`` / ``cpu``) and, where a
machine has several GPUs, may name the GPU index per call (``Decision.gpus``). A GPU call
whose decision names no GPU gets the one default rule, `default_gpus`:

0. only among the GPUs the tool's ``gpus`` hint allows (default: any; a hint naming none
   of this machine's GPUs is logged, once, and leaves any GPU);
1. a GPU that can take the call now: below its concurrency cap (``max_active``, counting
   the calls running there and the step's earlier calls placed there), and its memory
   (working memory, and its model's weights when they are not resident there) fits in
   what the GPU holds once its idle models are evicted (`GpuDevice.room_mb`, less what the
   step's earlier calls placed there); only when none can does the rule go on among all;
2. a GPU where the call's model is warm (resident now, or placed there earlier in the step);
3. else the GPU with the most free VRAM (its free memory less the running calls' working
   memory and what the step's earlier calls placed there: their working memory and cold
   weights);
4. else (a tie) the lowest index.

With one GPU the answer is always 0, so every scheduler that names no GPU runs as before.

>>> from langgraph_devsched.telemetry import GpuDevice
>>> from langgraph_devsched.residency import WarmModel
>>> two = (GpuDevice(0, "a", 24000, resident=(WarmModel("llm", 16000),)), GpuDevice(1, "b", 24000))
>>> default_gpus([GpuCall("c1", "embed", 500), GpuCall("c2", "llm", 900, 16000)], two)
{'c1': 1, 'c2': 0}
>>> gpu_device(1), gpu_index("cuda:1"), gpu_index("cpu"), gpu_index("cuda:¹")
('cuda:1', 1, None, None)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_devsched.log_once import warn_once
from langgraph_devsched.telemetry import GpuDevice

logger = logging.getLogger(__name__)


def gpu_device(index: int) -> str:
    """The device string of GPU ``index`` (``cuda:<index>``)."""
    return f"cuda:{index}"


def gpu_index(device: str) -> int | None:
    """The GPU index a device string names (``cuda`` alone: 0), None for ``cpu``/``none``."""
    if device == "cuda":
        return 0
    if device.startswith("cuda:"):
        return ascii_index(device[5:])
    return None


def ascii_index(text: str) -> int | None:
    """``text`` read as a GPU index: ASCII digits only (``"1"``), else None. `str.isdigit`
    also passes ``"²"`` and other Unicode digits, which `int` cannot read.

    >>> ascii_index("12"), ascii_index("²"), ascii_index("-1"), ascii_index("")
    (12, None, None, None)
    """
    return int(text) if text.isascii() and text.isdigit() else None


@dataclass(frozen=True)
class GpuCall:
    """What the default rule reads of one GPU-placed call: its model and memory."""

    call_id: str
    model: str | None = None
    vram_mb: float = 0.0
    weights_mb: float = 0.0
    gpu: int | None = None
    """The GPU the decision named, or None (the rule chooses)."""
    allowed: tuple[int, ...] | None = None
    """The GPUs its ``gpus`` hint allows (None: any)."""

    @classmethod
    def of(cls, call_id: str, tool: str, spec: Any, gpu: int | None = None,
           vram_mb: float | None = None) -> GpuCall:
        """The call of ``tool`` with hints ``spec`` (a `hints.ToolDeviceSpec`): its model,
        working memory (``vram_mb`` where given, else the hint's), weights and allowed GPUs;
        ``gpu``: the GPU its decision named."""
        return cls(call_id, spec.model_name(tool), spec.vram_mb if vram_mb is None else vram_mb,
                   spec.weights_mb, gpu, spec.gpus)


def default_gpus(calls: Sequence[GpuCall], devices: Sequence[GpuDevice]) -> dict[str, int]:
    """The GPU index of each call, in order: the one its decision named, else the rule in
    the module docstring (warm model, then most free VRAM, then lowest index). No device
    (a CPU-only machine) or one: every call on index 0 (0 is where a lone GPU is)."""
    if len(devices) <= 1:
        return {c.call_id: 0 if c.gpu is None else c.gpu for c in calls}  # one GPU: 0
    free = {d.index: d.free_mb - d.working_mb for d in devices}
    room = _Room(devices)
    warm = {d.index: {w.model for w in d.resident if w.side == "gpu"} for d in devices}
    out: dict[str, int] = {}
    for call in calls:
        index = call.gpu
        if index is None:
            index = min(candidates(call, free), key=lambda i: (
                not room.takes(call, i, call.model in warm[i]),
                call.model is None or call.model not in warm[i], -free[i], i))
        out[call.call_id] = index
        if index in free:
            cold = call.model is not None and call.model not in warm[index]
            free[index] -= call.vram_mb + (call.weights_mb if cold else 0.0)
            room.place(call, index, cold)
            if call.model is not None:
                warm[index].add(call.model)
    return out


def takes_now(call: GpuCall, device: GpuDevice) -> bool:
    """Whether ``device`` can take ``call`` now: below its cap, and its memory fits once
    the GPU's idle models are evicted (rule 1 of the module docstring, for one call).

    >>> from langgraph_devsched.residency import WarmModel
    >>> gpu = GpuDevice(1, "b", 24000, resident=(WarmModel("idle", 17000),))
    >>> takes_now(GpuCall("c", "m", 14000, 1000), gpu), gpu.free_mb
    (True, 7000.0)
    """
    warm = call.model is not None and device.warm(call.model)
    return _Room([device]).takes(call, device.index, warm)


class _Room:
    """Per GPU, what a call could get now (idle models evicted) and the calls it may still
    start under its cap, as the default rule places a step's calls one by one."""

    def __init__(self, devices: Sequence[GpuDevice]) -> None:
        self.mb = {d.index: d.room_mb for d in devices}
        self.slots = {d.index: None if d.max_active is None else d.max_active - d.active
                      for d in devices}
        self.idle = {d.index: {w.model: w.weights_mb for w in d.resident if w.side == "gpu"
                               and w.in_use == 0 and not w.keep_warm} for d in devices}

    def _need(self, call: GpuCall, index: int, warm: bool) -> float:
        """Its working memory plus its weights: to load (cold), or resident but idle (the
        room counts them as evictable; the call would keep them)."""
        if call.model is None:
            return call.vram_mb
        if not warm:
            return call.vram_mb + call.weights_mb
        return call.vram_mb + self.idle[index].get(call.model, 0.0)

    def takes(self, call: GpuCall, index: int, warm: bool) -> bool:
        slots = self.slots[index]
        return (slots is None or slots > 0) and (
            self._need(call, index, warm) <= self.mb[index] + 1e-9)

    def place(self, call: GpuCall, index: int, cold: bool) -> None:
        self.mb[index] -= self._need(call, index, not cold)
        if call.model is not None:
            self.idle[index].pop(call.model, None)  # in use now: never evicted
        slots = self.slots[index]
        if slots is not None:
            self.slots[index] = slots - 1


def candidates(call: GpuCall, devices: Iterable[int]) -> list[int]:
    """The GPUs the rule may give ``call``: those its hint allows, or any when the hint
    names none of them (logged)."""
    indices = list(devices)
    if call.allowed is None:
        return indices
    kept = [i for i in indices if i in call.allowed]
    if not kept:
        warn_once(logger, ("gpus_hint", call.allowed, tuple(indices)),
                  "a gpus hint %s names none of this machine's GPUs %s: its calls (%s, ...) "
                  "go to any GPU (logged once)", list(call.allowed), indices, call.call_id)
        return indices
    return kept


def check_gpus(
    given: object, gpu_calls: Sequence[str], devices: Sequence[GpuDevice],
    allowed: Mapping[str, tuple[int, ...] | None] | None = None,
) -> tuple[dict[str, int], tuple[str, ...]]:
    """The valid part of a decision's ``gpus`` (an index of a device its ``gpus`` hint
    allows, for a GPU-placed call) and the call ids whose index was not valid (then the
    default rule places them)."""
    if not isinstance(given, Mapping) or not given:
        return {}, ()
    indices = [d.index for d in devices] or [0]
    kept: dict[str, int] = {}
    bad: list[str] = []
    for call_id in gpu_calls:
        if call_id not in given:
            continue
        index = given[call_id]
        pins = (allowed or {}).get(call_id)
        valid = candidates(GpuCall(call_id, allowed=pins), indices)
        if type(index) is int and index in valid:
            kept[call_id] = index
        else:
            bad.append(call_id)
    return kept, tuple(bad)


def describe_devices(devices: Sequence[GpuDevice]) -> str:
    """One line per GPU, for logs and errors: ``cuda:0 (L4, 24000 MB, 1.0x)``.

    >>> describe_devices([GpuDevice(0, "L4", 24000)])
    'cuda:0 (L4, 24000 MB, 1x)'
    """
    return ", ".join(f"{d.device} ({d.name}, {d.budget_mb:.0f} MB, {d.speed:g}x)"
                     for d in devices) or "no GPU"
