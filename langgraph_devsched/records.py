"""What happened to tool calls: the one record type every executor and the testbed produce.

>>> r = CallRecord("c1", "ocr", "gpu_now", "cpu", "oom", 0.0, 120.0, 0.0, 0)
>>> r.latency_ms, r.fell_back
(120.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from langgraph_devsched.device import is_gpu_device
from langgraph_devsched.options import DeviceOption, FallbackCause


@dataclass(frozen=True)
class CallRecord:
    """One executed call. Times are ms from the start of its step."""

    call_id: str
    tool: str
    option: DeviceOption
    device: str
    fallback: FallbackCause | None
    start_ms: float
    end_ms: float
    vram_reserved_mb: float
    gpu_peers: int
    """Most other calls computing on the GPU at once while this one ran there (0 on CPU)."""
    error: str | None = None
    node: str | None = None
    """The cluster node that ran the call (Ray backend: its IP); None on one machine."""
    gpu_type: str | None = None
    """The GPU type that ran the call where the backend knows it (Ray's accelerator type)."""
    model: str | None = None
    """The resident model the call ran on (its ``model`` hint), None without one."""
    load_ms: float = 0.0
    """Time this call spent waiting for its model's weights to load (0: they were warm)."""
    loaded: bool = False
    """This call loaded its model's weights (a cold start); False on a warm hit."""
    evicted: tuple[str, ...] = ()
    """Models whose weights were evicted to make room for this call's model."""

    def __init__(
        self, call_id: str, tool: str, option: DeviceOption, device: str,
        fallback: FallbackCause | None, start_ms: float, end_ms: float,
        vram_reserved_mb: float, gpu_peers: int, error: str | None = None,
        node: str | None = None, gpu_type: str | None = None, model: str | None = None,
        load_ms: float = 0.0, loaded: bool = False, evicted: tuple[str, ...] = (),
    ) -> None:
        # the generated __init__ of a frozen dataclass pays an ``object.__setattr__`` a
        # field, three times this; every call of every step, real or simulated, makes one
        # (the dataclass keeps its equality, hash, repr, fields and immutability; a test
        # pins this signature to the fields)
        self.__dict__.update(
            call_id=call_id, tool=tool, option=option, device=device, fallback=fallback,
            start_ms=start_ms, end_ms=end_ms, vram_reserved_mb=vram_reserved_mb,
            gpu_peers=gpu_peers, error=error, node=node, gpu_type=gpu_type, model=model,
            load_ms=load_ms, loaded=loaded, evicted=evicted)

    @property
    def latency_ms(self) -> float:
        """From the step's start to this call's end (queue wait included)."""
        return self.end_ms

    @property
    def run_ms(self) -> float:
        """From the call's start on its device to its end."""
        return self.end_ms - self.start_ms

    @property
    def on_gpu(self) -> bool:
        """True when it ran on a GPU (``none``: it could run nowhere)."""
        return is_gpu_device(self.device)

    @property
    def fell_back(self) -> bool:
        return self.fallback is not None


@dataclass(frozen=True)
class StepRecord:
    """One step (a batch of calls decided jointly) and its makespan."""

    calls: tuple[CallRecord, ...]
    makespan_ms: float
    vram_peak_mb: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)

    def by_id(self) -> dict[str, CallRecord]:
        return {c.call_id: c for c in self.calls}

    @property
    def evictions(self) -> int:
        """Models evicted during this step (to make room for another's weights)."""
        return sum(len(c.evicted) for c in self.calls)

    @property
    def loads(self) -> int:
        """Model loads (cold starts) during this step."""
        return sum(1 for c in self.calls if c.loaded)
