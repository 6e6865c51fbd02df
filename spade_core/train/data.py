# Over 400 lines: one step's batch end to end: both roles' samples, their advantages, the fill.
"""The batch of one optimizer step, built from the store (docs/DESIGN.md §7.2).

Two roles share one update:

- **agent**: the no-hint episodes this step played, one group per environment; reward = the episode
  return, advantage = its z-score over the plays of that environment at that step
  (:func:`spade_core.method.advantages.group_zscores`). The episode's token ids are the whole conversation; the
  prompt is everything before the agent's first token and the loss mask (``env_mask`` in TRL) is 1 exactly
  on the agent's own tokens, so observations that the environment wrote are never trained on. The
  behaviour log-probs stored with the episode travel with the sample, for truncated importance sampling.
  Plays the environment broke, and plays whose model call failed, are left out; a tool-use play that did not
  terminate keeps its place in the group (return 0) but is masked out of the loss (:func:`agent_samples`).
- **designer**: the valid designs of the generation whose designs are due at this step (trained
  ``designer.training_delay`` steps after that generation's first step); reward = the raw designer
  reward over the generation's window, advantage = that reward centred on its skill's mean and scaled
  (the ``designer_rewards`` table, written by the reward stage). Invalid attempts and dropped designs are
  never samples; a design refused as a copy of its parent is one only with ``scoring.parent_copy_raw`` set.
  A design is trained on the prompt ids the engine was sent and the tokens it sampled, nothing added
  (:func:`designer_samples`). The designer's samples come first in the batch.

SPADE computes every advantage itself (TRL is told not to renormalise, ``spade_core.train.step``), so groups
may have any size and the roles any mix; a group whose advantages are all zero (one play, or equal
returns) is counted as carrying no signal.

Pure functions over frames: no model, no Prefect. ``spade_core.train.step`` feeds the batch to TRL.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from sandbox.outcome import is_left_out
from spade_core.designer.prompt_tokens import first_difference, render_prompt_ids
from spade_core.method.advantages import group_zscores

log = logging.getLogger(__name__)

AGENT = "agent"
DESIGNER = "designer"
# Environment kinds whose plays that did not terminate are masked out of the loss [tool use, as the authors].
MASK_TRUNCATED_KINDS: frozenset[str] = frozenset({"tool"})


@dataclass(frozen=True)
class Sample:
    """One training row: what TRL's ``rollout_func`` returns for it, its reward, advantage and lineage."""

    role: str
    group: str
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]  # 1 = the model's own token (trained on), 0 = environment text
    reward: float
    advantage: float = 0.0
    logprobs: list[float] | None = None  # behaviour log-prob of each completion token (None: unknown)
    source_id: str = ""  # episode_id or design_id
    env_id: str | None = None
    skill: str | None = None
    behaviour_step: int = 0  # the checkpoint that sampled it
    duplicate: bool = False  # a repeat of a real play that fills the batch (training.batch_fill: duplicate, random)

    @property
    def trained_tokens(self) -> int:
        return sum(self.env_mask)


