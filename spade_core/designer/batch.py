"""One batch of designs (docs/DESIGN.md §7 step 3): the prompts, one batched model call, the design rows.

One design prompt per document (``designer.group_size`` replies each, 1 in the paper), the skill of prompt i
being i mod n of the generation's skills (:func:`prompt_plan`). The retries of the validation
(:mod:`spade_core.designer.retries`) and the top-up rounds (:mod:`spade_core.designer.rounds`) build their
prompts and rows with the same functions (:func:`prompt_for`, :func:`generate_rows`), so a retry is built
exactly like a first attempt. Every design row's code is repaired before validation (:func:`with_repairs`,
``validation.code_repairs``) and the row records which repairs changed it. A reply past
``designer.attempt_deadline_s`` is stored without code (:func:`~spade_core.designer.replies.late_reply`).

Nothing here reads or writes the store: a :class:`DesignRun` carries what the rows depend on (the config,
the run and generation, the generation's seed, the checkpoint of the model, the previous memory).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pandas as pd

from spade_core.config import DesignerConfig, SpadeConfig, skill_kind
from spade_core.designer.corpus import sample_documents
from spade_core.designer.deadline import Clock, call_deadline, generate_within, is_late
from spade_core.designer.design import design_messages, mutation_messages, parameters_messages, truncate_document
from spade_core.designer.memory import Memory
from spade_core.designer.mutation import choose_parent, without_docstring
from spade_core.designer.parameters import parameter_block
from spade_core.designer.prompt_text import multiturn_brief
from spade_core.designer.prompt_tokens import request_prompt_ids
from spade_core.designer.repairs import repair_code
from spade_core.designer.replies import design_id_for, design_row, late_reply
from spade_core.designer.skills import skills_for_generation
from spade_core.envs.contract import env_id_for
from spade_core.envs.seeds import multiturn_example
from spade_core.llm.base import Completion, GenerationRequest, Generator, SamplingParams


@dataclass(frozen=True)
class DesignRun:
    """What the design rows of one generation depend on.

    Attributes:
        cfg: the run's config.
        run_id: the run (part of every ``design_id``).
        gen: the generation.
        seed: the generation's seed (documents, skills and sampling seeds derive from it).
        policy_step: the checkpoint the model's rows come from (their ``policy_step`` column).
        memory: the memory snapshot of generation ``gen - 1``, read on first use.
    """

    cfg: SpadeConfig
    run_id: str
    gen: int
    seed: int
    policy_step: int
    memory: Callable[[], Memory]


class Prompt(NamedTuple):
    """One design prompt: its document (None: no corpus), skill, chat messages and, for a mutation, the
    parent environment's env_id; with ``designer.mode: parameters`` also the parent's code, which the
    reply's parameter values are applied to."""

    doc_id: str | None
    skill: str
    messages: list[dict[str, str]]
    parent_env_id: str | None = None
    parent_code: str | None = None


def prompt_documents(cfg: SpadeConfig, count: int, seed: int) -> pd.DataFrame:
    """``count`` corpus documents for design prompts, sampled with ``seed`` and cut to the longer of the two
    word budgets (a prompt cuts its own to its kind's); none in the 'no corpus' ablation (``corpus.enabled``)."""
    corpus = cfg.corpus
    if not corpus.enabled:
        return pd.DataFrame()
    return sample_documents(
        corpus.source, count, seed, max(corpus.max_words, corpus.max_words_tool), endpoint_url=cfg.store.endpoint_url
    )


def prompt_plan(cfg: DesignerConfig, gen: int) -> list[str]:
    """The skill of each document prompt of generation ``gen``: prompt i gets skill i mod n."""
    skills = skills_for_generation(gen, cfg)
    return [skills[i % len(skills)] for i in range(cfg.documents_per_generation)]


