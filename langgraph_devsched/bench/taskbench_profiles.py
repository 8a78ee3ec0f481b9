"""The simulated ground truth of TaskBench's tools: one `ToolParams` row per tool name, read
from ``taskbench_profiles.yaml`` (packaged) or a user's file of the same shape.

>>> table = load_profiles()
>>> table.tools["Automatic Speech Recognition"].model
'whisper-small'
>>> try:
...     table.check(["Automatic Speech Recognition", "Made-up Tool"], where="DIR")
... except ScenarioError as exc:
...     print(str(exc)[:75])
profile table taskbench_profiles.yaml (packaged) lacks the tool(s) 'Made-up
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from langgraph_devsched.bench.scenario import ScenarioError
from langgraph_devsched.testbed import ToolParams

PACKAGED = "taskbench_profiles.yaml"


class ToolProfile(ToolParams):
    """One tool's row: `ToolParams` with a named model whose weights stay resident."""

    model: str = Field(min_length=1, description="the open model the tool runs on")
    weights_mb: float = Field(gt=0, description="its fp16 weights, MB")


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tools: dict[str, ToolProfile] = Field(min_length=1)


@dataclass(frozen=True)
class ProfileTable:
    """Rows by tool name, and where they were read (for error messages)."""

    tools: dict[str, ToolParams]
    source: str

    def check(self, names: Iterable[str], *, where: str) -> None:
        """`ScenarioError` naming every tool of ``names`` the table lacks (and the file)."""
        missing = [n for n in dict.fromkeys(names) if n not in self.tools]
        if missing:
            raise ScenarioError(
                f"profile table {self.source} lacks the tool(s) "
                f"{', '.join(repr(n) for n in missing)} of {where}; add a row for each "
                f"(fields of ToolParams, model and weights_mb required)")


def load_profiles(path: str | Path | None = None) -> ProfileTable:
    """The packaged table (None) or the YAML file ``path``; `ScenarioError` naming the file
    and the field for a file that cannot be used."""
    if path is None:
        source = f"{PACKAGED} (packaged)"
        text = (resources.files("langgraph_devsched.bench") / PACKAGED).read_text("utf-8")
    else:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(f"profile table {path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise ScenarioError(f"profile table {path}: not UTF-8 text ({exc.reason})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"profile table {source}: not valid YAML: {exc}") from None
    try:
        table = _File.model_validate(data)
    except ValidationError as exc:
        lines = [f"profile table {source}: invalid (expected 'tools:' mapping each tool name "
                 f"to {', '.join(ToolParams.model_fields)})"]
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "(top level)"
            lines.append(f"  {field}: {err['msg']}")
        raise ScenarioError("\n".join(lines)) from None
    return ProfileTable(
        {name: ToolParams(**row.model_dump()) for name, row in table.tools.items()}, source)


__all__ = ["PACKAGED", "ProfileTable", "ToolProfile", "load_profiles"]
