# Over 400 lines: one builder per section of the page, sharing the escaping and table helpers.
"""The report page: one self-contained HTML file (inline CSS, figures as base64 data URIs, no script).

Everything that comes from the store (run ids, env ids, skills, suites, code, the stored config) passes
through :func:`esc`. The page also carries a Content-Security-Policy that allows no script and no remote
resource at all, so even a value that slipped past escaping could not run or phone home.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import math
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from spade_core.report.data import RunData, fixed_pool_of
from spade_core.report.summary import raw_label, variant_of
from spade_core.report.tables import eval_comparison, learning_curve_table
from spade_core.report.timeline import (
    chain_seconds,
    overlap_fraction,
    overlap_seconds,
    saved_seconds_with_own_devices,
    train_seconds,
)

NO_DATA = "no data yet"
CODE_LIMIT = 20_000  # characters of code shown per environment

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .6em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
img { max-width: 100%; display: block; margin: .6em 0; }
pre { background: #f7f7f7; padding: .6em; overflow-x: auto; font-size: 12px; max-height: 40em; }
p.empty { color: #888; font-style: italic; }
.note { color: #555; font-size: 13px; }
"""
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def esc(value: object) -> str:
    """HTML-escape any value (quotes included), so store text can never become markup.

    >>> esc("</pre><script>alert(1)</script>")
    '&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;'
    """
    return html.escape(str(value), quote=True)


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and math.isnan(value))


def num(digits: int = 3, signed: bool = False) -> Callable[[object], str]:
    """A formatter for numbers; missing values print as an en dash, and what rounds to zero as zero.

    >>> num()(None), num()(-1e-17), num(signed=True)(-1e-17), num(2, signed=True)(-0.256)
    ('–', '0.000', '+0.000', '-0.26')
    """

    def fmt(value: object) -> str:
        if _missing(value):
            return "–"
        rounded = round(float(value), digits) + 0.0  # type: ignore[arg-type]  # + 0.0: no "-0.000"
        return f"{rounded:{'+' if signed else ''}.{digits}f}"

    return fmt


def integer(value: object) -> str:
    return "–" if _missing(value) else str(int(value))  # type: ignore[call-overload]


def when(value: object) -> str:
    """A timestamp in UTC, to the second."""
    if _missing(value) or not isinstance(value, dt.datetime):
        return "–"
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def text(value: object) -> str:
    return "–" if _missing(value) else str(value)


Column = tuple[str, str, Callable[[object], str]]  # (frame column, header, formatter)


