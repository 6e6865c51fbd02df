"""One SPADE generation as plain stage functions (DESIGN.md §7 steps 2–8), each writing its table.

    documents → designs → validations → hints → episodes (no hint, hint) → env_scores → memory

Every stage takes its inputs explicitly and returns the frame it wrote, so it runs and tests without
Prefect; :mod:`spade_core.stages` makes each one resumable and the orchestration layer wraps that in a
cached, retryable task. Ids tie the tables together: ``doc_id`` (documents → designs), ``design_id``
(designs → validations, env_scores), ``env_id`` (validations → hints → episodes → env_scores → memory).
Training (step 9) is a separate stage.

Sharding (``orchestration.shard_size`` items per shard): designs are written in shards of that many rows
(``design-{k}``), validation shard ``k`` validates (and repairs) exactly ``design-{k}`` and writes
``validate-{k}``; rollout shard ``k`` plays the ``k``-th block of the pool and writes ``rollout-{k}``.
File names are deterministic per (table, stage, shard), and an empty result is still written (a
schema-only file), so a rerun shard replaces its own file and "the file exists" never means "skipped".
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from sandbox.session import EnvSession, run_parallel
from spade_core.catalog import query
from spade_core.config import SpadeConfig
from spade_core.corpus import sample_documents
from spade_core.design import (
    design_id_for,
    design_messages,
    design_row,
    repair_messages,
    skill_kind,
    skills_for_generation,
)
from spade_core.envs.seeds import load_seed_envs
from spade_core.hints import clean_hint, hint_messages, hint_row
from spade_core.llm.base import GenerationRequest, Generator, SamplingParams
from spade_core.memory import STAGE as MEMORY_STAGE
from spade_core.memory import Memory
from spade_core.novelty import default_embedder, novelty_filter, pool_diversity
from spade_core.rollout import RolloutEngine, plan_episodes
from spade_core.schemas import SCHEMAS
from spade_core.scoring import score_environments
from spade_core.shards import WrittenFile, shard_count, shard_rows, write_table
from spade_core.store import Store
from spade_core.validate import limits_from_config, validate_many


@dataclass
class GenerationContext:
    """What every stage of one generation needs."""

    cfg: SpadeConfig
    store: Store
    run_id: str
    gen: int
    written: list[WrittenFile] = field(default_factory=list)  # every file written through this context

    @property
    def seed(self) -> int:
        return self.cfg.seed * 100_003 + self.gen

    @property
    def shard_size(self) -> int:
        return self.cfg.orchestration.shard_size

    def write(self, table: str, frame: pd.DataFrame, stage: str, shard: int | str = 0) -> pd.DataFrame:
        """Write ``frame`` as the (stage, shard) file of this generation's partition (empty: schema only)."""
        self.written.append(write_table(self.store, table, frame, self.run_id, self.gen, stage, shard))
        return frame

    def read(self, table: str) -> pd.DataFrame:
        """This generation's rows of ``table`` (all stages and shards)."""
        return self.store.read_table(table, self.run_id, self.gen)

    def read_shard(self, table: str, stage: str, shard: int) -> pd.DataFrame:
        """Exactly one (stage, shard) file of this generation's ``table``."""
        path = self.store.table_path(table, self.run_id, self.gen, stage, shard)
        with self.store.fs.open(path, "rb") as fh:
            return pq.read_table(fh, schema=SCHEMAS[table]).to_pandas(maps_as_pydicts="strict")


def prompt_plan(ctx: GenerationContext) -> list[str]:
    """The skill of each document prompt this generation, round-robin over the generation's skills."""
    skills = skills_for_generation(ctx.gen, ctx.cfg.designer)
    return [skills[i % len(skills)] for i in range(ctx.cfg.designer.documents_per_generation)]


def stage_documents(ctx: GenerationContext) -> pd.DataFrame:
    """Step 2: a fresh document per design prompt (none in the 'no corpus' ablation)."""
    corpus = ctx.cfg.corpus
    if not corpus.enabled:
        return ctx.write("documents", pd.DataFrame(), "documents")
    frame = sample_documents(
        corpus.source,
        ctx.cfg.designer.documents_per_generation,
        ctx.seed,
        max(corpus.max_words, corpus.max_words_tool),
        endpoint_url=ctx.cfg.store.endpoint_url,
    )
    return ctx.write("documents", frame, "documents")


