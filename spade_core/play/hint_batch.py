"""The hints of a pool (docs/DESIGN.md §7 step 5): one hint per environment, written by the model from the source.

A hint that contains the solution of a seed the hinted plays will use leaks it. Such a hint is rewritten,
up to ``rollout.hint_rewrites`` [1] times, by a request that quotes what leaked and asks for a hint that
does not give the answer away (:func:`spade_core.play.hints.rewrite_messages`); each round rewrites only the
hints still leaking, in one batched call. The stored hint is the last one, flagged ``leaks_solution`` when
it still leaks: its environment is still played with it (the plays are kept), and scoring gives it no
regret term (``env_scores.hint_leaked``). A rewrite that fails or comes back empty keeps the previous hint.

Every call is seeded (the first call by the generation's seed; rewrite round r by a hash of that seed and r,
and each request by the environment too), so a rerun writes the same hints.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from sandbox.session import EnvSession, run_parallel
from spade_core.config import sampling_cut
from spade_core.envs.validate import limits_from_config
from spade_core.hashing import short_hash
from spade_core.llm.base import GenerationRequest, Generator, SamplingParams
from spade_core.play.hints import hint_messages, hint_row, leaked_values, read_hint, rewrite_messages
from spade_core.play.plays import PlayRun, hint_seeds


def solutions(run: PlayRun, env_id: str, code: str) -> list[str]:
    """Reference solutions of the seeds the hinted plays will use (for leak detection), from the jail."""
    cfg = run.cfg
    out = []
    with EnvSession(
        code,
        max_turns=cfg.rollout.max_turns,
        limits=limits_from_config(cfg.validation),
        call_timeout_s=cfg.validation.call_timeout_s,
        own_max_turns=cfg.rollout.game_max_turns,
        contract=cfg.validation.contract,
    ) as session:
        if session.open().ok:
            for seed in hint_seeds(run, env_id):
                if session.reset(seed).ok and (sol := session.solution()).ok:
                    out.append(str(sol.data["solution"]))
    return out


def hint_sampling(run: PlayRun) -> SamplingParams:
    """Sampling of hint requests: ``rollout.hint_temperature``, ``hint_top_p`` / ``hint_top_k`` (the model's
    when unset; the authors': 0.3, 0.9, no top-k) and ``hint_max_new_tokens`` (2 x hint_max_words unset)."""
    rollout = run.cfg.rollout
    return SamplingParams.from_config(
        run.cfg.model,
        max_new_tokens=rollout.hint_max_new_tokens or max(32, 2 * rollout.hint_max_words),
        temperature=rollout.hint_temperature,
        seed=run.seed + 2,
        **sampling_cut(run.cfg.model, rollout.hint_top_p, rollout.hint_top_k),
    )


def rewrite_seed(run: PlayRun, round_: int, env_id: str = "") -> int:
    """The sampling seed of rewrite round ``round_`` (1-based): of the call, or of one env's request."""
    return int(short_hash(f"{run.seed}:hint-rewrite:{round_}:{env_id}", 8), 16) % (2**31)


def rewrite_leaks(
    run: PlayRun,
    envs: pd.DataFrame,
    texts: list[str],
    solutions: list[list[str]],
    generator: Generator,
    params: SamplingParams,
) -> tuple[list[str], dict[str, int]]:
    """``texts`` with every leaking hint rewritten up to ``rollout.hint_rewrites`` times, and counts:
    ``leaked`` (first hints that leaked), ``rewrites`` (rewrite requests), ``still_leaking`` (final hints)."""
    max_words, style = run.cfg.rollout.hint_max_words, run.cfg.rollout.hint_prompt
    texts = list(texts)
    leaking = {i: found for i, t in enumerate(texts) if (found := leaked_values(t, solutions[i]))}
    counts = {"leaked": len(leaking), "rewrites": 0}
    codes, kinds, ids = list(envs["code"]), list(envs["kind"]), list(envs["env_id"])
    for round_ in range(1, run.cfg.rollout.hint_rewrites + 1):
        if not leaking:
            break
        order = sorted(leaking)
        requests = [
            GenerationRequest(
                messages=rewrite_messages(codes[i], kinds[i], max_words, texts[i], leaking[i], style),
                seed=rewrite_seed(run, round_, ids[i]),
            )
            for i in order
        ]
        replies = generator.generate(requests, replace(params, seed=rewrite_seed(run, round_)))
        counts["rewrites"] += len(requests)
        for i, reply in zip(order, replies, strict=True):
            rewritten = read_hint(reply.text, max_words, style) if reply.error is None else ""
            if rewritten:
                texts[i] = rewritten
        leaking = {i: found for i in order if (found := leaked_values(texts[i], solutions[i]))}
    counts["still_leaking"] = len(leaking)
    return texts, counts


def hints_and_counts(run: PlayRun, envs: pd.DataFrame, generator: Generator) -> tuple[pd.DataFrame, dict[str, int]]:
    """The hint rows of ``envs`` (one batched model call, then one per rewrite round; solutions from parallel
    jails) and the leak counts of :func:`rewrite_leaks`."""
    if envs.empty:
        return pd.DataFrame(), {"leaked": 0, "rewrites": 0, "still_leaking": 0}
    rollout = run.cfg.rollout
    max_words, style = rollout.hint_max_words, rollout.hint_prompt
    requests = [GenerationRequest(messages=hint_messages(e.code, e.kind, max_words, style)) for e in envs.itertuples()]
    params = hint_sampling(run)
    replies = generator.generate(requests, params)
    found = run_parallel(
        lambda env: solutions(run, env[0], env[1]),
        list(zip(envs["env_id"], envs["code"], strict=True)),
        run.cfg.validation.parallel_jails,
    )
    first = [read_hint(r.text, max_words, style) for r in replies]
    texts, counts = rewrite_leaks(run, envs, first, found, generator, params)
    rows = [
        {**hint_row(e.env_id, text, sols, generator.model_ref), "policy_step": run.policy_step}
        for e, text, sols in zip(envs.itertuples(), texts, found, strict=True)
    ]
    return pd.DataFrame(rows), counts