@dataclass
class Batch:
    """The samples of one optimizer step (advantages set) and what was left out."""

    samples_: list[Sample] = field(default_factory=list)
    skipped_episodes: int = 0  # no token ids (a model error before the first turn) or no agent token
    trimmed: int = 0  # samples cut to fit training.global_batch_size

    @property
    def duplicated(self) -> int:
        """Repeats of real plays in the batch (``training.batch_fill: duplicate`` or ``random``)."""
        return sum(s.duplicate for s in self.samples_)

    def samples(self, role: str | None = None) -> list[Sample]:
        return [s for s in self.samples_ if role is None or s.role == role]

    def groups(self, role: str | None = None) -> dict[str, list[Sample]]:
        return _groups(self.samples(role))

    def zero_signal_groups(self, role: str | None = None) -> int:
        """Groups whose advantages are all zero (one member, or equal rewards): no gradient."""
        return sum(1 for g in self.groups(role).values() if all(abs(s.advantage) < 1e-12 for s in g))

    def without_zero_advantage(self) -> tuple[Batch, int]:
        """The batch without its samples whose advantage is 0, and how many those were.

        With no KL term such a sample adds no gradient, only compute (and tokens to the loss's normaliser:
        the update's scale changes, which Adam's per-parameter normalisation all but cancels).

        >>> def play(group, adv, source):
        ...     return Sample("agent", group, [1], [2], [1], 0.0, adv, source_id=source)
        >>> s = [play("g", 1.0, "e1"), play("g", -1.0, "e2"), play("h", 0.0, "e3")]
        >>> kept, dropped = Batch(s).without_zero_advantage()
        >>> [x.source_id for x in kept.samples()], dropped
        (['e1', 'e2'], 1)
        """
        kept = [s for s in self.samples_ if abs(s.advantage) >= 1e-12]
        return Batch(kept, self.skipped_episodes, self.trimmed), len(self.samples_) - len(kept)


def split_episode(token_ids: Iterable[int], loss_mask: Iterable[int]) -> tuple[list[int], list[int], list[int]] | None:
    """Cut an episode into (prompt ids, completion ids, env mask) at the agent's first token.

    >>> split_episode([1, 2, 3, 4, 5, 6], [0, 0, 1, 1, 0, 1])
    ([1, 2], [3, 4, 5, 6], [1, 1, 0, 1])
    >>> split_episode([1, 2], [0, 0]) is None  # the agent never spoke: nothing to train on
    True
    """
    ids, mask = [int(t) for t in token_ids], [int(m) for m in loss_mask]
    if len(ids) != len(mask):
        raise ValueError(f"token_ids ({len(ids)}) and loss_mask ({len(mask)}) differ in length")
    if 1 not in mask:
        return None
    first = mask.index(1)
    return ids[:first], ids[first:], mask[first:]


def _truncated(row: Any) -> bool:
    """Whether a row says the episode did not terminate (``terminated`` False; null or absent: unknown)."""
    value = getattr(row, "terminated", None)
    return value is not None and not pd.isna(value) and not bool(value)


def agent_samples(
    episodes: pd.DataFrame,
    kinds: Mapping[str, str] | None = None,
    mask_truncated: Collection[str] = MASK_TRUNCATED_KINDS,
) -> tuple[list[Sample], int]:
    """No-hint episodes as agent samples grouped per environment, advantages z-scored within each group;
    returns (samples, skipped). ``episodes`` holds the plays of one step.

    Left out and counted in ``skipped``: plays whose ``error_type`` says nothing about the agent
    (:func:`sandbox.outcome.is_left_out`: the environment broke the play, or its model call failed, a
    ``model_error``; such a play is no 0 in its group) and plays with no agent token. A play of an environment
    whose kind is in ``mask_truncated`` [tool use] that did not terminate (``terminated`` False: truncated,
    out of turns or context) stays in its group, so
    its return 0 counts in the z-score, but its ``env_mask`` is all 0: no token of it is trained on (the
    authors' ``--spade-compact-filter``, ``spade/slime/spade_rollout.py:811-818``, on in their tool-use
    runs). The kind of an environment comes from ``kinds`` (env_id -> "game" | "tool", e.g. the pool's
    ``kind`` column) or else from a ``kind`` column of ``episodes``; without either nothing is masked.
    """
    samples: list[Sample] = []
    skipped = 0
    rows = episodes[episodes["condition"] == "no_hint"] if not episodes.empty else episodes
    for row in rows.sort_values(["env_id", "seed", "episode_id"]).itertuples() if not rows.empty else []:
        if is_left_out(getattr(row, "error_type", None)):
            skipped += 1
            continue
        token_ids, loss_mask = row.token_ids, row.loss_mask
        parts = None if token_ids is None or loss_mask is None else split_episode(token_ids, loss_mask)
        if parts is None:
            skipped += 1
            continue
        prompt, completion, mask = parts
        kind = kinds.get(str(row.env_id)) if kinds is not None else getattr(row, "kind", None)
        if kind in mask_truncated and _truncated(row):
            mask = [0] * len(mask)
        reward = float(row.episode_return) if math.isfinite(float(row.episode_return)) else 0.0
        logprobs = getattr(row, "logprobs", None)
        behaviour = None if logprobs is None else [float(x) for x in list(logprobs)[len(prompt) :]]
        samples.append(
            Sample(
                AGENT,
                f"agent:{row.env_id}",
                prompt,
                completion,
                mask,
                reward,
                logprobs=behaviour,
                source_id=str(row.episode_id),
                env_id=str(row.env_id),
                behaviour_step=int(getattr(row, "policy_step", 0)),
            )
        )
    return with_advantages(samples), skipped


