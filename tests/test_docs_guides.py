"""The docs as a new reader meets them: docs/index.md sends each task to its guide, in the
order a user needs them; the three questions a new user asks first are answered one click from
the index, within one screen of where the link lands; every link between pages resolves; and
the guides carry no issue numbers and no machine diaries (this machine, its load, its cores,
dated runs): measured figures live on docs/results.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDES = ("install.md", "switch.md", "hints.md", "resident_models.md", "multi_gpu.md",
          "processes.md", "ray.md", "tracing.md", "cli.md", "troubleshooting.md")
"""The task-first guides, in the index's order."""
USER_PAGES = (*GUIDES, "index.md", "simulated_gpu.md", "concepts.md", "reference_hints.md",
              "reference_options.md", "reference_cli.md")
"""The pages a new user reads: the guides, the index, the ideas and the reference."""
NOT_OURS = {"agentic.md"}
"""Pages whose measured runs (with the machine's load at the time) stay on the page: the
agentic scheduler's real-model figures are not bench JSON the results page reads. Their
links are checked."""
SCREEN = 40
"""Lines of Markdown a screen shows."""
LINK = re.compile(r"\]\(([^)\s]+)\)")

ISSUE = re.compile(r"\bissues? \d+|\(#\d+\)|\bpoint \d+ of\b", re.I)
DIARY = re.compile(
    r"this (?:\d+-core |project's |development )?machine(?:'s)? (?:\(|was |under |shared)"
    r"|\d+-core machine|load average|shared with other (?:work|jobs)|development machine"
    r"|\b20\d\d-\d\d-\d\d\b|\d\d:\d\d(?:-\d\d:\d\d)? UTC"
    r"|\bmeasured on (?:this|the) (?:\d+-core |project's |development )?(?:CPU )?machine"
    r"|\bon [0-9a-f]{7,40}\b", re.I)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> dict[str, int]:
    """Anchor -> line index of each heading outside code blocks."""
    out: dict[str, int] = {}
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines()):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,6} (.*)$", line)):
            out.setdefault(slug(m.group(1)), number)
    return out


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "#"))]


def test_the_index_lists_the_guides_in_task_order() -> None:
    index = links(DOCS / "index.md")
    pages = [t.split("#")[0] for t in index]
    firsts = [pages.index(g) for g in GUIDES]
    assert firsts == sorted(firsts), f"guides out of order in index.md: {pages}"
    for page in (*USER_PAGES[len(GUIDES) + 1:], "results.md"):
        assert page in pages, f"index.md does not link {page}"


@pytest.mark.parametrize(("question", "answer"), [
    ("pinning a model to GPU 1", r'"gpus": \[1\]'),
    ("what call_timeout_s covers", r"deadline covers the call's whole life"),
    ("what gpu_queued means", r"\| `gpu_queued` \| wait"),
])
def test_a_first_question_is_one_click_and_one_screen_from_the_index(question: str,
                                                                     answer: str) -> None:
    found = []
    for target in links(DOCS / "index.md"):
        if "#" not in target:
            continue
        page, anchor = target.split("#", 1)
        lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
        start = anchors(DOCS / page).get(anchor)
        assert start is not None, f"index.md links {target}: no such heading"
        if re.search(answer, "\n".join(lines[start:start + SCREEN])):
            found.append(target)
    assert found, f"{question}: no link of index.md lands within {SCREEN} lines of it"


def test_the_readme_sends_readers_to_the_index() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(docs/index.md)" in readme


def all_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", all_pages(), ids=lambda p: p.name)
def test_every_link_between_pages_resolves(page: Path) -> None:
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve()
        assert resolved.exists(), f"{page.name}: link to missing {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.name}: {target}: no such heading"


DIARY_FREE = sorted(p.name for p in DOCS.glob("*.md")
                    if p.name not in NOT_OURS | {"results.md"})
"""Every page but the results page, which names each run's machine and load."""


@pytest.mark.parametrize("name", DIARY_FREE)
def test_pages_carry_no_issue_numbers_and_no_machine_diary(name: str) -> None:
    text = (DOCS / name).read_text(encoding="utf-8")
    bad = [f"{name}:{n}: {line.strip()[:90]}" for n, line in enumerate(text.splitlines(), 1)
           if ISSUE.search(line) or DIARY.search(line)]
    assert not bad, "move measured figures to docs/results.md:\n" + "\n".join(bad)


def test_the_user_pages_are_all_checked() -> None:
    assert set(USER_PAGES) <= set(DIARY_FREE) and len(DIARY_FREE) >= 20


def test_the_checks_catch_a_diary_and_an_issue() -> None:
    for line in ("Measured on this 2-core machine (shared with other work)",
                 "a run (2026-12-04, 19:00 UTC)", "load average 5.3", "What is built (issue 26)",
                 "What they find on d7c8ce5"):
        assert ISSUE.search(line) or DIARY.search(line), line
    for line in ("leave it out to use this machine", "run real tools on this machine's devices",
                 "`gpu_queued` waits for a slot"):
        assert not (ISSUE.search(line) or DIARY.search(line)), line
