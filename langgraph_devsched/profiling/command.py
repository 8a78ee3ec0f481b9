"""What ``devsched profile`` does: load tools, profile with a progress bar, report, write files.

    devsched profile --suite builtin --size small --devices cpu --json p.json --plots out/
    devsched profile --suite tools:TOOLS --example-args args.json --hints-out hints.yaml

``MODULE:ATTR`` is imported with the working directory on ``sys.path`` (as ``python -m``
does), so ``tools:TOOLS`` works from the folder holding ``tools.py``. The progress bar goes to
stderr, only on a terminal and not with ``quiet``. A run that measured no tool on any device
raises `NothingMeasured` (exit code 1) and writes no file; a run that measured some tools but
not others writes its files for the measured ones (and a comment naming the others in the
hints file), then raises `NotAllMeasured` (exit code 1) with each tool's reason and what to
do. A tool not declared side-effect free is called once in all; the table's notes say so.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from langchain_core.tools import BaseTool
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from langgraph_devsched.profiling.model import Profile
from langgraph_devsched.profiling.profiler import (
    EXAMPLE_ARGS_KEY,
    available_devices,
    load_tools,
    parse_devices,
    profile_tools,
)
from langgraph_devsched.profiling.report import plot_profile, print_profile
from langgraph_devsched.profiling.to_scenario import CpuOnlyPolicy

CPU_ONLY_POLICIES = ("skip", "pin")


class NothingMeasured(RuntimeError):
    """The run measured no tool on any device; the message lists each tool's reason."""


class NotAllMeasured(NothingMeasured):
    """Some tools were measured nowhere (the files hold the others); the message says why."""


ADVICE = (
    "fix what the reason says and profile again, or declare the figures yourself in the "
    "hints file (profile: {cpu_ms: ..., gpu_ms: ...}; an estimate is fine)"
)


def unmeasured(profile: Profile) -> list[str]:
    """``tool: reason`` for each tool measured on no device (a time budget's skips aside)."""
    out = []
    for row in profile.tools:
        if row.runs or all(v == "time budget exhausted" for v in row.skipped.values()):
            continue
        why = "; ".join(f"{k}: {v}" for k, v in row.skipped.items()) or "no device"
        out.append(f"{row.tool}: {why}")
    return out


