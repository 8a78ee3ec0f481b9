"""Check a command's output paths before its work starts, so a bad one costs nothing.

Each ``devsched`` output option writes a file (``--json``, ``--hints-out``) or into a folder
(``--plots``, ``--scenario-out``); missing folders are created when the results are written.
A path that can never be written (a folder where a file is wanted, a file where a folder is
wanted, a missing folder under something that is not a folder, a folder this user may not
write in) is an `OutputPathError` naming the option, the path and what is valid; the CLI
prints it as one line and exits with code 2 (a usage error).

>>> import pathlib, tempfile
>>> here = pathlib.Path(tempfile.mkdtemp())
>>> check_output_paths(("--json", here / "new" / "out.json", "file"), ("--plots", None, "folder"))
>>> check_output_paths(("--json", here, "file"))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
langgraph_devsched.output_paths.OutputPathError: --json ...: is a folder; give a file path ...
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

OutputKind = Literal["file", "folder"]


class OutputPathError(ValueError):
    """An output path that cannot be written: the message names the option and the path."""


def _first_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


def check_output_path(option: str, path: Path | str | None, kind: OutputKind) -> None:
    """Raise `OutputPathError` unless ``path`` (if given) can be written as ``kind``."""
    if path is None:
        return
    path = Path(path)
    shown = f"{option} {path}"
    if kind == "file" and path.is_dir():
        raise OutputPathError(
            f"{shown}: is a folder; give a file path (missing folders are created)")
    if kind == "folder" and path.exists() and not path.is_dir():
        raise OutputPathError(
            f"{shown}: is a file; give a folder to write into (created if missing)")
    if kind == "file" and path.exists() and not os.access(path, os.W_OK):
        raise OutputPathError(f"{shown}: the file is read-only; give a path that can be written")
    folder = path.parent if kind == "file" else path
    existing = _first_existing(folder.absolute())
    if not existing.is_dir():
        raise OutputPathError(
            f"{shown}: cannot be created: {existing} is a file, not a folder; give a path "
            "under a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputPathError(
            f"{shown}: cannot write in {existing} (permission denied); give a path in a "
            "writable folder")


def check_output_paths(*checks: tuple[str, Path | str | None, OutputKind]) -> None:
    """`check_output_path` for each ``(option, path, kind)``."""
    for option, path, kind in checks:
        check_output_path(option, path, kind)
