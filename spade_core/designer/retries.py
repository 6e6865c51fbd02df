"""Validation with retries (docs/DESIGN.md §7 step 4): designs in the jail; a failed prompt is retried.

A design prompt has ``designer.max_attempts`` attempts: after a failed one, the next is a repair (the first
``designer.repair_rounds`` retries: the error is fed back to the model) or a fresh design of the same skill
from a fresh document (the authors' retry). Every retry is a new ``designs`` row of its own (same
``design_id``, ``attempt`` = its number), its document a ``documents`` row and its verdict a new
``validations`` row, so nothing written before is ever rewritten. The verdict of a design is the one of its
highest attempt (:func:`spade_core.store.verdicts.final_designs`); failed attempts are never trained on.
Every attempt's code was repaired before it is validated here (``validation.code_repairs``; the ``repairs``
column of its design row says which repairs changed it). With ``validation.llm_validator`` the model then
judges every tool-use design that passed (:mod:`spade_core.designer.llm_validator`); its verdict and
reasoning go into the validation row, and a ``no`` makes the attempt ``unsolvable``, retried as any failed
attempt. ``validation.reset_gate`` is off in generation 1, as the authors'.

Deadlines (the authors' limits, settings; None: none): a reply past ``designer.attempt_deadline_s`` and a
judgement past ``validation.llm_validator_deadline_s`` fail their attempt with ``error_type`` ``deadline``
(retried as any failed attempt); a batch whose designs run past ``designer.batch_deadline_s`` starts no more
retries and loses every design of its own (:func:`lose_batch`; theirs lose the whole batch of 24).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pandas as pd

from spade_core.config import sampling_cut
from spade_core.designer.batch import (
    DesignRun,
    design_request,
    generate_rows,
    prompt_documents,
    prompt_for,
    reply_row,
)
from spade_core.designer.deadline import DEADLINE, Clock, call_deadline, generate_within
from spade_core.designer.design import REPAIR_MODULE, REPAIR_PARAMETERS, repair_messages
from spade_core.designer.llm_validator import judge
from spade_core.designer.mutation import parent_codes
from spade_core.designer.parameters import ParameterError, make_variant
from spade_core.designer.replies import LATE_REPLY, is_late_reply
from spade_core.envs.validate import validate_many
from spade_core.hashing import short_hash
from spade_core.llm.base import Generator, SamplingParams


def validation_rows(run: DesignRun, designs: pd.DataFrame, generator: Generator | None = None) -> list[dict[str, Any]]:
    """One ``validations`` row per design row (a reply without code is a ``syntax_error``); with
    ``validation.llm_validator`` and a ``generator``, the tool-use designs that passed are judged too."""
    with_code = designs[designs["code"].notna()]
    cfg = run.cfg.validation
    if run.gen == 1:  # the authors gate from the second pool on (rollout_id > 0, orchestrator.py:1139-1153)
        cfg = cfg.model_copy(update={"reset_gate": False})
    results = validate_many(list(with_code["code"]), cfg)
    by_index = {i: r.as_row() for i, r in zip(with_code.index, results, strict=True)}
    if cfg.llm_validator and generator is not None:
        judged = [i for i, r in zip(with_code.index, results, strict=True) if r.ok and r.kind == "tool"]
        judge_designs(run, [by_index[i] for i in judged], [str(designs.at[i, "code"]) for i in judged], generator)
    parameters = run.cfg.designer.mode == "parameters"
    parents = (
        parent_codes(run.memory(), run.cfg.designer.parents) if parameters and len(with_code) < len(designs) else {}
    )
    max_items = run.cfg.designer.max_parameter_items
    rows = []
    for i, d in designs.iterrows():
        error_type, message = "syntax_error", "no ```python block in the reply"
        if is_late_reply(d.get("completion"), d.get("completion_ids")):  # no reply by its deadline
            error_type, message = DEADLINE, str(d["completion"]).removeprefix(LATE_REPLY)
        elif parameters and i not in by_index:  # why the reply made no variant: the parameters mode's own class
            error_type, message = variant_failure(parents.get(str(d.get("parent_env_id"))), d, max_items)
        row = by_index.get(i) or {
            "env_id": None,
            "ok": False,
            "error_type": error_type,
            "message": message,
            "checks": {},
            "seconds": 0.0,
        }
        rows.append({"design_id": d["design_id"], "attempt": int(d["attempt"]), **row})
    return rows


def variant_failure(parent_code: str | None, design: Any, max_items: int) -> tuple[str, str]:
    """``(error_type, message)`` of a parameters-mode design that has no code: its parent is unknown, a value
    is beyond the bounds, the reply sets no parameter, or the variant does not parse (``max_items``:
    ``designer.max_parameter_items``)."""
    try:
        make_variant(parent_code, str(design.get("completion") or ""), max_items)
    except ParameterError as exc:
        return exc.error_type, str(exc)
    return "syntax_error", "the reply made no variant of its parent"


def judge_designs(run: DesignRun, rows: list[dict[str, Any]], codes: list[str], generator: Generator) -> None:
    """The LLM validator on designs that passed (:mod:`spade_core.designer.llm_validator`), in place on their
    validation ``rows``: the verdict and reasoning, and a ``no`` turns the row into an ``unsolvable``."""
    cfg = run.cfg.validation
    params = SamplingParams.from_config(
        run.cfg.model,
        temperature=cfg.llm_validator_temperature,
        max_new_tokens=cfg.llm_validator_max_new_tokens,
        seed=run.seed,
        **sampling_cut(run.cfg.model, cfg.llm_validator_top_p, cfg.llm_validator_top_k),
    )
    for row, judgement in zip(rows, judge(generator, codes, params, cfg.llm_validator_deadline_s), strict=True):
        row["llm_verdict"], row["llm_reason"] = judgement.verdict, judgement.reason
        row["checks"] = {**row["checks"], "llm_validator": judgement.keep}
        if judgement.verdict == DEADLINE:  # the authors' 120 s: a judgement not back rejects the design
            row.update(ok=False, error_type=DEADLINE, message=f"llm_validator: {judgement.reason}")
        elif not judgement.keep:
            last_line = judgement.reason.strip().splitlines()[-1][:300] if judgement.reason.strip() else ""
            row.update(ok=False, error_type="unsolvable", message=f"llm_validator: judged impossible: {last_line}")


def repair(
    run: DesignRun,
    failed: pd.DataFrame,
    verdicts: list[dict[str, Any]],
    generator: Generator,
    attempt: int,
    clock: Clock | None = None,
) -> pd.DataFrame:
    """The repaired replies of ``failed`` designs as new design rows with ``attempt`` (each within the design
    deadlines, as :func:`~spade_core.designer.batch.generate_rows`); a row's ``prompt`` is the repair
    conversation its reply was sampled from (the design prompt, the failed reply, the error), as its
    ``prompt_ids``."""
    cfg = run.cfg
    params = SamplingParams.from_config(
        cfg.model, max_new_tokens=cfg.designer.max_new_tokens, seed=run.seed + attempt, logprobs=True
    )
    parameters = cfg.designer.mode == "parameters"
    parents = parent_codes(run.memory(), cfg.designer.parents) if parameters else {}
    ask = REPAIR_PARAMETERS if parameters else REPAIR_MODULE
    failed = failed.astype(object).where(failed.notna(), None)  # a null read back as NaN stays null in its row
    requests = [
        design_request(
            run,
            generator,
            repair_messages(
                repaired_prompt(d.prompt, int(d.attempt)), d.completion, v["error_type"], v["message"] or "", ask
            ),
        )
        for d, v in zip(failed.itertuples(), verdicts, strict=True)
    ]
    seconds, what = call_deadline(cfg.designer.attempt_deadline_s, clock)
    replies = generate_within(generator, requests, params, seconds, what)
    rows = [
        reply_row(
            run,
            reply,
            attempt,
            request.prompt_ids,
            design_id=d.design_id,
            doc_id=d.doc_id,
            group_id=d.group_id,
            skill=d.skill,
            messages=request.messages,
            model_ref=d.model_ref,
            parent_env_id=getattr(d, "parent_env_id", None),
            parent_code=parents.get(str(getattr(d, "parent_env_id", None))) if parameters else None,
        )
        for d, request, reply in zip(failed.itertuples(), requests, replies, strict=True)
    ]
    return pd.DataFrame(rows)


def repaired_prompt(prompt: str, attempt: int) -> list[dict[str, str]]:
    """The design prompt a repair of a failed attempt is built on, from that attempt's stored ``prompt``: a first
    attempt's messages, or those a repair (``attempt`` >= 1: the repairs are the first retries) was built on, its
    stored conversation less the failed reply and error it added. A repair row stores its whole conversation,
    which is the prompt its reply was sampled from and is trained on.

    >>> first = [{"role": "user", "content": "design"}]
    >>> repair = [*first, {"role": "assistant", "content": "x = ("}, {"role": "user", "content": "failed"}]
    >>> repaired_prompt(json.dumps(first), 0) == first, repaired_prompt(json.dumps(repair), 1) == first
    (True, True)
    """
    messages: list[dict[str, str]] = json.loads(prompt)
    return messages[:-2] if attempt >= 1 else messages


def fresh_documents(run: DesignRun, count: int, shard: int, attempt: int) -> pd.DataFrame:
    """``count`` documents for the retries of ``attempt`` in ``shard`` (seeded: a rerun samples the same)."""
    if count == 0:
        return pd.DataFrame()
    return prompt_documents(run.cfg, count, int(short_hash(f"{run.seed}:retry:{shard}:{attempt}"), 16) % (2**31))


def redesign(
    run: DesignRun, failed: pd.DataFrame, generator: Generator, shard: int, attempt: int, clock: Clock | None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fresh designs of the ``failed`` designs' skills on fresh documents: (design rows, the documents)."""
    documents = fresh_documents(run, len(failed), shard, attempt)
    rng = random.Random(f"{run.seed}:{shard}:{attempt}")
    memory = run.memory()
    prompts = [
        prompt_for(
            run.cfg, str(d.skill), documents.iloc[i % len(documents)] if not documents.empty else None, memory, rng
        )
        for i, d in enumerate(failed.itertuples())
    ]
    ids = [(str(d.design_id), str(d.group_id)) for d in failed.itertuples()]
    seed = run.seed + 1000 * attempt + shard
    return generate_rows(run, prompts, ids, generator, rng, attempt, seed, clock), documents


