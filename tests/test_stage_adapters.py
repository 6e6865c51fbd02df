"""A stage is an adapter (docs/DESIGN.md §10.1): it reads its declared inputs, calls the library, writes its
outputs. So no stage module imports another, nothing outside the pipeline imports a stage module (the CLI,
the benchmarks, the flows and tasks call the library), and the registry refuses declarations that contradict
each other or the facts stated elsewhere (the step-0-only stages, the stages the verdicts are read from).

The import checks read the source with :mod:`ast` (nothing is imported); a violation names the file and line.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from spade_core.config import load_config
from spade_core.pipeline import registry
from spade_core.pipeline.registry import STAGES, DeclarationError, check_declarations, stages_for

ROOT = Path(__file__).resolve().parents[1]
STAGES_PACKAGE = "spade_core.pipeline.stages"
# Where nothing may import a stage module: everything that is not the pipeline (or a test).
OUTSIDE = ("spade_core", "tasks", "flows", "benchmarks")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every first-party import in ``path``; ``from package import name`` also yields
    ``package.name`` (it may be a module)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def stage_imports(path: Path) -> list[str]:
    """``file:line module`` of every import of a stage module in ``path``."""
    return [
        f"{path.relative_to(ROOT)}:{line} {module}"
        for line, module in imported_modules(path)
        if module.startswith(STAGES_PACKAGE + ".")
    ]


def test_the_import_scan_sees_every_form_of_a_stage_import(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from spade_core.pipeline.stages import design\n"
        "from spade_core.pipeline.stages.validate import run\n"
        "import spade_core.pipeline.stages.pool\n"
        "from spade_core.pipeline import registry\n"
    )
    found = [m for _, m in imported_modules(source) if m.startswith(STAGES_PACKAGE + ".")]
    assert found == [
        "spade_core.pipeline.stages.design",
        "spade_core.pipeline.stages.validate",
        "spade_core.pipeline.stages.validate.run",
        "spade_core.pipeline.stages.pool",
    ]


def test_no_stage_module_imports_another() -> None:
    modules = sorted((ROOT / "spade_core/pipeline/stages").glob("*.py"))
    assert len(modules) > 10
    assert [hit for path in modules for hit in stage_imports(path)] == []


def test_nothing_outside_the_pipeline_imports_a_stage_module() -> None:
    paths = [p for top in OUTSIDE for p in sorted((ROOT / top).rglob("*.py"))]
    outside = [p for p in paths if not p.is_relative_to(ROOT / "spade_core/pipeline")]
    assert any(p.name == "design_cmd.py" for p in outside) and any(p.parent.name == "benchmarks" for p in outside)
    assert [hit for path in outside for hit in stage_imports(path)] == []


def test_the_registry_takes_the_step_0_only_stages_from_their_declaration() -> None:
    assert {s.name for s in STAGES if s.first_step_only} == {"score", "memory"}
    cfg = load_config("tiny", overrides=["training.steps_per_generation=3"])
    names = [s.name for s in stages_for(cfg, 1)]
    assert names.count("score") == 1 and names.count("memory") == 1
    assert names.index("score") < names.index("train-s0") < names.index("rollout-s1")


def _replaced(name: str, **changes: object) -> tuple[registry.Stage, ...]:
    return tuple(dataclasses.replace(s, **changes) if s.name == name else s for s in STAGES)  # type: ignore[arg-type]


def test_a_stage_inside_the_step_block_must_be_declared_step_0_only() -> None:
    check_declarations(STAGES)
    with pytest.raises(DeclarationError, match="first_step_only"):
        check_declarations(_replaced("score", first_step_only=False))
    with pytest.raises(DeclarationError, match="first_step_only"):
        check_declarations(_replaced("pool", first_step_only=True))  # declared before the step block


def test_the_stages_writing_designs_are_the_ones_the_verdicts_read() -> None:
    with pytest.raises(DeclarationError, match=r"spade_core\.store\.verdicts"):
        check_declarations(_replaced("topup", writes=("documents", "validations")))


def test_the_reward_stage_runs_exactly_when_the_designer_stages_do() -> None:
    reward, design = registry.BY_NAME["reward"], registry.BY_NAME["design"]
    assert reward.applies is registry.designing and design.applies is registry.designing
    fixed = load_config("tiny", overrides=["designer.fixed_pool=seeds"])
    assert "reward" not in [s.name for s in stages_for(fixed, 1)]


def test_a_per_step_stage_runs_in_the_steps_its_runs_at_declares(monkeypatch: pytest.MonkeyPatch) -> None:
    assert registry.BY_NAME["refill"].runs_at is registry.top_up_steps
    cfg = load_config("tiny", overrides=["training.steps_per_generation=3"])
    monkeypatch.setattr(registry, "STAGES", _replaced("rollout", runs_at=lambda cfg: (0, 2)))
    stages = {s.name: s for s in stages_for(cfg, 1)}
    assert [name for name in stages if name.startswith("rollout")] == ["rollout-s0", "rollout-s2"]
    # A step without the stage's instance leaves nothing to wait for there; the other steps keep the input.
    assert "rollout-s1" not in stages["train-s1"].inputs and "rollout-s2" in stages["train-s2"].inputs


def test_only_a_per_step_stage_may_declare_the_steps_it_runs_in() -> None:
    with pytest.raises(DeclarationError, match="runs_at"):
        check_declarations(_replaced("pool", runs_at=lambda cfg: (0,)))
