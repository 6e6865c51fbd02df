"""The plays of a step (docs/DESIGN.md §7 step 6): which episodes an environment gets, with which seeds.

Every no-hint play (``rollout.plays_no_hint`` [8] per environment, or ceil(G / pool size) with
``training.global_batch_size`` G: :func:`no_hint_plays`) starts from a fresh seed of its own (:func:`play_seed`),
so the plays of one environment are different instances; at step 0 only, ``rollout.plays_hint`` [16] hinted
plays (never trained on) measure the regret. With ``designer.top_up_at: steps`` a step also plays the
environments the top-ups of the steps so far added, which have no hint, so no hinted play. Every row carries
the global step of the checkpoint that played it (``policy_step``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from spade_core.config import SpadeConfig
from spade_core.hashing import short_hash
from spade_core.llm.base import Generator, ModelError
from spade_core.play.rollout import EpisodeSpec, RolloutEngine


@dataclass(frozen=True)
class PlayRun:
    """What the plays (and hints) of one stage execution depend on.

    Attributes:
        cfg: the run's config.
        gen: the generation.
        seed: the generation's seed (the hint requests' sampling seeds derive from it).
        step: the step ``k`` within the generation (None: a stage outside the steps, which plays as step 0).
        policy_step: the checkpoint the model's rows come from (their ``policy_step`` column).
    """

    cfg: SpadeConfig
    gen: int
    seed: int
    step: int | None
    policy_step: int


def play_seed(run: PlayRun, env_id: str, condition: str, play: int, step: int | None = None) -> int:
    """The environment seed of one play: fresh per generation, step (default: the run's), environment,
    condition and play, from the config's ``seed``; not from the run id, so two runs on the same seed (an
    ablation beside its trained arm) play the same seeds until their weights part.

    >>> from spade_core.config import load_config
    >>> run = PlayRun(load_config(None), 1, 0, 0, 0)
    >>> play_seed(run, "e", "no_hint", 0) == play_seed(run, "e", "no_hint", 1)
    False
    >>> other = PlayRun(load_config(None, overrides=["seed=1"]), 1, 0, 0, 0)
    >>> play_seed(run, "e", "no_hint", 0) == play_seed(other, "e", "no_hint", 0)
    False
    """
    at = run.step if step is None else step
    key = f"{run.cfg.seed}:{run.gen}:{at or 0}:{env_id}:{condition}:{play}"
    return int(short_hash(key, 8), 16)


def no_hint_plays(cfg: SpadeConfig, pool_size: int) -> int:
    """No-hint plays per environment at every step: ``rollout.plays_no_hint``, or with
    ``training.global_batch_size`` G set, ``ceil(G / pool size)`` as the authors
    (``spade/core/orchestrator.py:2382``), so a pool of fewer environments still fills the batch.

    >>> from spade_core.config import load_config
    >>> cfg = load_config(None, overrides=["training.global_batch_size=192"])
    >>> no_hint_plays(cfg, 24), no_hint_plays(cfg, 20), no_hint_plays(load_config(None), 20)
    (8, 10, 8)
    """
    batch = cfg.training.global_batch_size
    return cfg.rollout.plays_no_hint if batch is None or pool_size < 1 else math.ceil(batch / pool_size)


def plan(run: PlayRun, envs: pd.DataFrame, hints: pd.DataFrame, pool_size: int) -> list[EpisodeSpec]:
    """The plays of ``envs`` at the run's step: no-hint plays always, hinted plays at step 0 (with a hint).
    ``pool_size``: the environments this step plays, for ceil(G / pool size)."""
    cfg = run.cfg.rollout
    hint_of = dict(zip(hints["env_id"], hints["hint"], strict=True)) if not hints.empty else {}
    plays = no_hint_plays(run.cfg, pool_size) if run.cfg.training.global_batch_size else cfg.plays_no_hint
    specs = []
    for e in envs.itertuples():
        specs += [
            EpisodeSpec(e.env_id, e.code, play_seed(run, e.env_id, "no_hint", p), "no_hint", None, p)
            for p in range(plays)
        ]
        hint = hint_of.get(e.env_id) or None
        if hint and not run.step:
            specs += [
                EpisodeSpec(e.env_id, e.code, play_seed(run, e.env_id, "hint", p), "hint", hint, p)
                for p in range(cfg.plays_hint)
            ]
    return specs


def hint_seeds(run: PlayRun, env_id: str) -> list[int]:
    """The seeds of an environment's hinted plays (whose solutions a hint must not leak)."""
    return [play_seed(run, env_id, "hint", p, step=0) for p in range(run.cfg.rollout.plays_hint)]


@dataclass(frozen=True)
class Played:
    """The rows of a rollout and how many of its plays the engine failed (``model_error`` rows, left out of
    scoring and training) or had to start again after a failed model call."""

    frame: pd.DataFrame
    model_errors: int = 0
    model_retries: int = 0

    def info(self) -> dict[str, int]:
        return {"model_errors": self.model_errors, "model_retries": self.model_retries}


def check_model_errors(failed: int, plays: int, max_share: float, where: str, example: str | None) -> None:
    """Stop the generation with one line when more than ``max_share`` (``rollout.max_model_error_share``) of a
    rollout's ``plays`` failed in the model call (``failed``, after ``rollout.model_retries``), instead of
    training on what is left; ``example`` is one of the failures' messages.

    >>> check_model_errors(1, 4, 0.25, "step 0", "HTTP 500")
    >>> check_model_errors(1, 4, 0.2, "step 0", "HTTP 500")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spade_core.llm.base.ModelError: 1 of 4 plays at step 0 failed in the model call (25% > ...0.2), e.g. HTTP 500; ...
    """
    if plays and failed / plays > max_share:
        text = (example or "no message").splitlines()[0][:200] if (example or "").strip() else "no message"
        raise ModelError(
            f"{failed} of {plays} plays at {where} failed in the model call ({failed / plays:.0%} > "
            f"rollout.max_model_error_share {max_share:g}), e.g. {text}; see the engine's log under "
            "$SPADE_CACHE/servers, then spade resume"
        )


def rollouts(run: PlayRun, envs: pd.DataFrame, hints: pd.DataFrame, generator: Generator, pool_size: int) -> Played:
    """Every planned play of ``envs`` in one engine run, with the run's ``policy_step``.

    Raises:
        ModelError: too many plays failed in the model call (:func:`check_model_errors`).
    """
    specs = plan(run, envs, hints, pool_size)
    if not specs:
        return Played(pd.DataFrame())
    engine = RolloutEngine.from_config(run.cfg, generator)
    frame = pd.DataFrame(engine.run(specs))
    if "logprobs" not in frame.columns:
        frame["logprobs"] = None  # a backend without log-probs: TIS leaves these samples unweighted
    frame["policy_step"] = run.policy_step
    failed = engine.stats.errors.get("model_error", 0)
    where = f"generation {run.gen} step {run.step or 0}"
    example = engine.stats.messages.get("model_error")
    check_model_errors(failed, len(frame), run.cfg.rollout.max_model_error_share, where, example)
    return Played(frame, failed, engine.stats.model_retries)
