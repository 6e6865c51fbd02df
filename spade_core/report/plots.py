# Over 400 lines: one small function per figure, sharing the canvas and colour helpers.
"""The report's figures as PNG bytes (matplotlib's Agg canvas; no pyplot, no global backend state).

Each function takes a frame from :mod:`spade_core.report.data` and returns PNG bytes, or None when the
frame is empty (the page then says "no data yet"). Labels that come from the store are drawn with math
parsing off, so a ``$`` in a suite or skill name is text, not TeX.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from spade_core.report.tables import ordered_sources
from spade_core.steps import generation_of

_RC: dict[Any, Any] = {
    "text.parse_math": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 9,
}
_ROLE_COLOURS = {"agent": "tab:blue", "designer": "tab:orange"}
_KIND_STYLES = {  # timeline stage kind -> (colour, legend label)
    "chain": ("tab:orange", "design chain (documents → hint)"),
    "rollout": ("tab:blue", "rollout"),
    "train": ("tab:green", "train"),
    "other": ("tab:grey", "score, memory, reward, evaluate"),
}
_SOURCE_STYLES = {  # pool source -> (colour, line style)
    "design": ("tab:blue", "-"),
    "replay": ("tab:orange", "--"),
    "starter": ("tab:green", "-."),
    "fixed": ("tab:purple", ":"),
}


@contextmanager
def _figure(width: float = 7.5, height: float = 3.4) -> Iterator[tuple[Figure, list[bytes]]]:
    """A fresh figure; its PNG lands in the yielded list when the block ends."""
    out: list[bytes] = []
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        yield fig, out
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
    out.append(buf.getvalue())


def _gen_axis(ax: Axes, gens: list[int]) -> None:
    ax.set_xticks(gens, [str(g) for g in gens])
    ax.set_xlabel("generation")


def funnel(frame: pd.DataFrame) -> bytes | None:
    """Grouped bars per generation: designed → with code → valid → scored (and replayed, when any)."""
    if frame.empty:
        return None
    stages = [("designed", "designed"), ("with_code", "with code"), ("valid", "valid"), ("scored", "scored")]
    if frame["replayed"].sum() > 0:
        stages.append(("replayed", "replayed / fixed pool"))
    gens = [int(g) for g in frame["gen"]]
    x = np.arange(len(gens))
    width = 0.8 / len(stages)
    with _figure() as (fig, out):
        ax = fig.add_subplot()
        for i, (column, label) in enumerate(stages):
            values = frame[column].to_numpy(dtype=float)
            bars = ax.bar(x + (i - (len(stages) - 1) / 2) * width, values, width, label=label)
            ax.bar_label(bars, labels=[f"{int(v)}" for v in values], fontsize=7, padding=1)
        ax.set_xticks(x, [str(g) for g in gens])
        ax.set_xlabel("generation")
        ax.set_ylabel("environments")
        ax.set_title("Validation funnel")
        ax.legend(loc="upper left", fontsize=8, ncols=len(stages))
        ax.margins(y=0.2)
    return out[0]


def distribution(frame: pd.DataFrame, column: str, title: str, ylim: tuple[float, float] | None = None) -> bytes | None:
    """Box plot per generation of one env_scores column, with every environment as a (jittered) dot."""
    if frame.empty:
        return None
    gens = sorted(int(g) for g in frame["gen"].unique())
    groups = [frame.loc[frame["gen"] == g, column].dropna().to_numpy(dtype=float) for g in gens]
    rng = np.random.default_rng(0)  # fixed jitter: the same store draws the same figure
    with _figure() as (fig, out):
        ax = fig.add_subplot()
        ax.boxplot(groups, positions=gens, widths=0.5, showmeans=True, manage_ticks=False)
        for g, values in zip(gens, groups, strict=True):
            ax.scatter(g + rng.uniform(-0.15, 0.15, len(values)), values, s=12, alpha=0.6, color="tab:blue")
        _gen_axis(ax, gens)
        ax.set_xlim(min(gens) - 0.6, max(gens) + 0.6)
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.set_ylabel(column.replace("_", " "))
        ax.set_title(title)
    return out[0]


def designer_reward(
    frame: pd.DataFrame,
    run_id: str = "",
    baseline: pd.DataFrame | None = None,
    baseline_id: str | None = None,
    raw_name: str = "raw",
) -> bytes | None:
    """The designer's reward per generation, of the run and of a baseline run (``designer_rewards``, as
    :func:`~spade_core.report.tables.designer_reward_table` frames).

    Left, the designer's curve: the mean raw value with a ± one-standard-error bar (std / √designs; the run's
    range, min to max, as a light band), the baseline run's beside it. Right, the trained reward (the advantage: centred
    per skill, scaled) as mean ± std, of both. Generations without a value are not drawn; None when neither
    run has one.
    """
    named = [(run_id or "run", frame, "tab:blue", "o", "-")]
    if baseline is not None:
        named.append((f"baseline {baseline_id}" if baseline_id else "baseline", baseline, "tab:orange", "s", "--"))
    frames = [(n, f[f["raw_mean"].notna()], c, m, ls) for n, f, c, m, ls in named if not f.empty]
    frames = [entry for entry in frames if not entry[1].empty]
    if not frames:
        return None
    gens = sorted({int(g) for _, f, *_ in frames for g in f["gen"]})
    with _figure(width=9.0, height=3.6) as (fig, out):
        raw_ax, trained_ax = fig.subplots(1, 2)
        for i, (name, rows, colour, marker, style) in enumerate(frames):
            x = rows["gen"].to_numpy(dtype=float) + (0.06 * i if len(frames) > 1 else 0.0)
            if name == named[0][0]:
                low, high = rows["raw_min"].to_numpy(dtype=float), rows["raw_max"].to_numpy(dtype=float)
                raw_ax.vlines(x, low, high, color=colour, alpha=0.2, linewidth=10, label=f"{name}: min – max")
            for ax, column, spread in ((raw_ax, "raw", "se"), (trained_ax, "trained", "std")):
                mean = rows[f"{column}_mean"].to_numpy(dtype=float)
                bar = np.nan_to_num(rows[f"{column}_{spread}"].to_numpy(dtype=float))
                ax.errorbar(
                    x,
                    mean,
                    yerr=bar,
                    marker=marker,
                    linestyle=style,
                    capsize=4,
                    color=colour,
                    label=f"{name}: mean ± {'SE' if spread == 'se' else 'std'}",
                )
        for ax in (raw_ax, trained_ax):
            _gen_axis(ax, gens)
            ax.set_xlim(min(gens) - 0.6, max(gens) + 0.6)
            ax.legend(fontsize=7)
        raw_ax.set_ylabel(raw_name)
        raw_ax.set_title(f"Designer's curve: {raw_name} per generation")
        trained_ax.axhline(0.0, color="grey", linewidth=0.8)
        trained_ax.set_ylabel("trained reward (advantage)")
        trained_ax.set_title("Trained reward (centred per skill, scaled)")
    return out[0]


def generation_boundaries(steps: list[int], k: int | None) -> list[int]:
    """The global steps where a new generation (a new pool) starts, every ``k`` steps, inside the span of
    ``steps`` (its first step excluded).

    >>> generation_boundaries([0, 1, 2, 3, 4, 5], 2)
    [2, 4]
    >>> generation_boundaries([3, 5], 2), generation_boundaries([0, 1], None)
    ([4], [])
    """
    if not steps or not k:
        return []
    first, last = min(steps), max(steps)
    return list(range(generation_of(k, first) * k, last + 1, k))


def learning_curve(frame: pd.DataFrame, steps_per_generation: int | None = None) -> bytes | None:
    """No-hint win rate against the global step: per skill (left) and per pool source (right), each with the
    overall win rate in bold black; dotted vertical lines where a generation starts (every K steps)."""
    if frame.empty:
        return None
    overall = frame[frame["level"] == "overall"].sort_values("step")
    steps = [int(s) for s in overall["step"]]
    values = frame["win_rate"].to_numpy(dtype=float)
    in_unit = bool(np.all((values >= 0) | np.isnan(values)) and np.all((values <= 1) | np.isnan(values)))
    gens = [int(g) for g in overall["gen"]]
    gen_at = dict(zip(steps, gens, strict=True))
    if steps_per_generation:
        boundaries = generation_boundaries(steps, steps_per_generation)
    else:  # no K known: wherever the generation of the plays changes
        boundaries = [s for s, g, before in zip(steps[1:], gens[1:], gens, strict=False) if g != before]
    k = steps_per_generation
    with _figure(width=9.0, height=4.4) as (fig, out):
        skill_ax, source_ax = fig.subplots(1, 2, sharey=True)
        marker = "o" if len(steps) <= 40 else None
        skills = frame[frame["level"] == "skill"]
        for skill, rows in skills.groupby("skill", sort=True):
            rows = rows.sort_values("step")
            skill_ax.plot(
                rows["step"],
                rows["win_rate"].to_numpy(dtype=float),
                marker=marker,
                markersize=3,
                linewidth=1,
                alpha=0.85,
                label=str(skill),
            )
        sources = frame[frame["level"] == "source"]
        for source in ordered_sources(sources["source"]):
            rows = sources[sources["source"] == source].sort_values("step")
            colour, style = _SOURCE_STYLES.get(source, ("tab:grey", (0, (1, 3))))
            source_ax.plot(
                rows["step"],
                rows["win_rate"].to_numpy(dtype=float),
                marker=marker,
                markersize=3,
                linewidth=1.4,
                linestyle=style,
                color=colour,
                label=source,
            )
        for ax, title in ((skill_ax, "per skill"), (source_ax, "per pool source")):
            ax.plot(
                steps,
                overall["win_rate"].to_numpy(dtype=float),
                color="black",
                linewidth=2.6,
                marker=marker,
                markersize=4,
                label="overall",
                zorder=5,
            )
            for boundary in boundaries:
                ax.axvline(boundary, color="grey", linestyle=":", linewidth=1)
            for start in [min(steps), *boundaries]:
                gen = gen_at.get(start, generation_of(k, start) if k else None)
                if gen is not None:
                    ax.annotate(
                        f"gen {gen}",
                        (start, 1),
                        xycoords=("data", "axes fraction"),
                        xytext=(2, -2),
                        textcoords="offset points",
                        fontsize=7,
                        color="grey",
                        va="top",
                    )
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
            ax.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
            if in_unit:
                ax.set_ylim(-0.05, 1.1)
            ax.set_xlabel("global step (checkpoint that played)" + ("; dotted: new generation" if boundaries else ""))
            ax.set_title(f"No-hint win rate {title}")
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=3, frameon=False)
        skill_ax.set_ylabel("win rate (mean no-hint return)")
    return out[0]


def training(frame: pd.DataFrame) -> bytes | None:
    """Loss and reward mean over the run's optimiser steps; dotted lines mark the generations.

    The trainer logs one joint loss per step for both roles (one update); when every step's rows agree it
    is drawn once, otherwise per role. Rewards are per role. A role absent from a step is simply not drawn
    there: the x axis numbers the run's (generation, step) pairs.
    """
    if frame.empty:
        return None
    keys = frame[["gen", "step"]].drop_duplicates().sort_values(["gen", "step"]).reset_index(drop=True)
    index = {(int(g), int(s)): i + 1 for i, (g, s) in enumerate(zip(keys["gen"], keys["step"], strict=True))}
    frame = frame.assign(x=[index[(int(g), int(s))] for g, s in zip(frame["gen"], frame["step"], strict=True)])
    frame = frame.sort_values("x", kind="stable")
    joint = bool((frame.groupby("x")["loss"].nunique(dropna=False) <= 1).all())
    with _figure(height=3.8) as (fig, out):
        loss_ax, reward_ax = fig.subplots(1, 2)
        if joint:
            once = frame.drop_duplicates("x")
            loss_ax.plot(once["x"], once["loss"].to_numpy(dtype=float), marker=".", color="tab:green", label="joint")
        for role, rows in frame.groupby("role", sort=True):
            colour = _ROLE_COLOURS.get(str(role))
            if not joint:
                loss_ax.plot(rows["x"], rows["loss"].to_numpy(dtype=float), marker=".", label=str(role), color=colour)
            reward_ax.plot(
                rows["x"], rows["reward_mean"].to_numpy(dtype=float), marker=".", label=str(role), color=colour
            )
        boundaries = np.flatnonzero(np.diff(keys["gen"].to_numpy()) != 0) + 1.5
        for ax, name in ((loss_ax, "loss"), (reward_ax, "reward mean")):
            for boundary in boundaries:
                ax.axvline(boundary, color="grey", linestyle=":", linewidth=0.8)
            ax.set_xlabel("training step (run-wide; dotted: new generation)")
            ax.set_ylabel(name)
            ax.legend(fontsize=8)
        loss_ax.set_title("Train loss" + ("" if joint else " per role"))
        reward_ax.set_title("Train reward mean per role")
    return out[0]


def evals(frame: pd.DataFrame, run_id: str, baseline_id: str | None, steps: tuple[int, int] = (1, 1)) -> bytes | None:
    """Mean score per suite against the generation: the run, the base model (gen 0) and the baseline run.
    With ``steps`` = (K of the run, K of the baseline) different, against the training step (gen · K)."""
    if frame.empty:
        return None
    if steps[0] != steps[1]:
        frame = frame.assign(gen=frame["gen"] * frame["run_id"].map({run_id: steps[0]}).fillna(steps[1]).astype(int))
    suites = sorted(frame["suite"].unique())
    cols = min(3, len(suites))
    rows_n = math.ceil(len(suites) / cols)
    with _figure(width=3.4 * cols + 0.8, height=2.9 * rows_n + 0.3) as (fig, out):
        axes = np.atleast_1d(fig.subplots(rows_n, cols, squeeze=False)).ravel()
        for ax, suite in zip(axes, suites, strict=False):
            data = frame[frame["suite"] == suite]
            base = data[(data["gen"] == 0) & (data["run_id"] == run_id)]
            if base.empty:  # the base model is shared: the baseline run's gen 0 will do
                base = data[data["gen"] == 0]
            ours = data[(data["run_id"] == run_id) & (data["gen"] > 0)]
            gens: set[int] = set()
            if not base.empty:
                ax.axhline(float(base["mean_score"].iloc[0]), color="grey", linestyle="--", label="base model (gen 0)")
            if not ours.empty:
                ax.plot(ours["gen"], ours["mean_score"], marker="o", label=f"{run_id}")
                gens |= {int(g) for g in ours["gen"]}
            if baseline_id is not None:
                other = data[(data["run_id"] == baseline_id) & (data["gen"] > 0)]
                if not other.empty:
                    ax.plot(other["gen"], other["mean_score"], marker="s", linestyle="-.", label=f"{baseline_id}")
                    gens |= {int(g) for g in other["gen"]}
            if gens:
                _gen_axis(ax, sorted(gens))
                if steps[0] != steps[1]:
                    ax.set_xlabel("training step (generation × K)")
            ax.set_ylim(-0.05, 1.05)
            ax.set_ylabel("mean score")
            ax.set_title(str(suite))
            ax.legend(fontsize=7)
        for ax in axes[len(suites) :]:
            ax.set_visible(False)
    return out[0]


def timeline_lanes(frame: pd.DataFrame) -> list[tuple[int, bool]]:
    """The timeline's lanes, top to bottom: per generation its design chain, then its steps (each only when it
    has stages), so generation g+1's chain lies right under generation g's training steps.

    >>> timeline_lanes(pd.DataFrame({"gen": [2, 1, 1, 2], "kind": ["chain", "chain", "train", "other"]}))
    [(1, True), (1, False), (2, True), (2, False)]
    """
    present = {(int(g), k == "chain") for g, k in zip(frame["gen"], frame["kind"], strict=True)}
    return sorted(present, key=lambda lane: (lane[0], not lane[1]))


def timeline(frame: pd.DataFrame, overlap: float | None = None) -> bytes | None:
    """Gantt chart of the run's stages: two lanes per generation (its design chain; its steps and the
    stages after them), bars coloured by kind, x in minutes since the run's first stage started.

    ``overlap`` (:func:`spade_core.report.timeline.overlap_fraction`), when given, goes into the title.
    """
    if frame.empty:
        return None
    lanes = timeline_lanes(frame)
    row = {lane: i for i, lane in enumerate(lanes)}
    with _figure(width=9.0, height=max(2.6, 1.3 + 0.38 * len(lanes))) as (fig, out):
        ax = fig.add_subplot()
        for kind, (colour, label) in _KIND_STYLES.items():
            rows = frame[frame["kind"] == kind]
            if rows.empty:
                continue
            for i, (gen, lane_rows) in enumerate(rows.groupby("gen", sort=True)):
                y = row[(int(gen), kind == "chain")]
                bars = [(s / 60, w / 60) for s, w in zip(lane_rows["start"], lane_rows["seconds"], strict=True)]
                ax.broken_barh(
                    bars,
                    (y - 0.38, 0.76),
                    facecolors=colour,
                    edgecolor="white",
                    linewidth=0.6,
                    label=label if i == 0 else None,
                )
        ax.set_yticks(range(len(lanes)), [f"gen {g} · {'design chain' if chain else 'steps'}" for g, chain in lanes])
        ax.set_ylim(len(lanes) - 0.5, -0.5)  # the first generation on top
        ax.set_xlim(0, max(float(frame["end"].max()) / 60, 1 / 60) * 1.02)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("minutes since the run's first stage started")
        title = "Stage timeline"
        if overlap is not None:
            title += f": the next generation's design chain ran during {overlap:.0%} of the training time"
        ax.set_title(title)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=4, frameon=False)
    return out[0]


def difficulty(frame: pd.DataFrame) -> bytes | None:
    """RLVE's difficulty controller per environment against the training step: the window's top (``high``,
    solid) and the difficulty the step's plays used (markers), one panel per run that played RLVE pools."""
    if frame.empty:
        return None
    runs = list(dict.fromkeys(frame["run_id"]))
    with _figure(width=7.5, height=3.2 * len(runs) + 0.4) as (fig, out):
        axes = np.atleast_1d(fig.subplots(len(runs), 1, squeeze=False)).ravel()
        for ax, run_id in zip(axes, runs, strict=True):
            data = frame[frame["run_id"] == run_id].sort_values("step")
            for index, (name, rows) in enumerate(data.groupby("name", sort=True)):
                color = f"C{index % 10}"
                ax.plot(rows["step"], rows["high"], color=color, label=str(name), linewidth=1.2)
                ax.plot(rows["step"], rows["difficulty"], color=color, marker="o", linestyle="none", markersize=3)
            ax.set_xlabel("training step")
            ax.set_ylabel("difficulty")
            ax.set_ylim(-0.5, max(1, int(data[["high", "difficulty"]].max().max())) + 0.5)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_title(f"RLVE difficulty: {run_id} (line: window top; dots: played)")
            ax.legend(fontsize=6, ncols=4, loc="upper left")
    return out[0]


