"""Small valid frames for every store table (used by store, catalog and CLI tests)."""

from __future__ import annotations

from typing import Any

import pandas as pd

ROWS: dict[str, dict[str, Any]] = {
    "documents": {"doc_id": "d1", "source": "wiki", "title": "Ada", "text": "Ada Lovelace ...", "n_words": 3},
    "designs": {
        "design_id": "x1",
        "attempt": 0,
        "doc_id": "d1",
        "group_id": "g1",
        "skill": "optimization",
        "kind": "game",
        "prompt": "p",
        "completion": "c",
        "code": "class E: ...",
        "env_id": "e1",
        "model_ref": "base",
        "policy_step": 0,
        "completion_ids": [5, 6],
        "logprobs": [-0.5, -1.25],
    },
    "validations": {
        "design_id": "x1",
        "attempt": 0,
        "env_id": "e1",
        "ok": False,
        "error_type": "timeout",
        "message": "slow",
        "checks": {"parses": True, "one_env_class": False},
        "seconds": 0.5,
    },
    "novelty": {
        "design_id": "x1",
        "attempt": 0,
        "env_id": "e1",
        "novel": False,
        "similarity": 0.97,
        "threshold": 0.95,
    },
    "pool": {
        "env_id": "e1",
        "design_id": "x1",
        "skill": "optimization",
        "kind": "game",
        "code": "class E: ...",
        "source": "design",
    },
    "hints": {"env_id": "e1", "hint": "think", "leaks_solution": False, "model_ref": "base", "policy_step": 0},
    "episodes": {
        "episode_id": "ep1",
        "env_id": "e1",
        "condition": "no_hint",
        "seed": 3,
        "episode_return": 1.0,
        "turns": 2,
        "terminated": True,
        "error_type": None,
        "transcript": [{"role": "user", "content": "hi"}],
        "rewards": [0.0, 1.0],
        "model_ref": "base",
        "token_ids": [1, 2, 3],
        "loss_mask": [0, 1, 1],
        "logprobs": [0.0, -0.5, -1.25],
        "policy_step": 0,
    },
    "env_scores": {
        "env_id": "e1",
        "design_id": "x1",
        "skill": "optimization",
        "win_rate": 0.5,
        "r_hint": 0.75,
        "r_no_hint": 0.5,
        "regret": 0.25,
        "hint_leaked": False,
    },
    "designer_rewards": {
        "design_id": "x1",
        "env_id": "e1",
        "skill": "optimization",
        "window_win_rate": 0.5,
        "regret": 0.25,
        "raw": 0.8,
        "dropped": False,
        "centred": 0.1,
        "scale": 32.0,
        "reward": 3.2,
        "train_step": 4,
    },
    "designer_lp_state": {
        "skill": "optimization",
        "mu_fast": 0.4,
        "mu_slow": 0.3,
        "count": 2,
        "gamma_fast": 0.98,
        "gamma_slow": 0.85,
    },
    "memory": {
        "env_id": "e1",
        "skill": "optimization",
        "kind": "game",
        "code": "class E: ...",
        "win_rate": 0.5,
        "regret": 0.25,
        "gen_added": 1,
    },
    "train_metrics": {
        "role": "agent",
        "step": 1,
        "loss": 0.1,
        "grad_norm": 1.5,
        "reward_mean": 0.4,
        "reward_std": 0.2,
        "kl": None,
        "clip_fraction": 0.0,
        "tokens": 100,
        "step_seconds": 2.0,
        "learning_rate": 1e-6,
        "tis_weight_mean": 0.98,
        "tis_clipped_fraction": 0.01,
        **{f"tis_weight_{k}": 0.98 for k in ("min", "p10", "p50", "p90", "max")},
    },
    "train_samples": {  # the first key varies per row in frame(): the source id
        "source_id": "ep1",
        "step": 3,
        "role": "agent",
        "group_id": "agent:e1",
        "env_id": "e1",
        "skill": "optimization",
        "reward": 1.0,
        "advantage": 0.7,
        "behaviour_step": 3,
        "tokens": 12,
    },
    "evals": {
        "suite": "humaneval",
        "item_id": "HumanEval/0",
        "checkpoint": "base",
        "score": 1.0,
        "passed": True,
        "response": "def f(): ...",
    },
}


def design_row(code: str | None, design_id: str = "d1", env_id: str | None = "e") -> dict[str, Any]:
    """One ``designs`` row of a design (no document, no tokens) whose reply was ``code``."""
    row = dict(ROWS["designs"], design_id=design_id, code=code, env_id=env_id, doc_id=None, group_id="g")
    return row | {"prompt": "[]", "completion": "", "model_ref": "m", "completion_ids": None, "logprobs": None}


