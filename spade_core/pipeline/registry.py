"""The one list of a generation's stages, in pipeline order (docs/DESIGN.md §10).

    documents → design → validate (sharded over design shards) → topup (optional) → novelty (optional)
    → pool → hint → [ refill (optional) → rollout (sharded over pool blocks) → score → memory → train ] × K
    steps → reward → evaluate (when due)

The per-step stages (``refill``, ``rollout``, ``train``) run once per step ``k`` of the generation as the instances
``rollout-s{k}``, ``train-s{k}``; ``score`` and ``memory``, declared between them with ``first_step_only``, run in
step 0 only (the regret and the memory come from the pool's first plays), and ``refill`` (the pool's top-up with
``designer.top_up_at: steps``) in the steps its declared ``runs_at`` gives only
(:func:`~spade_core.steps.top_up_steps`), as ``refill-s{k}``, with that step's checkpoint. :func:`stages_for`
expands the declarations into the instances of one generation, in order. ``reward`` (the designer's reward over the
whole window of K steps) runs after the last step; the designs it rewards are trained by a later generation's
``train`` (``designer.training_delay`` steps after this generation's first step), hence ``train``'s dependency on
the previous generation's ``reward``; in the generation that holds the run's last step (``training.total_steps``)
``reward`` runs before the last ``train``, which trains this generation's designs too (:func:`flushes`).

The Prefect flow (``flows/generation.py``), ``spade status`` and the local runner
(:mod:`spade_core.pipeline.local`) iterate :data:`STAGES`. Adding a stage is one module under
``spade_core/pipeline/stages/`` (an adapter: it reads its declared inputs, calls the library, writes its
outputs) plus one declaration here; when it runs (``applies``) is a predicate of this module.
"""

from __future__ import annotations

import dataclasses

from spade_core.config import SpadeConfig
from spade_core.pipeline.stage import Stage
from spade_core.pipeline.stages import (
    design,
    documents,
    evaluate,
    hint,
    memory,
    novelty,
    pool,
    reward,
    rollout,
    score,
    topup,
    train,
    validate,
)
from spade_core.stage_names import STEP_STAGES, instance_name
from spade_core.steps import flush_step, generation_of, top_up_steps
from spade_core.store.schemas import SCHEMAS
from spade_core.store.verdicts import DESIGN_STAGES, VALIDATION_STAGES


def designing(cfg: SpadeConfig, gen: int) -> bool:
    """The designer stages run unless the run plays a fixed pool (the fixed-environment baseline)."""
    return not cfg.designer.fixed_pool


def tops_up(cfg: SpadeConfig, gen: int) -> bool:
    """The top-up before the pool (``topup``): rounds to run, at ``designer.top_up_at: pool``."""
    return designing(cfg, gen) and cfg.designer.top_up_rounds > 0 and cfg.designer.top_up_at == "pool"


def refills(cfg: SpadeConfig, gen: int) -> bool:
    """The top-up at the pool's later steps (``refill``): ``designer.top_up_at: steps`` and a step to run a
    round at (:func:`~spade_core.steps.top_up_steps`)."""
    return bool(top_up_steps(cfg))


def judges_novelty(cfg: SpadeConfig, gen: int) -> bool:
    """The novelty stage runs when a check is on: ``memory.novelty_threshold``, or a parent to compare with
    (``designer.mode`` mutate or parameters)."""
    checks = cfg.memory.novelty_threshold is not None or cfg.designer.mode in ("mutate", "parameters")
    return checks and designing(cfg, gen)


def evaluation_due(cfg: SpadeConfig, gen: int) -> bool:
    """Whether generation ``gen`` ends with an evaluation (``evaluation.every``; 0 = never)."""
    every = cfg.evaluation.every
    return every > 0 and gen % every == 0


# What the judged designs are read from (:func:`spade_core.store.verdicts.final_designs`).
VERDICTS = ("designs", "validations", "novelty")