def validate_with_retries(
    run: DesignRun,
    designs: pd.DataFrame,
    shard: int,
    generator: Generator | None = None,
    clock: Clock | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Validate ``designs``, retry the failed ones (repairs, then fresh designs; ``shard`` seeds their
    documents) until valid or out of ``designer.max_attempts``. Returns (the retried design rows, every
    validation row, the retries' fresh documents); writes nothing.

    ``clock``: the batch's (``designer.batch_deadline_s``). No retry starts once it has passed, and when it has
    passed by the end every design's last verdict becomes a ``deadline`` (:func:`lose_batch`): the authors
    lose the whole batch at its limit."""
    rows = validation_rows(run, designs, generator)
    current = designs.reset_index(drop=True).to_dict("records")  # the newest attempt of each design
    latest = list(rows)  # the newest verdict of each design in ``current``
    retried: list[pd.DataFrame] = []
    documents: list[pd.DataFrame] = []
    attempts = run.cfg.designer.max_attempts if generator is not None else 1
    for attempt in range(1, attempts):
        failed = [i for i, r in enumerate(latest) if not r["ok"]]
        if not failed or generator is None or (clock is not None and clock.passed()):
            break
        todo = pd.DataFrame([current[i] for i in failed])
        if attempt <= run.cfg.designer.repair_rounds:
            fixes = repair(run, todo, [latest[i] for i in failed], generator, attempt, clock)
        else:
            fixes, docs = redesign(run, todo, generator, shard, attempt, clock)
            documents.append(docs)
        verdicts = validation_rows(run, fixes, generator)  # only the retried designs are validated again
        retried.append(fixes)
        rows += verdicts
        for i, fix, verdict in zip(failed, fixes.to_dict("records"), verdicts, strict=True):
            current[i] = fix
            latest[i] = verdict
    if clock is not None and clock.passed():
        lose_batch(rows, float(clock.seconds or 0.0))
    retries = pd.concat(retried, ignore_index=True) if retried else pd.DataFrame()
    fresh = [d for d in documents if not d.empty]
    return retries, pd.DataFrame(rows), pd.concat(fresh, ignore_index=True) if fresh else pd.DataFrame()


def lose_batch(rows: list[dict[str, Any]], seconds: float) -> None:
    """In place: the last verdict of every design in ``rows`` becomes a ``deadline`` (the batch ran past
    ``designer.batch_deadline_s``), valid ones included, as the authors' batch yields nothing at its limit
    (``spade/core/orchestrator.py:1459-1475``); the checks it passed stay on the row.

    >>> rows = [{"design_id": "a", "attempt": 0, "ok": False}, {"design_id": "a", "attempt": 1, "ok": True}]
    >>> lose_batch(rows, 900.0)
    >>> [(r["attempt"], r["ok"], r.get("error_type")) for r in rows]
    [(0, False, None), (1, False, 'deadline')]
    """
    last: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["design_id"] not in last or int(row["attempt"]) >= int(last[row["design_id"]]["attempt"]):
            last[row["design_id"]] = row
    for row in last.values():
        row.update(
            ok=False,
            error_type=DEADLINE,
            message=f"the design batch ran past designer.batch_deadline_s ({seconds:g} s)",
        )
