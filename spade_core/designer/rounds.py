"""Top-up rounds: design the environments a generation is missing, before its pool is formed or at its later steps.

When fewer than ``designer.documents_per_generation`` distinct valid environments came out of validation, a
round designs the missing number (:func:`missing`) from fresh prompts on fresh documents (the skills of the
failed prompts, in turn: :func:`round_skills`) and validates them exactly as the first attempts are, retries
included (:func:`design_round`). This is the authors' pool top-up: a step that finds fewer games than it
wants designs the missing ones (``spade/core/orchestrator.py:2299-2301``). A round at a later step adds its
valid designs to the pool the step plays (:func:`added_pool_rows`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pandas as pd

from spade_core.designer.batch import DesignRun, Prompt, generate_rows, prompt_for
from spade_core.designer.deadline import start_clock
from spade_core.designer.memory import Memory
from spade_core.designer.pool import COLUMNS
from spade_core.designer.replies import design_id_for
from spade_core.designer.retries import fresh_documents, validate_with_retries
from spade_core.llm.base import Generator

ROUND_OFFSET = 100_000  # design index of round r's i-th prompt: r * ROUND_OFFSET + i (apart from design's)


def missing(valid_env_ids: set[str], target: int) -> int:
    """How many environments a round designs.

    >>> missing({"a", "b"}, 5), missing({"a", "b"}, 2)
    (3, 0)
    """
    return max(0, target - len(valid_env_ids))


def round_skills(judged: pd.DataFrame, plan: list[str]) -> list[str]:
    """The skills a round designs, in turn: those of the failed prompts among the ``judged`` designs (final
    verdicts), else the generation's ``plan`` (:func:`~spade_core.designer.batch.prompt_plan`).

    >>> judged = pd.DataFrame({"ok": [True, False], "skill": ["a", "b"]})
    >>> round_skills(judged, ["x"]), round_skills(pd.DataFrame(), ["x"])
    (['b'], ['x'])
    """
    skills = list(judged.loc[~judged["ok"], "skill"]) if not judged.empty else []
    return skills or plan


def _ids(run: DesignRun, prompts: list[Prompt], r: int) -> list[tuple[str, str]]:
    """(design_id, group_id) of round ``r``'s prompts."""
    ids = []
    for i, prompt in enumerate(prompts):
        index = r * ROUND_OFFSET + i
        ids.append(
            (
                design_id_for(run.run_id, run.gen, prompt.doc_id, prompt.skill, index),
                design_id_for(run.run_id, run.gen, prompt.doc_id, prompt.skill, -1 - index),
            )
        )
    return ids


def design_round(
    run: DesignRun, model: Generator, r: int, count: int, skills: list[str], memory: Memory
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Round ``r``: ``count`` designs of ``skills`` in turn on fresh documents, validated with their retries
    (within ``designer.batch_deadline_s``: a round is a batch of its own). Returns (design rows, validation
    rows, documents, the final verdict of each design)."""
    docs = fresh_documents(run, count, ROUND_OFFSET + r, 0)
    rng = random.Random(f"{run.seed}:topup:{r}")
    prompts = [
        prompt_for(run.cfg, skills[i % len(skills)], docs.iloc[i % len(docs)] if not docs.empty else None, memory, rng)
        for i in range(count)
    ]
    clock = start_clock(run.cfg.designer.batch_deadline_s, model)
    first = generate_rows(
        run, prompts, _ids(run, prompts, r), model, rng, attempt=0, seed=run.seed + 7919 * r, clock=clock
    )
    retries, verdicts, retry_docs = validate_with_retries(run, first, ROUND_OFFSET + r, model, clock)
    designs = pd.concat([f for f in (first, retries) if not f.empty], ignore_index=True)
    final = verdicts.sort_values(["design_id", "attempt"]).drop_duplicates("design_id", keep="last")
    return designs, verdicts, concat([docs, retry_docs]), final


@dataclass(frozen=True)
class TopUp:
    """What the rounds before the pool wrote, and where they left the count (:func:`top_up`)."""

    designs: pd.DataFrame
    validations: pd.DataFrame
    documents: pd.DataFrame
    valid: set[str]  # the distinct valid env_ids after the rounds, those before them included
    rounds: int  # the rounds that ran
    designed: int  # the designs they asked for


def top_up(
    run: DesignRun, model: Generator, valid: set[str], skills: list[str], memory: Memory, rounds: int, target: int
) -> TopUp:
    """Rounds 1, 2, ... ``rounds`` before the pool's first play, each designing what ``valid`` still misses of
    ``target`` (:func:`design_round`), until none is missing."""
    valid = set(valid)
    designs, validations, documents = [], [], []
    ran = designed = 0
    for r in range(1, rounds + 1):
        count = missing(valid, target)
        if count == 0:
            break
        ran, designed = r, designed + count
        round_designs, verdicts, docs, final = design_round(run, model, r, count, skills, memory)
        designs.append(round_designs)
        validations.append(verdicts)
        documents.append(docs)
        valid |= set(final.loc[final["ok"], "env_id"])
    return TopUp(concat(designs), concat(validations), concat(documents), valid, ran, designed)


def added_pool_rows(designs: pd.DataFrame, final: pd.DataFrame, pool: pd.DataFrame) -> pd.DataFrame:
    """The ``pool`` rows (source ``design``) of a round's valid designs that are not in ``pool`` yet, one per
    env_id: each design's latest attempt among ``designs``, kept when its ``final`` verdict is ok."""
    kept = final[final["ok"]][["design_id", "env_id"]]
    rows = (
        designs.sort_values("attempt").drop_duplicates("design_id", keep="last").merge(kept, on=["design_id", "env_id"])
    )
    rows = rows[~rows["env_id"].isin(set(pool["env_id"]))].drop_duplicates("env_id")
    return rows.assign(source="design")[COLUMNS].reset_index(drop=True)


def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The non-empty ``frames`` one after another (an empty frame when none has rows)."""
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
