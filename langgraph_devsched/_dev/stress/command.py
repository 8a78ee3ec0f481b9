"""``devsched stress``: run the harness quietly, print the figures, write ``--json``."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import ValidationError

from langgraph_devsched._dev.stress.driver import BACKEND_CHOICES, StressConfig, run_stress
from langgraph_devsched._dev.stress.faults import parse_fault_rates
from langgraph_devsched._dev.stress.report import StressReport


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Injected faults log a warning each; keep the terminal for the figures."""
    logger = logging.getLogger("langgraph_devsched")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def make_config(
    *,
    calls: int,
    seed: int,
    backend: str,
    fault_rates: Sequence[str] = (),
    max_seconds: float = 540.0,
    gpus: int = 1,
) -> StressConfig:
    """The run's config; `ValueError` names the bad option and the valid values."""
    if backend not in BACKEND_CHOICES:
        raise ValueError(
            f"unknown backend {backend!r}; valid backends: {', '.join(BACKEND_CHOICES)}"
        )
    rates = parse_fault_rates(fault_rates)
    try:
        return StressConfig(
            calls=calls, seed=seed, backend=backend,  # type: ignore[arg-type]
            rates=rates, max_seconds=max_seconds, gpus=gpus,
        )
    except ValidationError as exc:
        msgs = (str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ValueError("; ".join(msgs)) from None


def print_report(report: StressReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"devsched stress: {report.calls} calls, {report.steps} steps")
    numeric = ("rate", "injected", "handled", "violations")
    cols = ("fault", "rate", "injected", "handled", "violations", "where",
            "injected/handled by backend", "expected outcome")
    for col in cols:
        table.add_column(col, justify="right" if col in numeric else "left")
    failing = set(report.failing_kinds)
    for f in report.faults:
        kind = f"[red]{f.kind}[/]" if f.kind in failing else f.kind
        table.add_row(
            kind, f"{f.rate:g}", str(f.injected), str(f.handled),
            str(report.violations_by_kind.get(f.kind, 0)), ",".join(f.backends) or "-",
            " ".join(f"{b} {i}/{h}" for b, (i, h) in sorted(f.by_backend.items())) or "-",
            f.expected,
        )
    console.print(table)
    for ledger in report.ledgers:
        console.print(
            f"ledger {ledger.backend} {ledger.device}: peak {ledger.peak_mb:.0f} / "
            f"{ledger.budget_mb:.0f} MB, "
            f"end {ledger.end_mb:.0f} MB ({ledger.end_active} active, {ledger.end_queued} queued)"
        )
    console.print(
        f"answered {report.answered}, lost {report.lost}, duplicated {report.duplicated}, "
        f"stray {report.stray}, error answers {report.error_answers}; "
        f"fallbacks {report.fallbacks}; {report.wall_s:.1f} s"
        + (" (stopped by --max-seconds)" if report.stopped_early else "")
    )
    console.print(
        "[green]OK[/]" if report.ok else f"[red]FAILED[/]: {report.violations} violation(s)"
    )
    if failing:
        console.print(f"failing kinds: {', '.join(report.failing_kinds)}", markup=False)
    for example in report.violation_examples:
        console.print(f"  {example}", markup=False, highlight=False)


def run_stress_command(
    *,
    calls: int,
    seed: int,
    backend: str,
    fault_rates: Sequence[str] = (),
    max_seconds: float = 540.0,
    json_path: Path | None = None,
    gpus: int = 1,
) -> StressReport:
    """What ``devsched stress`` does; raises `ValueError` on bad options."""
    config = make_config(
        calls=calls, seed=seed, backend=backend, fault_rates=fault_rates, max_seconds=max_seconds,
        gpus=gpus,
    )
    with _quiet():
        report = run_stress(config)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(report.model_dump_json(indent=1), encoding="utf-8")
    print_report(report)
    return report
