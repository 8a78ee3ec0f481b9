"""Every ``devsched ...`` command line written in docs/*.md and README.md names a subcommand and
options that exist: each is checked against ``devsched [COMMAND] --help`` (the typer app, run
with CliRunner). Beside tests/test_docs_snippets.py, which runs the Python blocks."""

from __future__ import annotations

import functools
import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from langgraph_devsched.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(\S*)")
INLINE = re.compile(r"`(devsched(?: [^`]*)?)`")
OPTION_SPAN = re.compile(r"`(--[a-z][\w-]*)[^`]*`")
HEADING = re.compile(r"^#+ .*`devsched (\w+)`")
PAGE_COMMAND = {"profiling.md": "profile", "benchmark.md": "bench", "reliability.md": "stress"}
"""Inline ``--option`` spans of these pages (outside a ``devsched X`` heading) are X's."""
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
SHELL_BLOCKS = ("", "bash", "sh", "shell", "console", "text")
STOP = {"|", "||", "&&", ";", ">", ">>", "2>&1", "&"}


@dataclass(frozen=True)
class Command:
    where: str
    line: str
    subcommand: str | None
    options: tuple[str, ...]


def _joined(lines: list[str]) -> list[tuple[int, str]]:
    """Shell lines with backslash continuations joined, with the number of their first line."""
    out: list[tuple[int, str]] = []
    start, buf = 0, ""
    for number, line in enumerate(lines, 1):
        if not buf:
            start = number
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def parse(text: str) -> str | None:
    """``devsched SUB --opt ...`` from one line (a shell line or an inline code span), or None."""
    at = re.search(r"(?:^|[\s$`(])devsched(?=\s|$)", text)
    if at is None:
        return None
    return text[at.end() - len("devsched"):].strip()


def command(where: str, line: str) -> Command:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in prose
        tokens = line.split()
    words: list[str] = []
    for token in tokens[1:]:
        if token in STOP:
            break
        words.append(token.strip("[]"))
    sub = next((w for w in words if not w.startswith("-")), None)
    is_sub = sub is not None and re.fullmatch(r"[a-z][a-z_-]*", sub) is not None
    first_is_sub = bool(words) and words[0] == sub
    options = tuple(w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2)
    return Command(where, line, sub if (is_sub and first_is_sub) else None, options)


def documented_commands() -> list[Command]:
    found: list[Command] = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        in_block, shell = False, False
        block: list[tuple[int, str]] = []
        section = PAGE_COMMAND.get(page.name)
        for number, line in enumerate(lines, 1):
            if (heading := HEADING.match(line)) is not None:
                section = heading.group(1)
            elif line.startswith("#"):
                section = PAGE_COMMAND.get(page.name)
            fence = FENCE.match(line)
            if fence is not None:
                if in_block:
                    if shell:
                        for offset, joined in _joined([t for _, t in block]):
                            if (cmd := parse(joined)) is not None:
                                found.append(command(f"{page.name}:{block[offset - 1][0]}", cmd))
                    in_block, block = False, []
                else:
                    in_block, shell = True, fence.group(2) in SHELL_BLOCKS
                continue
            if in_block:
                block.append((number, line))
                continue
            for span in INLINE.findall(line):
                found.append(command(f"{page.name}:{number}", span))
            if section is not None:  # `--option VALUE` in a table or in prose
                for option in OPTION_SPAN.findall(line):
                    found.append(Command(f"{page.name}:{number}", option, section, (option,)))
    return found


@functools.cache
def help_options(subcommand: str | None) -> frozenset[str] | None:
    """The options ``devsched [SUB] --help`` lists, or None when the subcommand does not exist."""
    args = [subcommand, "--help"] if subcommand else ["--help"]
    done = CliRunner().invoke(app, args, env={"COLUMNS": "300", "NO_COLOR": "1"})
    if done.exit_code != 0:
        return None
    return frozenset(OPTION.findall(done.output))


def subcommands() -> frozenset[str]:
    done = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "300", "NO_COLOR": "1"})
    section = done.output.split("Commands", 1)[1] if "Commands" in done.output else ""
    return frozenset(re.findall(r"│ (\w[\w-]*)\s", section))


