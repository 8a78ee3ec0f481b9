"""What ``devsched profile`` does: load tools, profile with a progress bar, report, write files.

    devsched profile --suite builtin --size small --devices cpu --json p.json --plots out/
"""

from __future__ import annotations

from pathlib import Path

from langchain_core.tools import BaseTool
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from langgraph_devsched.profiling.model import Profile
from langgraph_devsched.profiling.profiler import (
    available_devices,
    load_tools,
    parse_devices,
    profile_tools,
)
from langgraph_devsched.profiling.report import plot_profile, print_profile


def select_tools(suite: str, size: str, names: str | None = None) -> list[BaseTool]:
    """``builtin`` (the 19-tool suite at ``size``) or ``MODULE:ATTR``; optionally a subset."""
    if suite == "builtin":
        from langgraph_devsched.suite import builtin_tools

        tools = builtin_tools(size)
    else:
        tools = load_tools(suite)
    if not names:
        return tools
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {t.name: t for t in tools}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(
            f"unknown tool(s) {', '.join(unknown)}; known tools: {', '.join(known)}"
        )
    return [known[n] for n in wanted]


def run_profile_command(
    *,
    suite: str = "builtin",
    devices: str = "cpu,cuda",
    size: str = "small",
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    tools: str | None = None,
    json_path: Path | None = None,
    plots: Path | None = None,
    scenario_out: Path | None = None,
    budget_s: float | None = None,
    console: Console | None = None,
) -> Profile:
    """Profile, print the table, and write JSON / the PNG plot / scenario files if asked."""
    console = console or Console()
    requested = parse_devices(devices)
    selected = select_tools(suite, size, tools)
    usable, unavailable = available_devices(requested)
    for why in unavailable.values():
        console.print(f"[yellow]{why}: profiling on {', '.join(usable) or 'nothing'} only[/]")
    columns = (
        TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("profiling", total=len(selected) * len(usable))
        profile = profile_tools(
            selected,
            devices=requested,
            repeats=repeats,
            warmup=warmup,
            cpu_threads=threads,
            size=size if suite == "builtin" else None,
            on_start=lambda tool, dev: bar.update(task, description=f"{tool} on {dev}"),
            on_progress=lambda tool, dev: bar.advance(task),
            time_budget_s=budget_s,
        )
        bar.update(task, description="done")
    print_profile(profile, console)
    if json_path is not None:
        console.print(f"profile JSON: {profile.save(json_path)}")
    if plots is not None:
        console.print(f"plot: {plot_profile(profile, Path(plots) / 'profile_scatter.png')}")
    if scenario_out is not None:
        from langgraph_devsched.profiling.to_scenario import profile_to_scenarios, write_scenarios

        prefix = f"profiled_{profile.size or 'custom'}"
        paths = write_scenarios(profile_to_scenarios(profile, prefix=prefix), scenario_out)
        console.print(f"scenarios: {', '.join(str(p) for p in paths)}")
    return profile
