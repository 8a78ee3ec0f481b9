"""The reference pages cannot go stale: the generated blocks (hint fields, every ``devsched``
flag) are what ``scripts/docs_reference.py`` writes from the code now, and the hand-written
options tables name every argument of the signatures they document, and nothing else."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


reference = _script("docs_reference")


@pytest.mark.parametrize("page", reference.pages(), ids=lambda p: p.name)
def test_the_generated_reference_is_what_the_code_gives(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert reference.BLOCK.search(text), f"{page.name} has no generated block"
    assert reference.render(text) == text, (
        f"docs/{page.name} is stale: run python scripts/docs_reference.py")


def test_every_hint_field_and_every_cli_option_is_on_its_page() -> None:
    import typer

    from langgraph_devsched.cli import app
    from langgraph_devsched.hints import LoadProfile, SoloProfile, ToolDeviceSpec

    hints = (DOCS / "reference_hints.md").read_text(encoding="utf-8")
    for model in (ToolDeviceSpec, SoloProfile, LoadProfile):
        for field in model.model_fields:
            assert f"| `{field}` |" in hints, f"hint field {model.__name__}.{field} missing"
    cli = (DOCS / "reference_cli.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        assert f"## `devsched {name}`" in cli, f"devsched {name} missing"
        section = cli.split(f"## `devsched {name}`", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            for opt in param.opts:
                assert f"`{opt}`" in section, f"devsched {name} {opt} missing"


def test_a_changed_field_makes_the_page_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    page = DOCS / "reference_hints.md"
    text = page.read_text(encoding="utf-8")
    monkeypatch.setitem(reference.BLOCKS, "hints",
                        ("reference_hints.md", lambda: "| `gpu_capable` | gone |\n"))
    assert reference.render(text) != text


def _signature_names(obj: Any) -> list[str]:
    target = obj.__init__ if inspect.isclass(obj) and not _is_dataclass(obj) else obj
    names = [p.name for p in inspect.signature(target).parameters.values()
             if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return names


def _is_dataclass(obj: Any) -> bool:
    import dataclasses

    return dataclasses.is_dataclass(obj)


def documented() -> dict[str, Any]:
    from langgraph_devsched import (
        DeviceToolNode,
        GpuConfig,
        LocalBackend,
        ResidentModel,
        SimulatedTestbed,
    )
    from langgraph_devsched.middleware import DeviceSchedulingMiddleware
    from langgraph_devsched.profiling import simulated_gpu

    out: dict[str, Any] = {
        "DeviceToolNode": DeviceToolNode, "DeviceSchedulingMiddleware": DeviceSchedulingMiddleware,
        "LocalBackend": LocalBackend, "GpuConfig": GpuConfig, "simulated_gpu": simulated_gpu,
        "SimulatedTestbed": SimulatedTestbed, "ResidentModel": ResidentModel}
    from langgraph_devsched.executors import RayBackend

    out["RayBackend"] = RayBackend
    return out


def option_sections() -> dict[str, list[str]]:
    """Per ``## `Name``` section of reference_options.md, the argument names of its table."""
    text = (DOCS / "reference_options.md").read_text(encoding="utf-8")
    sections: dict[str, list[str]] = {}
    for chunk in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, body = chunk.split("\n", 1)
        name = heading.strip().strip("`")
        table = body.split("\n### ", 1)[0]
        sections[name] = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    return sections


@pytest.mark.parametrize("name", sorted(documented()))
def test_each_options_table_names_every_argument_and_nothing_else(name: str) -> None:
    sections = option_sections()
    assert name in sections, f"reference_options.md has no section ## `{name}`"
    want = _signature_names(documented()[name])
    assert sections[name] == want, (
        f"reference_options.md, {name}: rows {sections[name]}; the signature's arguments, "
        f"in order: {want}")


def test_every_options_section_documents_something() -> None:
    assert sorted(option_sections()) == sorted(documented())