def prompt_for(cfg: SpadeConfig, skill: str, doc: Any | None, memory: Memory, rng: random.Random) -> Prompt:
    """The design prompt for ``skill`` on document ``doc`` (a ``documents`` row, or None: no corpus)."""
    if doc is None:
        return prompt_from_text(cfg, skill, None, None, memory, rng)
    return prompt_from_text(cfg, skill, str(doc.doc_id), str(doc.text), memory, rng)


def prompt_from_text(
    cfg: SpadeConfig, skill: str, doc_id: str | None, text: str | None, memory: Memory, rng: random.Random
) -> Prompt:
    """The design prompt for ``skill`` on a document's ``text`` (cut to the kind's word budget; None: no
    document): written anew with memory examples, or with ``designer.mode: mutate`` a variant of a parent
    environment, or with ``parameters`` new values for a parent's parameters (``spade design`` builds its
    prompt here too)."""
    if text is not None:
        text = truncate_document(
            text, cfg.corpus.max_words_tool if skill_kind(skill) == "tool" else cfg.corpus.max_words
        )
    if cfg.designer.mode == "mutate":
        parent = choose_parent(memory, skill, rng, parents=cfg.designer.parents)
        code = without_docstring(parent.code)
        messages = mutation_messages(
            text, skill, cfg.designer.difficulty, code, parent.win_rate, cfg.designer.system_prompt
        )
        return Prompt(doc_id, skill, messages, parent.env_id)
    if cfg.designer.mode == "parameters":
        parent = choose_parent(memory, skill, rng, parameters=True, parents=cfg.designer.parents)
        messages = parameters_messages(text, parameter_block(parent.code))
        return Prompt(doc_id, skill, messages, parent.env_id, parent.code)
    positives = memory.positives(skill, cfg.designer.memory_positive, rng)
    negatives = memory.negatives(skill, cfg.designer.memory_negative, rng, cfg.training.steps_per_generation)
    multiturn = cfg.designer.multiturn and skill_kind(skill) == "tool"
    brief = multiturn_brief(multiturn_example(skill), rng) if multiturn else None
    messages = design_messages(
        text,
        skill,
        cfg.designer.difficulty,
        positives,
        negatives,
        brief,
        cfg.designer.system_prompt,
        cfg.designer.user_prompt,
    )
    return Prompt(doc_id, skill, messages)


def sampling(cfg: SpadeConfig, seed: int) -> SamplingParams:
    """The designer's sampling: the model's settings, the designer's budget, behaviour log-probs on."""
    return SamplingParams.from_config(cfg.model, max_new_tokens=cfg.designer.max_new_tokens, seed=seed, logprobs=True)


def with_repairs(row: dict[str, Any], repairs: Sequence[str]) -> dict[str, Any]:
    """``row`` (a :func:`~spade_core.designer.replies.design_row`) with its code repaired before validation:
    ``code`` and ``env_id`` become the repaired code's, ``repairs`` lists the repairs that changed it and
    ``unrepaired_env_id`` is the digest of the code as the model wrote it (schemas: ``designs``).

    >>> row = {"code": "x = random.random()\\n", "env_id": "e"}
    >>> fixed = with_repairs(row, ["fstring_braces", "stdlib_imports"])
    >>> fixed["code"], fixed["repairs"], fixed["unrepaired_env_id"] == env_id_for(row["code"])
    ('import random\\nx = random.random()\\n', ['stdlib_imports'], True)
    >>> with_repairs({"code": None, "env_id": None}, ["stdlib_imports"])["repairs"]
    []
    """
    if row["code"] is None:
        return {**row, "repairs": [], "unrepaired_env_id": None}
    fixed = repair_code(row["code"], repairs)
    return {
        **row,
        "code": fixed.code,
        "env_id": env_id_for(fixed.code),
        "repairs": list(fixed.applied),
        "unrepaired_env_id": fixed.unrepaired_env_id,
    }


def design_request(
    run: DesignRun, generator: Generator, messages: list[dict[str, str]], seed: int | None = None
) -> GenerationRequest:
    """The request of one design prompt, first attempt or retry alike: its messages and, when the backend takes
    token prompts, the ids the designer rendered for them
    (:func:`~spade_core.designer.prompt_tokens.request_prompt_ids`), which the engine continues and the design
    row stores (:func:`reply_row`)."""
    ids = request_prompt_ids(generator, messages, run.cfg.model.enable_thinking)
    return GenerationRequest(messages=messages, prompt_ids=ids, seed=seed)


