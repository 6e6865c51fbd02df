"""A tiny finished run's store for the export tests: real, valid environments from the seed library and the
starters, written as a run's stages leave them (files listed by stage markers, the run's config stored).

Generation 1 designs four environments: three pass the validator, one is refused as trivial; its pool holds
the three and a starter. Generation 2 designs a mutation of the first (its parent) and replays the first from
the memory. Every pool environment is scored in each generation that played it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from samples import write_stage

from spade_core.config import load_config
from spade_core.envs.seeds import load_seed_envs, load_starter_envs
from spade_core.store.artifacts import Store
from spade_core.store.schemas import SCHEMAS

RUN = "tiny-run"


def _frame(table: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for f in SCHEMAS[table]:
        if f.name not in frame.columns:
            frame[f.name] = None
    return frame[[f.name for f in SCHEMAS[table]]]


def _design(design_id: str, env: Any, doc_id: str, parent: str | None = None) -> dict[str, Any]:
    return {
        "design_id": design_id,
        "attempt": 0,
        "doc_id": doc_id,
        "group_id": "g",
        "skill": env.skill,
        "kind": env.kind,
        "prompt": "[]",
        "completion": "",
        "code": env.code,
        "env_id": env.env_id,
        "model_ref": "base",
        "policy_step": 0,
        "repairs": [],
        "unrepaired_env_id": env.env_id,
        "parent_env_id": parent,
    }


def _verdict(design_id: str, env: Any, ok: bool) -> dict[str, Any]:
    checks = {"parses": True, "one_env_class": True, "not_trivial": ok}
    return {"design_id": design_id, "attempt": 0, "env_id": env.env_id, "ok": ok}, {
        "error_type": None if ok else "trivial",
        "message": None if ok else "random actions won",
        "checks": checks,
        "seconds": 0.2,
    }


def _pool(env: Any, design_id: str | None, source: str) -> dict[str, Any]:
    return {"env_id": env.env_id, "design_id": design_id, "skill": env.skill, "kind": env.kind}, {
        "code": env.code,
        "source": source,
    }


def _score(env: Any, design_id: str | None, win: float, hint: float) -> dict[str, Any]:
    return {"env_id": env.env_id, "design_id": design_id, "skill": env.skill, "win_rate": win} | {
        "r_hint": hint,
        "r_no_hint": win,
        "regret": hint - win,
        "hint_leaked": False,
    }


def _merge(pair: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    return pair[0] | pair[1]


def tiny_run(store: Store, run_id: str = RUN) -> dict[str, Any]:
    """Write the run; returns its environments by role: ``designed`` (gen 1's three valid), ``refused``,
    ``mutant`` (gen 2's design), ``starter``."""
    seeds = {e.name: e for e in load_seed_envs()}
    a, b, c = seeds["two_unknowns"], seeds["seating_row"], seeds["company_directory"]
    refused, mutant = seeds["next_terms"], seeds["robot_heading"]
    starter = load_starter_envs(1)[0]
    store.write_text(store.config_path(run_id), load_config("tiny").to_yaml())

    designs1 = [_design("d1", a, "doc-a"), _design("d2", b, "doc-b"), _design("d3", c, "doc-c")]
    designs1.append(_design("d4", refused, "doc-d"))
    verdicts1 = [_verdict("d1", a, True), _verdict("d2", b, True), _verdict("d3", c, True)]
    verdicts1.append(_verdict("d4", refused, False))
    write_stage(store, run_id, 1, "design", {"designs": _frame("designs", designs1)})
    write_stage(store, run_id, 1, "validate", {"validations": _frame("validations", [_merge(v) for v in verdicts1])})
    pool1 = [_pool(a, "d1", "design"), _pool(b, "d2", "design"), _pool(c, "d3", "design")]
    pool1.append(_pool(starter, None, "starter"))
    write_stage(store, run_id, 1, "pool", {"pool": _frame("pool", [_merge(p) for p in pool1])})
    scores1 = [_score(a, "d1", 0.25, 0.75), _score(b, "d2", 0.5, 0.5), _score(c, "d3", 0.0, 0.25)]
    scores1.append(_score(starter, None, 0.75, 0.75))
    write_stage(store, run_id, 1, "score", {"env_scores": _frame("env_scores", scores1)})

    write_stage(store, run_id, 2, "design", {"designs": _frame("designs", [_design("d5", mutant, "doc-e", a.env_id)])})
    verdicts2 = [_merge(_verdict("d5", mutant, True))]
    write_stage(store, run_id, 2, "validate", {"validations": _frame("validations", verdicts2)})
    pool2 = [_pool(mutant, "d5", "design"), _pool(a, None, "replay")]
    write_stage(store, run_id, 2, "pool", {"pool": _frame("pool", [_merge(p) for p in pool2])})
    scores2 = [_score(mutant, "d5", 0.5, 1.0), _score(a, None, 0.5, 0.5)]
    write_stage(store, run_id, 2, "score", {"env_scores": _frame("env_scores", scores2)})
    return {"designed": [a, b, c], "refused": refused, "mutant": mutant, "starter": starter}
