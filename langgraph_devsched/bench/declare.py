"""What the scenario's tools declare to the schedulers: the truth, nothing, or a wrong profile.

A scenario tool without a declared profile gets, by default, the exact solo profile of its
hidden parameters, as a perfect profiler on that very machine would measure it (`exact`):
that flatters every scheduler that reads profiles. The other modes drop or distort it:

* ``exact``: the solo profile of the hidden parameters (what the bench did before).
* ``none``: no profile at all; tools declare only what the file says, their VRAM and,
  where they keep weights resident, their model and its size (a user knows those from the
  model, as the model cache's hints say them), never a latency or a load time. Schedulers
  start from nothing they could only know by measuring.
* ``noisy(S)``: every declared latency times a log-normal factor of sigma ``S`` (seeded per
  tool), like a profile taken on a busy machine.
* ``stale(F)``: the GPU latencies times ``F``, like a profile taken on another GPU.

A profile written in the scenario file itself is the tool's own declaration: ``exact`` and
``none`` keep it as it is, ``noisy``/``stale`` distort it like a derived one.

A tool whose hidden parameters keep model weights resident (``weights_mb > 0``) declares
its ``model`` and ``weights_mb`` too and, except under ``none``, its ``load_ms`` (the file's
own hints win); ``noisy`` distorts the load times like the latencies (its own seeded draws).

>>> parse_declare("noisy(0.3)")
Declare(kind='noisy', value=0.3)
>>> parse_declare("stale(2)").label
'stale(2)'
>>> parse_declare("perfect")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: --declare 'perfect': expected one of exact, none, noisy(SIGMA), stale(FACTOR), e.g. ...
"""

from __future__ import annotations

import math
import random
import re
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from langgraph_devsched.hints import LoadProfile, SoloProfile, ToolDeviceSpec, validate_spec

DeclareKind = Literal["exact", "none", "noisy", "stale"]
_PATTERN = re.compile(r"^\s*(exact|none|noisy|stale)\s*(?:\(\s*([0-9.eE+-]+)\s*\))?\s*$")


@dataclass(frozen=True)
class Declare:
    """One declaration mode (``value``: sigma for noisy, factor for stale)."""

    kind: DeclareKind = "exact"
    value: float | None = None

    @property
    def label(self) -> str:
        return self.kind if self.value is None else f"{self.kind}({self.value:g})"

    @property
    def ground_truth(self) -> bool:
        """True when schedulers are fed the hidden parameters' exact solo profiles."""
        return self.kind == "exact"


def parse_declare(text: str) -> Declare:
    """``exact``, ``none``, ``noisy(SIGMA)`` or ``stale(FACTOR)``; errors name the valid forms."""
    match = _PATTERN.match(text)
    valid = "expected one of exact, none, noisy(SIGMA), stale(FACTOR)"
    if match is None:
        raise ValueError(f"--declare {text!r}: {valid}, e.g. noisy(0.3) or stale(2)")
    kind, raw = match.group(1), match.group(2)
    if kind in ("exact", "none"):
        if raw is not None:
            raise ValueError(f"--declare {text!r}: {kind} takes no value; {valid}")
        return Declare(kind)  # type: ignore[arg-type]
    if raw is None:
        raise ValueError(f"--declare {text!r}: {kind} needs a value, e.g. {kind}(0.3); {valid}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"--declare {text!r}: {raw!r} is not a number; {valid}") from None
    if not math.isfinite(value) or value < 0 or (kind == "stale" and value == 0):
        raise ValueError(f"--declare {text!r}: the value must be finite and positive; {valid}")
    return Declare(kind, value)  # type: ignore[arg-type]


def declared_specs(
    tools: dict[str, Any], declare: Declare, *, seed: int = 0
) -> dict[str, ToolDeviceSpec]:
    """The hints each tool declares under ``declare``; ``tools`` maps names to scenario
    entries (``params``: hidden `ToolParams`, ``hints``: the file's declared fields)."""
    out = {}
    for name, entry in tools.items():
        hints = dict(entry.hints or {})
        p = entry.params
        hints.setdefault("vram_mb", p.vram_mb)
        if p.weights_mb > 0:
            if p.model is not None:
                hints.setdefault("model", p.model)
            hints.setdefault("weights_mb", p.weights_mb)
            if "load_ms" not in hints and declare.kind != "none":
                hints["load_ms"] = _distorted_load(
                    LoadProfile(gpu_ms=p.load_gpu_ms, cpu_ms=p.load_cpu_ms), declare, name, seed)
        own = hints.get("profile")
        if own is None and declare.kind != "none":
            own = SoloProfile(
                cpu_ms=p.cpu_ms, gpu_ms=p.transfer_ms + p.gpu_ms, transfer_ms=p.transfer_ms
            )
        if own is not None:
            profile = own if isinstance(own, SoloProfile) else SoloProfile.model_validate(own)
            hints["profile"] = _distorted(profile, declare, name, seed)
        out[name] = validate_spec(name, hints)
    return out


def _distorted_load(load: LoadProfile, declare: Declare, tool: str, seed: int) -> LoadProfile:
    if declare.kind != "noisy" or not declare.value:
        return load
    rng = random.Random(zlib.crc32(f"{seed}:{tool}:load".encode()))
    sigma = declare.value
    return LoadProfile(gpu_ms=(load.gpu_ms or 0.0) * math.exp(rng.gauss(0.0, sigma)),
                       cpu_ms=(load.cpu_ms or 0.0) * math.exp(rng.gauss(0.0, sigma)))


def _distorted(profile: SoloProfile, declare: Declare, tool: str, seed: int) -> SoloProfile:
    if declare.kind == "noisy" and declare.value:
        rng = random.Random(zlib.crc32(f"{seed}:{tool}".encode()))
        sigma = declare.value

        def scaled(ms: float | None) -> float | None:
            return None if ms is None else ms * math.exp(rng.gauss(0.0, sigma))

        return SoloProfile(
            cpu_ms=scaled(profile.cpu_ms),
            gpu_ms=scaled(profile.gpu_ms),
            transfer_ms=scaled(profile.transfer_ms) or 0.0,
        )
    if declare.kind == "stale" and declare.value is not None:
        gpu = None if profile.gpu_ms is None else profile.gpu_ms * declare.value
        return SoloProfile(cpu_ms=profile.cpu_ms, gpu_ms=gpu, transfer_ms=profile.transfer_ms)
    return profile