STAGES: tuple[Stage, ...] = (
    Stage("documents", documents.run, retried=True, applies=designing, writes=("documents",)),
    Stage(
        "design",
        design.run,
        inputs=("documents",),
        previous=("memory", "train"),
        uses_model=True,
        retried=True,
        applies=designing,
        reads=("documents", "memory"),
        writes=("designs",),
    ),
    Stage(
        "validate",
        validate.run,
        inputs=("design",),
        uses_model=True,
        retried=True,
        shard_by="design",
        applies=designing,
        reads=("designs", "memory"),
        writes=("validations", "designs", "documents"),
    ),
    Stage(
        "topup",
        topup.run,
        inputs=("design", "validate"),
        previous=("memory", "train"),
        uses_model=True,
        retried=True,
        applies=tops_up,
        reads=("designs", "validations", "memory"),
        writes=("documents", "designs", "validations"),
    ),
    Stage(
        "novelty",
        novelty.run,
        inputs=("validate", "topup"),
        previous=("memory",),
        applies=judges_novelty,
        reads=("designs", "validations", "memory"),
        writes=("novelty",),
    ),
    Stage(
        "pool",
        pool.run,
        inputs=("validate", "topup", "novelty"),
        previous=("memory", "train"),
        reads=(*VERDICTS, "memory", "pool"),
        writes=("pool",),
    ),
    Stage("hint", hint.run, inputs=("pool",), uses_model=True, retried=True, reads=("pool",), writes=("hints",)),
    Stage(
        "refill",
        topup.refill,
        inputs=("pool", "hint"),
        previous=("memory",),
        uses_model=True,
        retried=True,
        applies=refills,
        per_step=True,
        runs_at=top_up_steps,
        carry=("train",),
        reads=("designs", "validations", "memory", "pool"),
        writes=("documents", "designs", "validations", "pool"),
    ),
    Stage(
        "rollout",
        rollout.run,
        inputs=("pool", "hint", "refill"),
        uses_model=True,
        retried=True,
        shard_by="pool",
        per_step=True,
        carry=("train",),
        may_lag=True,
        reads=("pool", "hints"),
        writes=("episodes",),
    ),
    Stage(
        "score",
        score.run,
        inputs=("design", "validate", "topup", "novelty", "pool", "hint", "rollout"),
        first_step_only=True,
        reads=(*VERDICTS, "pool", "hints", "episodes"),
        writes=("env_scores",),
    ),
    Stage(
        "memory",
        memory.run,
        inputs=("pool", "rollout", "score"),
        previous=("memory",),
        first_step_only=True,
        reads=("memory", "pool", "episodes", "env_scores"),
        writes=("memory",),
    ),
    Stage(
        "train",
        train.run,
        inputs=("memory", "rollout", "score"),
        previous=("reward",),
        retried=True,
        exclusive=True,
        per_step=True,
        carry=("train",),
        reads=(*VERDICTS, "pool", "episodes", "designer_rewards"),  # read by the trainer's own process
        writes=("checkpoint", "train_metrics", "train_samples"),
    ),
    Stage(
        "reward",
        reward.run,
        inputs=("validate", "topup", "novelty", "pool", "hint", "refill", "rollout"),
        previous=("reward",),
        applies=designing,
        reads=(*VERDICTS, "pool", "hints", "episodes", "designer_lp_state"),
        writes=("designer_rewards", "designer_lp_state"),
    ),
    Stage(
        "evaluate",
        evaluate.run,
        inputs=("train",),
        uses_model=True,
        scores_trained=True,
        retried=True,
        applies=evaluation_due,
        writes=("evals",),
    ),
)
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
# The design chain: the stages declared before the first per-step one (:func:`chain_for` gives its instances).
CHAIN: tuple[str, ...] = tuple(s.name for s in STAGES[: next(i for i, s in enumerate(STAGES) if s.per_step)])


class DeclarationError(RuntimeError):
    """The stage declarations contradict each other or a fact stated elsewhere (a bug in :data:`STAGES`)."""


def check_declarations(stages: tuple[Stage, ...]) -> None:
    """Raise :class:`DeclarationError` unless ``stages`` agree with the facts stated elsewhere: the tables they
    read and write exist (:data:`~spade_core.store.schemas.SCHEMAS`, or ``checkpoint``); the per-step stages are
    :data:`~spade_core.stage_names.STEP_STAGES`, and only they may run in some steps only (``runs_at``); the stages
    declared inside the step block are exactly the ``first_step_only`` ones; and the stages outside the steps that
    write ``designs`` and ``validations`` are the ones :mod:`spade_core.store.verdicts` reads them from (the
    per-step top-ups are named by its callers)."""
    unknown = {t for s in stages for t in (*s.reads, *s.writes)} - set(SCHEMAS) - {"checkpoint"}
    if unknown:
        raise DeclarationError(f"stages declare tables that do not exist: {sorted(unknown)}")
    stepped = [i for i, s in enumerate(stages) if s.per_step]
    if {stages[i].name for i in stepped} != set(STEP_STAGES):
        raise DeclarationError(f"per-step stages {sorted(stages[i].name for i in stepped)} != names.STEP_STAGES")
    partial = sorted(s.name for s in stages if s.runs_at is not None and not s.per_step)
    if partial:
        raise DeclarationError(f"stages {partial} declare runs_at but are not per-step: they have no steps")
    inside = {s.name for s in stages[stepped[0] : stepped[-1] + 1] if not s.per_step}
    once = {s.name for s in stages if s.first_step_only}
    if once != inside:
        raise DeclarationError(
            f"the stages inside the step block {sorted(inside)} are not the first_step_only ones {sorted(once)}"
        )
    for table, named in (("designs", DESIGN_STAGES), ("validations", VALIDATION_STAGES)):
        writers = tuple(s.name for s in stages if table in s.writes and not s.per_step)
        if writers != named:
            raise DeclarationError(f"stages writing {table} {writers} != spade_core.store.verdicts' {named}")


check_declarations(STAGES)


# What the design chain (the stages before the steps) of generation g stops waiting for when generations
# overlap: the previous generation's last update. It then uses the newest checkpoint at its start instead.
ASYNC_RELEASED = ("train",)


