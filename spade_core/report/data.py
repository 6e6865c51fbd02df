"""What ``spade report`` shows, read from the store: DuckDB queries returning pandas frames.

Everything is scoped to one run (and an optional baseline run, whose evals and designer reward curve are
drawn beside the run's). One DuckDB connection of the run reader (:class:`spade_core.store.reader.RunReader`)
serves every query: its views read the files the stage markers list, nothing else in the store. A table with
no files yet is an empty view, so each frame here is simply empty and the page says "no data yet" for that
section. The pure frame functions are :mod:`spade_core.report.tables`'.

Definitions (docs/DESIGN.md §7):

- **designed**: ``designs`` rows of the designer's replies (``attempt`` 0; repairs are further attempts);
  **with code**: those whose reply held a ```python block; **valid**: designs whose final verdict is ok —
  the validation of their highest attempt, unless the novelty stage marked it ``novel = false``
  (:func:`spade_core.store.verdicts.final_verdicts`, generation by generation); **scored**: ``env_scores``
  rows of valid designs.
  ``env_scores`` also holds rows for invalid designs (all zeros), not counted in the win-rate or regret
  distributions, and rows without a ``design_id`` for replayed / fixed-pool environments, which are valid
  by construction.
- **designer reward**: the reward stage's rows (``designer_rewards``, one per valid design, written after the
  generation's last step, over its whole window of K steps), the reward the designer is trained on. Per
  generation: the mean (std, min, max) of ``raw``, the variant's value (``scoring.designer_reward``), over
  every rewarded design — the designer's curve, with its standard error std / √designs; and the mean (std) of
  ``reward``, the advantage trained on
  (``raw`` centred per skill over the kept designs, scaled; so its mean is 0), over the designs kept
  (``raw`` ≥ 0). Invalid designs, replayed and fixed-pool environments are never rewarded. A generation
  whose reward stage has not run has no value (missing, never 0); one whose reward stage ran and
  rewarded nothing counts 0 designs.
- **learning curve**: per global step ``s`` (``episodes.policy_step``: the checkpoint that played), the
  no-hint win rate — the mean return of the run's no-hint plays at that step, a play the environment broke
  or whose model call failed left out (``sandbox.outcome.LEFT_OUT_ERROR_TYPES``, the rule of
  ``spade_core/method/scoring.py``; still counted under ``errors``), another ``error_type`` as return 0 —
  overall, per skill, per pool source
  (``pool.source``: design, replay, starter, fixed) and per (skill, source). Skill and source come from the
  ``pool`` row of the play's environment in its generation ("unknown" without one). Hinted plays are left
  out, and so are plays no checkpoint of the run made (``policy_step`` −1: ``spade demo``, ``spade rollout``).
  Generation g owns the steps (g−1)·K … g·K−1, K = ``training.steps_per_generation`` of the stored config,
  else inferred from the plays (:func:`steps_per_generation`).
- **pass@1**: mean of ``evals.passed`` where it is set (one sample per item); **mean score**: mean of
  ``evals.score``. Generation 0 is the base model.
- Times come from the modification times of the files the markers list (the tables carry no timestamps):
  when the run's first and last artifacts were written.
- **timeline**: one row per stage of each generation, placed in time by its completion marker
  (``runs/{run_id}/gen={g}/stages/*.json``; :func:`spade_core.report.timeline.stage_timeline`): start and end in
  seconds since the run's first stage started.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd

from sandbox.outcome import LEFT_OUT_ERROR_TYPES
from spade_core.envs.rlve_pool import controller, difficulty_history
from spade_core.report.chosen import CHOSEN_COLUMNS, load_chosen
from spade_core.report.tables import DESIGNER_REWARD_COLUMNS, designer_reward_table, steps_per_generation
from spade_core.report.timeline import stage_timeline
from spade_core.store.artifacts import Store, StoreError
from spade_core.store.reader import RunReader
from spade_core.store.verdicts import final_verdicts


class ReportError(StoreError):
    """An unknown run or baseline, or a report that cannot be written; the message names the value."""


# Valid scored environments of one run: rows of valid designs plus replayed / fixed-pool rows.
_VALID_SCORES = """
select s.gen, s.env_id, s.design_id, s.skill, s.win_rate, s.r_hint, s.r_no_hint, s.regret
from env_scores s
where s.run_id = $run and (
    s.design_id is null
    or exists (select 1 from verdicts v where v.gen = s.gen and v.design_id = s.design_id and v.ok))