def with_advantages(samples: list[Sample]) -> list[Sample]:
    """The samples with ``advantage`` = the z-score of their reward within their group.

    >>> s = [Sample("agent", g, [], [1], [1], r) for g, r in (("a", 1.0), ("a", 0.0), ("b", 0.5))]
    >>> [round(x.advantage, 6) for x in with_advantages(s)]
    [1.0, -1.0, 0.0]
    """
    advantages = group_zscores([s.group for s in samples], [s.reward for s in samples])
    return [replace(s, advantage=a) for s, a in zip(samples, advantages, strict=True)]


def designer_samples(
    designs: pd.DataFrame,
    tokenizer: Any,
    enable_thinking: bool | None = None,
    report: Callable[[str], None] = log.warning,
) -> list[Sample]:
    """Rewarded designs as designer samples (docs/DESIGN.md §7: the designer's windowed, delayed reward).

    ``designs`` holds one row per design to train: its ``designs`` columns (the final, valid attempt) and
    its ``designer_rewards`` columns ``raw`` and ``reward``. The advantage is ``reward`` as the reward stage
    computed it (centred on its skill's mean, scaled): SPADE does not z-score designer samples, so a group of
    one design carries signal.

    The prompt is the ``prompt_ids`` stored with the design, the ids the engine was sent (:func:`design_prompt`);
    a row without them (a text-only backend, an older store) has its chat messages rendered with the chat
    template (``enable_thinking`` passed when the template reads it). A row whose stored ids differ from that
    rendering is not trained: ``report`` gets one line naming it. The completion is exactly the stored
    sampled tokens (the text's tokens when the backend gave none), every one trained (``env_mask`` 1), the
    stored behaviour log-probs aligned with them: a reply cut at the token limit is trained as it was
    sampled, with no end-of-turn token added (:func:`design_completion`). A row with no completion token is
    not trained either.
    """
    if designs.empty:
        return []
    samples = []
    for row in designs.sort_values(["skill", "design_id"]).itertuples():
        prompt_ids = design_prompt(row, tokenizer, enable_thinking, report)
        if prompt_ids is None:
            continue
        completion, behaviour = design_completion(row, tokenizer)
        if not completion:
            report(f"design {row.design_id} (env {getattr(row, 'env_id', None)}): no completion token, not trained")
            continue
        samples.append(
            Sample(
                DESIGNER,
                f"designer:{row.skill}",
                prompt_ids,
                completion,
                [1] * len(completion),
                float(row.raw),
                advantage=float(row.reward),
                logprobs=behaviour,
                source_id=str(row.design_id),
                env_id=None if getattr(row, "env_id", None) is None else str(row.env_id),
                skill=str(row.skill),
                behaviour_step=int(getattr(row, "policy_step", 0)),
            )
        )
    return samples


def _ids(value: Any) -> list[int] | None:
    """Stored token ids as ints; None for a null or empty value.

    >>> _ids(None), _ids([]), _ids([3, 4])
    (None, None, [3, 4])
    """
    if value is None or (isinstance(value, float) and math.isnan(value)) or len(value) == 0:
        return None
    return [int(t) for t in value]


