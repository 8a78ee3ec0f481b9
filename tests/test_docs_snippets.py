"""Every ```python block in docs/*.md runs, so the docs never rot.

Blocks of one file run in order in one fresh namespace (a later block may use an earlier
one's names), with a temporary working directory and no LangSmith/network settings. A block
fenced as ```python no-run (it needs a GPU, a network or an API key) is only compiled.
"""

from __future__ import annotations

import re
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
OWN_DOCS = (
    "switch.md",
    "hints.md",
    "simulated_gpu.md",
    "resident_models.md",
    "multi_gpu.md",
    "processes.md",
    "tracing.md",
    "cli.md",
    "troubleshooting.md",
    "concepts.md",
    "reference_hints.md",
    "schedulers.md",
)
"""The guides and pages that show code: each has a block that runs (install.md shows shell
commands only; ray.md needs a Ray cluster, so its blocks are compiled, not run)."""


@dataclass(frozen=True)
class Block:
    line: int
    """1-based line of the first code line."""
    code: str
    run: bool


def python_blocks(text: str) -> list[Block]:
    """The fenced ``python`` blocks of a Markdown text (indented fences too, e.g. in lists)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, info = opening["fence"], opening["info"].strip().split()
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if (
                closing is not None
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            j += 1
        if info and info[0] in ("python", "py", "python3"):
            body = textwrap.dedent("\n".join(lines[i + 1 : j]))
            blocks.append(Block(line=i + 2, code=body + "\n", run="no-run" not in info[1:]))
        i = j + 1
    return blocks


def run_blocks(path: Path, blocks: list[Block]) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "__file__": str(path)}
    for block in blocks:
        code = compile(block.code, f"{path.name}:{block.line}", "exec")
        if not block.run:
            continue
        try:
            exec(code, namespace)
        except Exception:
            where = f"{path.name}, block at line {block.line}"
            pytest.fail(f"{where} failed:\n{block.code}\n{traceback.format_exc()}")


@pytest.fixture
def sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    for var in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


@pytest.mark.parametrize("path", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_docs_python_blocks_run(path: Path, sandbox: Path) -> None:
    run_blocks(path, python_blocks(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", OWN_DOCS)
def test_each_guide_exists_and_has_a_runnable_example(name: str) -> None:
    blocks = python_blocks((DOCS / name).read_text(encoding="utf-8"))
    assert any(b.run for b in blocks), f"docs/{name} has no runnable python block"


SAMPLE = """\
# Title

```python
x = 1
```

- a list item:

  ```python
  y = x + 1
  ```

```python no-run
import torch; torch.cuda.init()
```

````markdown
```python
this is an example of a fence inside a fence, not code
```
````

```bash
exit 1
```
"""


def test_the_extractor_finds_runnable_indented_and_no_run_blocks() -> None:
    blocks = python_blocks(SAMPLE)
    assert [(b.line, b.code, b.run) for b in blocks] == [
        (4, "x = 1\n", True),
        (10, "y = x + 1\n", True),
        (14, "import torch; torch.cuda.init()\n", False),
    ]


def test_a_failing_block_fails_with_its_location(tmp_path: Path) -> None:
    doc = tmp_path / "broken.md"
    doc.write_text("text\n\n```python\nok = 1\n```\n\n```python\nassert ok == 2\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"block at line 8"):
        run_blocks(doc, python_blocks(doc.read_text()))