"""

_FUNNEL = """
with d as (select gen, count(*) as designed, count(code) as with_code from designs
           where run_id = $run and attempt = 0 group by gen),
v as (select gen, count(*) filter (where ok) as valid from verdicts group by gen),
s as (select gen, count(*) filter (where design_id is not null) as scored,
             count(*) filter (where design_id is null) as replayed
      from ({valid}) group by gen),
g as (select gen from d union select gen from v union select gen from s)
select g.gen, coalesce(designed, 0) as designed, coalesce(with_code, 0) as with_code,
       coalesce(valid, 0) as valid, coalesce(scored, 0) as scored, coalesce(replayed, 0) as replayed
from g left join d using (gen) left join v using (gen) left join s using (gen)
order by g.gen
""".replace("{valid}", _VALID_SCORES)

# The designer's reward per generation of the run and of the baseline run, from the reward stage's rows: the
# raw curve over the designs played (not the parent copies scoring.parent_copy_raw rewards unplayed, which have
# no window win rate), the trained count and advantage over every sample.
_DESIGNER_REWARD = """
with r as (select *, window_win_rate is not null as played from designer_rewards)
select run_id, gen, count(*) filter (where played) as designs, avg(raw) filter (where played) as raw_mean,
       stddev_samp(raw) filter (where played) as raw_std, min(raw) filter (where played) as raw_min,
       max(raw) filter (where played) as raw_max, count(*) filter (where not dropped) as trained,
       avg(reward) filter (where not dropped) as trained_mean,
       stddev_samp(reward) filter (where not dropped) as trained_std, min(train_step) as train_step
from r where run_id = $run or run_id = $baseline
group by run_id, gen order by run_id, gen
"""
# No-hint win rate per global step: overall, per skill, per pool source and per (skill, source). A play the
# environment broke (a sandbox error class) is left out of the win rate, as in scoring; another error is a 0.
_LEARNING_CURVE = """
with pool_env as (
    select gen, env_id, skill, source from pool where run_id = $run
    qualify row_number() over (partition by gen, env_id order by source) = 1),
plays as (
    select e.policy_step as step, e.gen, coalesce(p.skill, 'unknown') as skill,
           coalesce(p.source, 'unknown') as source, e.error_type is not null as failed,
           coalesce(e.error_type in ({broken}), false) as broken,
           case when e.error_type is null then e.episode_return else 0.0 end as ret
    from episodes e left join pool_env p on p.gen = e.gen and p.env_id = e.env_id
    where e.run_id = $run and e.condition = 'no_hint' and e.policy_step >= 0)
select step, min(gen) as gen,
       case when grouping(skill) = 0 and grouping(source) = 0 then 'skill_source'
            when grouping(skill) = 0 then 'skill' when grouping(source) = 0 then 'source'
            else 'overall' end as level,
       skill, source, count(*) as plays, count(*) filter (where failed) as errors,
       avg(ret) filter (where not broken) as win_rate