def _instance(stage: Stage, step: int | None, last: int, cfg: SpadeConfig, chain: bool) -> Stage:
    """``stage`` in step ``step`` (None: outside the step block, where per-step inputs mean the last step).

    A stage that may lag (the rollout, with ``orchestration.max_staleness`` s > 0) in step ``k`` waits for
    step ``k - 1 - s``'s update instead of step ``k - 1``'s, and for its own previous instance (plays keep
    their order). ``chain``: a stage before the steps, which with ``orchestration.async_generations`` does
    not wait for the previous generation's training (:data:`ASYNC_RELEASED`).
    """
    at = step if step is not None else last
    inputs = tuple(instance_name(x, at) for x in stage.inputs)
    lag = cfg.orchestration.max_staleness if stage.may_lag else 0
    if stage.per_step and step:
        if step - 1 - lag >= 0:
            inputs += tuple(instance_name(x, step - 1 - lag) for x in stage.carry)
        if lag:
            inputs += (instance_name(stage.name, step - 1),)
    previous = stage.previous
    if chain and cfg.orchestration.async_generations:
        previous = tuple(x for x in previous if x not in ASYNC_RELEASED)
    return dataclasses.replace(
        stage,
        name=instance_name(stage.name, step),
        inputs=inputs,
        previous=tuple(instance_name(x, last) for x in previous),
        step=step,
    )


def _runs_at(stage: Stage, cfg: SpadeConfig, step: int) -> bool:
    """Whether a stage of the step block has an instance in step ``step``: a ``first_step_only`` stage in step 0
    only, a per-step stage in the steps its ``runs_at`` gives (the top-up's ``refill``:
    :func:`~spade_core.steps.top_up_steps`), or in every step without one."""
    if stage.first_step_only:
        return step == 0
    return stage.runs_at is None or step in stage.runs_at(cfg)


def flushes(cfg: SpadeConfig, gen: int) -> bool:
    """Whether generation ``gen`` holds the run's last step (``training.total_steps``), whose update also trains
    the designs due after it, this generation's among them (:func:`~spade_core.steps.design_train_step`)."""
    flush = flush_step(cfg)
    k = cfg.training.steps_per_generation
    return flush is not None and generation_of(k, flush) == gen and designing(cfg, gen) and cfg.designer.train


def _without(stage: Stage, absent: set[str]) -> Stage:
    """``stage`` without the inputs named in ``absent``."""
    kept = tuple(x for x in stage.inputs if x not in absent)
    return stage if kept == stage.inputs else dataclasses.replace(stage, inputs=kept)


def stages_for(cfg: SpadeConfig, gen: int) -> list[Stage]:
    """The stage instances generation ``gen`` of a run with ``cfg`` runs, in order (see the module doc).

    In the generation that holds the run's last step (:func:`flushes`) ``reward`` runs before the last
    ``train``, which takes it as an input: that update trains this generation's designs."""
    applying = [s for s in STAGES if s.applies(cfg, gen)]
    stepped = [i for i, s in enumerate(applying) if s.per_step]
    last = cfg.training.steps_per_generation - 1
    if not stepped:
        return [_instance(s, None, last, cfg, False) for s in applying]
    first, end = stepped[0], stepped[-1] + 1
    out = [_instance(s, None, last, cfg, True) for s in applying[:first]]
    for k in range(last + 1):
        out += [_instance(s, k, last, cfg, False) for s in applying[first:end] if _runs_at(s, cfg, k)]
    after = [_instance(s, None, last, cfg, False) for s in applying[end:]]
    # A per-step stage with no instance in a step (its runs_at, or it does not apply) leaves none to wait for there.
    made = {s.name for s in (*out, *after)}
    absent = {instance_name(s.name, k) for s in STAGES if s.per_step for k in range(last + 1)} - made
    out, after = ([_without(s, absent) for s in part] for part in (out, after))
    if flushes(cfg, gen) and any(s.name == "reward" for s in after):
        reward = next(s for s in after if s.name == "reward")
        final = len(out) - 1  # the last train instance closes the step block
        out[final] = dataclasses.replace(out[final], inputs=(*out[final].inputs, reward.name))
        out.insert(final, reward)
        after.remove(reward)
    return out + after


def chain_for(cfg: SpadeConfig, gen: int) -> list[Stage]:
    """The design chain of generation ``gen``: its stage instances before the first step (documents, design,
    validate, novelty, pool, hint); with ``orchestration.async_generations`` they run while generation
    ``gen - 1`` trains."""
    stages = stages_for(cfg, gen)
    first = next((i for i, s in enumerate(stages) if s.step is not None), len(stages))
    return stages[:first]


def previous_names(cfg: SpadeConfig, gen: int = 2) -> set[str]:
    """The instance names of generation ``gen - 1``'s stages that some stage of ``gen`` depends on."""
    return {name for s in stages_for(cfg, gen) for name in s.previous}


def stage(name: str, cfg: SpadeConfig | None = None, gen: int = 1) -> Stage:
    """The stage (instance) called ``name``; an unknown name is an error listing the stages."""
    known = {s.name: s for s in stages_for(cfg, gen)} if cfg is not None else BY_NAME
    try:
        return known[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; stages: {', '.join(known)}") from None
