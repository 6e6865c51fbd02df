"""Advantages and truncated importance-sampling weights, as SPADE trains them (docs/DESIGN.md §7.2).

Formulas (the authors' code: github spade-rl/spade, ``spade/core/utils/trajectory_build.py:80-84`` for the
agent's advantage; Slime's ``--use-tis`` for the weights, defaults ``--tis-clip 2.0 --tis-clip-low 0``)::

    agent advantage   A_i = (r_i - mean(r)) / (std(r) + 1e-8)     over the no-hint plays of ONE environment
                                                                   at ONE step (population std)
    TIS weight        w_t = clamp(exp(logp_train(t) - logp_behaviour(t)), low, high)   per sampled token

SPADE computes the advantages itself and hands them to TRL unchanged (``spade_core.train.step``), so the
group structure TRL assumes (``num_generations`` consecutive rows) never decides what is normalised
with what: a group may have any size and the two roles may mix in any proportion. The TIS weight
multiplies the per-token policy loss; as it is non-negative it can equally scale the advantage of that
token, which is the seam TRL offers (advantages of shape (B, T)).

Pure functions over plain sequences; no model, no torch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

EPS = 1e-8  # the authors' epsilon


def zscore(returns: Sequence[float]) -> list[float]:
    """The z-score of each return within its group (population std, epsilon 1e-8).

    A group whose returns are all equal has advantage 0 for every play (no learning signal).

    >>> [round(a, 6) for a in zscore([1.0, 0.0, 0.0, 1.0])]
    [1.0, -1.0, -1.0, 1.0]
    >>> zscore([0.5, 0.5, 0.5])
    [0.0, 0.0, 0.0]
    >>> zscore([])
    []
    """
    if not returns:
        return []
    mean = sum(returns) / len(returns)
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns))
    return [(r - mean) / (std + EPS) for r in returns]


def group_zscores(groups: Sequence[Hashable], returns: Sequence[float]) -> list[float]:
    """:func:`zscore` within each group, in the input order (``groups[i]`` is the group of ``returns[i]``).

    >>> [round(a, 3) for a in group_zscores(["e1", "e2", "e1", "e2"], [1.0, 0.2, 0.0, 0.2])]
    [1.0, 0.0, -1.0, 0.0]
    """
    if len(groups) != len(returns):
        raise ValueError(f"groups ({len(groups)}) and returns ({len(returns)}) differ in length")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [0.0] * len(returns)
    for idx in members.values():
        for i, a in zip(idx, zscore([float(returns[i]) for i in idx]), strict=True):
            out[i] = a
    return out


def tis_weight(log_ratio: Any, low: float, high: float) -> Any:
    """The truncated importance weight ``clamp(exp(logp_train - logp_behaviour), low, high)`` of sampled
    tokens, from their log-ratio ``logp_train - logp_behaviour``: a float, or a tensor of them (the trainer
    weights a batch's tokens at once, :mod:`spade_core.train.grpo`).

    >>> tis_weight(0.0, 0.0, 2.0)
    1.0
    >>> tis_weight(5.0, 0.0, 2.0)  # the trainer likes the token far more than the sampler did: capped
    2.0
    >>> round(tis_weight(-1.0, 0.0, 2.0), 4)
    0.3679
    >>> import torch
    >>> [round(w, 4) for w in tis_weight(torch.tensor([0.0, 5.0, -1.0]), 0.0, 2.0).tolist()]
    [1.0, 2.0, 0.3679]
    """
    if low > high:
        raise ValueError(f"TIS bounds low={low} > high={high}")
    if isinstance(log_ratio, (int, float)):
        return min(high, max(low, math.exp(log_ratio)))
    return log_ratio.exp().clamp(min=low, max=high)
