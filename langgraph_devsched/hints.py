"""Per-tool device hints: what a tool can run on, what it needs, what it declares.

Hints come from code (the `device_hints` decorator or ``tool.metadata["devsched"]``), from a
YAML/JSON file, or from a mapping given to the node; they are validated when the node is built.

>>> spec = ToolDeviceSpec(vram_mb=900, profile=SoloProfile(cpu_ms=120, gpu_ms=15))
>>> spec.allowed_options()
('gpu_now', 'gpu_queued', 'cpu')
>>> ToolDeviceSpec(gpu_capable=False).allowed_options()
('cpu',)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption, is_gpu

DevicePrior = Literal["gpu", "cpu", "neutral"]
"""Which device a tool is expected to prefer while no profile or measurement says
(`ToolDeviceSpec.device_prior`)."""
HINTS_METADATA_KEY = "devsched"
"""Key under ``BaseTool.metadata`` where code-declared hints live."""


class SoloProfile(BaseModel):
    """A tool's declared solo latencies, as a profiler measures them (one call, idle machine)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    cpu_ms: float | None = Field(default=None, ge=0, description="median latency on the CPU")
    gpu_ms: float | None = Field(
        default=None, ge=0, description="median latency on the GPU, transfers included"
    )
    transfer_ms: float = Field(default=0.0, ge=0, description="host<->device copy time")


class LoadProfile(BaseModel):
    """How long loading a tool's model weights takes on each side (a cold start)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    gpu_ms: float | None = Field(
        default=None, ge=0, description="time to load the weights onto the GPU"
    )
    cpu_ms: float | None = Field(
        default=None, ge=0, description="time to load the weights into host memory"
    )


class ToolDeviceSpec(BaseModel):
    """What the scheduler may do with one tool (every field optional)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, arbitrary_types_allowed=True, allow_inf_nan=False
    )

    gpu_capable: bool = Field(
        default=True, strict=True, description="the tool can run on a GPU"
    )
    cpu_allowed: bool = Field(
        default=True, strict=True, description="the tool may run on (or fall back to) the CPU"
    )
    vram_mb: float = Field(default=0.0, ge=0, description="VRAM to reserve while on the GPU, MB")
    gpu_share: float = Field(
        default=1.0, gt=0, le=1, description="declared share of the GPU's compute used alone"
    )
    pinned: DeviceOption | None = Field(default=None, description="always use this option")
    preferred: DeviceOption | None = Field(default=None, description="option for static policies")
    profile: SoloProfile | None = Field(default=None, description="declared solo profile")
    model: str | None = Field(
        default=None,
        min_length=1,
        description="name of the model weights the tool keeps resident (tools naming the "
        "same model share one copy; default: the tool's own name when weights_mb > 0)",
    )
    weights_mb: float = Field(
        default=0.0, ge=0,
        description="VRAM the model's weights hold while resident, MB (apart from vram_mb, "
        "the working memory of one call)",
    )
    load_ms: LoadProfile | None = Field(
        default=None, description="declared time to load the weights on each side"
    )
    keep_warm: bool = Field(
        default=False, strict=True,
        description="never evict these weights to make room for another model",
    )
    idempotent: bool = Field(
        default=False, strict=True,
        description="side-effect free: the tool may run a call twice (on both sides, the "
        "second result dropped) so that the policy can measure a side it never ran "
        "(hedged probes, idle-time calibration); default False: every call runs once",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="answer the call with an error after this many seconds (overrides the "
        "node's call_timeout_s)",
    )
    cpu_impl: Callable[..., Any] | None = Field(
        default=None, exclude=True, description="tool or callable to run when placed on the CPU"
    )
    gpu_impl: Callable[..., Any] | None = Field(
        default=None, exclude=True, description="tool or callable to run when placed on a GPU"
    )
    gpus: tuple[int, ...] | None = Field(
        default=None, description="the GPU indices the tool (its model) may run on, e.g. "
        "[0, 1]; default: any GPU")
    device_prior: DevicePrior | None = Field(
        default=None, description="where the tool's first call starts while no profile "
        "and no measurement says: gpu, cpu, or neutral (the search picks, and the GPU is "
        "tried once after); then measurements rule (after a cpu start, the GPU side is "
        "measured only by a probe that can pay); default: gpu. "
        "AgenticScheduler(device_classes=True) infers it from the description (docs/words.md)")

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpu_indices(cls, value: Any) -> Any:
        if value is None:
            return None
        items = [value] if isinstance(value, int) and not isinstance(value, bool) else value
        if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple, set)):
            raise ValueError("expected a list of GPU indices, e.g. [0, 1]")
        items = list(items)
        if not items or any(type(i) is not int or i < 0 for i in items):
            raise ValueError("expected a non-empty list of GPU indices (integers >= 0), "
                             "e.g. [0, 1]")
        return tuple(sorted(set(items)))

    @model_validator(mode="after")
    def _consistent(self) -> ToolDeviceSpec:
        if not self.gpu_capable and not self.cpu_allowed:
            raise ValueError(
                "gpu_capable=False and cpu_allowed=False leave no device; allow at least one"
            )
        if self.gpus is not None and not self.gpu_capable:
            raise ValueError(f"gpus={list(self.gpus)} contradicts gpu_capable=False; "
                             "leave gpus out for a CPU-only tool")
        for field in ("pinned", "preferred"):
            option = getattr(self, field)
            if option is None:
                continue
            if is_gpu(option) and not self.gpu_capable:
                raise ValueError(f"{field}={option!r} contradicts gpu_capable=False; valid: 'cpu'")
            if option == "cpu" and not self.cpu_allowed:
                raise ValueError(
                    f"{field}='cpu' contradicts cpu_allowed=False; valid: 'gpu_now', 'gpu_queued'"
                )
        return self

    @functools.cached_property
    def _allowed(self) -> tuple[DeviceOption, ...]:
        if self.pinned is not None:
            return (self.pinned,)
        return tuple(
            o for o in DEVICE_OPTIONS if (self.gpu_capable if is_gpu(o) else self.cpu_allowed)
        )

    def allowed_options(self) -> tuple[DeviceOption, ...]:
        """The options a scheduler may choose for this tool, in canonical order."""
        return self._allowed

    @property
    def declares_time(self) -> bool:
        """Whether these hints declare a solo time on some side (``profile.cpu_ms`` or
        ``profile.gpu_ms``)."""
        profile = self.profile
        return profile is not None and (profile.cpu_ms is not None
                                        or profile.gpu_ms is not None)

    def model_name(self, tool: str) -> str | None:
        """The resident model this tool's calls use, or None (no resident weights)."""
        if self.model is not None:
            return self.model
        return tool if self.weights_mb > 0 else None


