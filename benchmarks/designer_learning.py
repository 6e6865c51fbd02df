"""Does the designer learn? The controlled test bed: G generations of ``designer-bench`` with the designer
trained, and the same seeds with ``designer.train=false`` (the ablation), the agent frozen in both.

The test bed (``data/configs/designer-bench.yaml``; docs/method.md, "Baselines and ablations"):

- ``training.roles: designer``: the designer trains alone; plays, hints and judgements stay on checkpoint 0,
  so the agent's policy is fixed although the two roles share the weights;
- one parent family: every design prompt (``designer.mode: parameters``) shows the same parent's parameter
  block, and the designer writes new values; the length of one list parameter is the difficulty.
  ``--family people`` (the default, ``data/seed_envs/difficulty/``): ``_NAMES`` and ``_WORDS``, the length of
  ``_NAMES`` is the number of people whose boxed answers the observation lists, one of whom is asked for.
  ``--family words`` (``data/seed_envs/use_the_words/``, runs ``designer-bench-words...``): ``_WORDS``, the
  words one sentence must hold. The family is the designer's library parent for every game skill
  (``designer.parents``, the folder), and ``memory.positive_win_rate`` in the preset admits no memory entry
  as a parent, so every generation mutates the same parent and the difficulty a design has is the value the
  designer wrote;
- ``designer.skills_per_generation: 1``: all of a generation's designs share one skill, so the per-skill
  centring of the designer's reward runs over all of them (``designer.documents_per_generation`` >= 8);
- per design ``rollout.plays_no_hint`` x K no-hint plays (the reward's window) and ``rollout.plays_hint``
  hinted plays: 16 and 16 in the preset, so a design's win rate has a standard error <= 0.5 / 4 = 0.125.

Before the runs the agent's win rate on the family is measured at each difficulty value (checkpoint 0, the
preset's sampling and limits, evaluation seeds 2**32 + i) and printed, with its standard error. Then both
arms go through the local runner (:func:`spade_core.pipeline.local.run_run`), side by side in two child
processes of one torch thread each (as ``benchmarks/selfplay.py``; ``--serial`` runs them one after the
other here), into one store as the runs ``designer-bench`` and ``designer-bench-ablation``. Per generation
and arm it prints, from the store: design attempts, the attempts that wrote back the parent's own values
(refused as not novel), valid (and novel) designs, rewarded designs, the mean raw blend
(``designer_rewards.raw``) with its standard error, the share of rewarded designs whose window win rate lies
in the plateau band [0.4, 0.6], and the distribution of the difficulty the designs chose (people shown: the
distinct names of ``_NAMES``, capped by the distinct words of ``_WORDS``; words asked for: the distinct words
of ``_WORDS``; each as its environment counts them). The
last line is

    blend_last_trained=A±a blend_last_ablation=B±b band_share_trained=C band_share_ablation=D generations=G minutes=M

where "last" pools the designs of the last third of the generations (at least one). The line before it gives
A and B again with one value per environment and generation (:func:`one_per_environment`): designs that wrote
the same code share one environment and its plays, so the first count can shrink a standard error that the
second cannot. Before them, for the trained arm, a table of the designer's updates says what each trained
on and how large it was (samples, those with a non-zero advantage, the mean absolute advantage, tokens, loss,
gradient norm, KL): the signal per update when the arms do not part. A last table asks what the reward can
tell apart among designs of one difficulty value (:func:`noise_rows`, both arms, once per environment and
generation): the variance of raw across them beside the variance their plays' sampling alone would give if
the agent won them all equally often; the share of the two, pooled over values, says how much of what the
designer is trained on within a value is the plays' luck. ``--summary-only --store DIR`` prints the tables
of runs already there.
``--roles both`` runs the same pair through the whole loop (the agent trained too; runs ``...-loop``).
``--parent-value N`` starts every design from the family's parent with N items in its list (written to
``STORE/parents/FOLDER-N/``, the run's ``designer.parents``), for a parent below or inside the band.
``--choices-only`` measures, instead of running, what the untrained designer writes from parents of several
lengths (:func:`measure_choices`): how far the difficulty its designs choose spreads, which bounds what its
reward can teach it.

    .venv/bin/python benchmarks/designer_learning.py [--generations 6] [--designs 8] [--plays 8] [--hinted 16]
        [--curve-plays 16] [--curve-values 1,2,3,4,6,8,12] [--no-curve | --curve-only] [--roles designer|both]
        [--family people|words] [--parent-value N] [--store DIR] [--serial] [--set key=value ...]
        [--keep-checkpoints]
        [--summary-only --store DIR]
        [--choices-only [--choice-parents 1,2,4] [--choice-designs 24]]

The smallest run that goes through every path (a curve, two generations, a designer update, both arms):
``--generations 2 --designs 2 --plays 2 --hinted 2 --curve-plays 2 --curve-values 1,4``.
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path so
# `import sandbox` finds the package when a script here is run by path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import argparse
import functools
import math
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from spade_core.config import ScoringConfig, SpadeConfig, load_config
from spade_core.designer.batch import sampling
from spade_core.designer.corpus import sample_documents
from spade_core.designer.design import parameters_messages, truncate_document
from spade_core.designer.parameters import (
    make_variant,
    parameter_block,
    parameter_similarity,
    parameters_of,
    variant_code,
)
from spade_core.envs.seeds import SEED_DIR, SeedEnv, load_seed_envs
from spade_core.llm import make_generator
from spade_core.llm.base import GenerationRequest
from spade_core.method.designer_reward import PLAY_COLUMNS, window_inputs
from spade_core.method.scoring import blend_reward
from spade_core.pipeline.local import StageLog, run_run
from spade_core.play.rollout import EpisodeSpec, RolloutEngine
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query
from spade_core.store.verdicts import final_verdicts

PRESET = "designer-bench"
NAMES = ["Ann", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gus", "Hana", "Ivo", "Jade", "Kai", "Lena"]
WORDS = [
    *("falcon", "copper", "meadow", "violin", "lantern", "pepper"),
    *("harbor", "canyon", "walnut", "orchid", "river", "castle"),
]
PLATEAU = (0.4, 0.6)  # scoring.plateau: 1 on [0.4, 0.6] (docs/method.md, step 7)
EVAL_SEED_BASE = 2**32  # play_seed() draws below 2**32: the curve's seeds are never a run's
T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{(time.perf_counter() - T0) / 60:5.1f} min] {message}", flush=True)


def run_ids(roles: str, family: str = "people") -> dict[str, str]:
    """The arms' run ids: ``designer-bench[-words]``, and ``-ablation`` for the untrained arm, ``-loop`` after
    both with ``--roles both``.

    >>> run_ids("both", "words")["ablation"]
    'designer-bench-words-ablation-loop'
    """
    prefix = PRESET if family == "people" else f"{PRESET}-{family}"
    suffix = "" if roles == "designer" else "-loop"
    return {"trained": f"{prefix}{suffix}", "ablation": f"{prefix}-ablation{suffix}"}


def people_shown(code: str) -> int | None:
    """The difficulty of a family variant: the people its observation lists (the distinct names, capped by
    the distinct non-blank words, at least one, as the environment counts them); None when the code lacks
    either list.

    >>> people_shown('_NAMES = ["Ann", "Ben", "Ann"]\\n_WORDS = ["a", "b", "c"]\\n')
    2
    """
    params = parameters_of(code)
    names, words = params.get("_NAMES"), params.get("_WORDS")
    if not isinstance(names, list) or not isinstance(words, list):
        return None
    return max(1, min(len({str(v) for v in names}), len({str(v) for v in words if str(v).strip()})))


def is_parent_copy(code: str, parent: str) -> bool:
    """Whether a design wrote back every one of its parent's values (``_NAMES`` and ``_WORDS`` in the people
    family): the novelty filter refuses such a design; it is never rewarded or trained on."""
    return parameter_similarity(code, parent) == 1.0


def words_asked(code: str) -> int | None:
    """The difficulty of a variant of the words family: the words its sentence must hold (the distinct
    non-blank words of ``_WORDS``, at least one, as the environment counts them; a parameter mutation keeps
    the parent's list shape, so ``_WORDS`` is a list); None when the code lacks the list.

    >>> words_asked('_WORDS = ["oak", "elm", "oak", " "]\\n'), words_asked("_WORDS = []\\n"), words_asked("_N = 3\\n")
    (2, 1, None)
    """
    words = parameters_of(code).get("_WORDS")
    if not isinstance(words, list):
        return None
    return max(1, len({str(w).strip() for w in words if str(w).strip()}))


@dataclass(frozen=True)
class Family:
    """A parent family of the test bed: the folder of ``data/seed_envs`` that holds its one environment (the
    run's ``designer.parents``), the list parameter whose length sets the difficulty, the items the curve and
    the choices fill that list with, what the difficulty counts, and how a variant's code shows it."""

    folder: str
    parameter: str
    items: tuple[str, ...]
    label: str
    difficulty: Callable[[str], int | None]

    @functools.cached_property
    def env(self) -> SeedEnv:
        """The family's one environment, read once."""
        (env,) = load_seed_envs(SEED_DIR / self.folder)
        return env

    def variant(self, value: int) -> str:
        """The parent with the first ``value`` items in its list parameter."""
        return make_variant(self.env.code, f"{self.parameter} = {list(self.items[:value])!r}")


FAMILIES = {
    # data/seed_envs/difficulty/: repeat one person's boxed word out of len(_NAMES) people's
    "people": Family("difficulty", "_NAMES", tuple(NAMES), "people shown", people_shown),
    # data/seed_envs/use_the_words/: one sentence that uses every word of _WORDS
    "words": Family("use_the_words", "_WORDS", tuple(WORDS), "words asked for", words_asked),
}


def write_parent(root: str, family: Family, value: int) -> str:
    """``--parent-value``: the family's parent with ``value`` items in its list, written as the one environment
    of ``ROOT/parents/FOLDER-VALUE/`` under the family's file name; the folder, for ``designer.parents``.

    A folder per family and value: the folder's path is part of the run's config, so a store that already
    holds runs from another parent does not resume them as if their parent were this one.
    """
    folder = os.path.join(root, "parents", f"{family.folder}-{value}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, family.env.path.name), "w") as out:
        out.write(family.variant(value))
    return folder


def config(root: str, arm: str, roles: str, args: argparse.Namespace) -> SpadeConfig:
    overrides = [
        f"store.root={root}",
        f"designer.train={str(arm == 'trained').lower()}",
        f"training.roles={roles}",
        f"designer.parents={FAMILIES[args.family].folder}",
        f"designer.documents_per_generation={args.designs}",
        f"rollout.plays_no_hint={args.plays}",
        f"rollout.plays_hint={args.hinted}",
        *args.set,
    ]
    return load_config(PRESET, None, overrides)


def measure_curve(cfg: SpadeConfig, family: Family, values: list[int], plays: int) -> pd.DataFrame:
    """The agent's no-hint win rate on the family at each difficulty value: checkpoint 0, the preset's
    sampling and limits, ``plays`` evaluation seeds per value."""
    codes = {v: family.variant(v) for v in values}
    specs = [EpisodeSpec(f"value={v}", code, EVAL_SEED_BASE + i) for v, code in codes.items() for i in range(plays)]
    generator = make_generator(cfg.model)
    try:
        rows = RolloutEngine.from_config(cfg, generator).run(specs)
    finally:
        generator.close()
    frame = pd.DataFrame({"value": [int(s.env_id.split("=")[1]) for s in specs]})
    frame["win"] = [float(r["episode_return"] >= 1.0 and r["error_type"] is None) for r in rows]
    curve = frame.groupby("value")["win"].agg(plays="count", win_rate="mean").reset_index()
    curve["se"] = [math.sqrt(p * (1 - p) / n) for p, n in zip(curve["win_rate"], curve["plays"], strict=True)]
    return curve


def measure_choices(cfg: SpadeConfig, family: Family, parents: list[int], designs: int) -> pd.DataFrame:
    """What the untrained designer writes from a parent of each length: one design per document for
    ``designs`` documents of the corpus (the preset's document budget and sampling, the design stage's
    parameter prompt), with the difficulty each variant shows, or None where the reply makes no variant.

    How far that value spreads among one generation's designs bounds what the designer's reward can teach
    it about the length (designs of the parent's length differ only in their words).
    """
    docs = sample_documents(cfg.corpus.source, designs, cfg.seed, cfg.corpus.max_words)
    texts = [truncate_document(t, cfg.corpus.max_words) for t in docs["text"]]
    variants = {k: family.variant(k) for k in parents}
    requests = [
        (k, GenerationRequest(messages=parameters_messages(t, parameter_block(variants[k])), seed=i))
        for k in parents
        for i, t in enumerate(texts)
    ]
    generator = make_generator(cfg.model)
    try:
        replies = generator.generate([r for _, r in requests], sampling(cfg, cfg.seed))
    finally:
        generator.close()
    rows = []
    for (k, _), reply in zip(requests, replies, strict=True):
        code = variant_code(variants[k], reply.text, cfg.designer.max_parameter_items)
        rows.append(
            {
                "parent": k,
                "value": family.difficulty(code) if code else None,
                "copy": bool(code and is_parent_copy(code, variants[k])),
            }
        )
    return pd.DataFrame(rows, columns=["parent", "value", "copy"])


def choices_table(frame: pd.DataFrame, label: str = "people shown") -> str:
    """Per parent length: designs, those with no variant, parent copies, those that keep the parent's length
    (copies included) and the difficulty (``label``) of the rest of the variants.

    >>> print(choices_table(pd.DataFrame({"parent": [1, 1, 1], "value": [1, 3, None], "copy": [True, False, False]})))
    | parent: people shown | designs | no variant | parent copies | same length | people shown (value:designs) |
    |---|---|---|---|---|---|
    | 1 | 3 | 1 | 1 | 1 | 1:1 3:1 |
    """
    lines = [
        f"| parent: {label} | designs | no variant | parent copies | same length | {label} (value:designs) |",
        "|---|---|---|---|---|---|",
    ]
    for parent, group in frame.groupby("parent"):
        values = group["value"].dropna().astype(int)
        counts = Counter(values)
        shown = " ".join(f"{k}:{counts[k]}" for k in sorted(counts)) or "-"
        lines.append(
            f"| {parent} | {len(group)} | {int(group['value'].isna().sum())} | {int(group['copy'].sum())} "
            f"| {int((values == parent).sum())} | {shown} |"
        )
    return "\n".join(lines)


def run_arm(root: str, arm: str, args: argparse.Namespace) -> None:
    """One arm's generations through the local runner, in this process."""
    cfg = config(root, arm, args.roles, args)
    run_id = run_ids(args.roles, args.family)[arm]
    log(f"{run_id}: designer.train={cfg.designer.train}, training.roles={cfg.training.roles}, {cfg.config_hash()}")
    run_run(cfg, Store.from_config(cfg.store), run_id, list(range(1, args.generations + 1)), watch=StageLog(log))
    log(f"{run_id}: done")


def side_by_side(root: str, args: argparse.Namespace) -> None:
    """Each arm in a child process of this script (``--only ARM``, one torch thread), logging to
    ``ROOT/RUN_ID.log``; an arm that fails is an error naming its log."""
    children = {}
    for arm, run_id in run_ids(args.roles, args.family).items():
        path = os.path.join(root, f"{run_id}.log")
        command = [sys.executable, os.path.abspath(__file__), "--only", arm, "--store", root, "--no-curve"]
        command += ["--generations", str(args.generations), "--designs", str(args.designs), "--roles", args.roles]
        command += ["--family", args.family]
        command += ["--plays", str(args.plays), "--hinted", str(args.hinted), "--set", "model.threads=1"]
        command += [x for item in args.set for x in ("--set", item)]
        with open(path, "w") as out:
            children[arm] = (subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT), path)
        log(f"{run_id}: started (pid {children[arm][0].pid}, log {path})")
    for arm, (child, path) in children.items():
        if child.wait() != 0:
            raise SystemExit(f"error: the {arm} run exited with {child.returncode}; see {path}")


def generation_designs(store: Store, family: Family, run_id: str, gen: int) -> pd.DataFrame:
    """The rewarded designs of one generation that were played: raw blend, window win rate, difficulty
    (``value``) and the no-hint plays the win rate was measured on (``n_no_hint``, as the reward stage counts
    them: spade_core.method.designer_reward.window_inputs). A refused parent copy rewarded under
    ``scoring.parent_copy_raw`` has no window win rate and is not one of them."""
    rewards = store.read_table("designer_rewards", run_id, gen, stages=["reward"])
    rewards = rewards[rewards["window_win_rate"].notna()] if not rewards.empty else rewards
    if rewards.empty:
        return pd.DataFrame(columns=["design_id", "env_id", "raw", "window_win_rate", "value", "n_no_hint"])
    pool = store.read_table("pool", run_id, gen, stages=["pool"], columns=["env_id", "code"])
    values = {e: family.difficulty(c) for e, c in zip(pool["env_id"], pool["code"], strict=True)}
    frame = rewards[["design_id", "env_id", "raw", "window_win_rate"]].copy()
    frame["value"] = frame["env_id"].map(values)
    episodes = store.read_table("episodes", run_id, gen, columns=list(PLAY_COLUMNS))
    window = window_inputs(episodes)  # the no-hint plays each window win rate was measured on, as the reward
    return frame.merge(window[["env_id", "n_no_hint"]], on="env_id", how="left")


def mean_se(values: pd.Series) -> tuple[float, float]:
    """Mean and standard error (NaN for fewer than two values' error, and for none at all)."""
    values = values.dropna().astype(float)
    if values.empty:
        return math.nan, math.nan
    se = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
    return float(values.mean()), se


def one_per_environment(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Each generation's designs with one row per environment: designs that wrote the same code share one
    environment and its plays, so their raw values are one measurement, not several.

    >>> gen = pd.DataFrame({"env_id": ["e1", "e1", "e2"], "raw": [0.4, 0.4, 0.0]})
    >>> one_per_environment([gen, gen])["raw"].tolist()
    [0.4, 0.0, 0.4, 0.0]
    """
    return pd.concat([f.drop_duplicates("env_id") for f in frames], ignore_index=True)


def sampling_variance(p: float, plays: int, scoring: ScoringConfig) -> float:
    """The variance of a design's plateau term that its window's ``plays`` no-hint plays alone give, when the
    agent wins it with probability ``p``: the observed win rate is k / n with k ~ Binomial(n, p), so

        Var = sum_k C(n, k) p^k (1 - p)^(n - k) (w_p * plateau(k / n) - E)^2,   E the same sum's mean

    (the plateau term of the blend, spade_core.method.scoring.blend_reward; the regret term's own sampling
    adds to it). A design the agent always or never wins has none.

    >>> cfg = ScoringConfig()
    >>> sampling_variance(0.0, 12, cfg), sampling_variance(1.0, 12, cfg)
    (0.0, 0.0)
    >>> round(sampling_variance(0.38, 12, cfg), 4), round(sampling_variance(0.38, 48, cfg), 4)
    (0.037, 0.0127)
    """
    probabilities = [math.comb(plays, k) * p**k * (1 - p) ** (plays - k) for k in range(plays + 1)]
    terms = [blend_reward(k / plays, 0.0, scoring) for k in range(plays + 1)]  # with no regret: the plateau term
    mean = sum(q * t for q, t in zip(probabilities, terms, strict=True))
    return float(sum(q * (t - mean) ** 2 for q, t in zip(probabilities, terms, strict=True)))


def noise_rows(frame: pd.DataFrame, scoring: ScoringConfig) -> list[dict[str, Any]]:
    """What the reward can tell apart among designs of one difficulty value: per value, the designs (one per
    environment), their no-hint plays (median), their mean raw, the variance of raw across them, and the
    variance the plays' sampling alone would give if the agent won every design of that value equally often
    (:func:`sampling_variance` at the value's pooled win rate, for each design's plays, averaged). Where the
    two variances match, the raw values of that value's designs differ by the plays' luck, not by what the
    designs wrote.

    >>> frame = pd.DataFrame({"value": [2, 2, 2, 5], "raw": [0.6, 0.2, 0.4, 0.0],
    ...                       "window_win_rate": [0.5, 0.25, 0.33, 0.0], "n_no_hint": [12, 12, 12, 12]})
    >>> [(r["value"], r["designs"], round(r["variance"], 3)) for r in noise_rows(frame, ScoringConfig())]
    [(2, 3, 0.04), (5, 1, nan)]
    """
    rows = []
    for value, group in frame.dropna(subset=["value", "n_no_hint"]).groupby("value"):
        raw = group["raw"].astype(float)
        plays = group["n_no_hint"].astype(int)
        pooled = float((group["window_win_rate"] * plays).sum() / plays.sum())  # the value's wins / its plays
        sampling = [sampling_variance(pooled, n, scoring) for n in plays]
        rows.append(
            {
                "value": int(value),
                "designs": len(group),
                "plays": int(plays.median()),
                "mean": float(raw.mean()),
                "variance": float(raw.var(ddof=1)) if len(group) > 1 else math.nan,
                "sampling": sum(sampling) / len(group),
            }
        )
    return rows


def sampling_share(rows: list[dict[str, Any]]) -> float:
    """The share of the variance of raw within one difficulty value that the plays' sampling gives, pooled over
    the values with two designs or more (each weighted by its designs - 1).

    >>> sampling_share([{"designs": 3, "variance": 0.04, "sampling": 0.03}, {"designs": 1, "variance": math.nan,
    ...                 "sampling": 0.0}])
    0.75
    """
    kept = [r for r in rows if r["designs"] > 1]
    within = sum((r["designs"] - 1) * r["variance"] for r in kept)
    return sum((r["designs"] - 1) * r["sampling"] for r in kept) / within if within > 0 else math.nan


def noise_table(rows: list[dict[str, Any]], label: str) -> str:
    lines = [
        f"| {label} | designs | no-hint plays | mean raw | variance of raw | variance the plays give |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['value']} | {r['designs']} | {r['plays']} | {fmt(r['mean'])} | {fmt(r['variance'], 4)} "
        f"| {fmt(r['sampling'], 4)} |"
        for r in rows
    ]
    return "\n".join(lines)


def band_share(frame: pd.DataFrame) -> float:
    rates = frame["window_win_rate"].dropna()
    return float(rates.between(*PLATEAU).mean()) if len(rates) else math.nan


def arm_rows(
    root: str, family: Family, run_id: str, generations: int, parent: str
) -> tuple[list[dict[str, Any]], list[pd.DataFrame]]:
    store = Store(root)
    rows, frames = [], []
    for gen in range(1, generations + 1):
        attempts = query(store, "select count(*) as n from validations where run_id = ? and gen = ?", [run_id, gen])
        codes = query(store, "select code from designs where run_id = ? and gen = ?", [run_id, gen])["code"]
        verdicts = final_verdicts(store, run_id, gen)
        designs = generation_designs(store, family, run_id, gen)
        blend, se = mean_se(designs["raw"])
        counts = Counter(int(v) for v in designs["value"].dropna())
        rows.append(
            {
                "gen": gen,
                "attempts": int(attempts.n[0]),
                "valid": int(verdicts["ok"].sum()) if not verdicts.empty else 0,
                "copies": sum(is_parent_copy(c, parent) for c in codes.dropna()),
                "rewarded": len(designs),
                "blend": blend,
                "se": se,
                "band": band_share(designs),
                "values": " ".join(f"{k}:{counts[k]}" for k in sorted(counts)) or "-",
            }
        )
        frames.append(designs)
    return rows, frames


def designer_updates(root: str, run_id: str) -> pd.DataFrame:
    """What each of the run's designer updates trained on and how large it was: per global step, the designer
    samples, those with a non-zero advantage, the mean |advantage|, the trained tokens, the loss, the
    gradient norm before clipping and the step's KL (``train_samples``, ``train_metrics``)."""
    store = Store(root)
    samples = store.read_table("train_samples", run_id, columns=["step", "role", "advantage", "tokens"])
    samples = samples[samples["role"] == "designer"]
    metrics = store.read_table("train_metrics", run_id, columns=["role", "step", "loss", "grad_norm", "kl"])
    metrics = metrics[metrics["role"] == "designer"].set_index("step")
    if samples.empty:
        return pd.DataFrame(columns=["step", "samples", "nonzero", "mean_abs_adv", "tokens", "loss", "grad_norm", "kl"])
    frame = samples.groupby("step").agg(
        samples=("advantage", "size"),
        nonzero=("advantage", lambda a: int((a != 0).sum())),
        mean_abs_adv=("advantage", lambda a: float(a.abs().mean())),
        tokens=("tokens", "sum"),
    )
    return frame.join(metrics[["loss", "grad_norm", "kl"]], how="left").reset_index()


def updates_table(frame: pd.DataFrame) -> str:
    lines = [
        "| step | samples | non-zero advantage | mean abs advantage | tokens | loss | grad norm | KL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in frame.itertuples():
        lines.append(
            f"| {r.step} | {r.samples} | {r.nonzero} | {fmt(r.mean_abs_adv)} | {r.tokens} | {fmt(r.loss, 4)} "
            f"| {fmt(r.grad_norm, 3)} | {fmt(r.kl, 4)} |"
        )
    return "\n".join(lines)


def fmt(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def table(rows: list[dict[str, Any]], label: str = "people shown") -> str:
    lines = [
        "| gen | attempts | parent copies | valid | rewarded | mean raw blend ± SE | share in [0.4, 0.6] "
        f"| {label} (value:designs) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['gen']} | {r['attempts']} | {r['copies']} | {r['valid']} | {r['rewarded']} "
            f"| {fmt(r['blend'])} ± {fmt(r['se'])} | {fmt(r['band'], 2)} | {r['values']} |"
        )
    return "\n".join(lines)


def drop_checkpoints(store: Store, run_id: str) -> None:
    """Delete a run's checkpoints (weights and optimizer state: 1.6 GB per trained step in this preset)."""
    path = os.path.dirname(store.checkpoint_dir(run_id, 1))
    if store.exists(path):
        store.remove_dir(path)


def difficulty_values(text: str) -> list[int]:
    """An argparse type: comma-separated list lengths a family can take (1 to 12, the items each has).

    >>> difficulty_values("1,4")
    [1, 4]
    """
    values = [v.strip() for v in text.split(",")]
    most = min(len(f.items) for f in FAMILIES.values())
    if not all(v.isdigit() and 1 <= int(v) <= most for v in values):
        raise argparse.ArgumentTypeError(f"must be comma-separated list lengths from 1 to {most}, got {text!r}")
    return [int(v) for v in values]


def difficulty_value(text: str) -> int:
    """An argparse type: one list length a family can take.

    >>> difficulty_value("1")
    1
    """
    values = difficulty_values(text)
    if len(values) != 1:
        raise argparse.ArgumentTypeError(f"must be one list length, got {text!r}")
    return values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", "-g", type=int, default=6, help="G: generations per arm (default 6).")
    parser.add_argument("--designs", type=int, default=8, help="designer.documents_per_generation (default 8).")
    parser.add_argument("--plays", type=int, default=8, help="rollout.plays_no_hint per step (default 8; x K=2).")
    parser.add_argument("--hinted", type=int, default=16, help="rollout.plays_hint (default 16).")
    parser.add_argument("--curve-plays", type=int, default=16, help="Plays per difficulty value for the curve.")
    parser.add_argument(
        "--curve-values", type=difficulty_values, default="1,2,3,4,6,8,12", help="List lengths the curve measures."
    )
    parser.add_argument("--no-curve", action="store_true", help="Skip the curve (the arms' child processes do).")
    parser.add_argument("--curve-only", action="store_true", help="Measure the curve, then stop.")
    parser.add_argument(
        "--choices-only",
        action="store_true",
        help="Measure what the untrained designer writes from parents of --choice-parents items, then stop.",
    )
    parser.add_argument(
        "--choice-parents", type=difficulty_values, default="1,2,4", help="Parent lengths --choices-only tries."
    )
    parser.add_argument("--choice-designs", type=int, default=24, help="Designs per parent for --choices-only.")
    parser.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        default="people",
        help="The parent family: people (data/seed_envs/difficulty/, the default) or words "
        "(data/seed_envs/use_the_words/); it sets designer.parents, and words runs are named designer-bench-words.",
    )
    parser.add_argument(
        "--parent-value",
        type=difficulty_value,
        default=None,
        help="Start every design from the family's parent with this many items in its list (written to "
        "STORE/parents/FOLDER-N/, which becomes designer.parents); default: the family's own parent. Give it "
        "again with --summary-only, so that parent copies are counted against it.",
    )
    parser.add_argument("--roles", choices=["designer", "both"], default="designer", help="training.roles.")
    parser.add_argument("--store", default=None, help="Store root (default: a new temporary directory, kept).")
    parser.add_argument("--only", choices=["trained", "ablation"], default=None, help="Run only one arm, here.")
    parser.add_argument("--serial", action="store_true", help="Run the arms here, one after the other.")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="Extra config override.")
    parser.add_argument("--keep-checkpoints", action="store_true", help="Keep the runs' checkpoints.")
    parser.add_argument(
        "--summary-only", action="store_true", help="Run nothing: print the tables of the runs already in --store."
    )
    args = parser.parse_args()
    if args.generations < 1 or args.designs < 1:
        parser.error("--generations and --designs must be >= 1")
    if args.choice_designs < 1:
        parser.error(f"--choice-designs must be >= 1, got {args.choice_designs}")
    if args.summary_only and not args.store:
        parser.error("--summary-only needs --store, the store the runs wrote")
    if args.summary_only or args.choices_only:
        args.no_curve = True
    root = args.store or tempfile.mkdtemp(prefix="spade-designer-learning-")
    os.makedirs(root, exist_ok=True)
    load = os.getloadavg()[0]
    ids, family = run_ids(args.roles, args.family), FAMILIES[args.family]
    parent = family.env.code
    if args.parent_value is not None:
        parent = family.variant(args.parent_value)
        if not (args.summary_only or args.choices_only or args.curve_only):
            args.set.append(f"designer.parents={write_parent(root, family, args.parent_value)}")
    work = "the untrained designer's choices" if args.choices_only else f"{args.generations} generations per arm"
    log(f"store {root}; {work}; load average {load:.2f}")
    if not args.no_curve:
        cfg = config(root, "ablation", args.roles, args)
        curve = measure_curve(cfg, family, args.curve_values, args.curve_plays)
        print(f"\nthe agent's win rate on the family (checkpoint 0, no hint) by {family.label}:")
        print(f"| {family.label} | plays | win rate ± SE |\n|---|---|---|")
        for r in curve.itertuples():
            print(f"| {r.value} | {r.plays} | {r.win_rate:.3f} ± {r.se:.3f} |")
        log("curve measured")
        if args.curve_only:
            return 0
    if args.choices_only:
        cfg = config(root, "ablation", args.roles, args)
        choices = measure_choices(cfg, family, args.choice_parents, args.choice_designs)
        print(f"\nwhat the untrained designer writes, by its parent's {family.label}:")
        print(choices_table(choices, family.label))
        log("choices measured")
        return 0
    if args.only:
        run_arm(root, args.only, args)
        return 0
    if not args.summary_only:
        if args.serial:
            for arm in ids:
                run_arm(root, arm, args)
        else:
            side_by_side(root, args)
    last = max(1, args.generations // 3)
    summary, distinct, played = {}, {}, []
    for arm, run_id in ids.items():
        rows, frames = arm_rows(root, family, run_id, args.generations, parent)
        played += [frame.assign(gen=gen) for gen, frame in enumerate(frames, 1)]
        pooled = pd.concat(frames[-last:], ignore_index=True)
        summary[arm] = (*mean_se(pooled["raw"]), band_share(pooled))
        once = one_per_environment(frames[-last:])
        distinct[arm] = (*mean_se(once["raw"]), len(once))
        print(
            f"\n{run_id} (designer.train={arm == 'trained'}, training.roles={args.roles}):\n"
            f"{table(rows, family.label)}",
            flush=True,
        )
        if arm == "trained":
            print(f"\n{run_id}: the designer's updates\n{updates_table(designer_updates(root, run_id))}", flush=True)
        if not args.keep_checkpoints:
            drop_checkpoints(Store(root), run_id)
    # both arms' designs, once per environment and generation (the generations the arms share, duplicate codes)
    designs = pd.concat(played, ignore_index=True).drop_duplicates(["gen", "env_id"])
    noise = noise_rows(designs, config(root, "trained", args.roles, args).scoring)
    print(
        f"\nwhat the reward tells apart within one value of {family.label} (both arms):\n"
        f"{noise_table(noise, family.label)}\n"
        f"within one value, the plays' sampling gives {fmt(sampling_share(noise), 2)} of the variance of raw"
    )
    (a, sa, c), (b, sb, d) = summary["trained"], summary["ablation"]
    log(f"report: spade report {ids['trained']} --baseline {ids['ablation']} --store {root}")
    minutes = math.nan if args.summary_only else (time.perf_counter() - T0) / 60
    (a1, sa1, na), (b1, sb1, nb) = distinct["trained"], distinct["ablation"]
    print(
        f"one value per environment and generation (designs of one code share its plays): blend_last_trained="
        f"{fmt(a1)}±{fmt(sa1)} ({na} environments) blend_last_ablation={fmt(b1)}±{fmt(sb1)} ({nb} environments)"
    )
    print(
        f"blend_last_trained={fmt(a)}±{fmt(sa)} blend_last_ablation={fmt(b)}±{fmt(sb)} "
        f"band_share_trained={fmt(c, 2)} band_share_ablation={fmt(d, 2)} generations={args.generations} "
        f"minutes={fmt(minutes, 1)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