def table(frame: pd.DataFrame, columns: list[Column], text_columns: tuple[str, ...] = ()) -> str:
    """An HTML table of ``frame``; every cell is formatted, then escaped."""
    head = "".join(f'<th class="{"text" if c in text_columns else ""}">{esc(h)}</th>' for c, h, _ in columns)
    body = []
    for record in frame.to_dict("records"):
        cells = "".join(
            f'<td class="{"text" if c in text_columns else ""}">{esc(fmt(record.get(c)))}</td>' for c, _, fmt in columns
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def image(name: str, png: bytes | None, alt: str) -> str:
    """An embedded PNG, or the "no data yet" line when there is no figure."""
    if png is None:
        return f'<p class="empty">{NO_DATA}</p>'
    data = base64.b64encode(png).decode("ascii")
    return f'<img id="fig-{esc(name)}" alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def _section(anchor: str, title: str, *parts: str) -> str:
    return f'<section id="{anchor}"><h2>{esc(title)}</h2>{"".join(parts)}</section>'


def _summary(data: RunData) -> pd.DataFrame:
    """Per generation: write times, funnel counts and the means of the scored environments."""
    gens = pd.DataFrame({"gen": data.generations})
    frame = gens.merge(data.gen_times, on="gen", how="left").merge(data.funnel, on="gen", how="left")
    if not data.scores.empty:
        means = data.scores.groupby("gen")[["win_rate", "regret"]].mean().reset_index()
        frame = frame.merge(means, on="gen", how="left")
    if not data.designer_reward.empty:
        frame = frame.merge(data.designer_reward[["gen", "raw_mean"]], on="gen", how="left")
    return frame


def _header(data: RunData, generated: dt.datetime) -> str:
    span = "–"
    if data.created is not None and data.last_write is not None:
        seconds = int((data.last_write - data.created).total_seconds())
        span = f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d} (h:mm:ss)"
    fixed_pool = fixed_pool_of(data.config)
    if data.baseline is not None:
        baseline = f"{data.baseline.run_id} — {data.baseline.how}"
        if data.baseline_candidates:
            baseline += f"; other candidates: {', '.join(data.baseline_candidates)}"
    else:
        baseline = "none (this run is a fixed-environment run)" if fixed_pool else "none found"
    facts = [
        ("run id", data.run_id),
        ("store", data.store_root),
        ("generations", ", ".join(map(str, data.generations)) or NO_DATA),
        ("kind", f"fixed-environment baseline (designer.fixed_pool={fixed_pool})" if fixed_pool else "SPADE"),
        ("first artifact written", when(data.created)),
        ("last artifact written", when(data.last_write)),
        ("wall clock (first to last artifact)", span),
        ("steps per generation (K)", text(data.steps_per_generation)),
        ("baseline run (evals, designer reward)", baseline),
        ("report generated", when(generated)),
    ]
    rows = "".join(f'<tr><th class="text">{esc(k)}</th><td class="text">{esc(v)}</td></tr>' for k, v in facts)
    summary = _summary(data)
    columns: list[Column] = [
        ("gen", "gen", integer),
        ("first_write", "first write", when),
        ("last_write", "last write", when),
        ("designed", "designed", integer),
        ("valid", "valid", integer),
        ("scored", "scored", integer),
        ("replayed", "replayed", integer),
        ("win_rate", "win rate (mean)", num()),
        ("regret", "regret (mean)", num()),
        ("raw_mean", f"designer reward: {raw_label(variant_of(data.config))} (mean)", num()),
    ]
    per_gen = table(summary, [c for c in columns if c[0] in summary.columns]) if not summary.empty else ""
    return _section("run", "Run", f"<table>{rows}</table>", per_gen or f'<p class="empty">{NO_DATA}</p>')


def _funnel(data: RunData, figures: Mapping[str, bytes | None]) -> str:
    columns: list[Column] = [
        ("gen", "gen", integer),
        ("designed", "designed", integer),
        ("with_code", "with code", integer),
        ("valid", "valid", integer),
        ("scored", "scored", integer),
        ("replayed", "replayed / fixed pool", integer),
    ]
    note = (
        '<p class="note">designed → reply held code → passed every validation check → scored by rollouts. '
        "Replayed memory environments and fixed-pool environments are scored without a design.</p>"
    )
    body = table(data.funnel, columns) if not data.funnel.empty else ""
    return _section("funnel", "Validation funnel", note, image("funnel", figures.get("funnel"), "funnel"), body)


def _scores(figures: Mapping[str, bytes | None]) -> str:
    note = (
        '<p class="note">Valid scored environments only. win rate = mean no-hint return; regret = mean hinted '
        "return − mean no-hint return.</p>"
    )
    return _section(
        "scores",
        "Win rate and regret",
        note,
        image("win_rate", figures.get("win_rate"), "win rate per generation"),
        image("regret", figures.get("regret"), "regret per generation"),
    )


