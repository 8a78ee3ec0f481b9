"""Scenario files: a testbed, tools (hidden parameters + declared hints) and a workload.

The format is documented in ``docs/scenarios.md``. A scenario is YAML validated by pydantic;
a malformed file raises `ScenarioError` naming the file, the field and what is expected.

>>> s = Scenario.model_validate({
...     "name": "one_asr", "category": "serial",
...     "testbed": {"vram_budget_mb": 8000},
...     "tools": {"asr": {"params": {"cpu_ms": 900, "gpu_ms": 60, "vram_mb": 1500}}},
...     "workload": {"kind": "serial", "calls": ["asr", "asr"]}})
>>> s.batches()
[['asr'], ['asr']]
>>> s.specs()["asr"].profile
SoloProfile(cpu_ms=900.0, gpu_ms=60.0, transfer_ms=0.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from langgraph_devsched.batchsim import PHYSICS, Physics, check_physics
from langgraph_devsched.bench.declare import Declare, declared_specs
from langgraph_devsched.hedging.simulated import DEFAULT_THINK_MS
from langgraph_devsched.hints import ToolDeviceSpec, validate_spec
from langgraph_devsched.testbed import (
    DEFAULT_MEM_BOUND,
    BackgroundLoad,
    GpuSpec,
    SimulatedTestbed,
    ToolParams,
)

Category = Literal["serial", "parallel", "memory", "residency"]
WorkloadKind = Literal["serial", "parallel", "sequence"]
MAX_BATCH_CALLS = 10
"""Largest batch a scenario may hold: the oracle enumerates 3^n mappings of each batch."""


class ScenarioError(ValueError):
    """A scenario file that cannot be used: the message names the file and the field."""


class ResidentModels(BaseModel):
    """Model weights resident when the testbed starts (each named by a tool's params)."""

    model_config = ConfigDict(extra="forbid")

    gpu: list[str] = Field(
        default_factory=list, description="on the GPU, least recently used first")
    cpu: list[str] = Field(default_factory=list, description="loaded in host memory")


class TestbedConfig(BaseModel):
    """The simulated machine."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    vram_budget_mb: float | None = Field(
        default=None, gt=0, description="VRAM the scheduler may use, MB (one GPU)")
    cpu_cores: int = Field(default=8, ge=1, description="CPU cores of the CPU executor")
    background: BackgroundLoad = Field(
        default_factory=BackgroundLoad, description="load already on the machine"
    )
    noise: float = Field(default=0.05, ge=0, lt=1, description="relative latency sigma")
    seed: int = Field(default=0, description="seed of the noise generator")
    oom_detect_ms: float = Field(default=20.0, ge=0, description="time lost to an OOM")
    resident: ResidentModels = Field(
        default_factory=lambda: ResidentModels(), description="models resident at the start"
    )
    physics: Physics = Field(
        default="processor_sharing", description="GPU contention physics (docs/physics.md)")
    slice_overhead: float = Field(
        default=0.0, ge=0, le=1, description="time_slicing: context-switch overhead factor")
    mem_bound: float = Field(
        default=DEFAULT_MEM_BOUND, ge=0, le=1,
        description="bandwidth: mem_bound of every tool whose params leave it out")
    gpus: list[GpuSpec] | None = Field(
        default=None, description="several GPUs instead (vram_mb, speed, name, background, "
        "resident each); background then holds only cpu_threads")

    @model_validator(mode="after")
    def _one_machine(self) -> TestbedConfig:
        if (self.vram_budget_mb is None) == (self.gpus is None):
            raise ValueError("give vram_budget_mb (one GPU) or gpus (a list: vram_mb, speed, "
                             "name, background, resident each), exactly one of them")
        if self.gpus is not None and not self.gpus:
            raise ValueError("gpus: give at least one GPU")
        return self


class ToolEntry(BaseModel):
    """One tool: the hidden ground truth and what the tool declares."""

    model_config = ConfigDict(extra="forbid")

    params: ToolParams = Field(description="hidden ground-truth parameters")
    description: str = Field(
        default="", description="what the tool does, in words (a tool's ``description``: "
        "what a forecast from words reads)")
    hints: dict[str, Any] | None = Field(
        default=None, description="declared ToolDeviceSpec fields (profile derived if absent)"
    )


class Request(BaseModel):
    """A user's request inside a sequence: the message that starts a run of its steps."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, description="index of the request's first batch in the sequence")
    text: str = Field(description="the user's message, as the agent received it")
    tools: list[str] = Field(
        default_factory=list, description="the tools the request truly needs (the ground "
        "truth: only the oracle forecast reads it)")
    arrival_ms: float = Field(
        default=0.0, ge=0, allow_inf_nan=False,
        description="how long before its first step the request arrived (the agent's first "
        "LLM turn; at most that step's idle time): a forecast from words starts then")
    name: str = Field(default="", description="where the request comes from (e.g. an id)")


class Workload(BaseModel):
    """What the app asks for in each round."""

    model_config = ConfigDict(extra="forbid")

    kind: WorkloadKind
    calls: list[str] | None = Field(default=None, description="serial chain or parallel batch")
    batches: list[list[str]] | None = Field(default=None, description="sequence of batches")
    rounds: int = Field(default=20, ge=1, description="rounds the benchmark runs by default")
    think_ms: float = Field(
        default=DEFAULT_THINK_MS, ge=0, allow_inf_nan=False,
        description="idle time between two steps (the agent's LLM turn), ms: side-effect-free "
        "tools' unmeasured sides may be calibrated in it (0: none)")
    idle_ms: list[float] | None = Field(
        default=None, description="sequence only, one per batch: the idle time before it (the "
        "first: before the first step), instead of ``think_ms`` after every step")
    requests: list[Request] = Field(
        default_factory=list, description="sequence only: the users' requests, each starting "
        "at a batch (in order of their steps)")

    @model_validator(mode="after")
    def _shape(self) -> Workload:
        if self.kind == "sequence":
            if not self.batches or self.calls is not None:
                raise ValueError("kind 'sequence' needs 'batches' (a list of lists of tools)")
            if any(not b for b in self.batches):
                raise ValueError("every batch of a sequence needs at least one call")
        elif not self.calls or self.batches is not None:
            raise ValueError(f"kind {self.kind!r} needs 'calls' (a list of tool names)")
        elif self.idle_ms is not None or self.requests:
            raise ValueError("idle_ms and requests need kind 'sequence'")
        count = len(self.batches or ())
        if self.idle_ms is not None:
            if len(self.idle_ms) != count:
                raise ValueError(f"idle_ms: give one idle time per batch ({count}), got "
                                 f"{len(self.idle_ms)}")
            if any(not 0 <= v < float("inf") for v in self.idle_ms):
                raise ValueError("idle_ms: every idle time must be a finite number >= 0")
        steps = [r.step for r in self.requests]
        if steps != sorted(set(steps)) or any(k >= count for k in steps):
            raise ValueError(f"requests: each starts at its own batch (0 to {count - 1}), in "
                             f"order; got steps {steps}")
        for r in self.requests:
            idle = self.idle_before(r.step)
            if r.arrival_ms > idle:
                raise ValueError(f"requests: the request at step {r.step} arrives "
                                 f"{r.arrival_ms} ms before it, more than its idle time "
                                 f"({idle} ms)")
        return self

    def idle_before(self, step: int) -> float:
        """The idle time before batch ``step`` of a round (the first: none unless
        ``idle_ms`` gives it)."""
        if self.idle_ms is not None:
            return float(self.idle_ms[step])
        return self.think_ms if step > 0 else 0.0

    def parts_after(self) -> list[tuple[float, ...]]:
        """Per batch of a round, the idle time after it in parts (`idle_parts` of the next
        batch; the last: the first batch's of the next round); without ``idle_ms``,
        ``think_ms`` whole after every step."""
        count = {"sequence": len(self.batches or ()), "serial": len(self.calls or ()),
                 "parallel": 1}[self.kind]
        if self.idle_ms is None:
            return [(self.think_ms,)] * count
        return [self.idle_parts((b + 1) % count) for b in range(count)]

    def idle_parts(self, step: int) -> tuple[float, ...]:
        """The idle time before batch ``step``, in parts: where a request starts there,
        before its arrival and after it (loads may run in each: a forecast from words
        comes only after the arrival), else whole.

        >>> w = Workload(kind="sequence", batches=[["a"], ["a"]], idle_ms=[1000, 9000],
        ...              requests=[{"step": 1, "text": "x", "arrival_ms": 2000}])
        >>> w.idle_parts(0), w.idle_parts(1)
        ((1000.0,), (7000.0, 2000.0))
        """
        idle = self.idle_before(step)
        arrival = next((r.arrival_ms for r in self.requests if r.step == step), None)
        if arrival is None or arrival <= 0 or arrival >= idle:
            return (idle,)
        return (idle - arrival, float(arrival))


class Scenario(BaseModel):
    """A benchmark scenario (see ``docs/scenarios.md``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    category: Category
    description: str = ""
    testbed: TestbedConfig
    tools: dict[str, ToolEntry] = Field(min_length=1)
    workload: Workload

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        known = ", ".join(sorted(self.tools))
        where = "workload.batches" if self.workload.kind == "sequence" else "workload.calls"
        for batch in self.batches():
            for tool in batch:
                if tool not in self.tools:
                    raise ValueError(f"{where}: unknown tool {tool!r}; known tools: {known}")
            if len(batch) > MAX_BATCH_CALLS:
                raise ValueError(
                    f"{where}: a batch of {len(batch)} calls is too large; "
                    f"at most {MAX_BATCH_CALLS} (the oracle enumerates 3^n mappings)"
                )
        for request in self.workload.requests:
            for tool in request.tools:
                if tool not in self.tools:
                    raise ValueError(f"workload.requests: unknown tool {tool!r}; known "
                                     f"tools: {known}")
        for name, entry in self.tools.items():
            try:
                validate_spec(name, entry.hints or {})
            except ValueError as exc:
                raise ValueError(f"tools.{name}.hints: {exc}") from None
        return self

    def batches(self) -> list[list[str]]:
        """The round as batches of tool names: a serial chain is one call per batch."""
        w = self.workload
        if w.kind == "sequence":
            return [list(b) for b in w.batches or []]
        if w.kind == "serial":
            return [[c] for c in w.calls or []]
        return [list(w.calls or [])]

    def specs(self) -> dict[str, ToolDeviceSpec]:
        """Declared hints per tool; a missing profile (or VRAM, or resident model) is what a
        profiler would measure alone: cpu_ms, gpu_ms = transfer + compute, transfer_ms (and
        peak VRAM, the weights and their load times)."""
        return declared_specs(self.tools, Declare("exact"))

    def has_resident_models(self) -> bool:
        """Whether any tool keeps model weights resident (or some start resident)."""
        t = self.testbed.resident
        on_gpus = any(g.resident for g in self.testbed.gpus or ())
        return bool(t.gpu or t.cpu) or on_gpus or any(
            e.params.weights_mb > 0 for e in self.tools.values())

    def make_testbed(
        self, *, noise: float | None = None, seed: int | None = None
    ) -> SimulatedTestbed:
        """A fresh testbed (clock at 0); ``noise``/``seed`` override the file's values."""
        t = self.testbed
        extra: dict[str, Any] = {}
        if t.physics != "processor_sharing":
            extra = {"physics": t.physics, "slice_overhead": t.slice_overhead,
                     "mem_bound": t.mem_bound}
        return SimulatedTestbed(
            {name: e.params for name, e in self.tools.items()},
            vram_budget_mb=t.vram_budget_mb,
            gpus=t.gpus,
            cpu_cores=t.cpu_cores,
            background=t.background,
            noise=t.noise if noise is None else noise,
            seed=t.seed if seed is None else seed,
            oom_detect_ms=t.oom_detect_ms,
            resident={"gpu": list(t.resident.gpu), "cpu": list(t.resident.cpu)},
            keep_warm=self.kept_warm(),
            **extra,
        )

    def kept_warm(self) -> frozenset[str]:
        """The models whose tools declare ``keep_warm`` (the testbed never evicts them)."""
        return frozenset(
            name for tool, e in self.tools.items()
            if (e.hints or {}).get("keep_warm") and (name := e.params.model_name(tool)))

    def with_physics(self, physics: str) -> Scenario:
        """This scenario under another contention physics, named ``name@physics``."""
        name = check_physics(physics)
        return self.model_copy(update={
            "name": f"{self.name}@{name}",
            "testbed": self.testbed.model_copy(update={"physics": name})})

    @property
    def physics(self) -> Physics:
        return self.testbed.physics


def parse_physics(value: str) -> list[Physics]:
    """``--physics``: one name, several comma-separated, or ``all`` (every physics)."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if names == ["all"]:
        return list(PHYSICS)
    if not names:
        raise ValueError(f"--physics needs a name; valid: {', '.join(PHYSICS)}, all")
    return list(dict.fromkeys(check_physics(n) for n in names))


def under_physics(scenarios: Sequence[Scenario], physics: str) -> list[Scenario]:
    """Every scenario under each physics ``parse_physics`` reads, labelled
    ``scenario@physics``, grouped by physics."""
    return [s.with_physics(p) for p in parse_physics(physics) for s in scenarios]


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file (YAML, safe loader)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"scenario file {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"scenario file {path}: not UTF-8 text ({exc.reason})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"scenario file {path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ScenarioError(
            f"scenario file {path}: expected a mapping with fields "
            f"{', '.join(Scenario.model_fields)}, got {type(data).__name__}"
        )
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_describe(path, exc)) from None
    except ValueError as exc:  # a HintsError raised inside a validator
        raise ScenarioError(f"scenario file {path}: {exc}") from None
    try:
        scenario.make_testbed()
    except ValueError as exc:  # e.g. an unknown resident model
        raise ScenarioError(f"scenario file {path}: testbed.{exc}") from None
    return scenario


def _describe(path: Path, exc: ValidationError) -> str:
    lines = [f"scenario file {path}: invalid scenario"]
    for err in exc.errors():
        msg = err["msg"]
        if err["type"] == "value_error" and not err["loc"]:
            lines.append("  " + msg.removeprefix("Value error, "))
            continue
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            msg = f"unknown field; valid fields here: {_valid_fields(err['loc'])}"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "literal_error":
            msg = f"expected one of {msg.removeprefix('Input should be ')}"
        else:
            msg = msg.removeprefix("Value error, ")
        lines.append(f"  {field}: {msg} (got {err.get('input')!r})")
    return "\n".join(lines)


def _valid_fields(loc: tuple[Any, ...]) -> str:
    """The field names allowed where an unknown field was found."""
    model: type[BaseModel] = Scenario
    parts = list(loc[:-1])
    i = 0
    while i < len(parts):
        if model is Scenario and parts[i] == "tools":
            model, i = ToolEntry, i + 2  # skip the tool's name
            continue
        field = model.model_fields.get(str(parts[i]))
        annotation = field.annotation if field is not None else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        i += 1
    return ", ".join(model.model_fields)


def builtin_scenario_paths() -> list[Path]:
    """The scenario files shipped in the package, sorted by name."""
    folder = resources.files("langgraph_devsched") / "scenarios"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".yaml"))


GPUS_GROUP = "gpus"
"""The name of the multi-GPU built-ins as one group (``--scenarios gpus``)."""


AMORTIZE_GROUP = "amortize"
"""Cold models whose loads the later steps repay (or do not), as one group
(``--scenarios amortize``)."""
GROUPS = {GPUS_GROUP: "scenarios_gpus", AMORTIZE_GROUP: "scenarios_amortize"}
"""Built-in groups apart from the default set: name -> package folder."""


def builtin_group_paths(group: str) -> list[Path]:
    """The built-ins of one group (`GROUPS`), sorted by name."""
    folder = resources.files("langgraph_devsched") / GROUPS[group]
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".yaml"))


def builtin_gpu_scenario_paths() -> list[Path]:
    """The multi-GPU built-ins (a group apart from the one-GPU built-ins), sorted by name."""
    return builtin_group_paths(GPUS_GROUP)


def builtin_by_name(names: str) -> list[Path]:
    """The built-in scenario files named in ``names`` (comma-separated), in that order;
    `ScenarioError` listing the built-in names for one that is not. The multi-GPU built-ins
    and the ``amortize`` ones are named one by one or together as ``gpus`` and ``amortize``.

    >>> [p.stem for p in builtin_by_name("serial_voice_assistant")]
    ['serial_voice_assistant']
    """
    known = {p.stem: p for p in builtin_scenario_paths()}
    groups = {g: {p.stem: p for p in builtin_group_paths(g)} for g in GROUPS}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    wanted = [m for n in wanted for m in groups.get(n, (n,))]
    for members in groups.values():
        known.update(members)
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise ScenarioError(
            f"scenario path {names}: no such file or folder, nor a built-in scenario name"
            f"{' (' + ', '.join(unknown) + ')' if unknown and len(wanted) > 1 else ''}; "
            f"built-in scenarios: {', '.join(known)}")
    return [known[n] for n in dict.fromkeys(wanted)]


def _on_disk(path: Path) -> str | None:
    """``"folder"``, ``"file"`` or None (nothing there, or a name no file system takes: a
    long comma-separated list of built-in names is one)."""
    try:
        return "folder" if path.is_dir() else "file" if path.exists() else None
    except OSError:  # e.g. ENAMETOOLONG
        return None


def load_scenarios(path: str | Path | None = None) -> list[Scenario]:
    """Scenarios from a file, from every ``*.yaml`` in a folder, the built-ins named (a
    comma-separated list of names, see `builtin_by_name`), or every built-in (None)."""
    if path is None:
        paths = builtin_scenario_paths()
    else:
        path = Path(path)
        kind = _on_disk(path)
        if kind == "folder":
            paths = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
            if not paths:
                raise ScenarioError(f"scenario folder {path}: no *.yaml files in it")
        elif kind == "file":
            paths = [path]
        else:
            paths = builtin_by_name(str(path))
    scenarios = [load_scenario(p) for p in paths]
    seen: dict[str, int] = {}
    for s in scenarios:
        seen[s.name] = seen.get(s.name, 0) + 1
    dupes = sorted(n for n, k in seen.items() if k > 1)
    if dupes:
        raise ScenarioError(f"scenario names must be unique; repeated: {', '.join(dupes)}")
    return scenarios


__all__ = [
    "Category",
    "Request",
    "Scenario",
    "ScenarioError",
    "ToolEntry",
    "Workload",
    "WorkloadKind",
    "builtin_by_name",
    "builtin_scenario_paths",
    "load_scenario",
    "load_scenarios",
    "parse_physics",
    "under_physics",
]