from plays
group by grouping sets ((step), (step, skill), (step, source), (step, skill, source))
order by step, level, skill, source
""".replace("{broken}", ", ".join(f"'{t}'" for t in sorted(LEFT_OUT_ERROR_TYPES)))

_TRAIN = """
select gen, role, step, loss, reward_mean, reward_std, grad_norm, kl, tokens, step_seconds
from train_metrics where run_id = $run order by gen, role, step
"""

_EVALS = """
select run_id, gen, suite, count(*) as items, avg(score) as mean_score, avg(passed::double) as pass_at_1
from evals where run_id = $run or run_id = $baseline
group by run_id, gen, suite order by suite, run_id, gen
"""

_TOP_ENVS = """
with ranked as (
    select *, row_number() over (partition by env_id order by regret desc, gen desc) as rank,
           count(*) over (partition by env_id) as times_scored
    from ({valid})),
top as (select * from ranked where rank = 1 order by regret desc, gen desc, env_id limit $top),
-- the designer's reward of the design (a replayed / fixed-pool environment rewarded no designer)
rewarded as (
    select gen, design_id, raw as designer_raw, reward as designer_reward from designer_rewards
    where run_id = $run and design_id in (select design_id from top)
    qualify row_number() over (partition by gen, design_id) = 1),
-- the code: from this run's designs, else its memory (replayed / seed environments), else any run's designs
sources as (
    select env_id, code, kind, 0 as preference from designs
    where run_id = $run and code is not null and env_id in (select env_id from top)
    union all
    select env_id, code, kind, 1 from memory where run_id = $run and env_id in (select env_id from top)
    union all
    select env_id, code, kind, 2 from designs where code is not null and env_id in (select env_id from top)),
best as (select env_id, arg_min(code, preference) as code, arg_min(kind, preference) as kind
         from sources group by env_id)
select t.gen, t.env_id, t.skill, b.kind, t.win_rate, t.r_hint, t.regret, r.designer_raw, r.designer_reward,
       t.times_scored, b.code