def chosen_parameters(frame: pd.DataFrame, run_id: str = "", baseline_id: str | None = None) -> bytes | None:
    """The integer parameters a parameter-mutation designer chose per generation (``CHOSEN_COLUMNS`` of
    :mod:`spade_core.report.chosen`): one panel per parameter (the first four by name), the run's mean ± its
    standard error and the baseline run's beside it, each value chosen drawn as a dot whose area grows with
    the designs that chose it. None when the frame is empty."""
    if frame.empty:
        return None
    parameters = sorted(set(frame["parameter"]))[:4]
    styles = [(run_id, run_id or "run", "tab:blue", "o", "-")]
    if baseline_id:
        styles.append((baseline_id, f"baseline {baseline_id}", "tab:orange", "s", "--"))
    gens = sorted({int(g) for g in frame["gen"]})
    with _figure(width=max(4.5, 4.5 * len(parameters)), height=3.4) as (fig, out):
        for ax, parameter in zip(fig.subplots(1, len(parameters), squeeze=False)[0], parameters, strict=True):
            for i, (run, name, colour, marker, style) in enumerate(styles):
                rows = frame[(frame["run_id"] == run) & (frame["parameter"] == parameter)].sort_values("gen")
                if rows.empty:
                    continue
                x = rows["gen"].to_numpy(dtype=float) + 0.08 * i
                for xi, values in zip(x, rows["values"], strict=True):
                    pairs = [item.split(":") for item in str(values).split()]
                    ys = [float(v) for v, _ in pairs]
                    ax.scatter([xi] * len(ys), ys, s=[15.0 * int(n) for _, n in pairs], color=colour, alpha=0.3)
                se = np.nan_to_num(rows["se"].to_numpy(dtype=float))
                ax.errorbar(
                    x,
                    rows["mean"].to_numpy(dtype=float),
                    yerr=se,
                    marker=marker,
                    linestyle=style,
                    capsize=4,
                    color=colour,
                    label=f"{name}: mean ± SE",
                )
            _gen_axis(ax, gens)
            ax.set_xlim(min(gens) - 0.6, max(gens) + 0.6)
            ax.set_ylabel(parameter)
            ax.set_title(f"{parameter} the designs chose")
            ax.legend(fontsize=7)
    return out[0]