def _designer_reward(data: RunData, figures: Mapping[str, bytes | None]) -> str:
    variant = variant_of(data.config)
    raw = raw_label(variant)
    baseline = data.baseline.run_id if data.baseline else None
    note = (
        '<p class="note">What the designer is trained on: the reward stage\'s rows (<code>designer_rewards</code>), '
        "one per valid design, written after the generation's last step over its whole window of K steps. "
        f"{esc(raw)} = the value of the variant (scoring.designer_reward = {esc(variant or 'unknown')}) for each "
        "design: its mean per generation is the designer's curve (bars: ± its standard error, std / √designs). "
        "A design whose raw value is &lt; 0 is dropped "
        "(blend, solve_rate); the trained reward of the others is their raw value centred on their skill's mean "
        "and scaled: the advantage the designer sample is trained with (so its mean is 0 by construction; its "
        "spread is what moves the designer), in the batch of the global step shown. Invalid designs, replayed "
        "and fixed-pool environments are never rewarded; a design refused as a copy of its parent is trained "
        "(with scoring.parent_copy_raw) but never played, so it is counted in trained, not in the curve. "
        "– : the generation's reward stage has not run."
        + (
            f" Beside it, baseline run {esc(baseline)}: its own {esc(raw_label(variant_of(data.baseline.config)))}"
            " per generation (e.g. a designer.train=false ablation next to the trained designer)."
            if data.baseline is not None and not data.baseline_designer_reward.empty
            else ""
        )
        + "</p>"
    )
    columns: list[Column] = [
        ("gen", "gen", integer),
        ("designs", "designs rewarded", integer),
        ("raw_mean", f"{raw} (mean)", num()),
        ("raw_std", "std", num()),
        ("raw_se", "SE", num()),
        ("raw_min", "min", num()),
        ("raw_max", "max", num()),
        ("trained", "designs kept", integer),
        ("trained_mean", "trained reward (mean)", num(signed=True)),
        ("trained_std", "trained reward (std)", num()),
        ("train_step", "trained at step", integer),
    ]
    frame = data.designer_reward
    if not data.baseline_designer_reward.empty:
        theirs = data.baseline_designer_reward[["gen", "raw_mean"]].rename(columns={"raw_mean": "baseline_raw_mean"})
        ours = frame if not frame.empty else pd.DataFrame({"gen": pd.Series(dtype=int)})
        frame = ours.merge(theirs, on="gen", how="outer").sort_values("gen")
        their_raw = raw_label(variant_of(data.baseline.config)) if data.baseline else "raw"
        columns.append(("baseline_raw_mean", f"baseline {baseline}: {their_raw} (mean)", num()))
    body = table(frame, columns) if not frame.empty else ""
    return _section(
        "designer-reward",
        "Designer reward",
        note,
        image("designer_reward", figures.get("designer_reward"), "designer reward per generation"),
        body,
    )


def _chosen_parameters(data: RunData, figures: Mapping[str, bytes | None]) -> str:
    """The numbers a parameter-mutation designer chose (designer.mode: parameters): shown only for such runs."""
    if data.chosen_parameters.empty:
        return ""
    note = (
        '<p class="note">Per generation, the numbers of the rewarded designs\' parameters (designer.mode: '
        "parameters): an integer parameter's value, a list's length (len(NAME)). Where the parent's difficulty "
        "is such a number (the designer test bed's len(_NAMES): the people the observation lists), this is the "
        "difficulty the designer chose. values: value:designs.</p>"
    )
    columns: list[Column] = [
        ("run_id", "run", text),
        ("parameter", "number", text),
        ("gen", "gen", integer),
        ("designs", "designs", integer),
        ("mean", "mean", num(2)),
        ("se", "SE", num(2)),
        ("values", "values", text),
    ]
    figure = image("chosen_parameters", figures.get("chosen_parameters"), "numbers the designs chose")
    body = table(data.chosen_parameters, columns, ("run_id", "parameter", "values"))
    return _section("chosen-parameters", "Chosen parameters", note, figure, body)


def _learning_curve(data: RunData, figures: Mapping[str, bytes | None]) -> str:
    k = data.steps_per_generation
    note = (
        '<p class="note">No-hint win rate per global step s (the checkpoint that played: episodes.policy_step) '
        "= mean return of the no-hint plays of that step; a play the environment broke or whose model call failed "
        "is left out (it is counted under errors), a play that ended in another error counts as 0. Skill and "
        "pool source (design, replay, starter, fixed) come from the generation's pool table. Hinted plays and "
        "plays outside the run's steps (spade demo, spade rollout) are left out."
        + (f" A new generation, with a new pool, starts every K = {k} steps (dotted lines)." if k else "")
        + "</p>"
    )
    rows = learning_curve_table(data.learning_curve)
    columns: list[Column] = [
        ("step", "step", integer),
        ("gen", "gen", integer),
        ("plays", "no-hint plays", integer),
        ("errors", "errors", integer),
        ("win_rate", "win rate (all)", num()),
    ]
    columns += [(c, f"win rate ({c})", num()) for c in rows.columns[len(columns) :]]
    body = table(rows, columns) if not rows.empty else ""
    figure = image("learning_curve", figures.get("learning_curve"), "no-hint win rate per global step")
    return _section("learning-curve", "Learning curve", note, figure, body)