def _truncate(text: str, words: int) -> str:
    return " ".join(text.split()[:words])


def stage_design(ctx: GenerationContext, documents: pd.DataFrame, generator: Generator, memory: Memory) -> pd.DataFrame:
    """Step 3: G designs per document prompt (one GRPO group each), all in one batched generate call."""
    cfg, rng = ctx.cfg, random.Random(ctx.seed)
    prompts: list[tuple[str | None, str, list[dict[str, str]]]] = []
    for i, skill in enumerate(prompt_plan(ctx)):
        doc_id, text = None, None
        if not documents.empty:
            doc = documents.iloc[i % len(documents)]
            budget = cfg.corpus.max_words_tool if skill_kind(skill) == "tool" else cfg.corpus.max_words
            doc_id, text = str(doc.doc_id), _truncate(str(doc.text), budget)
        positives = memory.positives(skill, cfg.designer.memory_positive, rng)
        negatives = memory.negatives(cfg.designer.memory_negative, rng)
        prompts.append((doc_id, skill, design_messages(text, skill, cfg.designer.difficulty, positives, negatives)))
    group = cfg.designer.group_size
    requests = [GenerationRequest(messages=m, seed=rng.getrandbits(31)) for _, _, m in prompts for _ in range(group)]
    params = SamplingParams.from_config(cfg.model, max_new_tokens=cfg.designer.max_new_tokens, seed=ctx.seed)
    completions = generator.generate(requests, params)
    rows = []
    for p, (doc_id, skill, messages) in enumerate(prompts):
        group_id = design_id_for(ctx.run_id, ctx.gen, doc_id, skill, -1 - p)
        for g in range(group):
            completion = completions[p * group + g]
            rows.append(
                design_row(
                    design_id=design_id_for(ctx.run_id, ctx.gen, doc_id, skill, p * group + g),
                    doc_id=doc_id,
                    group_id=group_id,
                    skill=skill,
                    messages=messages,
                    completion=completion.text,
                    model_ref=generator.model_ref,
                )
            )
    frame = pd.DataFrame(rows)
    for shard in range(shard_count(len(frame), ctx.shard_size)):
        ctx.write("designs", shard_rows(frame, shard, ctx.shard_size), "design", shard)
    return frame


def _validation_rows(ctx: GenerationContext, designs: pd.DataFrame) -> list[dict[str, Any]]:
    with_code = designs[designs["code"].notna()]
    results = validate_many(list(with_code["code"]), ctx.cfg.validation)
    by_design = {d: r.as_row() for d, r in zip(with_code["design_id"], results, strict=True)}
    rows = []
    for d in designs.itertuples():
        row = by_design.get(d.design_id) or {
            "env_id": None,
            "ok": False,
            "error_type": "syntax_error",
            "message": "no ```python block in the reply",
            "checks": {},
            "seconds": 0.0,
        }
        rows.append({"design_id": d.design_id, **row})
    return rows