def frame(table: str, n: int = 2) -> pd.DataFrame:
    rows = []
    for i in range(n):
        row = dict(ROWS[table])
        first = next(iter(row))
        row[first] = f"{row[first]}-{i}"
        rows.append(row)
    return pd.DataFrame(rows)


def write_stage(
    store: Any, run_id: str, gen: int, stage: str, tables: dict[str, pd.DataFrame], shard: int | None = None
) -> Any:
    """Write ``tables`` as stage ``stage``'s files of generation ``gen`` (of its shard ``shard``) and its marker
    listing them, as a finished stage leaves them (readers take the files a marker lists). Returns the
    marker's record."""
    from spade_core.store.markers import StageRecord, write_marker

    written = [
        store.write_table(t, f, run_id=run_id, gen=gen, stage=stage, shard=shard or 0) for t, f in tables.items()
    ]
    record = StageRecord(
        stage=stage,
        shard=shard,
        run_id=run_id,
        gen=gen,
        artifact_hash="test",
        digest=stage,
        files={w.table: [w.path] for w in written},
        sizes={w.path: w.size for w in written},
        file_digests={w.path: w.digest for w in written},
        rows={w.table: w.rows for w in written},
    )
    write_marker(store, record)
    return record


def as_stage(ctx: Any, name: str, fn: Any) -> Any:
    """Run ``fn(run)`` as the body of stage ``name`` through the pipeline's ``execute``, so that the stage's
    marker lists the files it wrote, as a finished stage leaves them; returns what ``fn`` returned."""
    from spade_core.pipeline.registry import BY_NAME
    from spade_core.pipeline.stage import Stage, execute

    out: list[Any] = []
    declared = BY_NAME[name]  # the tables it may read and write are the registry stage's
    execute(Stage(name, lambda run, model: out.append(fn(run)), reads=declared.reads, writes=declared.writes), ctx, {})
    return out[0]


def run_body(ctx: Any, name: str, model: Any = None) -> Any:
    """The body of registry stage ``name`` on ``ctx`` as one execution of that stage (its files named after
    it, its declared tables only), without a marker; returns its info."""
    from spade_core.pipeline.registry import BY_NAME

    declared = BY_NAME[name]
    return declared.body(ctx.execution(name, reads=declared.reads, writes=declared.writes), model)


def validated_generation(tmp_path: Any, model: Any, run_id: str, *overrides: str) -> Any:
    """Generation 1 of run ``run_id`` on the local store ``tmp_path``, ``tiny`` with ``overrides``, through
    documents, design and validate (shard 0, one attempt per prompt), ``model`` writing whole modules
    (``designer.mode=write``) as the designs (and judging them where the config asks); returns its context."""
    from spade_core.config import load_config
    from spade_core.designer.memory import Memory
    from spade_core.pipeline.context import GenerationContext
    from spade_core.pipeline.stages import documents
    from spade_core.pipeline.stages.design import design
    from spade_core.pipeline.stages.validate import validate_shard
    from spade_core.store.artifacts import Store

    base = ["designer.mode=write", "designer.max_attempts=1", "memory.report_diversity=false", f"store.root={tmp_path}"]
    ctx = GenerationContext(load_config("tiny", overrides=[*base, *overrides]), Store(str(tmp_path)), run_id, 1)
    as_stage(ctx, "documents", lambda run: documents.run(run, None))
    as_stage(ctx, "design", lambda run: design(run, run.read("documents", ["documents"]), model, Memory()))
    as_stage(ctx, "validate", lambda run: validate_shard(run, run.read_shard("designs", "design", 0), 0, model))
    return ctx


def designed_and_checked(ctx: Any, designer: Any) -> None:
    """Documents, design (a seeded memory), validate (shard 0, ``designer`` writing any retries) and novelty
    of ``ctx``'s generation, each as its stage."""
    from spade_core.designer.memory import Memory
    from spade_core.pipeline.stages import documents, novelty
    from spade_core.pipeline.stages.design import design
    from spade_core.pipeline.stages.validate import validate_shard

    as_stage(ctx, "documents", lambda run: documents.run(run, None))
    as_stage(ctx, "design", lambda run: design(run, run.read("documents", ["documents"]), designer, Memory.seeded()))
    as_stage(ctx, "validate", lambda run: validate_shard(run, run.read_shard("designs", "design", 0), 0, designer))
    as_stage(ctx, "novelty", lambda run: novelty.run(run, None))
