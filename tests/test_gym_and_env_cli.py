"""JailedEnv through Gymnasium, and the `spade validate` / `spade env play` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
from conftest import FIXTURES
from gymnasium.utils.env_checker import check_env
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.envs.contract import split_actions
from spade_core.envs.gym import ENV_ID, JailedEnv, JailedEnvError, register
from spade_core.envs.seeds import load_seed_envs

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
runner = CliRunner()
VAULT = FIXTURES / "envs" / "vault_code.py"
SEED_PATHS = {e.kind: e.path for e in load_seed_envs()}


@pytest.mark.parametrize("kind", ["game", "tool"])
def test_gymnasium_make_plays_the_reference_solution(kind: str) -> None:
    register()
    env = gymnasium.make(ENV_ID, path=str(SEED_PATHS[kind]))
    try:
        obs, info = env.reset(seed=5)
        assert isinstance(obs, str) and isinstance(info, dict)
        reward, terminated = 0.0, False
        for action in split_actions(env.unwrapped.solution()):  # type: ignore[attr-defined]
            obs, reward, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        assert (reward, terminated) == (1.0, True)
        assert env.unwrapped.kind == kind  # type: ignore[attr-defined]
    finally:
        env.close()


def test_gymnasium_make_with_code_string() -> None:
    register()
    env = gymnasium.make(ENV_ID, code=VAULT.read_text(), max_turns=3)
    try:
        env.reset(seed=1)
        results = [env.step("\\boxed{000}") for _ in range(3)]
        assert results[-1][3] is True  # truncated at max_turns
    finally:
        env.close()


def test_gymnasium_env_checker_passes() -> None:
    env = JailedEnv(path=VAULT)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_jailed_env_raises_with_the_error_type() -> None:
    env = JailedEnv(
        code="class E:\n    def __init__(self, max_turns=12): pass\n"
        "    def reset(self, seed=None):\n        while True: pass\n"
        "    def step(self, a): pass\n    def solution(self): return ''\n",
        call_timeout_s=1.0,
    )
    try:
        with pytest.raises(JailedEnvError) as err:
            env.reset(seed=0)
        assert err.value.error_type == "timeout"
    finally:
        env.close()


def test_validate_json_lines_and_exit_code(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def nothing(:\n")
    result = runner.invoke(app, ["validate", "--json", str(VAULT), str(bad)])
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["path"], r["ok"], r["error_type"]) for r in lines] == [
        (str(VAULT), True, None),
        (str(bad), False, "syntax_error"),
    ]
    assert lines[0]["checks"]["solution_reaches_goal"] is True and len(lines[0]["env_id"]) == 16


def test_validate_all_ok_exits_zero() -> None:
    result = runner.invoke(app, ["validate", str(VAULT), str(FIXTURES / "envs" / "warehouse_tools.py")])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("ok  ") == 2


def test_validate_missing_file_is_one_line() -> None:
    result = runner.invoke(app, ["validate", "/nope/env.py"])
    assert (result.exit_code, result.stderr) == (2, "error: environment file '/nope/env.py' does not exist\n")


def test_env_play_replays_actions_as_json() -> None:
    result = runner.invoke(
        app, ["env", "play", str(VAULT), "--seed", "3", "--json", "--action", "\\boxed{123}", "--action", "oops"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) >= {"observations", "rewards", "terminated", "truncated", "error_type"}
    assert len(out["observations"]) == 3 and len(out["rewards"]) == 2 and out["error_type"] is None
    assert out["observations"][2].startswith("Invalid probe")


def test_env_play_reports_a_broken_env_as_data(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(
        "class E:\n    def __init__(self, max_turns=12): pass\n    def reset(self, seed=None):\n        return 1, {}\n"
        "    def step(self, a): pass\n    def solution(self): return ''\n"
    )
    result = runner.invoke(app, ["env", "play", str(broken), "--json", "--action", "x"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error_type"] == "contract_error"


def test_env_play_interactive_session_through_stdin() -> None:
    spade = Path(sys.executable).parent / "spade"
    proc = subprocess.run(
        [str(spade), "env", "play", str(VAULT), "--seed", "3"],
        input="\\boxed{111}\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "A vault has a 3-digit code" in proc.stdout and "action> " in proc.stdout
    assert "reward=" in proc.stdout
