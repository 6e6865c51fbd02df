"""The learning-potential state (docs/DESIGN.md §7.2): per-skill fast and slow EMAs of the agent's return.

Formulas (the authors' ``spade/core/learning_potential.py``; paper runs ``--spade-gamma1 0.98
--spade-gamma2 0.85``, ``cmd/games/train_spade_30b.sh``). Each generation feeds one observation per skill
present: r = the play-weighted mean of every window no-hint play of that skill's environments (a skill with
no plays keeps its state). The first observation sets both EMAs to r; after that, with gamma the weight of
the *new* observation (the authors' convention, the reverse of the usual one)::

    mu_fast <- (1 - gamma_fast) * mu_fast + gamma_fast * r       [gamma_fast 0.98]
    mu_slow <- (1 - gamma_slow) * mu_slow + gamma_slow * r       [gamma_slow 0.85]
    raw(e)   = |p(e) - mu_slow(skill of e)|                       p(e): e's window win rate; 0 without plays

The state is a :class:`LearningPotentialState` whose :meth:`~LearningPotentialState.to_frame` is stored once
per generation (``designer_lp_state``), so a resumed run continues the EMAs (the authors keep them in process
memory and lose them on a crash). A skill the state has not seen starts a new tracker; the authors skip a
skill they have no tracker for (they create one per configured skill at start-up, so that does not happen in
their runs).

Pure functions and an immutable state; no store, no model. :mod:`spade_core.method.designer_reward` rewards a
window with it, :mod:`spade_core.method.scoring` a single pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd

DEFAULT_GAMMA_FAST = 0.98  # paper runs: --spade-gamma1 0.98 (the authors' argparse default is 0.99)
DEFAULT_GAMMA_SLOW = 0.85  # paper runs: --spade-gamma2 0.85 (argparse default 0.95)

LP_STATE_COLUMNS = ("skill", "mu_fast", "mu_slow", "count", "gamma_fast", "gamma_slow")


@dataclass(frozen=True)
class SkillEMA:
    """One skill's EMAs after ``count`` >= 1 observations."""

    mu_fast: float
    mu_slow: float
    count: int


@dataclass(frozen=True)
class LearningPotentialState:
    """Per-skill fast/slow EMAs of the agent's window return; immutable, updated by returning a new state.

    ``gamma_*`` is the weight of the new observation (``spade/core/learning_potential.py:18-25``); the authors
    require gamma_fast > gamma_slow. A skill absent from ``skills`` has had no observation.
    """

    gamma_fast: float = DEFAULT_GAMMA_FAST
    gamma_slow: float = DEFAULT_GAMMA_SLOW
    skills: Mapping[str, SkillEMA] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma_slow < self.gamma_fast <= 1.0:
            raise ValueError(
                f"learning potential needs 0 < gamma_slow < gamma_fast <= 1, "
                f"got gamma_fast={self.gamma_fast}, gamma_slow={self.gamma_slow}"
            )
        for skill, ema in self.skills.items():
            if ema.count < 1 or not (np.isfinite(ema.mu_fast) and np.isfinite(ema.mu_slow)):
                raise ValueError(f"skill {skill!r}: EMA state needs count >= 1 and finite means, got {ema}")
        object.__setattr__(self, "skills", MappingProxyType(dict(self.skills)))

    def baseline(self, skill: str) -> float:
        """mu_slow of ``skill``, 0.0 before its first observation (as the authors' ``get_baseline``)."""
        ema = self.skills.get(skill)
        return ema.mu_slow if ema is not None else 0.0

    def update(self, observations: Mapping[str, float]) -> LearningPotentialState:
        """A new state with one observation per skill in ``observations``; other skills are unchanged.

        The first observation of a skill sets both EMAs to it; later ones move each EMA by its gamma.

        >>> s = LearningPotentialState(0.8, 0.2).update({"logic": 0.0}).update({"logic": 0.5})
        >>> round(s.skills["logic"].mu_fast, 12), round(s.skills["logic"].mu_slow, 12), s.skills["logic"].count
        (0.4, 0.1, 2)
        """
        skills = dict(self.skills)
        for skill, r in observations.items():
            r = float(r)
            if not np.isfinite(r):
                raise ValueError(f"skill {skill!r}: observation must be finite, got {r}")
            old = skills.get(skill)
            if old is None:
                skills[skill] = SkillEMA(mu_fast=r, mu_slow=r, count=1)
            else:
                skills[skill] = SkillEMA(
                    mu_fast=(1.0 - self.gamma_fast) * old.mu_fast + self.gamma_fast * r,
                    mu_slow=(1.0 - self.gamma_slow) * old.mu_slow + self.gamma_slow * r,
                    count=old.count + 1,
                )
        return LearningPotentialState(self.gamma_fast, self.gamma_slow, skills)

    def to_frame(self) -> pd.DataFrame:
        """One row per observed skill (columns :data:`LP_STATE_COLUMNS`, sorted by skill), for Parquet."""
        rows = [
            (skill, ema.mu_fast, ema.mu_slow, ema.count, self.gamma_fast, self.gamma_slow)
            for skill, ema in sorted(self.skills.items())
        ]
        frame = pd.DataFrame(rows, columns=list(LP_STATE_COLUMNS))
        return frame.astype(
            {"skill": object, "mu_fast": "float64", "mu_slow": "float64", "count": "int64"}
            | {"gamma_fast": "float64", "gamma_slow": "float64"}
        )

    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        gamma_fast: float = DEFAULT_GAMMA_FAST,
        gamma_slow: float = DEFAULT_GAMMA_SLOW,
    ) -> LearningPotentialState:
        """The state stored by :meth:`to_frame`; an empty frame is the fresh state of a first generation.

        The gammas are the run's; rows stored under other gammas are an error (a resumed run must not
        silently continue EMAs built with different weights).
        """
        missing = [c for c in LP_STATE_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"learning-potential state frame lacks column(s) {missing}")
        repeated = frame["skill"][frame["skill"].duplicated()]
        if len(repeated):
            raise ValueError(f"learning-potential state repeats skill(s) {sorted(set(repeated))}")
        stored = {(float(f), float(s)) for f, s in zip(frame["gamma_fast"], frame["gamma_slow"], strict=True)}
        if stored - {(float(gamma_fast), float(gamma_slow))}:
            raise ValueError(
                f"learning-potential state was built with (gamma_fast, gamma_slow) {sorted(stored)}, "
                f"not the run's ({gamma_fast}, {gamma_slow})"
            )
        skills = {
            str(skill): SkillEMA(mu_fast=float(fast), mu_slow=float(slow), count=int(count))
            for skill, fast, slow, count in zip(
                frame["skill"], frame["mu_fast"], frame["mu_slow"], frame["count"], strict=True
            )
        }
        return cls(gamma_fast, gamma_slow, skills)