def _difficulty(data: RunData, figures: Mapping[str, bytes | None]) -> str:
    """RLVE's difficulty controller (designer.fixed_pool: rlve:...): shown only for runs that played RLVE."""
    if data.difficulty.empty:
        return ""
    latest = data.difficulty.sort_values("gen").groupby(["run_id", "name"], sort=True).tail(1)
    note = (
        '<p class="note">Sliding-window difficulty controller (spade_core/envs/rlve_difficulty.py): each step, '
        "an environment's plays use one difficulty drawn from its window [low, high]; high moves up once enough "
        "plays at high succeed. Latest generation per environment:</p>"
    )
    columns: list[Column] = [
        ("run_id", "run", text),
        ("name", "RLVE environment", text),
        ("gen", "gen", integer),
        ("step", "step", integer),
        ("difficulty", "played", integer),
        ("low", "low", integer),
        ("high", "high", integer),
    ]
    figure = image("difficulty", figures.get("difficulty"), "RLVE difficulty")
    return _section("difficulty", "RLVE difficulty", note, figure, table(latest, columns, ("run_id", "name")))


def _training(data: RunData, figures: Mapping[str, bytes | None]) -> str:
    body = ""
    if not data.train.empty:
        per_gen = (
            data.train.groupby(["gen", "role"])
            .agg(steps=("step", "count"), loss=("loss", "mean"), reward_mean=("reward_mean", "mean"))
            .reset_index()
        )
        columns: list[Column] = [
            ("gen", "gen", integer),
            ("role", "role", text),
            ("steps", "steps", integer),
            ("loss", "loss (mean)", num(4)),
            ("reward_mean", "reward mean", num()),
        ]
        body = table(per_gen, columns, text_columns=("role",))
    return _section("training", "Training", image("training", figures.get("training"), "train loss"), body)