DEFAULT_SPEC = ToolDeviceSpec(gpu_capable=False)
"""A tool with no hints runs as it is, on the CPU side, exactly as `ToolNode` would run it."""


class HintsError(ValueError):
    """Invalid device hints: the message names the tool, the field and the valid values."""


def validate_spec(tool_name: str, raw: Mapping[str, Any] | ToolDeviceSpec) -> ToolDeviceSpec:
    """Validate one tool's hints, raising `HintsError` that names tool, field and valid values."""
    if isinstance(raw, ToolDeviceSpec):
        return raw
    if not isinstance(raw, Mapping):
        raise HintsError(
            f"hints for tool {tool_name!r} must be a mapping of fields, got {type(raw).__name__}"
        )
    try:
        return ToolDeviceSpec.model_validate(dict(raw))
    except ValidationError as exc:
        raise HintsError(_describe(tool_name, exc)) from None


def _fields_at(loc: tuple[int | str, ...]) -> str:
    """The valid field names of the model that holds the field at ``loc`` (nested too)."""
    model: type[BaseModel] = ToolDeviceSpec
    for part in loc[:-1]:
        info = model.model_fields.get(str(part))
        annotation = info.annotation if info is not None else None
        candidates = (annotation, *getattr(annotation, "__args__", ()))
        nested = [a for a in candidates if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            break
        model = nested[0]
    return ", ".join(model.model_fields)


def _describe(tool_name: str, exc: ValidationError) -> str:
    lines = [f"invalid device hints for tool {tool_name!r}:"]
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(spec)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = f"unknown field; valid fields: {_fields_at(tuple(err['loc']))}"
        elif err["type"] == "bool_type":
            msg = "expected true or false (a YAML/JSON boolean, not a string or number)"
        elif err["type"] == "literal_error":
            msg = f"{msg} (valid options: {', '.join(DEVICE_OPTIONS)})"
        if not err["loc"]:
            lines.append(f"  {msg.removeprefix('Value error, ')}")
            continue
        lines.append(f"  {field}: {msg} (got {err.get('input')!r})")
    return "\n".join(lines)


F = TypeVar("F")


def device_hints(**fields: Any) -> Callable[[F], F]:
    """Attach device hints to a tool (place it above ``@tool``) or to a plain function.

    >>> from langchain_core.tools import tool
    >>> @device_hints(vram_mb=512, preferred="gpu_now")
    ... @tool
    ... def embed(text: str) -> str:
    ...     '''Embed a text.'''
    ...     return text
    >>> embed.metadata["devsched"]["vram_mb"]
    512
    """
    validate_spec("<decorated tool>", fields)

    def attach(obj: F) -> F:
        metadata = getattr(obj, "metadata", None)
        if hasattr(obj, "name") and hasattr(obj, "invoke"):
            merged = dict(metadata or {})
            merged[HINTS_METADATA_KEY] = dict(fields)
            obj.metadata = merged  # type: ignore[attr-defined]
        else:
            obj.__devsched_hints__ = dict(fields)  # type: ignore[attr-defined]
        return obj

    return attach


def code_hints(tool: object) -> Mapping[str, Any] | None:
    """The hints declared in code on a tool or function, if any."""
    metadata = getattr(tool, "metadata", None)
    if isinstance(metadata, Mapping) and HINTS_METADATA_KEY in metadata:
        return metadata[HINTS_METADATA_KEY]
    found = getattr(tool, "__devsched_hints__", None)
    if found is None:
        func = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
        found = getattr(func, "__devsched_hints__", None)
    return found if isinstance(found, Mapping) else None


def load_hints_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read a hints file: ``{"tools": {name: {field: value}}}`` in YAML or JSON (safe loader),
    or a profile JSON written by ``devsched profile --json`` (converted by
    `langgraph_devsched.profiling.to_hints.profile_hints`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise HintsError(f"hints file {path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise HintsError(f"hints file {path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise HintsError(f"hints file {path}: not valid YAML/JSON: {exc}") from None
    from langgraph_devsched.profiling.to_hints import looks_like_profile

    if looks_like_profile(data):
        return _profile_file_hints(path, data)
    if not isinstance(data, dict) or not isinstance(data.get("tools"), dict):
        raise HintsError(
            f"hints file {path}: expected a mapping with a 'tools' mapping of "
            "tool name -> hints, e.g. {'tools': {'ocr': {'vram_mb': 900}}}, "
            "or a profile JSON written by `devsched profile --json`"
        )
    tools = data["tools"]
    for name, fields in tools.items():
        if not isinstance(fields, dict):
            raise HintsError(f"hints file {path}: tools.{name} must be a mapping of fields")
    return {str(k): v for k, v in tools.items()}


def _profile_file_hints(path: Path, data: Any) -> dict[str, dict[str, Any]]:
    from langgraph_devsched.profiling.to_hints import profile_hints

    try:
        return profile_hints(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise HintsError(
            f"hints file {path}: looks like a profile but is invalid: {problems}"
        ) from None


HintsArg = Mapping[str, Mapping[str, Any] | ToolDeviceSpec] | str | Path | None
"""What ``hints=`` accepts: a mapping of tool name -> fields, a hints file path, or None."""


def hints_mapping(hints: object) -> Mapping[str, Mapping[str, Any] | ToolDeviceSpec]:
    """``hints=`` as a mapping of tool name -> fields (a file is read); `HintsError` for
    anything else, such as a list of mappings.

    >>> try:
    ...     hints_mapping([{"ocr": {"vram_mb": 900}}])
    ... except HintsError as exc:
    ...     print(str(exc)[:46])
    hints= must be a mapping of tool name -> hints
    """
    if hints is None:
        return {}
    if isinstance(hints, (str, Path)):
        return load_hints_file(hints)
    if not isinstance(hints, Mapping):
        raise HintsError(
            "hints= must be a mapping of tool name -> hints, e.g. {'ocr': {'vram_mb': 900}}, "
            f"or the path of a hints file; got {type(hints).__name__} {str(hints)[:60]}"
        )
    bad = [repr(k) for k in hints if not isinstance(k, str)]
    if bad:
        raise HintsError(f"hints=: tool names must be strings; got {', '.join(bad)}")
    return hints


def resolve_specs(
    tools: Mapping[str, object],
    hints: Mapping[str, Mapping[str, Any] | ToolDeviceSpec] | str | Path | None = None,
) -> dict[str, ToolDeviceSpec]:
    """One validated spec per tool: explicit ``hints`` (mapping or file) over code hints.

    Hints naming a tool the node does not have are an error that lists the known tools.
    """
    explicit = hints_mapping(hints)
    unknown = sorted(set(explicit) - set(tools))
    if unknown:
        raise HintsError(
            f"device hints name unknown tool(s) {', '.join(map(repr, unknown))}; "
            f"known tools: {', '.join(sorted(tools)) or '(none)'}"
        )
    specs: dict[str, ToolDeviceSpec] = {}
    for name, tool in tools.items():
        if name in explicit:
            specs[name] = validate_spec(name, explicit[name])
        elif (declared := code_hints(tool)) is not None:
            specs[name] = validate_spec(name, declared)
        else:
            specs[name] = DEFAULT_SPEC
    return specs