def reply_row(
    run: DesignRun, completion: Completion, attempt: int, prompt_ids: list[int] | None = None, **design: Any
) -> dict[str, Any]:
    """The ``designs`` row of one reply, first attempt or retry alike: :func:`~spade_core.designer.replies.design_row`
    of its text (``design``: the row's ids, prompt and parent; a reply past its deadline is stored without
    code), its code repaired (:func:`with_repairs`), its ``attempt``, checkpoint, the prompt's token ids as they
    were sent (``prompt_ids``; None: the backend was sent the messages alone), the reply's token ids and
    log-probs."""
    cfg = run.cfg
    row = design_row(
        completion=late_reply(str(completion.error)) if is_late(completion) else completion.text,
        parameters=cfg.designer.mode == "parameters",
        max_items=cfg.designer.max_parameter_items,
        **design,
    )
    return {
        **with_repairs(row, cfg.validation.code_repairs),
        "attempt": attempt,
        "policy_step": run.policy_step,
        "prompt_ids": None if prompt_ids is None else [int(t) for t in prompt_ids],
        "completion_ids": list(completion.token_ids) or None,
        "logprobs": completion.logprobs,
    }


def generate_rows(
    run: DesignRun,
    prompts: list[Prompt],
    ids: list[tuple[str, str]],
    generator: Generator,
    rng: random.Random,
    attempt: int,
    seed: int,
    clock: Clock | None = None,
) -> pd.DataFrame:
    """One ``designs`` row per (prompt, (design_id, group_id)) pair, from one batched model call; a reply not
    back within ``designer.attempt_deadline_s`` (or the time left on the batch's ``clock``) is stored as
    :func:`~spade_core.designer.replies.late_reply`, without code."""
    cfg = run.cfg
    requests = [design_request(run, generator, p.messages, rng.getrandbits(31)) for p in prompts]
    seconds, what = call_deadline(cfg.designer.attempt_deadline_s, clock)
    completions = generate_within(generator, requests, sampling(cfg, seed), seconds, what)
    rows = [
        reply_row(
            run,
            completion,
            attempt,
            request.prompt_ids,
            design_id=design_id,
            doc_id=prompt.doc_id,
            group_id=group_id,
            skill=prompt.skill,
            messages=prompt.messages,
            model_ref=generator.model_ref,
            parent_env_id=prompt.parent_env_id,
            parent_code=prompt.parent_code,
        )
        for prompt, request, (design_id, group_id), completion in zip(prompts, requests, ids, completions, strict=True)
    ]
    return pd.DataFrame(rows)


def design_batch(
    run: DesignRun, documents: pd.DataFrame, generator: Generator, memory: Memory, clock: Clock | None = None
) -> pd.DataFrame:
    """The first attempt (``attempt`` 0) of every design prompt, G replies each, as ``designs`` rows.
    ``clock``: the batch's (``designer.batch_deadline_s``), whose time left bounds the call."""
    rng = random.Random(run.seed)
    group = run.cfg.designer.group_size
    prompts: list[Prompt] = []
    ids: list[tuple[str, str]] = []
    for p, skill in enumerate(prompt_plan(run.cfg.designer, run.gen)):
        doc = documents.iloc[p % len(documents)] if not documents.empty else None
        prompt = prompt_for(run.cfg, skill, doc, memory, rng)
        group_id = design_id_for(run.run_id, run.gen, prompt.doc_id, skill, -1 - p)
        for g in range(group):
            prompts.append(prompt)
            ids.append((design_id_for(run.run_id, run.gen, prompt.doc_id, skill, p * group + g), group_id))
    return generate_rows(run, prompts, ids, generator, rng, attempt=0, seed=run.seed, clock=clock)
