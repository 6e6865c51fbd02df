"""RLVE's environments as a fixed pool (``designer.fixed_pool: rlve:...``): names, the jail bundle, the
sliding-window controller over stored plays, the ``paper-fixed-rlve`` preset, and a tiny run end to end.

Everything is real: the installed ``rlve-gym`` package, the jail, the store, the local runner over the stage
registry; the end-to-end run plays with the micro model (a real model writing noise in milliseconds: what is
tested is the pipeline), the benchmark ``benchmarks/baseline.py`` with the embedded one.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from samples import write_stage

from spade_core.config import load_config
from spade_core.envs import rlve
from spade_core.envs.rlve_difficulty import TAU_NUM, Window, windows
from spade_core.envs.rlve_pool import controller, difficulty_history, rlve_pool
from spade_core.store.artifacts import Store
from spade_core.store.markers import read_marker


@pytest.mark.slow  # rlve:all loads a probe in a jail per non-standard-library import (networkx, numpy, sympy)
def test_official16_is_the_authors_list_and_every_name_resolves() -> None:
    names = rlve.resolve("rlve:official16")
    assert names == rlve.OFFICIAL16 and len(names) == 16
    everything = rlve.resolve("rlve:all")
    assert set(names) <= set(everything) and len(everything) > 300
    assert rlve.resolve("rlve: Sorting , Division,Sorting") == ("Sorting", "Division")


@pytest.mark.parametrize(
    ("spec", "close"),
    [("rlve:Sortng", "Sorting"), ("rlve:multiplication", "Multiplication"), ("rlve:Sorting,SATT", "SAT")],
)
def test_an_unknown_rlve_name_is_one_line_with_close_matches(spec: str, close: str) -> None:
    with pytest.raises(rlve.RlveNameError) as caught:
        rlve.resolve(spec)
    message = str(caught.value)
    assert "\n" not in message and "unknown RLVE environment" in message and close in message


def test_spade_run_with_an_unknown_rlve_name_is_one_line_before_anything_is_written(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spade_core.cli import app

    args = ["run", "--run-id", "r", "--store", str(tmp_path / "s"), "--set", "designer.fixed_pool=rlve:Sortng"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0 and "close matches: Sorting" in result.stderr
    assert not (tmp_path / "s").exists()


def test_parameters_are_the_controller_after_d_updates() -> None:
    from Gym.parameter_controllers import identifier2controller

    controller = identifier2controller["Multiplication"]()
    for _ in range(5):
        controller.update()
    assert rlve.parameters("Multiplication", 5) == controller.get_parameter_list()
    assert rlve.parameters("Sorting", 99) == rlve.parameters("Sorting", rlve.MAX_DIFFICULTY)


@pytest.mark.usefixtures("jail_processes_checked")
def test_a_bundle_plays_in_the_jail_with_rlves_verifier() -> None:
    from sandbox.session import EnvSession

    session = EnvSession(rlve.bundle("Sorting", 0))
    try:
        assert session.open().ok and session.kind == "game"
        reset = session.reset(11)
        assert reset.ok and "sort them in **ascending order**" in reset.data["obs"]
        assert reset.data["info"] == {"rlve": "Sorting", "difficulty": 0}
        answer = session.solution().data["solution"]  # \boxed{...} of RLVE's reference answer
        assert session.step(answer).data["reward"] == 1.0
        wrong = session.step("<answer>1 2</answer>").data
        assert (wrong["reward"], wrong["terminated"]) == (0.0, True)
        # the verifier reads <answer> tags too, as RLVE's own prompt asks
        tagged = answer.replace("\\boxed{", "<answer>").replace("}", "</answer>")
        assert session.step(tagged).data["reward"] == 1.0
    finally:
        session.close()


def _first_observation(code: str, seed: int) -> str:
    from sandbox.session import EnvSession

    session = EnvSession(code)
    try:
        assert session.open().ok
        return str(session.reset(seed).data["obs"])
    finally:
        session.close()


@pytest.mark.usefixtures("jail_processes_checked")
def test_the_plays_of_a_pool_row_share_one_problem() -> None:
    """The authors' same-problem groups: a pool bundle ignores the play's seed; a bare one draws by it."""
    shared = rlve.bundle("Multiplication", 4, problem_seed=7)
    assert _first_observation(shared, 1) == _first_observation(shared, 2)
    free = rlve.bundle("Multiplication", 4)
    assert _first_observation(free, 1) != _first_observation(free, 2)


@pytest.mark.usefixtures("jail_processes_checked")
def test_an_official16_environment_needing_networkx_plays_in_the_jail() -> None:
    from sandbox.session import EnvSession

    if not rlve.jail_has("networkx"):
        pytest.skip("the system Python has no networkx for the jail (apt-get install python3-networkx)")
    session = EnvSession(rlve.bundle("ShortestPath", 2))
    try:
        assert session.open().ok and session.reset(3).ok
        assert session.step(session.solution().data["solution"]).data["reward"] == 1.0
    finally:
        session.close()


@pytest.mark.usefixtures("jail_processes_checked")
def test_a_generator_that_raises_is_an_error_row_not_a_crash(micro_generator) -> None:  # type: ignore[no-untyped-def]
    from spade_core.play.rollout import EpisodeSpec, RolloutEngine

    cfg = load_config("tiny", overrides=["rollout.max_tokens_per_turn=4", "rollout.env_retries=0"])
    broken = rlve.bundle("Sorting", 0, params=[{}])  # Sorting's _generate asserts "N" in parameter
    fine = rlve.bundle("Multiplication", 0)
    specs = [EpisodeSpec("rlve:Sorting@d0", broken, 5), EpisodeSpec("rlve:Multiplication@d0", fine, 5)]
    rows = {r["env_id"]: r for r in RolloutEngine.from_config(cfg, micro_generator).run(specs)}
    assert (rows["rlve:Sorting@d0"]["error_type"], rows["rlve:Sorting@d0"]["episode_return"]) == ("exception", 0.0)
    assert rows["rlve:Multiplication@d0"]["error_type"] is None and rows["rlve:Multiplication@d0"]["turns"] == 1


def _plays(env_id: str, n: int, won: int, policy_step: int) -> pd.DataFrame:
    """``n`` stored no-hint plays of ``env_id``, the first ``won`` with return 1."""
    from samples import ROWS

    rows = [
        dict(ROWS["episodes"], episode_id=f"{env_id}-{policy_step}-{i}", env_id=env_id, condition="no_hint")
        | {"episode_return": 1.0 if i < won else 0.0, "error_type": None, "policy_step": policy_step}
        for i in range(n)
    ]
    return pd.DataFrame(rows)


def test_the_controller_promotes_from_the_runs_stored_plays(tmp_path: Path) -> None:
    """tau_num = 128 plays at the window's top, 90 % of them won: the window moves up; error rows, another
    run's plays and another command's plays do not count. Each generation's pool draws from the window its
    plays left."""
    store = Store(str(tmp_path))
    cfg = load_config("tiny", overrides=["designer.fixed_pool=rlve:Sorting,Division", f"store.root={tmp_path}"])
    won = pd.concat(
        [_plays("rlve:Sorting@d0", TAU_NUM, int(0.9 * TAU_NUM) + 1, 0), _plays("rlve:Division@d0", 4, 4, 0)]
    )
    errored = _plays("rlve:Division@d0", TAU_NUM, TAU_NUM, 0).assign(
        episode_id=lambda f: f["episode_id"] + "x", error_type="exception"
    )
    write_stage(store, "r", 1, "rollout-s0", {"episodes": pd.concat([won, errored])})
    all_won = _plays("rlve:Division@d0", TAU_NUM, TAU_NUM, 0)
    write_stage(store, "other", 1, "rollout-s0", {"episodes": all_won})
    # plays another command wrote into the run (spade rollout --run-id: no marker) are no training plays
    store.write_table("episodes", all_won, run_id="r", gen=1, stage="rollout-cli")
    first = rlve_pool(cfg, store, "r", 1)
    assert list(first["env_id"]) == ["rlve:Sorting@d0", "rlve:Division@d0"]
    assert set(first["source"]) == {"fixed"} and set(first["kind"]) == {"game"}
    second = rlve_pool(cfg, store, "r", 2)
    assert (
        second["env_id"].iloc[0] in {"rlve:Sorting@d0", "rlve:Sorting@d1"}
        and second["env_id"].iloc[1] == "rlve:Division@d0"
    )
    for gen, frame in ((1, first), (2, second)):
        write_stage(store, "r", gen, "pool", {"pool": frame})
    history = difficulty_history(store, "r").set_index(["gen", "name"])
    assert (history.loc[(2, "Sorting"), "low"], history.loc[(2, "Sorting"), "high"]) == (0, 1)
    assert (history.loc[(2, "Division"), "low"], history.loc[(2, "Division"), "high"]) == (0, 0)
    # the same store, the same draw: a rerun of generation 2's pool stage writes the same pool
    assert rlve_pool(cfg, store, "r", 2).equals(second)


def test_the_controller_settings_of_the_config_move_the_window() -> None:
    cfg = load_config("tiny", overrides=["designer.rlve_tau_num=2", "designer.rlve_d_delta=2"])
    assert controller(cfg.designer.model_dump()) == {"tau_acc": 0.9, "tau_num": 2, "d_delta": 2, "variant": "spade"}
    wins = [("Sorting", 0, True)] * 2 + [("Sorting", 1, True)] * 2 + [("Sorting", 2, True)] * 2

    assert windows(["Sorting"], wins, **controller(cfg.designer.model_dump()))["Sorting"] == Window(2, 3)
    authors = windows(["Sorting"], wins)["Sorting"]  # the authors' 128 plays: no promotion yet
    assert (authors.low, authors.high) == (0, 0)


@pytest.mark.parametrize(("variant", "high"), [("spade", 3), ("rlve", 1)])
def test_the_spade_authors_controller_checks_after_each_play_and_rlves_once_per_rollout(
    variant: str, high: int
) -> None:
    # one rollout of 6 wins at the top difficulty, tau_num 2: the SPADE authors' copy checks every 2 plays
    # at the top (0 -> 1 -> 2 -> 3), RLVE's own counts the rollout first and checks once (0 -> 1)
    wins = [("Sorting", 0, True)] * 2 + [("Sorting", 1, True)] * 2 + [("Sorting", 2, True)] * 2
    assert windows(["Sorting"], wins, tau_num=2, variant=variant)["Sorting"].high == high
    top = {"Sorting": Window(0, 20)}  # the SPADE authors cap the difficulty at 20, RLVE does not
    capped = windows(["Sorting"], [("Sorting", 20, True)] * 2, start=top, tau_num=2, variant=variant)
    assert capped["Sorting"].high == (20 if variant == "spade" else 21)
    assert (
        controller(load_config("tiny", overrides=[f"designer.rlve_controller={variant}"]).designer.model_dump())[
            "variant"
        ]
        == variant
    )


def test_paper_fixed_rlve_preset_pins() -> None:
    """The authors' cmd/games/train_fixed_rlve_4b.sh, value by value."""
    cfg = load_config("paper-fixed-rlve")
    assert cfg.designer.fixed_pool == "rlve:official16"
    assert (cfg.designer.rlve_tau_acc, cfg.designer.rlve_tau_num, cfg.designer.rlve_d_delta) == (0.9, 128, 4)
    sampling = (cfg.model.temperature, cfg.model.top_p, cfg.model.top_k, cfg.model.max_new_tokens)
    assert sampling == (1.0, 0.95, None, 8192)
    assert (cfg.training.global_batch_size, cfg.rollout.plays_no_hint, cfg.rollout.plays_hint) == (256, 16, 0)
    assert (cfg.training.steps_per_generation, cfg.training.beta, cfg.training.learning_rate) == (1, 0.0, 1e-6)
    assert (cfg.training.loss_type, cfg.training.epsilon, cfg.training.epsilon_high) == ("grpo", 0.2, 0.28)
    assert (cfg.training.weight_decay, cfg.training.adam_beta1, cfg.training.adam_beta2) == (0.1, 0.9, 0.98)
    assert (cfg.rollout.max_context_tokens, cfg.rollout.max_tokens_per_turn, cfg.rollout.action) == (
        32768,
        8192,
        "reply",
    )
    assert cfg.orchestration.async_generations is False
    assert (Window().low, Window().high, TAU_NUM) == (0, 0, 128)
    assert cfg.designer.rlve_controller == "spade"  # the SPADE authors' copy, which their baseline runs


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("jail_processes_checked")
def test_a_tiny_fixed_rlve_run_end_to_end(tmp_path: Path, micro_model_dir: str) -> None:
    """Two generations of K = 1 step on two RLVE environments at their lowest difficulty, with the production
    leases (the micro model plays; the train stage runs): each generation completes with its pool and plays
    stored; the report shows the controller; an unknown name fails before any stage writes."""
    from spade_core.pipeline.local import run_run
    from spade_core.pipeline.status import generation_complete
    from spade_core.report import write_report
    from spade_core.store.catalog import query

    overrides = [
        f"store.root={tmp_path}",
        f"model.name_or_path={micro_model_dir}",
        "model.backend=transformers",
        "designer.fixed_pool=rlve:Sorting,Multiplication",
        "rollout.plays_hint=0",
        "rollout.max_tokens_per_turn=8",
        "rollout.hint_max_words=12",
        "training.steps_per_generation=1",
        "training.gradient_checkpointing=false",
        "memory.report_diversity=false",
    ]
    store = Store(str(tmp_path))
    with pytest.raises(rlve.RlveNameError, match="close matches: Sorting"):
        run_run(load_config("tiny", overrides=[*overrides, "designer.fixed_pool=rlve:Sortng"]), store, "bad", [1])
    assert not any(Path(tmp_path).rglob("*.parquet"))

    cfg = load_config("tiny", overrides=overrides)
    run_run(cfg, store, "rl", [1, 2])
    assert all(generation_complete(store, cfg, "rl", g) for g in (1, 2))
    pool = query(store, "select gen, env_id, skill, source from pool where run_id = 'rl' order by gen, env_id")
    assert list(pool["env_id"]) == ["rlve:Multiplication@d0", "rlve:Sorting@d0"] * 2
    plays = query(
        store,
        "select gen, env_id, count(*) n, count(error_type) errors from episodes where run_id = 'rl' "
        "group by all order by gen, env_id",
    )
    assert list(plays["n"]) == [cfg.rollout.plays_no_hint] * 4 and plays["errors"].sum() == 0
    # no hinted plays: the hint stage asks the model nothing and writes no hint
    assert query(store, "select count(*) n from hints where run_id = 'rl'")["n"].iloc[0] == 0
    assert read_marker(store, "rl", 1, "hint").model_calls == 0
    history = difficulty_history(store, "rl")
    assert (
        list(history[["gen", "difficulty", "low", "high"]].itertuples(index=False, name=None))
        == [(1, 0, 0, 0)] * 2 + [(2, 0, 0, 0)] * 2
    )

    page = write_report(store, "rl", out_dir=tmp_path / "report").read_text()
    assert 'id="fig-difficulty"' in page and "RLVE difficulty" in page and ">Multiplication<" in page