def stage_validate(
    ctx: GenerationContext, designs: pd.DataFrame, generator: Generator | None = None, memory: Memory | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Step 4: validate every design in the jail; optional repair rounds feed the error back; then the
    optional novelty filter. Shard by shard (:func:`validate_shard`), as the orchestrated stage does.

    Returns (designs, validations); repaired designs replace their originals in the designs table.
    """
    parts = [
        validate_shard(ctx, shard_rows(designs, k, ctx.shard_size), k, generator)
        for k in range(shard_count(len(designs), ctx.shard_size))
    ]
    designs = pd.concat([d for d, _ in parts], ignore_index=True)
    validations = pd.concat([v for _, v in parts], ignore_index=True)
    if memory is not None:
        validations = apply_novelty(ctx, designs, validations, memory)
    return designs, validations


def validate_shard(
    ctx: GenerationContext, designs: pd.DataFrame, shard: int, generator: Generator | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Validate the designs of one shard (``design-{shard}``), repair failures, write ``validate-{shard}``.

    Repaired designs are written back to ``design-{shard}`` before the validations, so a shard whose
    validations exist always has its final designs.
    """
    rows = _validation_rows(ctx, designs)
    rounds = ctx.cfg.designer.repair_rounds if generator is not None else 0
    for _ in range(rounds):
        failed = [i for i, r in enumerate(rows) if not r["ok"]]
        if not failed or generator is None:
            break
        params = SamplingParams.from_config(
            ctx.cfg.model, max_new_tokens=ctx.cfg.designer.max_new_tokens, seed=ctx.seed + 1
        )
        requests = []
        for i in failed:
            d = designs.iloc[i]
            messages = _messages(d.prompt)
            requests.append(
                GenerationRequest(
                    messages=repair_messages(messages, d.completion, rows[i]["error_type"], rows[i]["message"] or "")
                )
            )
        replies = generator.generate(requests, params)
        designs = designs.copy()
        for i, reply in zip(failed, replies, strict=True):
            d = designs.iloc[i]
            repaired = design_row(
                design_id=d.design_id,
                doc_id=d.doc_id,
                group_id=d.group_id,
                skill=d.skill,
                messages=_messages(d.prompt),
                completion=reply.text,
                model_ref=d.model_ref,
            )
            designs.iloc[i] = pd.Series(repaired)
        for i, row in zip(failed, _validation_rows(ctx, designs.iloc[failed]), strict=True):
            rows[i] = row  # only the repaired designs are validated again
        ctx.write("designs", designs, "design", shard)
    return designs, ctx.write("validations", pd.DataFrame(rows), "validate", shard)


def apply_novelty(
    ctx: GenerationContext, designs: pd.DataFrame, validations: pd.DataFrame, memory: Memory
) -> pd.DataFrame:
    """The optional novelty filter over ALL shards (``memory.novelty_threshold``; None = off).

    A valid design too close to memory, or to an earlier accepted design, becomes ``not_novel``; the
    shard files that change are rewritten. Running it again on its own output changes nothing.
    """
    threshold = ctx.cfg.memory.novelty_threshold
    if threshold is None:
        return validations
    columns = list(SCHEMAS["validations"].names)
    rows = validations[columns].to_dict("records")
    code_of = dict(zip(designs["design_id"], designs["code"], strict=True))
    before = [r["ok"] for r in rows]
    _reject_similar(rows, [code_of[r["design_id"]] for r in rows], [e.code for e in memory], threshold)
    frame = pd.DataFrame(rows, columns=columns)
    for shard in range(shard_count(len(frame), ctx.shard_size)):
        block = slice(shard * ctx.shard_size, (shard + 1) * ctx.shard_size)
        if before[block] != [r["ok"] for r in rows[block]]:
            ctx.write("validations", shard_rows(frame, shard, ctx.shard_size), "validate", shard)
    return frame


def _reject_similar(rows: list[dict[str, Any]], codes: list[Any], memory_codes: list[str], threshold: float) -> None:
    """Reject valid designs too close to a memory environment or an earlier accepted design."""
    valid = [i for i, r in enumerate(rows) if r["ok"]]
    candidates = [str(codes[i]) for i in valid]
    for i, (accepted, similarity) in zip(
        valid, novelty_filter(candidates, memory_codes, threshold, default_embedder()), strict=True
    ):
        if not accepted:
            rows[i].update(
                ok=False,
                error_type="not_novel",
                message=f"cosine similarity {similarity:.3f} to a known environment > {threshold}",
            )


def _messages(prompt_json: str) -> list[dict[str, str]]:
    return list(json.loads(prompt_json))


def pool(ctx: GenerationContext, designs: pd.DataFrame, validations: pd.DataFrame, memory: Memory) -> pd.DataFrame:
    """The environments played this generation: new valid designs, plus ``rollout.replay_envs`` from
    memory (PLR-style; highest regret in band; seed environments at first)."""
    valid = validations[validations["ok"]].merge(designs[["design_id", "skill", "kind", "code"]], on="design_id")
    frame = valid[["env_id", "design_id", "skill", "kind", "code"]].drop_duplicates("env_id")
    replay = memory.replay(ctx.cfg.rollout.replay_envs, exclude=set(frame["env_id"]))
    extra = pd.DataFrame(
        [{"env_id": e.env_id, "design_id": None, "skill": e.skill, "kind": e.kind, "code": e.code} for e in replay],
        columns=frame.columns,
    )
    return pd.concat([frame, extra], ignore_index=True) if not extra.empty else frame.reset_index(drop=True)


def load_pool(ctx: GenerationContext) -> pd.DataFrame:
    """The pool of this generation, recomputed from the store: the fixed pool, or :func:`pool` over the
    stored designs and validations and the memory snapshot of ``gen - 1``. Deterministic, so every shard
    of every process sees the same environments in the same order."""
    if ctx.cfg.designer.fixed_pool:
        return fixed_pool(ctx)
    memory = Memory.load(ctx.store, ctx.run_id, ctx.gen - 1, ctx.cfg.memory)
    return pool(ctx, ctx.read("designs"), ctx.read("validations"), memory)


def stage_hints(ctx: GenerationContext, envs: pd.DataFrame, generator: Generator) -> pd.DataFrame:
    """Step 5: one hint per environment from its source; leaks of the played seeds' solutions flagged."""
    if envs.empty:
        return ctx.write("hints", pd.DataFrame(), "hint")
    max_words = ctx.cfg.rollout.hint_max_words
    requests = [GenerationRequest(messages=hint_messages(e.code, e.kind, max_words)) for e in envs.itertuples()]
    params = SamplingParams.from_config(ctx.cfg.model, max_new_tokens=max(32, 2 * max_words), seed=ctx.seed + 2)
    replies = generator.generate(requests, params)
    solutions = run_parallel(lambda code: _solutions(ctx, code), list(envs["code"]), ctx.cfg.validation.parallel_jails)
    rows = [
        hint_row(e.env_id, clean_hint(r.text, max_words), sols, generator.model_ref)
        for e, r, sols in zip(envs.itertuples(), replies, solutions, strict=True)
    ]
    return ctx.write("hints", pd.DataFrame(rows), "hint")


def _seeds(ctx: GenerationContext) -> list[int]:
    return [ctx.seed + s for s in range(ctx.cfg.rollout.seeds_per_env)]


def _solutions(ctx: GenerationContext, code: str) -> list[str]:
    """Reference solutions of the seeds that will be played (for leak detection), from the jail."""
    out = []
    with EnvSession(
        code,
        max_turns=ctx.cfg.rollout.max_turns,
        limits=limits_from_config(ctx.cfg.validation),
        call_timeout_s=ctx.cfg.validation.call_timeout_s,
    ) as session:
        if session.open().ok:
            for seed in _seeds(ctx):
                if session.reset(seed).ok and (sol := session.solution()).ok:
                    out.append(str(sol.data["solution"]))
    return out


def stage_rollouts(
    ctx: GenerationContext, envs: pd.DataFrame, hints: pd.DataFrame, generator: Generator, shard: int = 0
) -> pd.DataFrame:
    """Step 6: G no-hint and M hinted plays per environment and seed of one shard of the pool, all batched
    together; writes ``rollout-{shard}``."""
    if envs.empty:
        return ctx.write("episodes", pd.DataFrame(), "rollout", shard)
    hint_of = dict(zip(hints["env_id"], hints["hint"], strict=True)) if not hints.empty else {}
    specs = []
    for e in envs.itertuples():
        specs += plan_episodes(e.env_id, e.code, ctx.cfg.rollout, hint_of.get(e.env_id) or None, base_seed=ctx.seed)
    engine = RolloutEngine.from_config(ctx.cfg, generator)
    return ctx.write("episodes", pd.DataFrame(engine.run(specs)), "rollout", shard)


def stage_score(
    ctx: GenerationContext, designs: pd.DataFrame, validations: pd.DataFrame, envs: pd.DataFrame, episodes: pd.DataFrame
) -> pd.DataFrame:
    """Step 7: win rate, regret and designer reward per environment; invalid designs get the invalid reward."""
    # Designs whose reply held no code have no environment to score: the trainer gives them the invalid
    # reward directly. Every other design (valid or not) gets its environment's row.
    merged = designs[["design_id", "skill"]].merge(validations[["design_id", "env_id", "ok"]], on="design_id")
    merged = merged[merged["env_id"].notna()]
    new = pd.DataFrame(
        {
            "env_id": merged["env_id"],
            "design_id": merged["design_id"],
            "skill": merged["skill"],
            "valid": merged["ok"].astype(bool),
        }
    )
    replayed = envs[envs["design_id"].isna()]
    replay = pd.DataFrame({"env_id": replayed["env_id"], "design_id": None, "skill": replayed["skill"], "valid": True})
    # Two designs with identical code share one env_id and each keep their row (and reward).
    table = pd.concat([new, replay], ignore_index=True)
    episodes = (
        episodes
        if not episodes.empty
        else pd.DataFrame(columns=["env_id", "condition", "episode_return", "error_type"])
    )
    return ctx.write("env_scores", score_environments(episodes, table, ctx.cfg.scoring), "score")


def stage_memory(ctx: GenerationContext, memory: Memory, envs: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """Step 8: add each scored environment to the FIFO memory and persist the snapshot of this generation."""
    memory.add_scored(scores, envs, ctx.gen)
    return ctx.write("memory", memory.to_frame(), MEMORY_STAGE)


@dataclass
class GenerationResult:
    documents: pd.DataFrame
    designs: pd.DataFrame
    validations: pd.DataFrame
    envs: pd.DataFrame
    hints: pd.DataFrame
    episodes: pd.DataFrame
    scores: pd.DataFrame
    memory: pd.DataFrame
    diversity: float | None  # Vendi score of the pool's code embeddings (memory.report_diversity)


def fixed_pool(ctx: GenerationContext) -> pd.DataFrame:
    """The fixed-environment baseline's pool: the seed library, or the valid environments of a stored run."""
    source = ctx.cfg.designer.fixed_pool or "seeds"
    if source == "seeds":
        rows = [
            {"env_id": e.env_id, "design_id": None, "skill": e.skill, "kind": e.kind, "code": e.code}
            for e in load_seed_envs()
        ]
        return pd.DataFrame(rows)
    run = source.removeprefix("run:")
    frame = query(
        ctx.store,
        "select distinct d.env_id, cast(null as varchar) as design_id, d.skill, d.kind, d.code "
        "from designs d join validations v on v.design_id = d.design_id and v.run_id = d.run_id "
        "where v.ok and d.run_id = ? order by d.env_id",
        [run],
    )
    if frame.empty:
        raise ValueError(f"designer.fixed_pool {source!r}: run {run!r} has no valid environments in the store")
    return frame.drop_duplicates("env_id").reset_index(drop=True)


def run_generation(ctx: GenerationContext, generator: Generator) -> GenerationResult:
    """Steps 2–8 of one generation, in order (training is separate). Memory continues from the snapshot
    of generation ``gen - 1`` (the seed library when there is none). With ``designer.fixed_pool`` set
    (the fixed-environment baseline) there are no documents, designs or validations: the agent plays
    the fixed pool."""
    memory = Memory.load(ctx.store, ctx.run_id, ctx.gen - 1, ctx.cfg.memory)
    if ctx.cfg.designer.fixed_pool:
        documents = designs = pd.DataFrame(columns=["design_id", "skill", "doc_id"])
        validations = pd.DataFrame(columns=["design_id", "env_id", "ok"])
        envs = fixed_pool(ctx)
    else:
        documents = stage_documents(ctx)
        designs = stage_design(ctx, documents, generator, memory)
        designs, validations = stage_validate(ctx, designs, generator, memory)
        envs = pool(ctx, designs, validations, memory)
    hints = stage_hints(ctx, envs, generator)
    size = ctx.shard_size
    played = [
        stage_rollouts(ctx, shard_rows(envs, k, size), hints, generator, k) for k in range(shard_count(len(envs), size))
    ]
    episodes = pd.concat(played, ignore_index=True)
    scores = stage_score(ctx, designs, validations, envs, episodes)
    snapshot = stage_memory(ctx, memory, envs, scores)
    diversity = None
    if ctx.cfg.memory.report_diversity and not envs.empty:
        diversity = pool_diversity(list(envs["code"]), default_embedder())
    return GenerationResult(documents, designs, validations, envs, hints, episodes, scores, snapshot, diversity)
