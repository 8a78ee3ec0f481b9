"""``devsched perf``: decision time and memory per scheduler and batch size, per-step time and
RSS through the node over many steps, the node's overhead against `ToolNode`, and
(optionally) quality on generated scenarios.

`run_perf` returns the JSON document (keys: ``config``, ``decisions`` — one row per
scheduler and size —, ``steps``, ``overhead``, ``shared``, ``quality``); `perf_command` is the typer
command that ``devsched`` registers.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from langgraph_devsched.output_paths import check_output_paths

DEFAULT_SIZES = "1,2,4,8,16,32,64"
DEFAULT_STEPS = 2_000
"""Node steps by default: a per-step time in well under a minute (``--steps 50000`` is the
long run the RSS figure in docs/benchmark.md comes from)."""


def run_perf(
    *,
    schedulers: Sequence[str] | None = None,
    sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    samples: int = 5,
    warmup: int = 30,
    steps: int = DEFAULT_STEPS,
    every: int = 1000,
    overhead: int = 800,
    quality: int = 0,
    seed: int = 0,
    say: Any = None,
    gpus: int = 1,
    shared: int = 0,
) -> dict[str, Any]:
    """Measure and return the JSON document (see the module docstring)."""
    from langgraph_devsched._dev.perf.decisions import measure_decisions
    from langgraph_devsched._dev.perf.steps import measure_steps
    from langgraph_devsched.bench.runner import default_schedulers, validate_scheduler_names

    names = default_schedulers() if schedulers is None else validate_scheduler_names(schedulers)
    if any(n < 1 for n in sizes):
        raise ValueError(f"sizes must be >= 1, got {list(sizes)}")
    note = say or (lambda text: None)
    doc: dict[str, Any] = {
        "config": {
            "schedulers": names, "sizes": list(sizes), "samples": samples, "warmup": warmup,
            "steps": steps, "every": every, "overhead": overhead, "quality": quality,
            "seed": seed, "gpus": gpus, "shared": shared,
            "python": platform.python_version(), "machine": platform.machine(),
        },
    }
    doc["decisions"] = measure_decisions(
        names, sizes=sizes, samples=samples, warmup=warmup, seed=seed, gpus=gpus,
        on_row=lambda r: note(f"decisions: {r['scheduler']} n={r['n']}"),
    )
    doc["steps"] = measure_steps(
        steps=steps, every=every, seed=seed,
        on_progress=lambda k: note(f"steps: {k}/{steps}"),
    ) if steps > 0 else None
    if overhead > 0:
        from langgraph_devsched._dev.perf.overhead import measure_overhead

        note(f"overhead: {overhead} alternating steps a pair")
        doc["overhead"] = measure_overhead(steps=overhead)
    else:
        doc["overhead"] = None
    if shared > 0:
        from langgraph_devsched._dev.perf.shared import measure_shared

        note(f"shared ledger: {shared} reserve+release pairs, {shared // 5} steps")
        doc["shared"] = measure_shared(pairs=shared, steps=max(1, shared // 5))
    else:
        doc["shared"] = None
    if quality > 0:
        from langgraph_devsched._dev.perf.quality import measure_quality

        note(f"quality: {quality} generated scenarios")
        doc["quality"] = measure_quality(count=quality, seed=seed)
    else:
        doc["quality"] = None
    return doc


def tables(doc: dict[str, Any]) -> list[Any]:
    """Rich tables of a `run_perf` document."""
    from rich.table import Table

    dec = Table(title="Decision time (ms) and peak extra memory (MB)")
    for col in ("scheduler", "n", "fresh p50", "fresh p95", "repeated p50", "repeated p95",
                "reused", "peak MB"):
        dec.add_column(col, justify="left" if col == "scheduler" else "right")
    for r in doc["decisions"]:
        if r.get("error"):
            dec.add_row(r["scheduler"], str(r["n"]), f"[dim]{r['error'][:60]}[/]", "", "", "",
                        "", "")
            continue
        dec.add_row(r["scheduler"], str(r["n"]), f"{r['fresh_p50_ms']:.3f}",
                    f"{r['fresh_p95_ms']:.3f}", f"{r['repeated_p50_ms']:.3f}",
                    f"{r['repeated_p95_ms']:.3f}", str(r["reused"]), f"{r['peak_mb']:.2f}")
    out = [dec]
    s = doc.get("steps")
    if s:
        st = Table(title=f"Node steps ({s['steps']:,} steps, {s['tools']} tools)")
        for col in ("step p50 ms", "step p95 ms", "last window p50", "RSS start MB",
                    "RSS end MB", "RSS growth MB"):
            st.add_column(col, justify="right")
        st.add_row(f"{s['step_p50_ms']:.3f}", f"{s['step_p95_ms']:.3f}",
                   f"{s['last_window']['p50_ms']:.3f}", f"{s['rss_mb'][1]:.1f}"
                   if len(s["rss_mb"]) > 1 else "", f"{s['rss_mb'][-1]:.1f}",
                   f"{s['rss_growth_mb']:.1f}")
        out.append(st)
    o = doc.get("overhead")
    if o:
        ot = Table(title=f"Node overhead against ToolNode ({o['calls_per_step']} no-op calls a "
                         f"step, {o['unhinted']['steps']} alternating steps a pair)")
        for col in ("DeviceToolNode", "ToolNode ms", "DeviceToolNode ms", "ratio",
                    "diff ms a step"):
            ot.add_column(col, justify="left" if col == "DeviceToolNode" else "right")
        for label, key in (("unhinted", "unhinted"), ("hinted, settled", "hinted")):
            r = o[key]
            ot.add_row(label, f"{r['tool_node_ms']:.3f}", f"{r['device_ms']:.3f}",
                       f"{r['ratio']:.3f}", f"{r['diff_ms']:+.3f}")
        out.append(ot)
    sh = doc.get("shared")
    if sh:
        led, node = sh["ledger"], sh["node"]
        tt = Table(title=f"Machine-wide ledger (shared=) against the in-process one "
                         f"({led['pairs']} reserve+release pairs; {node['steps']} steps of "
                         f"{node['calls_per_step']} GPU calls)")
        for col in ("what", "in-process p50", "p99", "shared p50", "p99", "added p50",
                    "added p99"):
            tt.add_column(col, justify="left" if col == "what" else "right")
        tt.add_row("reserve+release (ms)", f"{led['in_process']['p50_ms']:.4f}",
                   f"{led['in_process']['p99_ms']:.4f}", f"{led['shared']['p50_ms']:.4f}",
                   f"{led['shared']['p99_ms']:.4f}", f"{led['added_p50_ms']:+.4f}",
                   f"{led['added_p99_ms']:+.4f}")
        tt.add_row("node step (ms; added: a call)", f"{node['in_process']['p50_ms']:.3f}",
                   f"{node['in_process']['p99_ms']:.3f}", f"{node['shared']['p50_ms']:.3f}",
                   f"{node['shared']['p99_ms']:.3f}", f"{node['added_p50_ms_a_call']:+.4f}",
                   f"{node['added_p99_ms_a_call']:+.4f}")
        out.append(tt)
    q = doc.get("quality")
    if q:
        sq = Table(title="Bounded search on the noise-free testbed (mapping / optimum)")
        for col in ("scenario", "calls", "local search", "scored", "default", "method"):
            sq.add_column(col, justify="left" if col == "scenario" else "right")
        for r in q["search"]:
            sq.add_row(r["name"], str(r["calls"]), f"{r['local_ratio']:.4f}",
                       str(r["local_scored"]), f"{r['default_ratio']:.4f}",
                       r["default_method"])
        out.append(sq)
        qt = Table(title=f"Quality on {len(q['scenarios'])} generated scenarios "
                         f"(final makespan / optimum)")
        for col in ("scenario", "calls", "monitor", "monitor_local", "ucb"):
            qt.add_column(col, justify="left" if col == "scenario" else "right")
        for r in q["scenarios"]:
            qt.add_row(r["name"], str(r["calls"]), f"{r['monitor_ratio']:.4f}",
                       f"{r['monitor_local_ratio']:.4f}", f"{r['ucb_ratio']:.4f}")
        out.append(qt)
    return out


def perf_command(
    schedulers: Annotated[
        str | None, typer.Option(help="comma-separated names (default: every scheduler "
                                 "buildable without arguments, and the oracle)")
    ] = None,
    sizes: Annotated[str, typer.Option(help="batch sizes n, comma-separated")] = DEFAULT_SIZES,
    samples: Annotated[int, typer.Option(min=1, help="timed decisions per case")] = 5,
    warmup: Annotated[
        int, typer.Option(min=0, help="rounds before the repeated shape is timed")
    ] = 30,
    steps: Annotated[
        int, typer.Option(min=0, help="node steps for per-step time and RSS (0: skip; "
                          "50000 for the long RSS check, several minutes)")
    ] = DEFAULT_STEPS,
    every: Annotated[int, typer.Option(min=1, help="steps per RSS reading and window")] = 1000,
    overhead: Annotated[
        int, typer.Option(min=0, help="alternating steps a pair for the overhead against "
                          "ToolNode, unhinted and hinted (0: skip)")
    ] = 800,
    quality: Annotated[
        int, typer.Option(min=0, help="generated 9-10 call scenarios checked against the "
                          "oracle (0: skip)")
    ] = 0,
    seed: Annotated[int, typer.Option(help="seed of the generated tools and scenarios")] = 0,
    gpus: Annotated[int, typer.Option(min=1, max=8, help="GPUs of the decisions' simulated "
                                      "machine (several: alternately 24 GB at speed 1 and "
                                      "12 GB at speed 2)")] = 1,
    shared: Annotated[
        int, typer.Option(min=0, help="reserve+release pairs timed against the machine-wide "
                          "ledger (shared=) and the in-process one, and a fifth as many node "
                          "steps (0: skip; 2000 is a good run)")
    ] = 0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the results as JSON here")
    ] = None,
) -> None:
    """Measure decision time per scheduler and batch size, the node's per-step cost and its
    overhead against ToolNode."""
    from rich.console import Console

    console = Console(stderr=True, log_path=False)  # a log line is about the run, not us
    try:
        check_output_paths(("--json", json_path, "file"))
        names = None if schedulers is None else [
            n.strip() for n in schedulers.split(",") if n.strip()]
        size_list = [int(x) for x in sizes.split(",") if x.strip()]
        doc = run_perf(
            schedulers=names, sizes=size_list, samples=samples, warmup=warmup, steps=steps,
            every=every, overhead=overhead, quality=quality, seed=seed, gpus=gpus,
            shared=shared, say=lambda text: console.log(text, highlight=False),
        )
    except ValueError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    out = Console()
    for table in tables(doc):
        out.print(table)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        out.print(f"JSON: {json_path}")