@contextlib.contextmanager
def cwd_on_path() -> Iterator[None]:
    """Put the working directory first on ``sys.path`` for the block (``python -m`` style)."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def select_tools(suite: str, size: str, names: str | None = None) -> list[BaseTool]:
    """``builtin`` (the 19-tool suite at ``size``) or ``MODULE:ATTR``; optionally a subset."""
    if suite == "builtin":
        from langgraph_devsched.suite import builtin_tools

        tools = builtin_tools(size)
    else:
        with cwd_on_path():
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


def parse_example_args(value: str | None, tools: Sequence[BaseTool]) -> dict[str, dict[str, Any]]:
    """``--example-args``: inline JSON (``'{"ocr": {"image": "a.png"}}'``) or a JSON/YAML file
    mapping tool name -> arguments. Names must be among ``tools``."""
    if value is None:
        return {}
    text = value.strip()
    where = "--example-args"
    if not text.startswith("{"):
        path = Path(value)
        where = f"--example-args file {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(
                f"{where}: cannot read ({exc.strerror}); give a JSON/YAML file or inline JSON "
                "such as '{\"tool_name\": {\"arg\": 1}}'"
            ) from None
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{where}: not valid JSON/YAML: {exc}") from None
    known = [t.name for t in tools]
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a mapping of tool name -> arguments")
    unknown = [str(n) for n in data if n not in known]
    if unknown:
        raise ValueError(
            f"{where}: unknown tool(s) {', '.join(unknown)}; known tools: {', '.join(known)}"
        )
    bad = [str(n) for n, args in data.items() if not isinstance(args, Mapping)]
    if bad:
        raise ValueError(
            f"{where}: the arguments of {', '.join(bad)} must be a mapping of name -> value"
        )
    return {str(n): dict(args) for n, args in data.items()}


def _nothing_measured(profile: Profile) -> str:
    lines = ["no tool was measured on any device:"]
    for row in profile.tools:
        why = "; ".join(f"{k}: {v}" for k, v in row.skipped.items()) or "no device"
        lines.append(f"  {row.tool}: {why}")
    if any("no example arguments" in v for row in profile.tools for v in row.skipped.values()):
        lines.append(
            "give example arguments with --example-args '{\"TOOL\": {\"ARG\": VALUE}}' "
            f"(or a JSON/YAML file), or set tool.metadata[{EXAMPLE_ARGS_KEY!r}]"
        )
    return "\n".join(lines)


def run_profile_command(
    *,
    suite: str = "builtin",
    devices: str = "cpu,cuda",
    size: str = "small",
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    tools: str | None = None,
    example_args: str | None = None,
    json_path: Path | None = None,
    plots: Path | None = None,
    scenario_out: Path | None = None,
    cpu_only: str = "skip",
    hints_out: Path | None = None,
    budget_s: float | None = None,
    assume_idempotent: bool = False,
    quiet: bool = False,
    console: Console | None = None,
    errors: Console | None = None,
) -> Profile:
    """Profile, print the table, and write JSON / hints / the PNG plot / scenarios if asked.

    ``console`` gets the table and the paths written (nothing when ``quiet``); ``errors``
    (stderr) gets warnings and the progress bar (on a terminal, not when ``quiet``).
    """
    console = console or Console()
    errors = errors or Console(stderr=True)
    if cpu_only not in CPU_ONLY_POLICIES:
        raise ValueError(f"unknown --cpu-only {cpu_only!r}; valid: {', '.join(CPU_ONLY_POLICIES)}")
    requested = parse_devices(devices)
    with cwd_on_path():  # the tools may import their siblings when they first run
        selected = select_tools(suite, size, tools)
        given = parse_example_args(example_args, selected)
        usable, unavailable = available_devices(requested)
        for why in unavailable.values():
            errors.print(f"[yellow]{why}: profiling on {', '.join(usable) or 'nothing'} only[/]")
        columns = (
            TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        show = not quiet and errors.is_terminal
        with Progress(*columns, console=errors, transient=True, disable=not show) as bar:
            task = bar.add_task("profiling", total=len(selected) * len(usable))
            profile = profile_tools(
                selected,
                devices=requested,
                repeats=repeats,
                warmup=warmup,
                cpu_threads=threads,
                args=given,
                size=size if suite == "builtin" else None,
                on_start=lambda tool, dev: bar.update(task, description=f"{tool} on {dev}"),
                on_progress=lambda tool, dev: bar.advance(task),
                time_budget_s=budget_s,
                assume_idempotent=assume_idempotent,
            )
    if not quiet:
        print_profile(profile, console)
    if not any(row.runs for row in profile.tools):
        raise NothingMeasured(_nothing_measured(profile))
    missing = unmeasured(profile)
    say = (lambda _msg: None) if quiet else console.print
    if json_path is not None:
        say(f"profile JSON: {profile.save(json_path)}")
    if hints_out is not None:
        from langgraph_devsched.profiling.to_hints import profile_hints, write_hints

        comments = [f"not measured: {line}" for line in missing]
        say(f"hints: {write_hints(profile_hints(profile), hints_out, comments=comments)}")
    if plots is not None:
        say(f"plot: {plot_profile(profile, Path(plots) / 'profile_scatter.png')}")
    if scenario_out is not None:
        from langgraph_devsched.profiling.to_scenario import profile_to_scenarios, write_scenarios

        prefix = f"profiled_{profile.size or 'custom'}"
        policy: CpuOnlyPolicy = "pin" if cpu_only == "pin" else "skip"
        built = profile_to_scenarios(profile, prefix=prefix, cpu_only=policy)
        paths = write_scenarios(built, scenario_out)
        say(f"scenarios: {', '.join(str(p) for p in paths)}")
    if missing:
        raise NotAllMeasured(
            "not measured on any device:\n" + "\n".join(f"  {line}" for line in missing)
            + f"\nthe other tools were measured (and written); for these: {ADVICE}"
        )
    return profile
