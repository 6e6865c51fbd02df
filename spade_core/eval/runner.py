"""Run held-out suites against a model: batched greedy generation, multi-turn episodes where a suite has
them, scoring, and rows of the ``evals`` table (docs/DESIGN.md §9).

A failed model call or a reply that cannot be scored becomes a row with score 0 (its ``response`` says
``[model_error] ...`` for the former); one bad item never stops the evaluation.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from spade_core.eval.base import EvalItem, FollowUp, Message, SimulatedTurn, Suite
from spade_core.eval.registry import resolve_suites
from spade_core.llm import make_generator
from spade_core.llm.base import Completion, GenerationRequest, Generator, ModelError, SamplingParams
from spade_core.steps import first_step
from spade_core.store.checkpoints import model_path_for_checkpoint
from spade_core.store.schemas import SCHEMAS

log = logging.getLogger(__name__)
COLUMNS: list[str] = list(SCHEMAS["evals"].names)
MAX_ROUNDS = 200  # generation rounds per episode, a backstop behind each suite's own turn and step limits


@dataclass
class _Episode:
    item: EvalItem
    messages: list[Message]
    state: dict[str, Any]
    replies: list[str] = field(default_factory=list)
    error: str | None = None
    simulated: SimulatedTurn | None = None  # the next generation is this turn of the other role


def _generate(generator: Generator, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
    """One batched call; if the whole batch fails, each request alone, so one bad prompt costs one item."""
    try:
        out = generator.generate(requests, params)
        if len(out) == len(requests):
            return out
        raise ModelError(f"generator returned {len(out)} completions for {len(requests)} requests")
    except Exception as exc:
        if len(requests) == 1:
            return [Completion(text="", error=f"{type(exc).__name__}: {str(exc)[:300]}")]
        log.warning("eval batch of %d failed (%s); retrying one by one", len(requests), exc)
        return [c for r in requests for c in _generate(generator, [r], params)]


def _score_safely(suite: Suite, items: list[EvalItem], responses: list[str]) -> list[tuple[float, bool, str | None]]:
    """(score, passed, error_type) per item: the suite's ``verdicts`` where it has them (BFCL's checker names
    why an item failed), else its ``score_many``; a scoring failure is a failed item
    (``scoring_error:<exception>``), retried item by item so one bad item costs only itself."""
    try:
        verdicts = getattr(suite, "verdicts", None)
        if verdicts is not None:
            return [(v.score, v.passed, None if v.passed else v.error_type) for v in verdicts(items, responses)]
        return [(score, passed, None) for score, passed in suite.score_many(items, responses)]
    except Exception as exc:
        if len(items) == 1:
            log.warning("scoring %s failed: %s", items[0].item_id, exc)
            return [(0.0, False, f"scoring_error:{type(exc).__name__}")]
        pairs = zip(items, responses, strict=True)
        return [s for item, response in pairs for s in _score_safely(suite, [item], [response])]


def _follow_up(
    suite: Suite, method: Callable[..., Sequence[FollowUp]], episodes: list[_Episode], replies: Sequence[Any]
) -> list[FollowUp]:
    """``method`` (a follow-up of ``suite``) for ``episodes``; a broken one ends them (their replies so far
    are scored)."""
    if not episodes:
        return []
    try:
        out = list(method([ep.item for ep in episodes], replies, [ep.state for ep in episodes]))
        if len(out) == len(episodes):
            return out
        raise ValueError(f"{len(out)} follow-ups for {len(episodes)} episodes")
    except Exception as exc:
        log.warning("%s %s failed: %s", suite.name, method.__name__, exc)
        return [None] * len(episodes)


def run_episodes(
    generator: Generator, suite: Suite, items: list[EvalItem], params: SamplingParams
) -> list[tuple[str | None, str | None]]:
    """Play every item to its end, all live episodes in one generation call per round (an episode's round
    is the agent's reply, or the reply of the role a :class:`SimulatedTurn` asks for).

    Returns, per item, ``(response, error)``: the suite's final response, or the model error that ended it.
    """
    episodes = [_Episode(item, list(item.messages), suite.new_state(item)) for item in items]
    for ep in episodes:
        ep.simulated = suite.first_turn(ep.item, ep.state)
    live = episodes
    for _ in range(MAX_ROUNDS):
        if not live:
            break
        requests = [
            GenerationRequest(messages=list(ep.simulated.messages if ep.simulated else ep.messages)) for ep in live
        ]
        completions = _generate(generator, requests, params)
        answered, simulated, texts = [], [], []
        for ep, completion in zip(live, completions, strict=True):
            if completion.error is not None:
                ep.error = completion.error
            elif ep.simulated is not None:
                simulated.append(ep)
                texts.append(completion.text)
            else:
                ep.replies.append(completion.text)
                ep.messages.append({"role": "assistant", "content": completion.text})
                answered.append(ep)
        follow = _follow_up(suite, suite.follow_up_many, answered, [ep.replies for ep in answered])
        follow += _follow_up(suite, suite.simulated_reply_many, simulated, texts)
        live = []
        for ep, step in zip([*answered, *simulated], follow, strict=True):
            ep.simulated = step if isinstance(step, SimulatedTurn) else None
            if ep.simulated is not None or step:
                ep.messages.extend(step if isinstance(step, list) else [])
                live.append(ep)
    out: list[tuple[str | None, str | None]] = []
    for ep in episodes:
        if ep.error is not None:
            out.append((None, ep.error))
            continue
        try:
            out.append((suite.final_response(ep.item, ep.replies, ep.state), None))
        except Exception as exc:
            out.append(("", f"final response failed: {exc}"))
    return out


def evaluate_suite(
    generator: Generator,
    suite: Suite,
    items: list[EvalItem],
    checkpoint: str,
    *,
    max_new_tokens: int | None = None,
    seed: int | None = None,
    chunk_size: int = 32,
    on_progress: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Generate (greedy, or with the suite's own sampling) and score ``items`` of one suite in chunks; one
    ``evals`` row per item."""
    tokens = max_new_tokens or suite.max_new_tokens
    params = SamplingParams(
        temperature=suite.temperature, top_p=suite.top_p, top_k=suite.top_k, max_new_tokens=tokens, seed=seed
    )
    rows: list[dict[str, Any]] = []
    for start in range(0, len(items), chunk_size):
        chunk = items[start : start + chunk_size]
        played = run_episodes(generator, suite, chunk, params)
        scored = [(item, response) for item, (response, error) in zip(chunk, played, strict=True) if error is None]
        scores = iter(_score_safely(suite, [i for i, _ in scored], [r or "" for _, r in scored]))
        for item, (response, error) in zip(chunk, played, strict=True):
            score, passed, error_type = (0.0, False, "model_error") if error is not None else next(scores)
            rows.append(
                {
                    "suite": suite.name,
                    "item_id": item.item_id,
                    "checkpoint": checkpoint,
                    "score": float(score),
                    "passed": bool(passed),
                    "response": response if error is None else f"[model_error] {error}",
                    "error_type": error_type,
                }
            )
        if on_progress is not None:
            on_progress(len(chunk))
    return pd.DataFrame(rows, columns=COLUMNS)


def evaluate(
    generator: Generator,
    suite_names: Sequence[str | Suite],
    limit: int,
    seed: int,
    checkpoint: str,
    *,
    max_new_tokens: int | None = None,
    chunk_size: int | None = None,
    progress: bool = False,
    suite_limits: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """Evaluate ``generator`` on each suite (a registry name or a :class:`Suite`); rows of ``evals``.

    Args:
        generator: any backend of the ``Generator`` protocol; decoding is greedy (temperature 0) unless a
            suite samples as its benchmark does (``reasoning_gym_hard``).
        suite_names: names from ``spade_core.eval.SUITES`` or suite instances.
        limit: items per suite; seed: held-out item selection seed.
        checkpoint: the value of the ``checkpoint`` column (a path, a model name, ``run/gen``).
        max_new_tokens: tokens per reply; None keeps each suite's default.
        chunk_size: items generated and scored together (default: the generator's batch size, at least 16).
        progress: show a progress bar per suite (rich).
        suite_limits: items of the suites named, in place of ``limit`` (``evaluation.suite_limits``).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    suites = resolve_suites(suite_names)
    chunk = chunk_size or max(16, int(getattr(generator, "batch_size", 32)))
    frames = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not progress, transient=False) as bar:
        for suite in suites:
            items = suite.items((suite_limits or {}).get(suite.name, limit), seed)
            task = bar.add_task(f"eval {suite.name}", total=len(items))
            frames.append(
                evaluate_suite(
                    generator,
                    suite,
                    items,
                    checkpoint,
                    max_new_tokens=max_new_tokens,
                    seed=seed,
                    chunk_size=chunk,
                    on_progress=functools.partial(bar.advance, task),
                )
            )
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Per suite (and per run / generation / checkpoint when present): items, pass@1 and mean score.

    >>> rows = pd.DataFrame({"suite": ["a", "a", "b"], "score": [1.0, 0.5, 0.0], "passed": [True, False, False]})
    >>> summarize(rows).to_dict("records")  # doctest: +NORMALIZE_WHITESPACE
    [{'suite': 'a', 'items': 2, 'pass@1': 0.5, 'mean_score': 0.75},
     {'suite': 'b', 'items': 1, 'pass@1': 0.0, 'mean_score': 0.0}]
    """
    keys = [c for c in ("run_id", "gen", "checkpoint") if c in frame.columns and frame[c].nunique() > 1] + ["suite"]
    if frame.empty:
        return pd.DataFrame(columns=[*keys, "items", "pass@1", "mean_score"])
    passed = frame["passed"].fillna(False).astype(bool)
    grouped = frame.assign(_passed=passed).groupby(keys, sort=True)
    out = grouped.agg(items=("score", "size"), **{"pass@1": ("_passed", "mean")}, mean_score=("score", "mean"))
    return out.reset_index()


def evaluate_checkpoint(
    cfg: Any,
    store: Any,
    run_id: str,
    gen: int,
    suites: Sequence[str] | None = None,
    limit: int | None = None,
    generator: Generator | None = None,
    *,
    max_new_tokens: int | None = None,
    progress: bool = False,
    written: list[Any] | None = None,
) -> pd.DataFrame:
    """Evaluate the checkpoint that ends generation ``gen`` of ``run_id`` and write its rows to ``evals``.

    Gen 0 is the base model ``cfg.model.name_or_path``; gen g >= 1 is checkpoint ``g · K`` (the weights after
    the generation's K steps, ``store.checkpoint_dir(run_id, g · K)``), located by
    ``spade_core.store.checkpoints.model_path_for_checkpoint``.
    Rows land at ``run={run_id}/gen={gen}`` with stage ``eval-{suite}``; a rerun replaces them.

    Args:
        suites, limit: default to ``cfg.evaluation.suites`` and ``cfg.evaluation.limit``.
        generator: an already-built generator for that model (else one is built and closed here).
        max_new_tokens: tokens per reply (default ``cfg.evaluation.max_new_tokens`` if set, else per suite).
        written: gets the files written (the evaluate stage lists them in its marker).
    """
    resolved = resolve_suites(list(suites) if suites is not None else list(cfg.evaluation.suites))
    step = first_step(cfg, gen + 1)  # the checkpoint after generation gen's last step: g · K
    checkpoint = str(cfg.model.name_or_path) if gen == 0 else store.checkpoint_dir(run_id, step)
    owned = generator is None
    if generator is None:
        generator = _checkpoint_generator(cfg, store, run_id, step)
    try:
        frame = evaluate(
            generator,
            resolved,
            limit or cfg.evaluation.limit,
            cfg.evaluation.seed,
            checkpoint,
            max_new_tokens=max_new_tokens or getattr(cfg.evaluation, "max_new_tokens", None),
            progress=progress,
            suite_limits=None if limit else cfg.evaluation.suite_limits,  # an explicit limit is for every suite
        )
    finally:
        if owned:
            generator.close()
    for suite in resolved:
        rows = frame[frame["suite"] == suite.name].reset_index(drop=True)
        file = store.write_table("evals", rows, run_id=run_id, gen=gen, stage=f"eval-{suite.name}", shard=0)
        if written is not None:
            written.append(file)
    return frame


def _checkpoint_generator(cfg: Any, store: Any, run_id: str, step: int) -> Generator:

    path = model_path_for_checkpoint(cfg, store, run_id, step)
    return make_generator(
        cfg.model.model_copy(update={"name_or_path": str(path)}), cfg.orchestration.generation_devices
    )