def design_prompt(
    row: Any, tokenizer: Any, enable_thinking: bool | None, report: Callable[[str], None]
) -> list[int] | None:
    """The prompt ids a design row trains on: its stored ``prompt_ids`` when it has them and the chat template
    renders its ``prompt`` messages to the same ids, else that rendering (no stored ids); None, with one line
    to ``report``, when the two differ (the engine saw another prompt than the trainer would train on)."""
    rendered = render_prompt_ids(tokenizer, json.loads(row.prompt), enable_thinking)
    stored = _ids(getattr(row, "prompt_ids", None))
    if stored is None:
        return rendered
    at = first_difference(stored, rendered)
    if at is None:
        return stored
    report(
        f"design {row.design_id} (env {getattr(row, 'env_id', None)}): its stored prompt ids ({len(stored)} tokens) "
        f"differ from the chat template's rendering of its prompt ({len(rendered)} tokens) from token {at}: "
        "not trained"
    )
    return None


def design_completion(row: Any, tokenizer: Any) -> tuple[list[int], list[float] | None]:
    """A design row's completion ids and behaviour log-probs: the stored sampled tokens and their log-probs
    (None when the log-probs are missing or do not line up with the tokens: no correction rather than a wrong
    one), else the reply text's tokens without log-probs. Nothing is added: a reply cut at the token limit
    ends where it was cut, one that stopped ends with the end-of-turn token it sampled."""
    stored = _ids(getattr(row, "completion_ids", None))
    if stored is None:
        return [int(t) for t in tokenizer(row.completion, add_special_tokens=False)["input_ids"]], None
    raw_logprobs = getattr(row, "logprobs", None)
    behaviour = None if raw_logprobs is None else [float(x) for x in raw_logprobs]
    if behaviour is not None and len(behaviour) != len(stored):
        behaviour = None
    return stored, behaviour


def _groups(samples: list[Sample]) -> dict[str, list[Sample]]:
    groups: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s)
    return dict(groups)


def mix_roles(agent: list[Sample], designer: list[Sample], designer_fraction: float, seed: int) -> list[Sample]:
    """Cap the designer's share of the batch at ``designer_fraction`` by keeping whole designer groups
    (chosen at random, seeded); agent samples are never dropped, except that 1 means designer only and
    0 means agent only.

    >>> a = [Sample("agent", f"a{i}", [], [1], [1], 0.0) for i in range(6)]
    >>> d = [Sample("designer", f"d{i}", [], [1], [1], 0.0) for i in range(8)]
    >>> sorted({s.role for s in mix_roles(a, d, 0.0, 0)}), len(mix_roles(a, d, 0.25, 0)), len(mix_roles(a, d, 0.9, 0))
    (['agent'], 8, 14)
    """
    if designer_fraction <= 0:
        return list(agent)
    if designer_fraction >= 1:
        return list(designer)
    wanted_designer = designer_fraction / (1 - designer_fraction) * len(agent)
    if agent and len(designer) > wanted_designer:
        designer = _keep_groups(designer, wanted_designer, random.Random(seed))
    return agent + designer


def _keep_groups(samples: list[Sample], budget: float, rng: random.Random) -> list[Sample]:
    groups = list(_groups(samples).values())
    rng.shuffle(groups)
    kept: list[Sample] = []
    for g in groups:
        if len(kept) + len(g) > max(budget, len(groups[0])):
            continue
        kept.extend(g)
    return sorted(kept, key=lambda s: s.group)


