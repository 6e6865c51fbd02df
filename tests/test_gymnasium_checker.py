"""Gymnasium's own checker (``check_env``) over every bundled environment and over designs a generation admitted,
the wrapper's seeding contract, ``spade env check``, and vector use with autoreset. Real jails throughout."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from agents import InOrder
from conftest import FIXTURES
from gymnasium.vector import SyncVectorEnv
from samples import designed_and_checked
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.config import load_config
from spade_core.envs.gym import ENV_ID, AnyText, JailedEnv, register
from spade_core.envs.gym_check import Finding, check_jailed_env
from spade_core.envs.seeds import load_multiturn_envs, load_seed_envs, load_starter_envs
from spade_core.pipeline.context import GenerationContext
from spade_core.store.artifacts import Store
from spade_core.store.verdicts import final_designs

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
runner = CliRunner()
BUNDLED = [*load_seed_envs(), *load_multiturn_envs(), *load_starter_envs()]
SEED_ENVS = {e.skill: e for e in load_seed_envs()}
STARTER = next(e for e in load_starter_envs() if e.skill == "spatial_reasoning")
VAULT = FIXTURES / "envs" / "vault_code.py"
# The vault game, but every first observation carries a random number drawn from the global generator.
UNSEEDED = (
    VAULT.read_text()
    .replace("rng = random.Random(seed)", "rng = random.Random()")
    .replace('"A vault has a 3-digit code.', '"Vault " + str(rng.random()) + " has a 3-digit code.')
)


@pytest.mark.parametrize("env", BUNDLED, ids=[e.path.stem for e in BUNDLED])
def test_gymnasium_check_env_passes_on_every_bundled_environment(env: Any) -> None:
    assert check_jailed_env(path=env.path) == []


# Replies of a scripted designer in mutate mode, all of spatial reasoning (generation 3's skill): the starter
# with other words, and the robot seed drawn with Unicode arrows and blocks (observations outside ASCII).
WEST_EAST = STARTER.code.replace("left", "west").replace("right", "east").replace("Left", "West")
ARROWS = (
    SEED_ENVS["spatial_reasoning"]
    .code.replace('{"N": "^", "E": ">", "S": "v", "W": "<"}', '{"N": "↑", "E": "→", "S": "↓", "W": "←"}')
    .replace("^ north, > east, v south, < west", "↑ north, → east, ↓ south, ← west")
    .replace("('#' wall, '.' floor", "('█' wall, '·' floor")
    .replace('"#" if (r, c) in self.walls else "."', '"█" if (r, c) in self.walls else "·"')
)


@pytest.fixture(scope="module")
def admitted(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The code of the designs a tiny generation admitted (documents, design, validate, novelty), mutate mode
    with a scripted designer: no stored generation ships with the repository, and no model runs here."""
    root = tmp_path_factory.mktemp("admitted")
    overrides = [
        "designer.mode=mutate",
        "designer.kind=game",
        "designer.skills_per_generation=1",
        "designer.documents_per_generation=2",
        "designer.max_attempts=1",
        f"store.root={root}",
    ]
    ctx = GenerationContext(load_config("tiny", overrides=overrides), Store(str(root)), "gym", 3)
    designed_and_checked(ctx, InOrder([f"```python\n{module}```" for module in (WEST_EAST, ARROWS)]))
    final = final_designs(ctx.store, "gym", 3)
    return list(final[final["ok"]]["code"])


def test_gymnasium_check_env_passes_on_designs_a_generation_admitted(admitted: list[str]) -> None:
    assert len(admitted) == 2
    assert any("↑" in code for code in admitted)  # the admitted code is the one with Unicode observations
    assert {i: check_jailed_env(code=code) for i, code in enumerate(admitted)} == {0: [], 1: []}


def test_a_seed_given_once_fixes_every_later_seedless_reset() -> None:
    def episodes() -> tuple[list[str], list[int | None]]:
        env = JailedEnv(path=SEED_ENVS["mathematical_reasoning"].path)
        try:
            observations = [env.reset(seed=7)[0]]
            seeds = [env.episode_seed]
            for _ in range(2):
                observations.append(env.reset()[0])
                seeds.append(env.episode_seed)
            return observations, seeds
        finally:
            env.close()

    first, again = episodes(), episodes()
    assert first == again
    observations, seeds = first
    assert seeds[0] == 7 and len(set(seeds)) == 3 and len(set(observations)) == 3