def _plays(n_plays: Sequence[int] | np.ndarray | None, n: int) -> np.ndarray:
    if n_plays is None:
        return np.ones(n, dtype=np.int64)
    counts = np.asarray(n_plays)
    if counts.shape != (n,) or (counts < 0).any():
        raise ValueError(f"n_plays needs {n} counts >= 0")
    return counts.astype(np.int64)


def skill_window_means(
    win_rates: Sequence[float] | np.ndarray,
    skills: Sequence[str],
    n_plays: Sequence[int] | np.ndarray | None = None,
) -> dict[str, float]:
    """Per skill, the mean of every window play of its environments (play-weighted by ``n_plays``).

    ``n_plays=None`` weighs environments equally. Skills whose environments have no plays are absent, as the
    authors update a tracker only when its skill has plays (``delayed_env_rewards.py:128-140``).

    >>> skill_window_means([1.0, 0.0], ["a", "a"], n_plays=[3, 1])
    {'a': 0.75}
    """
    rates = np.asarray(win_rates, dtype=float)
    counts = _plays(n_plays, len(rates))
    if len(skills) != len(rates):
        raise ValueError(f"{len(rates)} win rates but {len(skills)} skills")
    totals: dict[str, list[float]] = {}
    for skill, p, n in zip(skills, rates, counts, strict=True):
        if n > 0:
            acc = totals.setdefault(skill, [0.0, 0.0])
            acc[0] += float(p) * int(n)
            acc[1] += int(n)
    return {skill: s / n for skill, (s, n) in totals.items()}


def learning_potential_raw(
    win_rates: Sequence[float] | np.ndarray,
    skills: Sequence[str],
    state: LearningPotentialState,
    n_plays: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """|win rate - mu_slow(skill)| under ``state`` as given (no update); 0.0 for an environment without plays.

    >>> s = LearningPotentialState(0.8, 0.2).update({"a": 0.5})
    >>> learning_potential_raw([0.2, 1.0, 0.9], ["a", "a", "a"], s, n_plays=[2, 2, 0]).round(12).tolist()
    [0.3, 0.5, 0.0]
    """
    rates = np.asarray(win_rates, dtype=float)
    counts = _plays(n_plays, len(rates))
    if len(skills) != len(rates):
        raise ValueError(f"{len(rates)} win rates but {len(skills)} skills")
    baselines = np.array([state.baseline(skill) for skill in skills], dtype=float)
    return np.where(counts > 0, np.abs(rates - baselines), 0.0)


def learning_potential_update(
    win_rates: Sequence[float] | np.ndarray,
    skills: Sequence[str],
    state: LearningPotentialState,
    n_plays: Sequence[int] | np.ndarray | None = None,
) -> tuple[np.ndarray, LearningPotentialState]:
    """(raw rewards, new state): feed each skill's window mean to its EMAs, then read the new mu_slow.

    The update comes first, so the raws see this window's baseline (the authors' delayed learning-potential
    mode, ``delayed_env_rewards.py:128-169``, with the per-step updates switched off). Pure: ``state`` is
    unchanged; store the returned state's :meth:`~LearningPotentialState.to_frame` with the generation.
    """
    new_state = state.update(skill_window_means(win_rates, skills, n_plays))
    return learning_potential_raw(win_rates, skills, new_state, n_plays), new_state
