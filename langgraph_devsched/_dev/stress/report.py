"""The stress run's report: what was asked, what was answered, what the ledgers saw.

`StressReport.ok` holds when no answer was lost or duplicated, no answer went to a wrong id,
every ledger stayed within its budget and ended at zero, and no invariant was violated.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, computed_field


class LedgerFigures(BaseModel):
    """VRAM as one backend's ledger saw it (MB; background excluded)."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    budget_mb: float
    device: str = "cuda:0"
    """The GPU of the backend's machine these figures are of (one line per GPU)."""
    peak_mb: float = 0.0
    end_mb: float = 0.0
    end_active: int = 0
    end_queued: int = 0
    steps: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.peak_mb <= self.budget_mb + 1e-6
            and abs(self.end_mb) <= 1e-6
            and self.end_active == 0
            and self.end_queued == 0
        )


class FaultFigures(BaseModel):
    """One fault kind: how often it fired, and how often the expected outcome was seen."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    rate: float
    injected: int
    handled: int
    expected: str
    backends: list[str] = Field(
        default_factory=list, description="where it ran: simulated, local, none (no node)"
    )
    by_backend: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        description="scenario faults: (injected, handled) on each backend it ran on",
    )


class StressReport(BaseModel):
    """Figures of one ``devsched stress`` run (``--json`` writes this)."""

    model_config = ConfigDict(extra="forbid")

    seed: int
    backend: str
    calls: int = Field(description="tool calls sent")
    steps: int
    answered: int = Field(description="calls with at least one answer")
    lost: int = Field(description="calls with no answer")
    duplicated: int = Field(description="answers beyond the first for a call")
    stray: int = Field(default=0, description="answers whose id matches no call of their step")
    error_answers: int = Field(
        default=0, description="answers with status 'error' (expected for faults)"
    )
    fallbacks: dict[str, int] = Field(
        default_factory=dict, description="applied-option fallbacks by cause (node + executors)"
    )
    agentic_causes: dict[str, int] = Field(
        default_factory=dict, description="agentic scheduler per-call fallback causes"
    )
    faults: list[FaultFigures] = Field(default_factory=list)
    ledgers: list[LedgerFigures] = Field(default_factory=list)
    counters: dict[str, int] = Field(default_factory=dict, description="other harness counts")
    violations: int = 0
    violations_by_kind: dict[str, int] = Field(
        default_factory=dict, description="violations by fault kind ('invariant': no fault)"
    )
    violation_examples: list[str] = Field(
        default_factory=list,
        description="the first violations: 20 invariants, 3 per fault kind (60 at most)",
    )
    wall_s: float = 0.0
    stopped_early: bool = Field(default=False, description="--max-seconds ended the run first")
    node_call_timeout: bool = Field(
        default=False, description="hangs were released by the node itself (False: by the harness)"
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def faults_injected(self) -> dict[str, int]:
        """Injections that fired, by fault kind."""
        return {f.kind: f.injected for f in self.faults}

    @computed_field  # type: ignore[prop-decorator]
    @property
    def failing_kinds(self) -> list[str]:
        """Fault kinds with an injection not handled as expected, or a violation of their own."""
        return [
            f.kind for f in self.faults
            if f.handled < f.injected or self.violations_by_kind.get(f.kind, 0) > 0
        ]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        """Nothing lost, duplicated or stray; ledgers within budget and at 0; no violation."""
        return (
            self.lost == 0
            and self.duplicated == 0
            and self.stray == 0
            and self.violations == 0
            and all(ledger.ok for ledger in self.ledgers)
        )
