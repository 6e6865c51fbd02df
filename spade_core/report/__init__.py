"""``spade report``: one self-contained HTML page per run (docs/DESIGN.md §9).

Per generation: the validation funnel, win-rate and regret distributions, the designer reward the designer
is trained on (``designer_rewards``: the mean raw value with its standard error — the designer's curve, beside a
baseline run's — and the trained reward; with ``designer.mode: parameters`` the numbers the designs chose, such
as the test bed's difficulty); per global step: the learning curve (no-hint win rate per skill and pool source,
with generation boundaries); training loss and reward per role, the stage timeline (how far generation g+1's
design chain overlapped generation g's training), eval scores against the base model and a baseline run
(a fixed-environment run, or any run given with ``--baseline``; compared at the same training step, gen ·
K, so runs with different K meet), for runs on RLVE's environments the difficulty controller per
environment, the top environments by regret with their code, and the run's stored config.

- :mod:`spade_core.report.data` — DuckDB queries over the store, returning frames;
- :mod:`spade_core.report.plots` — the figures as PNG bytes (matplotlib, Agg canvas);
- :mod:`spade_core.report.page` — the HTML (every store value escaped; figures as data URIs).

The page goes to ``{store}/reports/{run_id}/index.html`` for a local store and to
``./spade-report-{run_id}/index.html`` for an S3 store (a report is opened in a local browser), unless an
output directory is given; each figure is also written beside it as a PNG file.
"""

from __future__ import annotations

import os
from pathlib import Path

from spade_core.report import page, plots
from spade_core.report.data import ReportError, RunData, list_runs, load_run
from spade_core.report.summary import raw_label, variant_of
from spade_core.report.timeline import overlap_fraction, train_seconds
from spade_core.store.artifacts import Store

__all__ = ["ReportError", "RunData", "default_out_dir", "figures", "list_runs", "load_run", "write_report"]


def default_out_dir(store: Store, run_id: str) -> Path:
    """Where the report goes without ``--out``: inside a local store, or the working directory for S3."""
    if store.is_s3:
        return Path(f"spade-report-{run_id}")
    return Path(store.report_dir(run_id))


def figures(data: RunData) -> dict[str, bytes | None]:
    """Every figure of the page by name (None: no data for it yet)."""
    return {
        "funnel": plots.funnel(data.funnel),
        "win_rate": plots.distribution(data.scores, "win_rate", "Win rate per generation", (-0.05, 1.05)),
        "regret": plots.distribution(data.scores, "regret", "Regret per generation"),
        "designer_reward": plots.designer_reward(
            data.designer_reward,
            data.run_id,
            data.baseline_designer_reward,
            data.baseline.run_id if data.baseline else None,
            raw_label(variant_of(data.config)),
        ),
        "learning_curve": plots.learning_curve(data.learning_curve, data.steps_per_generation),
        "training": plots.training(data.train),
        "timeline": plots.timeline(
            data.timeline, overlap_fraction(data.timeline) if train_seconds(data.timeline) else None
        ),
        "evals": plots.evals(data.evals, data.run_id, data.baseline.run_id if data.baseline else None, data.eval_steps),
        "difficulty": plots.difficulty(data.difficulty),
        "chosen_parameters": plots.chosen_parameters(
            data.chosen_parameters, data.run_id, data.baseline.run_id if data.baseline else None
        ),
    }


def write_report(
    store: Store, run_id: str, out_dir: str | os.PathLike[str] | None = None, baseline: str | None = None, top: int = 10
) -> Path:
    """Write ``index.html`` (self-contained) and one PNG per figure for ``run_id``; returns the page's path.

    Raises:
        ReportError: an unknown run or baseline (the message lists the store's runs), or an output
            directory that cannot be written.
    """
    if out_dir is not None and "://" in str(out_dir):
        raise ReportError(f"report output {str(out_dir)!r} must be a local directory")
    data = load_run(store, run_id, baseline=baseline, top=top)
    images = figures(data)
    out = Path(out_dir) if out_dir is not None else default_out_dir(store, run_id)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, png in images.items():
            target = out / f"{name}.png"
            if png is not None:
                target.write_bytes(png)
            elif target.exists():
                target.unlink()  # a figure from an earlier report whose data is gone
        index = out / "index.html"
        tmp = out / ".index.html.tmp"
        tmp.write_text(page.render(data, images), encoding="utf-8")
        tmp.replace(index)
    except OSError as exc:
        raise ReportError(f"cannot write the report to {str(out)!r}: {exc.strerror or exc}") from None
    return index
