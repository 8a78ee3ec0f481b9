"""The agentic answer on a machine with several GPUs: each GPU option names its GPU.

Spelling: an answer value is ``cpu``, or a GPU option and a GPU index joined by ``@``
(``gpu_now@0``, ``gpu_queued@1``). Read leniently: ``gpu_now@cuda:1`` is ``gpu_now@1``; a
bare ``gpu_now`` is valid and leaves the GPU to the default rule (`gpus.default_gpus`); an
index the machine lacks, or that the call's ``gpus`` hint forbids, is repaired to the
default rule with the cause ``gpu_not_allowed`` (`split_answer`). A call's allowed values
(`expand`: the json_schema enum per call) are its allowed options, each GPU option once per
GPU its hint allows. With one GPU none of this applies: the values stay ``gpu_now``,
``gpu_queued`` and ``cpu``, and the default rule puts every GPU call on GPU 0.

>>> expand(["gpu_now", "gpu_queued", "cpu"], [0, 1])
['gpu_now@0', 'gpu_now@1', 'gpu_queued@0', 'gpu_queued@1', 'cpu']
>>> split("gpu_now@cuda:1"), split("gpu_queued"), split("cpu")
(('gpu_now', 1), ('gpu_queued', None), ('cpu', None))
>>> spell("gpu_now", 1), spell("cpu", 1), spell("gpu_queued", None)
('gpu_now@1', 'cpu', 'gpu_queued')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph_devsched.gpus import GpuCall, ascii_index, default_gpus, gpu_index
from langgraph_devsched.options import DEVICE_OPTIONS, GPU_OPTIONS
from langgraph_devsched.schedulers.agentic.answers import ParsedAnswer
from langgraph_devsched.schedulers.gpu_workers import allowed_gpus
from langgraph_devsched.telemetry import DeviceState

if TYPE_CHECKING:
    from langgraph_devsched.schedulers.agentic.constraints import AgenticCause
    from langgraph_devsched.schedulers.base import Batch, CallRequest

GPU_SEP = "@"
"""Joins a GPU option and its GPU index in an answer value (``gpu_now@1``)."""
_BAD = -1
"""`split`'s index for a GPU part it cannot read (``gpu_now@x``)."""


def several(device: DeviceState) -> bool:
    """Whether the machine has several GPUs (then answers name the GPU)."""
    return len(device.devices) > 1


def spell(option: str, gpu: int | None) -> str:
    """The answer value of ``option`` on GPU ``gpu`` (None, or a CPU option: the option)."""
    return option if gpu is None or option not in GPU_OPTIONS else f"{option}{GPU_SEP}{gpu}"


def split(value: str) -> tuple[str, int | None]:
    """An answer value as (option, GPU index named); None: no GPU named; -1: a GPU part
    that names no index (``gpu_now@x``). The option is not checked here."""
    option, sep, where = value.strip().partition(GPU_SEP)
    if not sep:
        return option, None
    where = where.strip()
    index = ascii_index(where)  # ASCII digits only: "²" passes isdigit, not int
    if index is None:
        index = gpu_index(where)
    return option.strip(), _BAD if index is None or where == "cuda" else index


def expand(options: Sequence[str], gpus: Sequence[int]) -> list[str]:
    """``options`` with each GPU option once per GPU of ``gpus`` (in the options' order)."""
    out: list[str] = []
    for option in options:
        out.extend([spell(option, g) for g in gpus] if option in GPU_OPTIONS else [option])
    return out


def call_gpus(call: CallRequest, device: DeviceState) -> list[int]:
    """The GPU indices ``call`` may run on: those its ``gpus`` hint allows (any, when the
    hint names none of this machine's GPUs: `gpus.candidates`)."""
    return [d.index for d in allowed_gpus(call.call_id, call.spec, device.devices)]


def all_values(device: DeviceState) -> list[str]:
    """Every answer value on this machine (no call restricted)."""
    return expand(list(DEVICE_OPTIONS), [d.index for d in device.devices])


@dataclass(frozen=True)
class GpuAnswer:
    """An answer with the GPU taken out of each value: the options alone (what `repair`
    reads), the valid GPU named per call, and the calls whose named GPU was not valid."""

    answer: ParsedAnswer
    named: dict[str, int] = field(default_factory=dict)
    causes: dict[str, AgenticCause] = field(default_factory=dict)


def split_answer(answer: ParsedAnswer, batch: Batch, device: DeviceState) -> GpuAnswer:
    """``answer``'s values split into options and GPUs (`split`). A GPU the machine lacks or
    the call's hint forbids is dropped (the default rule places the call) with the cause
    ``gpu_not_allowed``; a GPU named with ``cpu`` is ignored.

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> from langgraph_devsched.schedulers.base import Batch
    >>> from langgraph_devsched.telemetry import GpuDevice
    >>> two = DeviceState(True, "a", 24000, 0, 0.0, 8,
    ...                   gpus=(GpuDevice(0, "a", 24000), GpuDevice(1, "b", 24000)))
    >>> batch = Batch.of([("a", "ocr", ToolDeviceSpec()), ("b", "asr", ToolDeviceSpec(gpus=(0,)))])
    >>> out = split_answer(ParsedAnswer({"a": "gpu_now@1", "b": "gpu_queued@1"}), batch, two)
    >>> out.answer.options, out.named, out.causes
    ({'a': 'gpu_now', 'b': 'gpu_queued'}, {'a': 1}, {'b': 'gpu_not_allowed'})
    """
    calls = {c.call_id: c for c in batch.calls}
    options: dict[str, str] = {}
    named: dict[str, int] = {}
    causes: dict[str, AgenticCause] = {}
    for call_id, value in answer.options.items():
        option, index = split(value)
        options[call_id] = option
        call = calls.get(call_id)
        if index is None or call is None or option not in GPU_OPTIONS:
            continue
        if index in call_gpus(call, device):
            named[call_id] = index
        else:
            causes[call_id] = "gpu_not_allowed"
    return GpuAnswer(ParsedAnswer(options, answer.reason, answer.issues), named, causes)


def placed_gpus(
    batch: Batch, device: DeviceState, mapping: Mapping[str, str],
    named: Mapping[str, int] | None = None, seen: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """The GPU of every GPU-placed call of ``mapping``: the one ``named`` where given, else
    the default rule's (`gpus.default_gpus`, in the batch's order, as the executors apply
    it). One GPU, or none: every GPU call on 0."""
    named = named or {}
    seen = seen or {}
    calls = [
        GpuCall.of(c.call_id, c.tool, c.spec, named.get(c.call_id),
                   vram_mb=max(c.spec.vram_mb, seen.get(c.tool, 0.0)))
        for c in batch.calls if mapping[c.call_id] in GPU_OPTIONS
    ]
    return default_gpus(calls, device.devices)


def slot_mapping(
    batch: Batch, device: DeviceState, mapping: Mapping[str, str],
    named: Mapping[str, int] | None = None, seen: Mapping[str, float] | None = None,
) -> dict[str, str]:
    """``mapping`` with every GPU option spelled on its GPU (`placed_gpus`): the form the
    executed mappings of a machine with several GPUs are kept in (`gpu_outcomes`)."""
    where = placed_gpus(batch, device, mapping, named, seen)
    return {c: spell(o, where.get(c)) for c, o in mapping.items()}


def kept(gpus: Mapping[str, Any], mapping: Mapping[str, str]) -> dict[str, int]:
    """The entries of ``gpus`` whose call is GPU-placed in ``mapping``."""
    return {c: int(g) for c, g in gpus.items() if mapping.get(c) in GPU_OPTIONS}
