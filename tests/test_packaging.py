"""The project installs as a regular (non-editable) package: bundled data and the jail runtime are in the wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("spade_core", "sandbox", "tasks", "flows")
SOURCES = ("pyproject.toml", "README.md", "data", *PACKAGES)


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The file names inside a wheel built from a copy of the sources (the build leaves the repo untouched)."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    out = work / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = out.glob("spade-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def _repo_files(folder: str, pattern: str) -> list[str]:
    files = sorted(p.relative_to(REPO).as_posix() for p in (REPO / folder).glob(pattern))
    assert files, f"no {pattern} in {folder}/"
    return files


@pytest.mark.parametrize(
    "folder, pattern",
    [
        ("data/configs", "*.yaml"),
        ("data/seed_envs", "*.py"),
        ("data/seed_envs/multiturn", "*.py"),
        ("data/seed_envs/difficulty", "*.py"),
        ("data/seed_envs/use_the_words", "*.py"),
        ("data/starter_envs", "*.py"),
        ("data/accelerate", "*.yaml"),
    ],
)
def test_bundled_data_is_package_data(wheel_names: set[str], folder: str, pattern: str) -> None:
    expected = [name.replace("data/", "spade_data/", 1) for name in _repo_files(folder, pattern)]
    assert [name for name in expected if name not in wheel_names] == []


def test_the_jail_runtime_is_in_the_wheel(wheel_names: set[str]) -> None:
    expected = [*_repo_files("sandbox/runtime", "*.py"), "sandbox/runtime/ruff.toml"]
    assert [name for name in expected if name not in wheel_names] == []


def test_every_module_is_in_the_wheel(wheel_names: set[str]) -> None:
    """A new subpackage must be added to ``[tool.setuptools] packages`` in pyproject.toml."""
    modules = [name for package in PACKAGES for name in _repo_files(package, "**/*.py") if "__pycache__" not in name]
    missing = sorted({name.rsplit("/", 1)[0].replace("/", ".") for name in modules if name not in wheel_names})
    assert missing == [], f"add these packages to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_nothing_outside_the_packages_is_in_the_wheel(wheel_names: set[str]) -> None:
    top = {name.split("/", 1)[0] for name in wheel_names if not name.startswith("spade-")}
    assert top == {*PACKAGES, "spade_data"}


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_dependency_is_pinned_within_its_range() -> None:
    """The Makefile installs with ``-c constraints.txt``: a dependency without a pin there goes back to the
    resolver's backtracking, and a pin outside pyproject's range makes the install fail."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = _pins()
    problems = []
    for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        requirement = Requirement(text)
        pin = pins.get(canonicalize_name(requirement.name))
        if pin is None:
            problems.append(f"{requirement.name}: no pin in constraints.txt")
        elif not requirement.specifier.contains(pin, prereleases=True):
            problems.append(f"{requirement.name}: pin {pin} is outside {requirement.specifier}")
    assert problems == []
