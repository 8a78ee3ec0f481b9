"""The docs a new user reads first: the built-in scenario count they state is the number
shipped (docs/benchmark.md's opening and docs/cli.md's example once said 13 of 17; the option
rows are generated now: docs/reference_cli.md), and docs/cli.md's command table names every
command ``devsched --help`` lists (it lacked ``perf``)."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from langgraph_devsched.bench.scenario import builtin_scenario_paths
from langgraph_devsched.cli import app

DOCS = Path(__file__).resolve().parents[1] / "docs"
BUILT_IN = len(builtin_scenario_paths())


def counted(text: str) -> list[int]:
    """Every count of built-ins the text states ("17 are built in", "the 17 built-in
    scenarios", "(default: the built-ins, 17)")."""
    found = re.findall(r"(\d+) (?:are built in|built-in scenarios|built-ins\))", text)
    found += re.findall(r"the built-ins, (\d+)\)", text)
    return [int(n) for n in found]


def test_the_docs_state_the_number_of_built_in_scenarios() -> None:
    bench = (DOCS / "benchmark.md").read_text(encoding="utf-8")
    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    opening = bench.split("## ", 1)[0]  # before the first section: what a reader meets
    examples = [line for line in cli.splitlines() if line.startswith("devsched bench ")
                and "built-in scenarios" in line]
    assert BUILT_IN == 17
    for where, text in (("benchmark.md opening", opening),
                        *((f"cli.md example {i}", e) for i, e in enumerate(examples))):
        assert counted(text) == [BUILT_IN], (where, text)
    assert len(examples) == 1


def test_the_cli_page_lists_every_command() -> None:
    command = typer.main.get_command(app)
    names = sorted(command.commands)  # type: ignore[attr-defined]
    helped = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert all(name in helped.output for name in names)
    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `devsched (\w+)` \|", cli, flags=re.M)
    assert sorted(listed) == names, (listed, names)
    assert "perf" in names
