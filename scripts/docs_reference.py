"""Generate the reference tables of the docs from the code, so they cannot go stale.

    python scripts/docs_reference.py          # rewrite the generated blocks in place
    python scripts/docs_reference.py --check  # exit 1 if a page differs from what the code gives

A generated block sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``
in a page of docs/; the text around it is written by hand. The blocks:

* ``hints``: every field of `ToolDeviceSpec`, `SoloProfile` and `LoadProfile` (type, default
  and the field's own description), in docs/reference_hints.md;
* ``cli``: every ``devsched`` command and option (from the typer app: value, default, help),
  in docs/reference_cli.md.

tests/test_docs_reference.py runs ``--check``'s comparison.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(<!-- generated: (?P<name>\w+) -->\n)(?P<body>.*?)(<!-- end generated -->)",
                   re.S)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names)
    if origin is typing.Literal:
        return " / ".join(f"`{a}`" for a in args)
    if origin is tuple:
        return f"list of {_type_name(args[0])}"
    if origin is not None and "Callable" in str(origin):
        return "callable (code only)"
    if isinstance(annotation, type):
        return {"float": "number", "int": "integer", "bool": "`true`/`false`",
                "str": "string"}.get(annotation.__name__, f"`{annotation.__name__}`")
    return str(annotation)


def _bounds(info: Any) -> str:
    out = []
    for meta in info.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value:g}")
        if getattr(meta, "min_length", None):
            out.append("not empty")
    return f" ({', '.join(out)})" if out else ""


def _default(info: Any) -> str:
    if info.is_required():
        return "required"
    value = info.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def model_table(model: Any) -> str:
    """One row per field of a pydantic model: field, type, default, meaning."""
    lines = ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        kind = _type_name(info.annotation) + _bounds(info)
        if kind == "DeviceOption":
            kind = "an option"
        lines.append(f"| `{name}` | {kind} | {_default(info)} | {info.description or ''} |")
    return "\n".join(lines)


def hints_block() -> str:
    from langgraph_devsched.hints import LoadProfile, SoloProfile, ToolDeviceSpec

    return (f"### `ToolDeviceSpec`: a tool's hints\n\n{model_table(ToolDeviceSpec)}\n\n"
            f"### `profile`: `SoloProfile`\n\n{model_table(SoloProfile)}\n\n"
            f"### `load_ms`: `LoadProfile`\n\n{model_table(LoadProfile)}\n")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("*", "\\*")


def cli_block() -> str:
    import typer

    from langgraph_devsched.cli import app

    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="devsched")
    out: list[str] = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        ctx = command.context_class(command, parent=root, info_name=name)
        summary = _cell((command.help or "").split("\n\n")[0])
        out += [f"## `devsched {name}`", "", summary, "",
                "| option | value | meaning |", "| --- | --- | --- |"]
        for param in command.params:
            record = param.get_help_record(ctx)
            if record is None:
                continue
            flags, text = record
            spelled = flags.split(" ", 1)
            value = spelled[1] if len(spelled) > 1 and not spelled[0].endswith(",") else ""
            if flags.startswith("-") and ", " in flags:  # "-q, --quiet"
                spelled = flags.split(" ")
                value = ""
            names = ", ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts))
            shown = f"`{value}`" if value else "flag"
            out.append(f"| {names} | {shown} | {_cell(text)} |")
        out.append("")
    return "\n".join(out)


BLOCKS = {"hints": ("reference_hints.md", hints_block),
          "cli": ("reference_cli.md", cli_block)}


def render(text: str) -> str:
    """``text`` with each generated block replaced by what the code gives now."""
    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise SystemExit(f"unknown generated block {name!r}; valid: {', '.join(BLOCKS)}")
        return f"{match.group(1)}{BLOCKS[name][1]()}{match.group(4)}"

    return BLOCK.sub(fill, text)


def pages() -> list[Path]:
    return [DOCS / page for page, _ in BLOCKS.values()]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for page in pages():
        old = page.read_text(encoding="utf-8")
        new = render(old)
        if new != old:
            stale.append(page)
            if not check:
                page.write_text(new, encoding="utf-8")
    if check and stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"stale: {names}; run python scripts/docs_reference.py")
        return 1
    print(("rewrote " if stale else "up to date: ")
          + ", ".join(str(p.relative_to(ROOT)) for p in (stale or pages())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
