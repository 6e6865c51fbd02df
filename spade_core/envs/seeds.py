"""The seed environment library in ``data/seed_envs/``: hand-written environments that obey the contract,
seed the memory, serve as the fixed-environment baseline and as test fixtures. It is installed with the
package (``spade_core.resources``).

The starter environments in ``data/starter_envs/`` follow the same contract and naming; they are easy enough
that the embedded 135M model wins some plays from the start (``rollout.starter_envs``, docs/DESIGN.md §7).
The multi-turn instruction seeds in ``data/seed_envs/multiturn/`` (tool use, ``spade_env.InstructionEnv``)
are the designer's example with ``designer.multiturn``; they are not part of the 12-environment library.

File names are ``{skill}__{name}.py``; the skill key is one of ``config.GAME_SKILLS + config.TOOL_SKILLS``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from spade_core.config import skill_kind
from spade_core.envs.contract import env_id_for
from spade_core.resources import data_dir

SEED_DIR = data_dir("seed_envs")
MULTITURN_SEED_DIR = SEED_DIR / "multiturn"  # multi-turn instruction environments (spade_env.InstructionEnv)


@dataclass(frozen=True)
class SeedEnv:
    name: str
    skill: str
    kind: str
    path: Path
    code: str

    @property
    def env_id(self) -> str:
        return env_id_for(self.code)


def load_seed_envs(directory: Path = SEED_DIR) -> list[SeedEnv]:
    """Every seed environment, sorted by file name; a file with an unknown skill key is an error."""
    envs = []
    for path in sorted(directory.glob("*__*.py")):
        skill, name = path.stem.split("__", 1)
        try:
            kind = skill_kind(skill)
        except ValueError as exc:
            raise ValueError(f"seed env {path.name}: {exc}") from None
        envs.append(SeedEnv(name=name, skill=skill, kind=kind, path=path, code=path.read_text()))
    return envs


@functools.cache
def load_multiturn_envs() -> tuple[SeedEnv, ...]:
    """The multi-turn instruction seeds (``designer.multiturn``), sorted by file name; read once per process
    (every multi-turn design prompt shows one)."""
    return tuple(load_seed_envs(MULTITURN_SEED_DIR))


def multiturn_example(skill: str) -> str:
    """The code of the multi-turn seed of ``skill``, else of the first multi-turn seed: the designer's example
    with ``designer.multiturn``."""
    envs = load_multiturn_envs()
    return next((e for e in envs if e.skill == skill), envs[0]).code


def load_starter_envs(limit: int | None = None) -> list[SeedEnv]:
    """The starter environments sorted by file name, the first ``limit`` of them (None: all)."""
    envs = load_seed_envs(data_dir("starter_envs"))
    return envs if limit is None else envs[:limit]
