"""The hard constraints on every agentic answer, the repair that enforces them, the causes.

`repair` turns a parsed answer (`answers.parse_answer`) into a complete mapping that obeys
the hints and the operator's `HardConstraints`, taking the fallback scheduler's option for
every call it cannot repair, and says per call why (`AgenticCause`).

>>> from langgraph_devsched.schedulers.agentic.answers import parse_answer
>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch
>>> from langgraph_devsched.telemetry import DeviceState
>>> batch = Batch.of([("a", "asr", ToolDeviceSpec(vram_mb=6000)),
...                   ("b", "ocr", ToolDeviceSpec(vram_mb=3000))])
>>> answer = parse_answer({"assignments": [{"call_id": "a", "option": "gpu_now"},
...     {"call_id": "b", "option": "gpu_now"}], "reason": "both fast on the GPU"})
>>> gpu = DeviceState(True, "gpu", 8000, 0, 0, 8)
>>> mapping, causes = repair(answer, batch, gpu, HardConstraints(), fallback={})
>>> mapping, causes
({'a': 'gpu_now', 'b': 'gpu_queued'}, {'b': 'vram_over_budget'})
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption, is_gpu, parse_option
from langgraph_devsched.schedulers.agentic.answers import ParsedAnswer
from langgraph_devsched.schedulers.base import Batch
from langgraph_devsched.telemetry import DeviceState

AgenticCause = Literal[
    "llm_error",
    "timeout",
    "no_answer",
    "busy",
    "vetoed",
    "missing_call",
    "unknown_option",
    "not_allowed",
    "pinned",
    "cpu_forbidden",
    "vram_over_budget",
    "no_gpu",
    "gpu_not_allowed",
]
"""Why a call's option is not the sub-agent's answer. The whole-step causes (``llm_error``,
``timeout``, ``no_answer``, ``busy``: every consultation slot is taken by a model still
running), ``vetoed`` (not a failure: the model answered, and the guard vetoed its mapping
on the evidence, `exploration.Veto`), ``missing_call`` and ``unknown_option`` take the
fallback scheduler's option; the others repair the answer in place (``gpu_not_allowed``, on a
machine with several GPUs: a GPU index the machine lacks or the call's ``gpus`` hint
forbids; the default rule places the call, `gpu_choice`)."""
REPAIRED: frozenset[AgenticCause] = frozenset(
    {"not_allowed", "pinned", "cpu_forbidden", "vram_over_budget", "no_gpu", "gpu_not_allowed"}
)


@dataclass(frozen=True)
class HardConstraints:
    """Rules enforced on every mapping, whatever the sub-agent says.

    ``min_free_vram_mb``: VRAM to keep free beside the background use (e.g. for a chat model
    on the same GPU); ``pinned``: tool -> option; ``cpu_forbidden``: tools never sent to the
    CPU by the scheduler.

    >>> HardConstraints(pinned={"ocr": "fast"})
    Traceback (most recent call last):
    ...
    ValueError: pinned['ocr']: unknown device option 'fast'; valid options: gpu_now, gpu_queued, cpu
    """

    min_free_vram_mb: float = 0.0
    pinned: Mapping[str, DeviceOption] = field(default_factory=dict)
    cpu_forbidden: frozenset[str] = frozenset()

    def __init__(
        self,
        *,
        min_free_vram_mb: float = 0.0,
        pinned: Mapping[str, str] | None = None,
        cpu_forbidden: Collection[str] = (),
    ) -> None:
        if min_free_vram_mb < 0:
            raise ValueError(f"min_free_vram_mb must be >= 0, got {min_free_vram_mb}")
        checked = {t: parse_option(o, where=f"pinned[{t!r}]") for t, o in (pinned or {}).items()}
        forbidden = frozenset(cpu_forbidden)
        clash = sorted(t for t, o in checked.items() if o == "cpu" and t in forbidden)
        if clash:
            raise ValueError(
                f"tool(s) {', '.join(map(repr, clash))} pinned to 'cpu' and in cpu_forbidden; "
                "remove one of the two"
            )
        object.__setattr__(self, "min_free_vram_mb", float(min_free_vram_mb))
        object.__setattr__(self, "pinned", checked)
        object.__setattr__(self, "cpu_forbidden", forbidden)

    def describe(self) -> dict[str, Any]:
        """The constraints as JSON-able data (what the sub-agent is told)."""
        return {
            "min_free_vram_mb": self.min_free_vram_mb,
            "pinned": dict(sorted(self.pinned.items())),
            "cpu_forbidden": sorted(self.cpu_forbidden),
        }


def _pinned(spec: ToolDeviceSpec, tool: str, rules: HardConstraints) -> DeviceOption | None:
    return spec.pinned or rules.pinned.get(tool)


def _cpu_ok(spec: ToolDeviceSpec, tool: str, rules: HardConstraints) -> bool:
    return spec.cpu_allowed and tool not in rules.cpu_forbidden


def _fix_one(
    option: DeviceOption, spec: ToolDeviceSpec, tool: str, rules: HardConstraints, gpu: bool
) -> tuple[DeviceOption, AgenticCause | None]:
    """Hints and pins/CPU rules for one call: the option to use and the repair made."""
    pinned = _pinned(spec, tool, rules)
    if pinned is not None:
        return pinned, (None if option == pinned else "pinned")
    if option == "cpu" and not _cpu_ok(spec, tool, rules):
        return ("gpu_queued", "cpu_forbidden") if spec.gpu_capable else ("cpu", None)
    if is_gpu(option) and not spec.gpu_capable:
        return "cpu", "not_allowed"
    if is_gpu(option) and not gpu and _cpu_ok(spec, tool, rules):
        return "cpu", "no_gpu"
    return option, None


def vram_need_mb(spec: ToolDeviceSpec, seen_mb: float = 0.0) -> float:
    """What a call reserves on the GPU: the larger of the declared and the observed need."""
    return max(spec.vram_mb, seen_mb)


def repair(
    answer: ParsedAnswer | None,
    batch: Batch,
    device: DeviceState,
    rules: HardConstraints,
    *,
    fallback: Mapping[str, DeviceOption],
    vram_seen_mb: Mapping[str, float] | None = None,
    fit_vram: bool = True,
) -> tuple[dict[str, DeviceOption], dict[str, AgenticCause]]:
    """A complete mapping for ``batch`` from ``answer`` (None: nothing usable), with causes.

    Calls missing from the answer, or given an unknown option, take ``fallback``'s option
    (the hints' nearest allowed one if the fallback lacks the call). Then every call is held
    to its hints and ``rules``; last, ``gpu_now`` calls that together do not fit the VRAM left
    (budget - in use - ``min_free_vram_mb``) are queued, and GPU calls that could never fit
    alone go to the CPU where allowed (pinned calls are never moved). ``fit_vram=False``
    skips that last part: for a mapping of the fallback policy, whose twin already weighs
    the VRAM (the ledger queues what does not fit), unless the operator keeps VRAM free.
    On a machine with several GPUs the VRAM is fitted per GPU (`repair_on_gpus`).
    """
    mapping, causes, _ = repair_on_gpus(answer, batch, device, rules, fallback=fallback,
                                        vram_seen_mb=vram_seen_mb, fit_vram=fit_vram)
    return mapping, causes


def repair_on_gpus(
    answer: ParsedAnswer | None,
    batch: Batch,
    device: DeviceState,
    rules: HardConstraints,
    *,
    fallback: Mapping[str, DeviceOption],
    vram_seen_mb: Mapping[str, float] | None = None,
    fit_vram: bool = True,
    gpus: Mapping[str, int] | None = None,
) -> tuple[dict[str, DeviceOption], dict[str, AgenticCause], dict[str, int]]:
    """`repair`, and the GPUs ``gpus`` names kept: those of calls still on a GPU. On a
    machine with several GPUs the VRAM is fitted per GPU, each call on its named GPU or
    the default rule's (`gpu_choice.placed_gpus`); a named GPU that could never hold the
    call alone while another allowed GPU could is dropped (``vram_over_budget``; the
    default rule places it). One GPU: exactly `repair`.
    """
    seen = vram_seen_mb or {}
    gpu = device.gpu_available
    mapping: dict[str, DeviceOption] = {}
    causes: dict[str, AgenticCause] = {}
    given = answer.options if answer is not None else {}
    for call in batch.calls:
        raw = given.get(call.call_id)
        option: DeviceOption
        if raw in DEVICE_OPTIONS:
            option = cast(DeviceOption, raw)
        else:
            causes[call.call_id] = "missing_call" if raw is None else "unknown_option"
            option = fallback.get(call.call_id) or (call.spec.preferred or "gpu_queued")
        fixed, cause = _fix_one(option, call.spec, call.tool, rules, gpu)
        if cause is not None and call.call_id not in causes:
            causes[call.call_id] = cause
        mapping[call.call_id] = fixed
    named = {c: g for c, g in (gpus or {}).items() if c in mapping and is_gpu(mapping[c])}
    if gpu and (fit_vram or rules.min_free_vram_mb > 0):
        _fit_vram(batch, device, rules, seen, mapping, causes, named)
    return mapping, causes, {c: g for c, g in named.items() if is_gpu(mapping[c])}


def _rooms(device: DeviceState, rules: HardConstraints) -> dict[int, float]:
    """The VRAM left per GPU index: budget - in use - ``min_free_vram_mb``."""
    if len(device.devices) > 1:
        return {d.index: d.budget_mb - d.used_mb - rules.min_free_vram_mb
                for d in device.devices}
    return {0: device.vram_budget_mb - device.vram_used_mb - rules.min_free_vram_mb}


def _fit_vram(
    batch: Batch,
    device: DeviceState,
    rules: HardConstraints,
    seen: Mapping[str, float],
    mapping: dict[str, DeviceOption],
    causes: dict[str, AgenticCause],
    named: dict[str, int],
) -> None:
    """Per GPU (one: GPU 0), queue the ``gpu_now`` calls that do not fit beside the others
    and send to the CPU (where allowed) a call that could never fit alone."""
    rooms = _rooms(device, rules)
    where: dict[str, int] = {}
    if len(rooms) > 1:
        from langgraph_devsched.schedulers.agentic.gpu_choice import call_gpus, placed_gpus

        for call in batch.calls:
            index = named.get(call.call_id)
            need = vram_need_mb(call.spec, seen.get(call.tool, 0.0))
            if index is not None and need > rooms.get(index, 0.0) and any(
                    need <= rooms.get(i, 0.0) for i in call_gpus(call, device)):
                del named[call.call_id]  # the default rule places it where it fits
                causes.setdefault(call.call_id, "vram_over_budget")
        where = placed_gpus(batch, device, mapping, named, seen)
    pinned = {c.call_id for c in batch.calls if _pinned(c.spec, c.tool, rules) is not None}
    used_now = dict.fromkeys(rooms, 0.0)
    for call in batch.calls:
        if mapping[call.call_id] == "gpu_now" and call.call_id in pinned:
            index = where.get(call.call_id, 0)
            used_now[index] = used_now.get(index, 0.0) + vram_need_mb(
                call.spec, seen.get(call.tool, 0.0))
    for call in batch.calls:
        option = mapping[call.call_id]
        if not is_gpu(option) or call.call_id in pinned:
            continue
        index = where.get(call.call_id, 0)
        room = rooms.get(index, 0.0)
        need = vram_need_mb(call.spec, seen.get(call.tool, 0.0))
        if need > room and _cpu_ok(call.spec, call.tool, rules):
            mapping[call.call_id] = "cpu"
        elif option == "gpu_now" and used_now.get(index, 0.0) + need > room:
            mapping[call.call_id] = "gpu_queued"
        else:
            if option == "gpu_now":
                used_now[index] = used_now.get(index, 0.0) + need
            continue
        causes.setdefault(call.call_id, "vram_over_budget")
