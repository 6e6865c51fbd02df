"""Seed-pool check: validate the seed environment library in the jail and play scripted episodes.

A quick smoke test of the machine (``spade demo``, no model, about a minute): it exercises the sandbox,
the validator, the store and the catalog end to end on the shipped seed environments. ``make demo`` runs
one full SPADE generation instead (``spade run``). Two
scripted agents play each valid environment: ``reference`` replays ``solution()`` (must score 1) and
``empty`` sends empty actions (must score 0). Results go to the ``validations`` and ``episodes`` tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from sandbox.session import EnvSession, Replay, run_parallel
from spade_core.config import SpadeConfig
from spade_core.envs.contract import split_actions
from spade_core.envs.seeds import SeedEnv, load_seed_envs
from spade_core.envs.validate import limits_from_config, validate_many
from spade_core.hashing import short_hash
from spade_core.store.artifacts import Store
from spade_core.store.markers import write_command_marker

SCRIPTED_CONDITIONS = ("reference", "empty")


@dataclass
class SeedCheckSummary:
    envs: int
    valid: int
    episodes: int
    reference_mean_return: float
    empty_mean_return: float


def _play_scripted(env: SeedEnv, cfg: SpadeConfig, seed: int, condition: str) -> dict[str, Any]:
    """One scripted episode; failures become the row's ``error_type``."""
    with EnvSession(
        env.code,
        max_turns=cfg.validation.max_turns,
        limits=limits_from_config(cfg.validation),
        call_timeout_s=cfg.validation.call_timeout_s,
    ) as session:
        result = session.open()
        actions = [""] * cfg.validation.max_turns
        if result.ok and condition == "reference":
            result = session.reset(seed)
            if result.ok:
                result = session.solution()
                actions = split_actions(result.data.get("solution", "")) if result.ok else []
        played = session.replay(seed, actions) if result.ok else Replay(error_type=result.error_type)
    transcript = [{"role": "user", "content": played.observations[0]}] if played.observations else []
    for action, obs in zip(actions, played.observations[1:], strict=False):
        transcript += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
    episode_id = short_hash(f"{env.env_id}:{condition}:{seed}")
    return {
        "episode_id": episode_id,
        "env_id": env.env_id,
        "condition": condition,
        "seed": seed,
        "episode_return": played.episode_return,
        "turns": len(played.rewards),
        "terminated": played.terminated and played.error_type is None,
        "error_type": played.error_type,
        "transcript": transcript,
        "rewards": played.rewards,
        "model_ref": f"scripted:{condition}",
        "token_ids": None,
        "loss_mask": None,
        "logprobs": None,
        "policy_step": -1,  # scripted: no model
    }


def run_seed_check(cfg: SpadeConfig, store: Store, run_id: str, gen: int = 1, seeds: int = 2) -> SeedCheckSummary:
    """Validate every seed env, play the scripted episodes, write both tables; returns a summary."""
    envs = load_seed_envs()
    results = validate_many([e.code for e in envs], cfg.validation)
    written = [
        store.write_table(
            "validations",
            pd.DataFrame([{"design_id": None, "attempt": 0, **r.as_row()} for r in results]),
            run_id=run_id,
            gen=gen,
            stage="seed_check",
        )
    ]
    valid = [e for e, r in zip(envs, results, strict=True) if r.ok]
    jobs = [(e, s, c) for e in valid for s in range(seeds) for c in SCRIPTED_CONDITIONS]
    rows = run_parallel(lambda job: _play_scripted(job[0], cfg, job[1], job[2]), jobs, cfg.validation.parallel_jails)
    episodes = pd.DataFrame(rows, columns=list(rows[0]) if rows else None)
    if rows:
        written.append(store.write_table("episodes", episodes, run_id=run_id, gen=gen, stage="seed_check"))
    write_command_marker(store, cfg, run_id, gen, "seed_check", written)  # the run's rows to every reader

    def mean(condition: str) -> float:
        picked = [r["episode_return"] for r in rows if r["condition"] == condition]
        return sum(picked) / len(picked) if picked else 0.0

    return SeedCheckSummary(
        envs=len(envs),
        valid=len(valid),
        episodes=len(rows),
        reference_mean_return=mean("reference"),
        empty_mean_return=mean("empty"),
    )
