"""``make setup``'s torch step, read with ``make -n`` (a dry run: nothing is installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def torch_lines(tmp_path: Path, *variables: str) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "setup", f"VENV={tmp_path / 'venv'}", *variables],
        capture_output=True, text=True, timeout=60, check=True)
    return [line.strip() for line in done.stdout.splitlines()
            if "pip install" in line and ("torch==" in line or "torch>=" in line)]


def test_torch_comes_from_the_index_the_variable_names(tmp_path: Path) -> None:
    """Point 8 of issue 27. Old: no way to say where torch comes from: from the public index
    ``torch==2.13.0`` is the CUDA build, several GB."""
    lines = torch_lines(tmp_path, f"TORCH_INDEX_URL={CPU_INDEX}")
    assert len(lines) == 2  # with nvidia-smi, and without
    assert all(f"pip install -q --index-url {CPU_INDEX} " in line for line in lines), lines
    assert any(line.endswith(f"--index-url {CPU_INDEX} torch==2.13.0; \\") for line in lines)


def test_left_empty_pip_uses_its_configured_index(tmp_path: Path) -> None:
    lines = torch_lines(tmp_path)
    assert len(lines) == 2 and not any("--index-url" in line for line in lines), lines
    assert any(line.endswith("torch==2.13.0; \\") for line in lines)


def test_the_readme_says_how_to_get_the_cpu_build(tmp_path: Path) -> None:
    """Point 8: README and quickstart give the command, with the variable the Makefile reads
    and the PyTorch CPU wheel index, and no longer call the default install a CPU build."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    command = f"make setup TORCH_INDEX_URL={CPU_INDEX}"
    assert command in readme and command in quickstart
    words = " ".join(readme.split())
    assert "(a CPU build)" not in words and "CPU torch pinned" not in words
    lines = torch_lines(tmp_path, f"TORCH_INDEX_URL={CPU_INDEX}")  # the command does that
    assert all(CPU_INDEX in line for line in lines)