def test_a_drawn_episode_seed_replays_that_episode() -> None:
    env = JailedEnv(path=SEED_ENVS["optimization"].path)
    try:
        drawn = env.reset()[0]
        assert env.episode_seed is not None
        assert env.reset(seed=env.episode_seed)[0] == drawn
    finally:
        env.close()


def test_an_environment_never_seeded_draws_fresh_episodes() -> None:
    seeds = []
    for _ in range(2):
        env = JailedEnv(path=VAULT)
        try:
            env.reset()
            seeds.append(env.episode_seed)
        finally:
            env.close()
    assert seeds[0] != seeds[1]  # two entropy-seeded generators; equal with probability 2**-31


def test_the_text_spaces_hold_any_characters_up_to_one_reply_frame() -> None:
    space = JailedEnv(path=VAULT).observation_space  # never reset: no jail starts
    assert isinstance(space, AnyText) and space.max_length == 64 * 1024
    assert "ünïcødé → 🎲" in space and "" in space
    assert "x" * (space.max_length + 1) not in space and b"bytes" not in space
    assert "ünïcødé" not in gymnasium.spaces.Text(space.max_length, charset=string.printable)
    assert set(space.sample()) <= set(string.printable)


def test_an_unsupported_render_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="render_mode='human' is not one of"):
        JailedEnv(path=VAULT, render_mode="human")


def test_an_unseeded_environment_fails_the_checker_naming_the_check() -> None:
    (finding,) = check_jailed_env(code=UNSEEDED)
    assert finding == Finding(
        "error",
        "check_reset_seed_determinism: Using `env.reset(seed=123)` is non-deterministic as the observations are "
        "not equivalent.",
    )


def test_env_check_prints_ok_and_exits_zero() -> None:
    path = SEED_ENVS["data_retrieval"].path
    result = runner.invoke(app, ["env", "check", str(path), str(VAULT)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"ok   {path}", f"ok   {VAULT}"]


def test_env_check_prints_one_line_per_finding_and_exits_one(tmp_path: Path) -> None:
    unseeded, broken = tmp_path / "unseeded.py", tmp_path / "broken.py"
    unseeded.write_text(UNSEEDED)
    broken.write_text("def nothing(:\n")
    result = runner.invoke(app, ["env", "check", str(VAULT), str(unseeded), str(broken)])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"ok   {VAULT}",
        f"FAIL {unseeded}: check_reset_seed_determinism: Using `env.reset(seed=123)` is non-deterministic as the "
        "observations are not equivalent.",
        f"FAIL {broken}: check_reset_return_type: JailedEnvError: syntax_error: SyntaxError: invalid syntax "
        "(<environment>, line 1)",
    ]


def test_env_check_missing_file_is_one_line() -> None:
    result = runner.invoke(app, ["env", "check", "/nope/env.py"])
    assert (result.exit_code, result.stderr) == (2, "error: environment file '/nope/env.py' does not exist\n")


# Two games and a tool-use environment, each cut to two turns: a reply of "x" is wrong everywhere, so every
# episode is truncated at its second step and the vector's next step autoresets it (steps 3 and 6).
VECTOR_ENVS = [SEED_ENVS["mathematical_reasoning"].path, SEED_ENVS["data_retrieval"].path, STARTER.path]


def vector_rollout(seed: int, steps: int = 6) -> list[tuple[Any, ...]]:
    """Observations, rewards, terminations and truncations of a seeded :class:`SyncVectorEnv` run."""
    register()
    envs = SyncVectorEnv([lambda p=p: gymnasium.make(ENV_ID, path=str(p), max_turns=2) for p in VECTOR_ENVS])
    try:
        observations, _ = envs.reset(seed=seed)
        out: list[tuple[Any, ...]] = [tuple(observations)]
        for _ in range(steps):
            observations, rewards, terminations, truncations, _ = envs.step(("x",) * len(VECTOR_ENVS))
            out.append((tuple(observations), rewards.tolist(), terminations.tolist(), truncations.tolist()))
        return out
    finally:
        envs.close()


def test_a_seeded_vector_env_replays_its_resets_and_autoresets() -> None:
    run = vector_rollout(seed=11)
    assert run == vector_rollout(seed=11)
    assert [step[3] for step in run[1:]] == [[False] * 3, [True] * 3, [False] * 3] * 2
    first, autoreset, second_autoreset = run[0], run[3][0], run[6][0]
    # Each autoreset is a new episode whose seed was drawn from the seeded generator, not a repeat.
    assert first[0] != autoreset[0] != second_autoreset[0] and first[2] != autoreset[2]
    assert vector_rollout(seed=12)[0] != first