from top t left join best b using (env_id) left join rewarded r on r.gen = t.gen and r.design_id = t.design_id
order by t.regret desc, t.gen desc, t.env_id
""".replace("{valid}", _VALID_SCORES)


DIFFICULTY_COLUMNS = ["run_id", "gen", "step", "name", "difficulty", "low", "high"]


def difficulty_table(store: Store, run_ids: list[str], ks: list[int]) -> pd.DataFrame:
    """:data:`DIFFICULTY_COLUMNS` of those of ``run_ids`` (with their K, ``ks``) that played RLVE pools
    (:func:`spade_core.envs.rlve_pool.difficulty_history`); ``step`` = the training step the generation's
    plays came before, (gen − 1) · K."""

    frames = []
    for run_id, k in zip(run_ids, ks, strict=True):
        designer = read_config(store, run_id)[1].get("designer")
        history = difficulty_history(store, run_id, controller(designer if isinstance(designer, dict) else {}))
        if not history.empty:
            frames.append(history.assign(run_id=run_id, step=(history["gen"] - 1) * k))
    if not frames:
        return pd.DataFrame(columns=DIFFICULTY_COLUMNS)
    return pd.concat(frames, ignore_index=True)[DIFFICULTY_COLUMNS]


@dataclass
class Baseline:
    """The fixed-environment run the evals are compared with, and how it was chosen."""

    run_id: str
    how: str  # "given" (--baseline) or "auto-detected (designer.fixed_pool=...)"
    config: dict[str, Any] = field(default_factory=dict)  # its stored config ({} without one)


@dataclass
class RunData:
    """Everything one report page shows; empty frames mean "no data yet"."""

    run_id: str
    store_root: str
    generations: list[int]
    config_text: str | None
    config: dict[str, Any]
    created: dt.datetime | None
    last_write: dt.datetime | None
    gen_times: pd.DataFrame  # gen, first_write, last_write
    funnel: pd.DataFrame
    scores: pd.DataFrame
    designer_reward: pd.DataFrame  # DESIGNER_REWARD_COLUMNS, per generation (designer_reward_table)
    train: pd.DataFrame
    evals: pd.DataFrame
    top_envs: pd.DataFrame
    learning_curve: pd.DataFrame  # step, gen, level, skill, source, plays, errors, win_rate
    steps_per_generation: int | None  # K, from the stored config or the plays; None without either
    timeline: pd.DataFrame  # gen, stage, kind, step, start, end, seconds (spade_core.report.timeline.stage_timeline)
    baseline: Baseline | None = None
    baseline_candidates: list[str] = field(default_factory=list)
    # the baseline run's designer reward per generation (DESIGNER_REWARD_COLUMNS; empty: none or no rows)
    baseline_designer_reward: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=DESIGNER_REWARD_COLUMNS)
    )
    # RLVE fixed pools (designer.fixed_pool: rlve:...) of the run and the baseline: per generation and
    # environment, the difficulty played and the controller's window (DIFFICULTY_COLUMNS; empty: none)
    difficulty: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DIFFICULTY_COLUMNS))
    # designer.mode parameters: the numbers the rewarded designs of the run and the baseline chose, per
    # generation (spade_core.report.chosen.CHOSEN_COLUMNS; empty: no such run)
    chosen_parameters: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CHOSEN_COLUMNS))

    @property
    def eval_steps(self) -> tuple[int, int]:
        """(K of the run, K of the baseline): evals are compared at the same training step (gen · K)."""
        empty = pd.DataFrame()
        ours = self.steps_per_generation or 1
        theirs = steps_per_generation(self.baseline.config, empty) if self.baseline else None
        return ours, theirs or 1


def list_runs(store: Store) -> list[str]:
    """Every run id of the store, sorted (:meth:`~spade_core.store.reader.RunReader.runs`)."""
    return RunReader(store).runs()


def _unknown(kind: str, run_id: str, store: Store, runs: list[str]) -> ReportError:
    listing = f"runs: {', '.join(runs)}" if runs else "the store holds no runs yet"
    return ReportError(f"{kind} {run_id!r} is not in the store {store.base}; {listing}")


def read_config(store: Store, run_id: str) -> tuple[str | None, dict[str, Any]]:
    """The stored resolved config of a run as text and as a dict."""
    reader = RunReader(store)
    return reader.config_text(run_id), reader.config(run_id)


def verdict_rows(reader: RunReader, run_id: str) -> pd.DataFrame:
    """gen, design_id, ok: the final verdict of each design of the run, generation by generation
    (:func:`spade_core.store.verdicts.final_verdicts`, with the top-ups of every step the generation ran)."""
    frames = [pd.DataFrame(columns=["gen", "design_id", "ok"])]
    for gen, records in sorted(reader.markers(run_id).items()):
        refills = sorted({r.stage for r in records.values() if r.stage.startswith("refill-s")})
        final = final_verdicts(reader.store, run_id, gen, steps=refills)
        frames.append(final.assign(gen=gen)[["gen", "design_id", "ok"]])
    return pd.concat(frames, ignore_index=True).astype({"gen": "int64", "ok": bool})


def fixed_pool_of(config: dict[str, Any]) -> str | None:
    """``designer.fixed_pool`` of a stored config dict, or None for a SPADE run."""
    designer = config.get("designer")
    value = designer.get("fixed_pool") if isinstance(designer, dict) else None
    return str(value) if value else None


def _choose_baseline(
    store: Store,
    run_id: str,
    given: str | None,
    runs: list[str],
    config: dict[str, Any],
    con: duckdb.DuckDBPyConnection,
) -> tuple[Baseline | None, list[str]]:
    if given is not None:
        if given not in runs:
            raise _unknown("baseline run", given, store, runs)
        if given == run_id:
            raise ReportError(f"baseline run {given!r} is the run itself; name another run")
        return Baseline(given, "given", read_config(store, given)[1]), []
    if fixed_pool_of(config):
        return None, []  # the run is itself a fixed-environment baseline
    candidates = {r: fixed_pool_of(read_config(store, r)[1]) for r in runs if r != run_id}
    candidates = {r: pool for r, pool in candidates.items() if pool}
    if not candidates:
        return None, []
    evaluated = set(con.execute("select distinct run_id from evals").df()["run_id"])
    ordered = sorted(candidates, key=lambda r: (r not in evaluated, r))
    chosen = ordered[0]
    how = f"auto-detected (designer.fixed_pool={candidates[chosen]})"
    return Baseline(chosen, how, read_config(store, chosen)[1]), ordered[1:]


def load_run(store: Store, run_id: str, baseline: str | None = None, top: int = 10) -> RunData:
    """Read everything the report shows for ``run_id``.

    Args:
        store: the artifact store.
        run_id: the run to report on.
        baseline: another run to compare with: its evals and its designer reward curve are shown beside the
            run's (a fixed-environment run, or a ``designer.train=false`` ablation); None = auto-detect a run
            whose stored config sets ``designer.fixed_pool`` (only when ``run_id`` is not such a run itself).
        top: how many environments to list by regret.

    Raises:
        ReportError: ``run_id`` or ``baseline`` is not in the store (the message lists the runs).
    """
    store.config_path(run_id)  # a malformed run id is a StoreError naming it
    reader = RunReader(store)
    runs = reader.runs()
    if run_id not in runs:
        raise _unknown("run", run_id, store, runs)
    config_text, config = reader.config_text(run_id), reader.config(run_id)
    con, _ = reader.connect()
    try:
        con.register("verdicts", verdict_rows(reader, run_id))
        chosen, others = _choose_baseline(store, run_id, baseline, runs, config, con)
        params = {"run": run_id}

        def frame(sql: str, **extra: object) -> pd.DataFrame:
            names = {k: v for k, v in {**params, **extra}.items() if f"${k}" in sql}
            return con.execute(sql, names).df()

        times = reader.write_times(run_id)
        timed = times.dropna(subset=["time"])
        gen_times = (
            timed.groupby("gen")["time"].agg(first_write="min", last_write="max").reset_index()
            if not timed.empty
            else pd.DataFrame(columns=["gen", "first_write", "last_write"])
        )
        curve = frame(_LEARNING_CURVE)
        markers = reader.markers(run_id)
        generations = sorted(g for g in set(times["gen"]) if g >= 1)
        rewards = frame(_DESIGNER_REWARD, baseline=chosen.run_id if chosen else run_id)
        rewarded = {int(g) for g, records in markers.items() if "reward" in records}
        ours = rewards[rewards["run_id"] == run_id]
        theirs = rewards[rewards["run_id"] == chosen.run_id] if chosen else rewards.iloc[0:0]
        compared = [(run_id, steps_per_generation(config, curve) or 1)]
        if chosen:
            compared.append((chosen.run_id, steps_per_generation(chosen.config, pd.DataFrame()) or 1))
        return RunData(
            run_id=run_id,
            store_root=store.base,
            generations=generations,
            config_text=config_text,
            config=config,
            created=min(timed["time"], default=None),
            last_write=max(timed["time"], default=None),
            gen_times=gen_times,
            funnel=frame(_FUNNEL),
            scores=frame(_VALID_SCORES + " order by s.gen, s.env_id"),
            designer_reward=designer_reward_table(ours, generations, rewarded),
            train=frame(_TRAIN),
            evals=frame(_EVALS, baseline=chosen.run_id if chosen else run_id),
            top_envs=frame(_TOP_ENVS, top=int(top)),
            learning_curve=curve,
            steps_per_generation=steps_per_generation(config, curve),
            timeline=stage_timeline(markers),
            baseline=chosen,
            baseline_candidates=others,
            baseline_designer_reward=designer_reward_table(theirs, [], set()),
            difficulty=difficulty_table(store, [r for r, _ in compared], [k for _, k in compared]),
            chosen_parameters=load_chosen(con, {run_id: config} | ({chosen.run_id: chosen.config} if chosen else {})),
        )
    finally:
        con.close()