def timeline_table(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per generation: wall seconds of its design chain and of its training steps, and how long generation
    g+1's design chain ran during generation g's training (union of intervals; missing where none)."""
    chain, train, overlap = chain_seconds(timeline), train_seconds(timeline), overlap_seconds(timeline)
    gens = sorted({int(g) for g in timeline["gen"]})
    return pd.DataFrame(
        {"gen": g, "chain": chain.get(g), "train": train.get(g), "overlap": overlap.get(g)} for g in gens
    )


def _timeline(data: RunData, figures: Mapping[str, bytes | None]) -> str:
    figure = image("timeline", figures.get("timeline"), "stage timeline")
    if data.timeline.empty:
        return _section("timeline", "Timeline", figure)
    trained = bool(train_seconds(data.timeline))
    fraction = overlap_fraction(data.timeline)
    saved = saved_seconds_with_own_devices(data.timeline)
    note = (
        '<p class="note">One bar per stage, placed by its completion marker (started_at, or finished_at − seconds '
        "in older markers; a sharded stage spans its shards); x = minutes since the run's first stage started. "
        "Per generation, one lane for its design chain (documents → design → validate → topup → novelty → pool "
        "→ hint) and one for its steps (rollout, train) and the stages after them. "
        + (
            f"Generation g+1's design chain ran during {fraction:.1%} of the run's training-step wall time "
            "(overlap fraction = |∪<sub>g</sub> (T<sub>g</sub> ∩ C<sub>g+1</sub>)| / |∪<sub>g</sub> T<sub>g</sub>|, "
            "T: training steps, C: design chain). "
            f"Separate generation and training devices would save about {saved:.1f} s ({saved / 60:.1f} min) "
            "= Σ<sub>g</sub> min(|C<sub>g+1</sub>|, |T<sub>g</sub>|)."
            if trained
            else "No training step has finished yet, so there is no overlap to measure."
        )
        + "</p>"
    )
    columns: list[Column] = [
        ("gen", "gen", integer),
        ("chain", "design chain (s)", num(1)),
        ("train", "training steps (s)", num(1)),
        ("overlap", "training overlapped by gen g+1's chain (s)", num(1)),
    ]
    return _section("timeline", "Timeline", note, figure, table(timeline_table(data.timeline), columns))


def _evals(data: RunData, figures: Mapping[str, bytes | None]) -> str:
    baseline_id = data.baseline.run_id if data.baseline else None
    comparison = eval_comparison(data.evals, data.run_id, baseline_id, steps=data.eval_steps)
    note = (
        f'<p class="note">Run {esc(data.run_id)}; generation 0 is the base model'
        + (f"; baseline: fixed-environment run {esc(baseline_id)}" if baseline_id else "; no baseline run")
        + (
            f", read at the same training step (generation × K; K = {data.eval_steps[0]} here, "
            f"{data.eval_steps[1]} for the baseline)"
            if baseline_id and data.eval_steps[0] != data.eval_steps[1]
            else ""
        )
        + ". pass@1 = share of items passed (one sample each).</p>"
    )
    columns: list[Column] = [
        ("suite", "suite", text),
        ("gen", "gen", integer),
        ("items", "items", integer),
        ("mean_score", "mean score", num()),
        ("pass_at_1", "pass@1", num()),
        ("vs_base", "Δ vs base model", num(signed=True)),
        ("baseline_score", f"baseline {baseline_id or ''} score".replace("  ", " "), num()),
        ("vs_baseline", "Δ vs baseline", num(signed=True)),
        ("step", "training step", integer),
    ]
    body = table(comparison, columns, text_columns=("suite",)) if not comparison.empty else ""
    return _section("evals", "Evaluation", note, image("evals", figures.get("evals"), "eval scores"), body)


def _top_envs(data: RunData) -> str:
    if data.top_envs.empty:
        return _section("top-envs", "Top environments by regret", f'<p class="empty">{NO_DATA}</p>')
    items = []
    for env in data.top_envs.to_dict("records"):
        code = text(env.get("code"))
        if code == "–":
            code = "(code not stored)"
        elif len(code) > CODE_LIMIT:
            code = code[:CODE_LIMIT] + f"\n... ({len(code) - CODE_LIMIT} more characters)"
        facts = (
            f"gen {integer(env['gen'])} · {text(env['skill'])} · {text(env['kind'])} · "
            f"win rate {num()(env['win_rate'])} · regret {num(signed=True)(env['regret'])} · "
            f"designer {raw_label(variant_of(data.config))} {num()(env['designer_raw'])}, "
            f"trained {num(signed=True)(env['designer_reward'])} · scored {integer(env['times_scored'])}×"
        )
        items.append(
            f'<div class="env"><h3>{esc(text(env["env_id"]))}</h3><p class="note">{esc(facts)}</p>'
            f"<details><summary>code</summary><pre>{esc(code)}</pre></details></div>"
        )
    return _section("top-envs", "Top environments by regret", *items)


def _config(data: RunData) -> str:
    if data.config_text is None:
        return _section(
            "config", "Configuration", f'<p class="empty">{NO_DATA} (no runs/{esc(data.run_id)}/config.yaml)</p>'
        )
    return _section("config", "Configuration", f"<pre>{esc(data.config_text)}</pre>")


def render(data: RunData, figures: Mapping[str, bytes | None], generated: dt.datetime | None = None) -> str:
    """The whole page for one run."""
    generated = generated or dt.datetime.now(dt.UTC)
    parts: list[Any] = [
        _header(data, generated),
        _funnel(data, figures),
        _scores(figures),
        _designer_reward(data, figures),
        _chosen_parameters(data, figures),
        _learning_curve(data, figures),
        _difficulty(data, figures),
        _training(data, figures),
        _timeline(data, figures),
        _evals(data, figures),
        _top_envs(data),
        _config(data),
    ]
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>SPADE report: {esc(data.run_id)}</title><style>{_CSS}</style></head>"
        f"<body><h1>SPADE report: {esc(data.run_id)}</h1>{''.join(parts)}</body></html>\n"
    )