COMMANDS = documented_commands()


def test_the_docs_write_devsched_commands() -> None:
    assert len(COMMANDS) >= 20
    assert {c.subcommand for c in COMMANDS} >= {"bench", "profile", "stress", None}


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: f"{c.where} {c.line[:60]}")
def test_each_documented_command_and_option_exists(cmd: Command) -> None:
    if cmd.subcommand is not None:
        assert cmd.subcommand in subcommands(), (
            f"{cmd.where}: `{cmd.line}`: no subcommand {cmd.subcommand!r}; "
            f"valid: {', '.join(sorted(subcommands()))}"
        )
    valid = help_options(cmd.subcommand)
    assert valid is not None, f"{cmd.where}: `devsched {cmd.subcommand} --help` failed"
    missing = [o for o in cmd.options if o not in valid]
    assert not missing, (
        f"{cmd.where}: `{cmd.line}`: no such option(s) {', '.join(missing)} for "
        f"`devsched {cmd.subcommand or ''}`; valid: {', '.join(sorted(valid))}"
    )


def test_the_checker_catches_a_wrong_option_and_a_wrong_subcommand() -> None:
    assert help_options("nosuchcommand") is None
    cmd = command("x.md:1", parse("$ devsched profile --cpu-olny pin --json p.json") or "")
    assert (cmd.subcommand, cmd.options) == ("profile", ("--cpu-olny", "--json"))
    valid = help_options("profile")
    assert valid is not None and "--json" in valid and "--cpu-olny" not in valid
    lines = ["devsched profile --suite a:B \\", "    --json p.json  # a comment", "make demo"]
    assert _joined(lines) == [(1, "devsched profile --suite a:B      --json p.json  # a comment"),
                              (3, "make demo")]
    assert command("x", "devsched COMMAND --help").subcommand is None


WRITES = ("--json", "--hints-out", "--out", "--save-monitor")
"""Options whose value is a file the command writes."""
SPAN = re.compile(r"`([^`]+)`")


def written_paths(page: Path) -> list[tuple[str, Path]]:
    """``(where, path)`` for each file a documented ``devsched`` command writes, resolved
    from the folder it runs in (a leading ``cd DIR &&``; else the repository root). Code
    spans may wrap over lines; shell blocks join backslash continuations."""
    text = page.read_text(encoding="utf-8")
    lines: list[str] = []
    prose: list[str] = []
    in_block = False
    for line in text.splitlines():
        if FENCE.match(line):
            in_block = not in_block
            continue
        (lines if in_block else prose).append(line)
    candidates = [joined for _, joined in _joined(lines)]
    candidates += [" ".join(span.split()) for span in SPAN.findall("\n".join(prose))]
    found: list[tuple[str, Path]] = []
    for line in candidates:
        at = re.search(r"(?:cd (\S+) && )?devsched (?=\w)", line)
        if at is None:
            continue
        folder = ROOT / (at.group(1) or ".")
        try:
            words = shlex.split(line[at.start():], comments=True)
        except ValueError:
            words = line[at.start():].split()
        for option, value in itertools.pairwise(words):
            if option in WRITES:
                found.append((f"{page.name}: {line.strip()[:70]}", (folder / value).resolve()))
    return found


def tracked_files() -> frozenset[Path]:
    import subprocess

    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip("not a git checkout: no tracked files to protect")
    return frozenset((ROOT / name).resolve() for name in done.stdout.splitlines())


REGENERATES = {"results.md"}
"""Pages whose commands rewrite tracked files on purpose: each run's command on the results
page is how its committed JSON under docs/results/ is made again."""


def test_no_documented_command_writes_over_a_tracked_file() -> None:
    tracked = tracked_files()
    written = [w for page in PAGES if page.name not in REGENERATES for w in written_paths(page)]
    assert len(written) >= 10 and any("cd examples" in where for where, _ in written)
    over = [f"{where} -> {path.relative_to(ROOT)}" for where, path in written
            if path in tracked]
    assert not over, f"documented commands that write over tracked files: {over}"
