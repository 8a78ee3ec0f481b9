"""A simulated GPU for your own tools, built from their hints or a profile (no scenario file).

Each tool's hidden `ToolParams` come from what it declares: ``cpu_ms`` = ``profile.cpu_ms``,
``transfer_ms`` = ``profile.transfer_ms``, ``gpu_ms`` = ``profile.gpu_ms`` minus the transfer
(the testbed adds it back), ``vram_mb``, ``gpu_share``, ``model``, ``weights_mb`` and
``load_ms`` as declared (a load time not declared is not simulated). A GPU-capable tool with
no ``profile.gpu_ms`` (a CPU-only profile) needs ``gpu_speedup=`` (assume the GPU is that many
times faster) or a declared ``gpu_ms``; a CPU-only tool (``gpu_capable: false``) needs no
figure at all: it gets ``gpu_ms = cpu_ms`` (never used) and, with no ``profile.cpu_ms``, a
simulated CPU time of `UNTIMED_MS` (its device is forced, so an invented time would only set
the step's length; its own code still runs with ``run_tools_on="cpu"``).

``run_tools_on="cpu"`` makes the node run each tool's own code on this machine's CPU while the
simulation decides placement, VRAM and time (see `SimulatedBackend`).

>>> bed = simulated_gpu(
...     {"ocr": {"vram_mb": 900, "profile": {"cpu_ms": 120, "gpu_ms": 15, "transfer_ms": 3}}},
...     vram_budget_mb=4000, run_tools_on="cpu")
>>> bed.run_step([("c1", "ocr", "gpu_now")]).makespan_ms, bed.run_tools_on
(15.0, 'cpu')
>>> two = simulated_gpu({"ocr": {"profile": {"cpu_ms": 120, "gpu_ms": 15}}},
...                     gpus=[{"vram_mb": 24000}, {"vram_mb": 8000, "speed": 0.5}])
>>> [d.budget_mb for d in two.device_state().gpus]
[24000.0, 8000.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

from langgraph_devsched.executors.simulated import RunToolsOn
from langgraph_devsched.hints import HintsError, ToolDeviceSpec, load_hints_file, validate_spec
from langgraph_devsched.profiling.model import Profile
from langgraph_devsched.profiling.to_hints import profile_hints
from langgraph_devsched.testbed import BackgroundLoad, GpuSpec, SimulatedTestbed, ToolParams

HintsSource = Mapping[str, Mapping[str, Any] | ToolDeviceSpec] | Profile | str | Path
"""A hints mapping, a hints file (YAML/JSON), a profile JSON file, or a `Profile`."""


class HostRunTestbed(SimulatedTestbed):
    """A `SimulatedTestbed` that also says where the tools' own code runs (``run_tools_on``);
    `SimulatedBackend` (and so ``DeviceToolNode(testbed=...)``) reads it."""

    def __init__(
        self,
        tools: Mapping[str, ToolParams | Mapping[str, float]],
        *,
        run_tools_on: RunToolsOn = "simulated",
        **testbed: Any,
    ) -> None:
        if run_tools_on not in get_args(RunToolsOn):
            raise ValueError(
                f"unknown run_tools_on {run_tools_on!r}; valid: {', '.join(get_args(RunToolsOn))}"
            )
        super().__init__(tools, **testbed)
        self.run_tools_on: RunToolsOn = run_tools_on


def _specs(hints: HintsSource) -> dict[str, ToolDeviceSpec]:
    if isinstance(hints, Profile):
        raw: Mapping[str, Any] = profile_hints(hints)
    elif isinstance(hints, (str, Path)):
        raw = load_hints_file(hints)
    else:
        raw = hints
    return {str(name): validate_spec(str(name), fields) for name, fields in raw.items()}


UNTIMED_MS = 1e-3
"""The simulated CPU time of a CPU-only tool that declares none (next to nothing)."""


def tool_params(
    name: str, spec: ToolDeviceSpec, *, gpu_speedup: float | None = None, cpu_threads: int = 1
) -> ToolParams:
    """The simulated ground truth of one tool from its hints (see the module docstring)."""
    solo = spec.profile
    declared_cpu = solo.cpu_ms if solo is not None else None
    if declared_cpu is None and spec.gpu_capable:
        raise HintsError(
            f"tool {name!r} has no profile.cpu_ms: declare profile: {{cpu_ms: ..., gpu_ms: ...}} "
            "in its hints (an estimate is fine), or measure it with `devsched profile "
            "--devices cpu --hints-out hints.yaml` (then gpu_speedup=); if that run could "
            "not call the tool, its error says why"
        )
    cpu_ms = UNTIMED_MS if declared_cpu is None else max(declared_cpu, UNTIMED_MS)
    transfer = solo.transfer_ms if solo is not None else 0.0
    if solo is not None and solo.gpu_ms is not None:
        gpu_ms = max(solo.gpu_ms - transfer, 0.0)
    elif not spec.gpu_capable:
        gpu_ms = cpu_ms
    elif gpu_speedup is not None:
        gpu_ms = cpu_ms / gpu_speedup
    else:
        raise HintsError(
            f"tool {name!r} has no profile.gpu_ms (measured on the CPU only): declare one "
            "(an estimate is fine), profile it on a GPU, or pass gpu_speedup=<how many times "
            "faster the GPU is>"
        )
    return ToolParams(
        cpu_ms=cpu_ms,
        gpu_ms=gpu_ms,
        transfer_ms=transfer,
        vram_mb=spec.vram_mb,
        gpu_share=spec.gpu_share,
        cpu_threads=cpu_threads,
        model=spec.model,
        weights_mb=spec.weights_mb,
        load_gpu_ms=(spec.load_ms.gpu_ms or 0.0) if spec.load_ms else 0.0,
        load_cpu_ms=(spec.load_ms.cpu_ms or 0.0) if spec.load_ms else 0.0,
    )


def simulated_gpu(
    hints: HintsSource,
    *,
    vram_budget_mb: float | None = None,
    gpus: Sequence[GpuSpec | Mapping[str, Any]] | None = None,
    run_tools_on: RunToolsOn = "simulated",
    gpu_speedup: float | None = None,
    cpu_threads: int = 1,
    cpu_cores: int = 8,
    background: BackgroundLoad | None = None,
    noise: float = 0.0,
    seed: int = 0,
) -> HostRunTestbed:
    """A simulated machine whose tools behave as ``hints`` (or a profile) say.

    ``vram_budget_mb`` is the simulated GPU's memory for tools; or ``gpus``, several GPUs,
    one mapping (or `GpuSpec`) each: ``[{"vram_mb": 24000}, {"vram_mb": 8000, "speed":
    0.5}]`` (fields: ``vram_mb``, ``speed``, ``name``, ``background``, ``resident``). Give
    one of the two. Raises `HintsError` naming the tool and the missing figure when a tool's
    latencies are not declared.
    """
    if gpu_speedup is not None and not gpu_speedup > 0:
        raise ValueError(f"gpu_speedup must be > 0, got {gpu_speedup!r}")
    params = {
        name: tool_params(name, spec, gpu_speedup=gpu_speedup, cpu_threads=cpu_threads)
        for name, spec in _specs(hints).items()
    }
    return HostRunTestbed(
        params,
        run_tools_on=run_tools_on,
        vram_budget_mb=vram_budget_mb,
        gpus=gpus,
        cpu_cores=cpu_cores,
        background=background,
        noise=noise,
        seed=seed,
    )
