"""Design (docs/DESIGN.md §7 step 3): G designs per document prompt, all in one batched model call."""

from __future__ import annotations

import random
from typing import Any

import pandas as pd

from spade_core.design import design_id_for, design_messages, design_row, skill_kind, skills_for_generation
from spade_core.llm.base import GenerationRequest, Generator, SamplingParams
from spade_core.memory import Memory
from spade_core.pipeline.context import GenerationContext
from spade_core.shards import shard_count, shard_rows

NAME = "design"


def prompt_plan(ctx: GenerationContext) -> list[str]:
    """The skill of each document prompt this generation, round-robin over the generation's skills."""
    skills = skills_for_generation(ctx.gen, ctx.cfg.designer)
    return [skills[i % len(skills)] for i in range(ctx.cfg.designer.documents_per_generation)]


def _truncate(text: str, words: int) -> str:
    return " ".join(text.split()[:words])


def design(ctx: GenerationContext, documents: pd.DataFrame, generator: Generator, memory: Memory) -> pd.DataFrame:
    """The designs of every document prompt (``attempt`` 0), G per prompt; writes ``design-{k}`` shards."""
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
            row = design_row(
                design_id=design_id_for(ctx.run_id, ctx.gen, doc_id, skill, p * group + g),
                doc_id=doc_id,
                group_id=group_id,
                skill=skill,
                messages=messages,
                completion=completions[p * group + g].text,
                model_ref=generator.model_ref,
            )
            rows.append({**row, "attempt": 0, "policy_step": ctx.first_step})
    frame = pd.DataFrame(rows)
    for shard in range(shard_count(len(frame), ctx.shard_size)):
        ctx.write("designs", shard_rows(frame, shard, ctx.shard_size), NAME, shard)
    return frame


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    documents = ctx.read("documents", ["documents"]).drop(columns=["run_id", "gen"])
    designs = design(ctx, documents, model, ctx.previous_memory())
    return {"designs": len(designs), "shards": shard_count(len(designs), ctx.shard_size)}