def fill_with_duplicates(samples: list[Sample], target: int) -> list[Sample]:
    """``samples``, and when they are fewer than ``target`` copies of them in turn up to ``target``, each marked
    ``duplicate`` (``training.batch_fill: duplicate``): the authors' ``upsample_trajectories``
    (``spade/core/utils/trajectory_build.py:125-160``), called with ``global_batch_size`` minus the step's new
    designs (``spade/core/orchestrator.py:2607-2620``). A copy keeps its play's reward and advantage, as theirs
    keep the normalised reward.

    >>> s = [Sample(AGENT, "agent:e", [], [1], [1], float(r), source_id=f"p{r}") for r in range(3)]
    >>> [(x.source_id, x.duplicate) for x in fill_with_duplicates(s, 5)]
    [('p0', False), ('p1', False), ('p2', False), ('p0', True), ('p1', True)]
    >>> len(fill_with_duplicates(s, 2)), fill_with_duplicates([], 4)
    (3, [])
    """
    if not samples or len(samples) >= target:
        return list(samples)
    return [*samples, *(replace(samples[i % len(samples)], duplicate=True) for i in range(target - len(samples)))]


def fill_at_random(samples: list[Sample], target: int, seed: int) -> list[Sample]:
    """``samples``, and when they are fewer than ``target`` copies drawn from them at random, with replacement,
    up to ``target``, each marked ``duplicate`` (``training.batch_fill: random``): the authors' fixed-environment
    baseline pads its short batch with ``random.choice`` copies of real samples
    (``spade/slime/fixed_env_rollout.py:448-462``). Seeded, so a step's batch is the same when it is trained again.

    >>> s = [Sample(AGENT, "agent:e", [], [1], [1], float(r), source_id=f"p{r}") for r in range(3)]
    >>> filled = fill_at_random(s, 8, seed=1)
    >>> len(filled), sum(x.duplicate for x in filled), {x.source_id for x in filled[3:]} <= {"p0", "p1", "p2"}
    (8, 5, True)
    >>> filled == fill_at_random(s, 8, seed=1), len(fill_at_random(s, 2, seed=1)), fill_at_random([], 4, seed=1)
    (True, 3, [])
    """
    if not samples or len(samples) >= target:
        return list(samples)
    rng = random.Random(seed)
    return [*samples, *(replace(rng.choice(samples), duplicate=True) for _ in range(target - len(samples)))]


def make_batch(samples: list[Sample], skipped_episodes: int = 0, size: int | None = None) -> Batch:
    """The step's batch: the designer's samples first (the authors' order), then the agent's, each in group
    order (advantages already set), the agent's repeated plays (:func:`fill_with_duplicates`) after all its real
    ones, as the authors append them, cut to ``size`` samples when given (:func:`trim_to`): a surplus sheds the
    repeats first."""
    first = {DESIGNER: 0, AGENT: 1}
    ordered = sorted(samples, key=lambda s: (first.get(s.role, 2), s.duplicate, s.group, s.source_id))
    kept = ordered if size is None else trim_to(ordered, size)
    return Batch(kept, skipped_episodes, trimmed=len(ordered) - len(kept))


def trim_to(samples: list[Sample], size: int) -> list[Sample]:
    """The first ``size`` samples: with the designer's first, a surplus sheds the agent's tail, as the authors
    (``spade/slime/spade_rollout.py:663-666`` put the designer first so that ``[:global_batch_size]``,
    lines 835-842, never drops it). A short batch is kept whole: its padding is inert rows (zero loss mask)
    the trainer adds (``spade_core.train.grpo.StoredRollouts``; the authors' lines 821-833).

    Advantages are not recomputed: a group cut in two keeps the z-scores of all its plays, as theirs.

    >>> d = [Sample(DESIGNER, "designer:s", [], [1], [1], 0.0, source_id=f"d{i}") for i in range(24)]
    >>> a = [Sample(AGENT, f"agent:e{i // 8}", [], [1], [1], 0.0, source_id=f"p{i}") for i in range(192)]
    >>> batch = trim_to(d + a, 192)
    >>> len(batch), sum(s.role == DESIGNER for s in batch), batch[-1].source_id
    (192, 24, 'p167')
    >>> len(trim_to(a[:100], 192))
    100
    """
    return samples[:size]
