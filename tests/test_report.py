"""`spade report`: a real store of two generations (every table the report reads, evals of the base model
and a fixed-environment baseline run), the real command, and the page rendered in headless Chromium."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import typer
from PIL import Image
from samples import write_stage
from typer.testing import CliRunner

from spade_core.cli.report_cmd import report
from spade_core.config import load_config
from spade_core.report import load_run, write_report
from spade_core.report.plots import generation_boundaries
from spade_core.report.summary import generation_summary, summary_markdown, top_environments
from spade_core.report.tables import learning_curve_table, steps_per_generation
from spade_core.report.timeline import overlap_fraction, saved_seconds_with_own_devices
from spade_core.store.artifacts import Store
from spade_core.store.catalog import connect
from spade_core.store.markers import StageRecord, read_marker, write_marker
from spade_core.store.schemas import SCHEMAS

CHROMIUM = Path("/usr/bin/chromium")
HOSTILE = "</pre><script>alert(1)</script>"
FIGURES = ("funnel", "win_rate", "regret", "designer_reward", "learning_curve", "training", "timeline", "evals")
SECTIONS = [
    "Run",
    "Validation funnel",
    "Win rate and regret",
    "Designer reward",
    "Learning curve",
    "Training",
    "Timeline",
    "Evaluation",
    "Top environments by regret",
    "Configuration",
]
SKILLS = [("optimization", "game"), ("logical_deduction", "game"), ("data_retrieval", "tool")]
K = 2  # training.steps_per_generation of the tiny preset the fixture's configs are made from
PLAYS = 4  # no-hint plays per pool environment and step

runner = CliRunner()
app = typer.Typer()
app.command()(report)


def _frame(table: str, rows: list[dict]) -> pd.DataFrame:
    """``rows`` as a frame of ``table``; nullable columns the rows do not name are null."""
    frame = pd.DataFrame(rows)
    for field in SCHEMAS[table]:
        if field.name not in frame.columns and field.nullable:
            frame[field.name] = None
    return frame


def _env_id(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def _config(store: Store, run_id: str, overrides: list[str]) -> None:
    text = load_config("tiny", overrides=overrides).to_yaml()
    store.write_text(store.run_dir(run_id) + "/config.yaml", text)


def _train(store: Store, run_id: str, gen: int, roles: tuple[str, ...]) -> None:
    rows = [
        {
            "role": role,
            "step": step,
            "loss": 0.5 / (gen + step),  # one joint loss per step, as the trainer logs it
            "grad_norm": 1.0,
            "reward_mean": 0.2 * gen + 0.05 * step + (0.1 if role == "designer" else 0.0),
            "reward_std": 0.1,
            "kl": None,
            "clip_fraction": 0.0,
            "tokens": 1000,
            "step_seconds": 1.5,
            "learning_rate": 1e-6,
            "tis_weight_mean": 1.0,
            "tis_clipped_fraction": 0.0,
            **{f"tis_weight_{k}": 1.0 for k in ("min", "p10", "p50", "p90", "max")},
        }
        for role in roles
        for step in range(1, 4)
        if not (role == "designer" and step == 3)  # a step whose batch held no designer sample
    ]
    write_stage(store, run_id, gen, "train", {"train_metrics": pd.DataFrame(rows)})


def _play(env_id: str, condition: str, seed: int, ret: float, step: int, error: str | None = None) -> dict:
    return {
        "episode_id": f"{env_id}-{condition}-{step}-{seed}",
        "env_id": env_id,
        "condition": condition,
        "seed": seed,
        "episode_return": ret,
        "turns": 1,
        "error_type": error,
        "transcript": [{"role": "user", "content": "obs"}],
        "rewards": [ret],
        "model_ref": f"step-{step}",
        "token_ids": None,
        "loss_mask": None,
        "logprobs": None,
        "policy_step": step,
    }


def _pool_and_plays(store: Store, run_id: str, gen: int, pool: list[tuple]) -> None:
    """The generation's pool and its plays at each of its K steps, with known returns.

    At global step s a design environment wins s of its PLAYS no-hint plays (the agent "learns"); every
    other environment wins 2 of PLAYS. The first pool environment also has one no-hint play per step that
    failed in the model call with return 1.0 in the frame: it is a play with an error, left out of the win
    rate. Hinted plays (return 1,
    step 0 of the generation) and a `spade demo` play (policy_step -1) must not count at all.
    """
    columns = ["env_id", "design_id", "skill", "kind", "code", "source"]
    write_stage(store, run_id, gen, "pool", {"pool": pd.DataFrame(pool, columns=columns)})
    for k in range(K):
        step = (gen - 1) * K + k
        rows = []
        for i, (env_id, _, _, _, _, source) in enumerate(pool):
            wins = min(step, PLAYS) if source == "design" else 2
            rows += [_play(env_id, "no_hint", p, 1.0 if p < wins else 0.0, step) for p in range(PLAYS)]
            if k == 0:
                rows += [_play(env_id, "hint", p, 1.0, step) for p in range(2)]
            if i == 0:
                rows.append(_play(env_id, "no_hint", 99, 1.0, step, error="model_error"))  # left out
        write_stage(store, run_id, gen, f"rollout-s{k}", {"episodes": _frame("episodes", rows)})
    demo = _play(pool[0][0], "no_hint", 0, 1.0, -1)
    store.write_table("episodes", _frame("episodes", [demo]), run_id=run_id, gen=gen, stage="seed_check")


def _evals(store: Store, run_id: str, gen: int, level: float) -> None:
    rows = []
    for suite in ("reasoning_gym", "humaneval"):
        for i in range(6):
            passed = i < round(level * 6)
            rows.append(
                {
                    "suite": suite,
                    "item_id": f"{suite}/{i}",
                    "checkpoint": f"gen-{gen}" if gen else "base",
                    "score": 1.0 if passed else 0.0,
                    "passed": passed,
                    "response": "...",
                }
            )
    write_stage(store, run_id, gen, "eval", {"evals": pd.DataFrame(rows)})


def _spade_generation(store: Store, run_id: str, gen: int, hostile: bool, raw: dict | None = None) -> None:
    """One SPADE generation's tables: 6 designs (one without code), validations, scores, memory, designer
    rewards (``raw``: :data:`RAW` by default), training."""
    designs, validations, scores = [], [], []
    for i in range(6):
        skill, kind = SKILLS[i % 3]
        code = None if i == 5 else f"class Env{gen}{i}:\n    '''gen {gen} design {i} < & >'''\n"
        if hostile and i == 0:
            code = f"# {HOSTILE}\nclass Hostile:\n    pass\n"
        env_id = _env_id(code) if code else None
        ok = code is not None and i % 2 == 0
        design_id = f"{run_id}-g{gen}-d{i}"
        designs.append(
            {
                "design_id": design_id,
                "attempt": 0,
                "doc_id": f"doc{i // 2}",
                "group_id": f"grp{i // 2}",
                "skill": skill,
                "kind": kind,
                "prompt": "[]",
                "completion": "```python\n...\n```",
                "code": code,
                "env_id": env_id,
                "model_ref": f"gen-{gen - 1}",
                "policy_step": gen - 1,
            }
        )
        validations.append(
            {
                "design_id": design_id,
                "attempt": 0,
                "env_id": env_id,
                "ok": ok,
                "error_type": None if ok else ("syntax_error" if code is None else "trivial"),
                "message": None if ok else "failed",
                "checks": {"parses": code is not None},
                "seconds": 0.2,
            }
        )
        if code is not None:
            win = (0.2 + 0.15 * i + 0.1 * gen) if ok else 0.0
            regret = (0.5 if hostile and i == 0 else 0.05 * i + 0.02 * gen) if ok else 0.0
            scores.append(
                {
                    "env_id": env_id,
                    "design_id": design_id,
                    "skill": skill,
                    "win_rate": win,
                    "r_hint": win + regret,
                    "r_no_hint": win,
                    "regret": regret,
                    "hint_leaked": False,
                }
            )
    replay = "class Replayed:\n    pass\n"
    scores.append(
        {
            "env_id": _env_id(replay),
            "design_id": None,
            "skill": "optimization",
            "win_rate": 0.5,
            "r_hint": 0.6,
            "r_no_hint": 0.5,
            "regret": 0.1,
            "hint_leaked": False,
        }
    )
    memory = [
        {"env_id": _env_id(replay), "skill": "optimization", "kind": "game", "code": replay}
        | {"win_rate": 0.5, "regret": 0.1, "gen_added": 0}
    ] + [
        {"env_id": s["env_id"], "skill": s["skill"], "kind": "game", "code": "..."}
        | {"win_rate": s["win_rate"], "regret": s["regret"], "gen_added": gen}
        for s in scores[:-1]
    ]
    starter = "class Starter:\n    pass\n"
    pool = [
        (d["env_id"], d["design_id"], d["skill"], d["kind"], d["code"], "design")
        for d, v in zip(designs, validations, strict=True)
        if v["ok"]
    ] + [
        (_env_id(replay), None, "optimization", "game", replay, "replay"),
        (_env_id(starter), None, "logical_deduction", "game", starter, "starter"),
    ]
    _pool_and_plays(store, run_id, gen, pool)
    write_stage(store, run_id, gen, "design", {"designs": _frame("designs", designs)})
    write_stage(store, run_id, gen, "validate", {"validations": pd.DataFrame(validations)})
    write_stage(store, run_id, gen, "score", {"env_scores": pd.DataFrame(scores)})
    write_stage(store, run_id, gen, "memory", {"memory": pd.DataFrame(memory)})
    _designer_rewards(store, run_id, gen, designs, validations, raw or RAW)
    _train(store, run_id, gen, ("agent", "designer"))
    _evals(store, run_id, gen, 0.5 + 0.1 * gen)


# The reward stage's raw value of the valid designs d0, d2, d4 of generation g: d0 dropped (raw < 0).
RAW = {0: lambda g: -0.1, 2: lambda g: 0.4 + 0.1 * g, 4: lambda g: 0.8 + 0.1 * g}
# The ablation's (designer.train=false: rewarded the same way, never trained).
ABLATION_RAW = {0: lambda g: 0.2, 2: lambda g: 0.3, 4: lambda g: 0.4}


def _designer_rewards(store: Store, run_id: str, gen: int, designs: list, validations: list, raw: dict) -> None:
    """The reward stage's rows: one per valid design; the kept ones trained with rewards -0.2·g and +0.2·g."""
    rows, sign = [], -1
    for i, (d, v) in enumerate(zip(designs, validations, strict=True)):
        if not v["ok"]:
            continue
        value = raw[i](gen)
        dropped = value < 0
        reward = None if dropped else sign * 0.2 * gen
        sign = sign if dropped else -sign
        rows.append(
            {"design_id": d["design_id"], "env_id": d["env_id"], "skill": d["skill"], "window_win_rate": 0.5}
            | {"regret": 0.1, "raw": value, "dropped": dropped, "scale": 2.0}
            | {"centred": None if dropped else reward / 2.0, "reward": reward, "train_step": gen * 2}
        )
    write_stage(store, run_id, gen, "reward", {"designer_rewards": pd.DataFrame(rows)})


# Stage markers of spade-1 (gen, stage, shard, start, end in seconds after T0). Gen 1 trains 500-800 and
# 860-1160, gen 2 1300-1600 and 1660-1960: 1200 s in all. Gen 2's design chain runs 560-980 (420 s) while
# gen 1 plays and trains: 560-800 and 860-980 overlap gen 1's training, 360 s, so the overlap fraction is
# 360 / 1200 = 30 %; own devices would save min(420, 600) + min(0, 600) = 420 s. Validate is sharded: its
# whole marker takes no time and its row spans its shards.
STAGE_TIMES = [
    (1, "documents", None, 0, 60),
    (1, "design", None, 60, 180),
    (1, "validate", 0, 180, 240),
    (1, "validate", 1, 185, 270),
    (1, "validate", None, 270, 270),
    (1, "pool", None, 270, 300),
    (1, "hint", None, 300, 360),
    (1, "rollout-s0", None, 360, 480),
    (1, "score", None, 480, 490),
    (1, "memory", None, 490, 500),
    (1, "train-s0", None, 500, 800),
    (1, "rollout-s1", None, 800, 860),
    (1, "train-s1", None, 860, 1160),
    (1, "reward", None, 1160, 1170),
    (2, "documents", None, 560, 620),
    (2, "design", None, 620, 800),
    (2, "validate", None, 800, 900),
    (2, "pool", None, 900, 920),
    (2, "hint", None, 920, 980),
    (2, "rollout-s0", None, 1170, 1290),
    (2, "score", None, 1290, 1295),
    (2, "memory", None, 1295, 1300),
    (2, "train-s0", None, 1300, 1600),
    (2, "rollout-s1", None, 1600, 1660),
    (2, "train-s1", None, 1660, 1960),
    (2, "reward", None, 1960, 1970),
    (2, "evaluate", None, 1970, 2100),
]
T0 = pd.Timestamp("2026-12-03T09:00:00Z")


def _stamp(seconds: float, ms: bool = False) -> str:
    """T0 + ``seconds`` as a marker writes it: ``started_at`` to the millisecond, ``finished_at`` to the second."""
    moment = T0 + pd.Timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:23] + "Z" if ms else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _stage_markers(store: Store, run_id: str) -> None:
    """The run's stage markers at :data:`STAGE_TIMES`; gen 1's are old ones, without ``started_at``."""
    for gen, stage, shard, start, end in STAGE_TIMES:
        started = {} if gen == 1 else {"started_at": _stamp(start, ms=True)}
        written = read_marker(store, run_id, gen, stage, shard)  # keep the files a stage wrote above
        record = StageRecord(
            files=written.files if written is not None else {},
            stage=stage,
            shard=shard,
            run_id=run_id,
            gen=gen,
            artifact_hash="a",
            digest="d",
            seconds=end - start,
            finished_at=_stamp(end),
            **started,
        )
        write_marker(store, record)


def _baseline_generation(store: Store, run_id: str, gen: int) -> None:
    """A fixed-pool generation: no designs, every played environment scored without a design id."""
    rows = [
        {"env_id": f"seed{i:012d}", "design_id": None, "skill": skill}
        | {"win_rate": 0.3 + 0.1 * i, "r_hint": 0.5, "r_no_hint": 0.3 + 0.1 * i, "regret": 0.1}
        | {"hint_leaked": False}
        for i, (skill, _) in enumerate(SKILLS)
    ]
    write_stage(store, run_id, gen, "score", {"env_scores": pd.DataFrame(rows)})
    pool = [(r["env_id"], None, r["skill"], "game", "class Seed: pass\n", "fixed") for r in rows]
    _pool_and_plays(store, run_id, gen, pool)
    _train(store, run_id, gen, ("agent",))
    _evals(store, run_id, gen, 0.5)


def fill(store: Store, run_id: str = "spade-1", hostile: bool = True, baseline: str | None = "fixed-1") -> None:
    _config(store, run_id, [])
    _evals(store, run_id, 0, 0.5)  # gen 0 = the base model
    for gen in (1, 2):
        _spade_generation(store, run_id, gen, hostile)
    _stage_markers(store, run_id)
    if baseline:
        _config(store, baseline, ["designer.fixed_pool=seeds"])
        for gen in (1, 2):
            _baseline_generation(store, baseline, gen)


def ablation(store: Store, run_id: str = "ablation-1") -> None:
    """A designer.train=false run: the same generations, its designs rewarded (:data:`ABLATION_RAW`), not trained."""
    _config(store, run_id, ["designer.train=false"])
    for gen in (1, 2):
        _spade_generation(store, run_id, gen, hostile=False, raw=ABLATION_RAW)


def _section(page: str, anchor: str) -> str:
    match = re.search(rf'<section id="{anchor}">(.*?)</section>', page, re.S)
    assert match, f"no section {anchor!r}"
    return match.group(1)


# -- the rendered page ------------------------------------------------------------------------------------

HARNESS = """<!DOCTYPE html><html><body><iframe id="report" src="index.html" width="1200" height="800"></iframe>
<pre id="result">pending</pre>
<script>
document.getElementById("report").addEventListener("load", function () {
  var out = {};
  try {
    var doc = this.contentDocument;
    out.images = Array.from(doc.images).map(function (img) {
      return {id: img.id, complete: img.complete, width: img.naturalWidth, height: img.naturalHeight};
    });
    out.headings = Array.from(doc.querySelectorAll("h2")).map(function (h) { return h.textContent; });
    out.scripts = doc.querySelectorAll("script").length;
    out.pres = Array.from(doc.querySelectorAll("pre")).map(function (p) { return p.textContent; });
  } catch (err) {
    out.error = String(err);
  }
  document.getElementById("result").textContent = JSON.stringify(out);
});
</script></body></html>
"""


def render_in_chromium(index: Path, tmp: Path) -> dict:
    """Load the report unmodified in an iframe of a harness page; the harness reports what Chromium decoded."""
    harness = index.parent / "harness.html"
    harness.write_text(HARNESS)
    try:
        proc = subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                f"--user-data-dir={tmp / 'chromium-profile'}",
                "--allow-file-access-from-files",  # lets the harness read the report's DOM (file:// origins)
                "--virtual-time-budget=10000",
                "--dump-dom",
                harness.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        harness.unlink()
    match = re.search(r'<pre id="result">(.*?)</pre>', proc.stdout, re.S)
    assert match, f"chromium gave no result (rc {proc.returncode}): {proc.stderr[-2000:]}"
    import html

    result = json.loads(html.unescape(match.group(1)))
    assert "error" not in result, result
    return result


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    """The two-generation store, reported with the real command (default out dir), rendered in Chromium."""
    if not CHROMIUM.exists():
        pytest.skip("/usr/bin/chromium is absent (apt-get install -y chromium; the Makefile's system-deps does)")
    tmp = tmp_path_factory.mktemp("report")
    store = Store(str(tmp / "store"))
    fill(store)
    result = runner.invoke(app, ["spade-1", "--store", str(tmp / "store")])
    assert result.exit_code == 0, result.output
    index = Path(result.stdout.strip())
    assert index == tmp / "store" / "reports" / "spade-1" / "index.html"
    return index, index.read_text(), render_in_chromium(index, tmp)


def test_every_figure_is_decoded_by_chromium(rendered: tuple[Path, str, dict]) -> None:
    _, _, dom = rendered
    images = {img["id"]: img for img in dom["images"]}
    assert sorted(images) == sorted(f"fig-{name}" for name in FIGURES)
    for img in images.values():
        assert img["complete"] and img["width"] > 100 and img["height"] > 100, img


def test_page_has_every_section_heading(rendered: tuple[Path, str, dict]) -> None:
    assert rendered[2]["headings"] == SECTIONS


def test_page_is_self_contained(rendered: tuple[Path, str, dict]) -> None:
    index, page, _ = rendered
    assert not re.search(r'(src|href)="(?!data:)', page)  # no file or URL the page would need beside it
    assert {p.name for p in index.parent.iterdir()} == {"index.html", *(f"{name}.png" for name in FIGURES)}


def test_hostile_code_is_shown_as_text_not_run(rendered: tuple[Path, str, dict]) -> None:
    _, page, dom = rendered
    assert dom["scripts"] == 0
    assert any(HOSTILE in text for text in dom["pres"])  # the code is there, verbatim, as text
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page


def test_written_pngs_are_real_pictures(rendered: tuple[Path, str, dict]) -> None:
    index, _, dom = rendered
    sizes = {img["id"].removeprefix("fig-"): (img["width"], img["height"]) for img in dom["images"]}
    for name in FIGURES:
        with Image.open(index.parent / f"{name}.png") as img:
            assert img.size == sizes[name]
            colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is not None and len(colours) > 10, f"{name}.png is (nearly) blank"


def test_header_names_run_generations_and_config(rendered: tuple[Path, str, dict]) -> None:
    _, page, _ = rendered
    run = _section(page, "run")
    assert "spade-1" in run and "1, 2" in run
    assert "UTC" in run  # first / last artifact times from the store's files
    assert "fixed-1 — auto-detected (designer.fixed_pool=seeds)" in run
    assert "fixed_pool: null" in _section(page, "config")


def test_top_environments_are_ranked_by_regret_with_code(rendered: tuple[Path, str, dict]) -> None:
    _, page, _ = rendered
    top = _section(page, "top-envs")
    first = re.findall(r"<h3>([0-9a-f]{16})</h3>", top)
    hostile_id = _env_id(f"# {HOSTILE}\nclass Hostile:\n    pass\n")
    assert first[0] == hostile_id  # regret 0.5 in both generations: one entry, scored twice
    assert first.count(hostile_id) == 1 and "scored 2×" in top
    assert "class Replayed:" in top  # a replayed environment's code comes from the memory table
    assert "regret +0.100 · designer raw blend –, trained – ·" in top  # and it rewarded no designer
    assert "designer raw blend -0.100, trained – ·" in top  # the hostile design: dropped (raw < 0), not trained
    assert "&lt; &amp; &gt;" in top  # ordinary code is escaped too


def test_auto_detected_baseline_is_in_the_eval_comparison(rendered: tuple[Path, str, dict]) -> None:
    _, page, _ = rendered
    evals = _section(page, "evals")
    assert "fixed-environment run fixed-1" in evals and "baseline fixed-1 score" in evals
    # humaneval gen 2: the run passes 4 of 6 (0.667), the base model and the baseline 3 of 6 (0.5)
    assert re.search(r"<td[^>]*>humaneval</td><td[^>]*>2</td><td[^>]*>6</td><td[^>]*>0\.667</td>", evals)
    assert "+0.167" in evals


def test_learning_curve_section_has_the_per_step_table(rendered: tuple[Path, str, dict]) -> None:
    _, page, _ = rendered
    curve = _section(page, "learning-curve")
    assert "every K = 2 steps" in curve
    head = re.findall(r"<th[^>]*>([^<]*)</th>", curve)
    assert head == [
        "step",
        "gen",
        "no-hint plays",
        "errors",
        "win rate (all)",
        "win rate (design)",
        "win rate (replay)",
        "win rate (starter)",
    ]
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", curve)[1:]]
    # step 3 (gen 2): designs win 3 of 4 each (9 of 12), and a play whose model call failed is counted among
    # the plays and errors but left out of the rate; replay and starter 2 of 4 each: (9 + 2 + 2) / (12 + 4 + 4)
    # = 13 / 20; design 9 / 12
    assert cells == [
        ["0", "1", "21", "1", "0.200", "0.000", "0.500", "0.500"],
        ["1", "1", "21", "1", "0.350", "0.250", "0.500", "0.500"],
        ["2", "2", "21", "1", "0.500", "0.500", "0.500", "0.500"],
        ["3", "2", "21", "1", "0.650", "0.750", "0.500", "0.500"],
    ]
    assert '<th class="text">steps per generation (K)</th><td class="text">2</td>' in _section(page, "run")


def test_designer_reward_is_the_trained_one_per_generation(rendered: tuple[Path, str, dict]) -> None:
    _, page, _ = rendered
    section = _section(page, "designer-reward")
    # gen 1, the reward stage's rows: 3 valid designs, raw -0.1, 0.5, 0.9 (mean 0.433, sample std 0.503, range
    # -0.1 - 0.9; standard error 0.503 / sqrt(3) = 0.291); 2 kept (d0 dropped), trained rewards -0.2 and +0.2
    # (mean 0, std 0.283), trained at step 2
    assert re.search(
        r"<td[^>]*>1</td><td[^>]*>3</td><td[^>]*>0\.433</td><td[^>]*>0\.503</td><td[^>]*>0\.291</td>"
        r"<td[^>]*>-0\.100</td>"
        r"<td[^>]*>0\.900</td><td[^>]*>2</td><td[^>]*>\+0\.000</td><td[^>]*>0\.283</td><td[^>]*>2</td>",
        section,
    ), section
    assert "designer_rewards" in section and "raw blend (mean)" in section
    assert "baseline" not in re.findall(r"<th[^>]*>([^<]*)</th>", section)[-1]  # fixed-1 rewarded no designer
    run = _section(page, "run")
    assert "designer reward: raw blend (mean)" in run and re.search(r"<td[^>]*>0\.433</td></tr>", run)


# -- without a browser -------------------------------------------------------------------------------------


def test_timeline_shows_the_next_design_chain_over_training(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False, baseline=None)
    data = load_run(store, "spade-1")
    timeline = data.timeline
    assert len(timeline) == len([t for t in STAGE_TIMES if t[2] is None])  # whole stages only
    validate = timeline[(timeline["gen"] == 1) & (timeline["stage"] == "validate")].iloc[0]
    assert (validate["start"], validate["end"]) == (180.0, 270.0)  # spans its shards
    assert overlap_fraction(timeline) == pytest.approx(0.3)
    assert saved_seconds_with_own_devices(timeline) == pytest.approx(420.0)
    out = tmp_path / "out"
    section = _section(write_report(store, "spade-1", out_dir=out).read_text(), "timeline")
    assert 'id="fig-timeline"' in section
    assert "design chain ran during 30.0% of the run's training-step wall time" in section
    assert "save about 420.0 s (7.0 min)" in section
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", section)[1:]]
    assert cells == [["1", "360.0", "600.0", "360.0"], ["2", "420.0", "600.0", "0.0"]]
    with Image.open(out / "timeline.png") as img:
        assert img.format == "PNG" and img.size[0] > 100
        rgb = img.convert("RGB")
        colours = {c for _, c in rgb.getcolors(maxcolors=1 << 20)}
    # bars in each kind's colour: design chain (tab:orange), rollout (tab:blue), train (tab:green)
    assert {(255, 127, 14), (31, 119, 180), (44, 160, 44)} <= colours


def test_given_baseline_is_compared_and_unknown_baseline_is_an_error(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, baseline=None)
    _config(store, "other-fixed", ["designer.fixed_pool=run:spade-1"])
    _baseline_generation(store, "other-fixed", 1)
    out = tmp_path / "out"
    index = write_report(store, "spade-1", out_dir=out, baseline="other-fixed")
    evals = _section(index.read_text(), "evals")
    assert "baseline other-fixed score" in evals and "+0.167" in evals
    assert (out / "evals.png").stat().st_size > 0
    result = runner.invoke(app, ["spade-1", "--store", str(tmp_path / "store"), "--baseline", "nope"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: baseline run 'nope' is not in the store {tmp_path / 'store'}; runs: other-fixed, spade-1\n"
    )


def test_fixed_environment_run_reports_its_pool_and_no_baseline(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False)
    page = write_report(store, "fixed-1", out_dir=tmp_path / "out").read_text()
    run = _section(page, "run")
    assert "fixed-environment baseline (designer.fixed_pool=seeds)" in run
    assert "none (this run is a fixed-environment run)" in run
    assert "fig-funnel" in page and "fig-win_rate" in page and "fig-evals" in page
    assert "no data yet" in _section(page, "designer-reward")  # a fixed pool: no reward stage, no designer reward
    assert "(code not stored)" in _section(page, "top-envs")  # this fixture's pool has no memory table
    curve = _section(page, "learning-curve")  # a fixed pool: one source, 6 of 12 no-hint plays won per step
    assert "win rate (fixed)" in curve and "win rate (design)" not in curve  # (13 plays: one failed in the model)
    assert re.search(r"<td[^>]*>0</td><td[^>]*>1</td><td[^>]*>13</td><td[^>]*>1</td><td[^>]*>0\.500</td>", curve)


def test_learning_curve_numbers(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False, baseline=None)
    data = load_run(store, "spade-1")
    curve = data.learning_curve
    assert data.steps_per_generation == K  # from the stored config

    def at(step: int, level: str, skill: str | None = None, source: str | None = None) -> pd.Series:
        rows = curve[(curve["step"] == step) & (curve["level"] == level)]
        if skill is not None:
            rows = rows[rows["skill"] == skill]
        if source is not None:
            rows = rows[rows["source"] == source]
        assert len(rows) == 1, rows
        return rows.iloc[0]

    # hinted plays and the demo play (policy_step -1) are not steps of the curve
    assert sorted(curve["step"].unique()) == [0, 1, 2, 3]
    assert dict(zip(curve["step"], curve["gen"], strict=True)) == {0: 1, 1: 1, 2: 2, 3: 2}
    # step 3, optimization, design: the optimization design wins 3 of 4, and its play whose model call failed
    # (return 1.0 in the frame) is counted as a play with an error but left out of the win rate -> 3 / 4
    row = at(3, "skill_source", "optimization", "design")
    assert (row["plays"], row["errors"], row["win_rate"]) == (5, 1, pytest.approx(0.75))
    # step 3, optimization (design 3 of 4 + replay 2 of 4), overall 13 of 20, design source 9 of 12
    assert at(3, "skill", skill="optimization")["win_rate"] == pytest.approx(5 / 8)
    assert at(3, "overall")["win_rate"] == pytest.approx(13 / 20)
    assert at(3, "source", source="design")["win_rate"] == pytest.approx(9 / 12)
    assert at(0, "overall")["win_rate"] == pytest.approx(4 / 20)  # the hinted plays (all wins) are left out
    assert at(1, "source", source="starter")["plays"] == PLAYS
    assert set(curve.loc[curve["level"] == "skill", "skill"]) == {s for s, _ in SKILLS}
    table = learning_curve_table(curve)
    assert list(table.columns) == ["step", "gen", "plays", "errors", "win_rate", "design", "replay", "starter"]
    assert table["plays"].tolist() == [21] * 4


def test_files_no_marker_lists_do_not_reach_the_report(tmp_path: Path) -> None:
    """A file written into a run's partitions around the pipeline (an orphan of a killed stage, another
    command's file) used to reach the report's views; the run reader reads what the markers list."""
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False, baseline=None)
    before = load_run(store, "spade-1")
    pool = store.read_table("pool", "spade-1", 2)
    won = [_play(env_id, "no_hint", 50 + p, 1.0, 3) for env_id in pool["env_id"] for p in range(PLAYS)]
    store.write_table("episodes", _frame("episodes", won), run_id="spade-1", gen=2, stage="rollout-s1", shard=7)
    store.write_table("designs", store.read_table("designs", "spade-1", 2).drop(columns=["run_id", "gen"]),
                      run_id="spade-1", gen=2, stage="design", shard=3)  # fmt: skip
    every_file = connect(store).execute("select count(*) from episodes where policy_step = 3").fetchone()
    assert every_file is not None and every_file[0] == 21 + len(won)  # the orphan is in the store's files
    after = load_run(store, "spade-1")
    pd.testing.assert_frame_equal(after.learning_curve, before.learning_curve)
    pd.testing.assert_frame_equal(after.funnel, before.funnel)
    assert after.generations == before.generations


def test_learning_curve_without_config_infers_k_from_the_plays(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    for gen in (1, 2, 3):
        pool = [(f"seed{i:012d}", None, "optimization", "game", "class S: pass\n", "fixed") for i in range(2)]
        _pool_and_plays(store, "bare", gen, pool)
    data = load_run(store, "bare")
    assert data.config == {} and data.steps_per_generation == K
    assert steps_per_generation({}, data.learning_curve) == K
    assert generation_boundaries(sorted(data.learning_curve["step"].unique()), K) == [2, 4]
    out = tmp_path / "out"
    page = write_report(store, "bare", out_dir=out).read_text()
    curve = _section(page, "learning-curve")
    assert "every K = 2 steps" in curve and "win rate (fixed)" in curve and 'id="fig-learning_curve"' in curve
    with Image.open(out / "learning_curve.png") as img:
        assert img.format == "PNG" and img.size[0] > 100


def test_missing_tables_say_no_data_yet(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    frame = _frame(
        "designs",
        [
            {"design_id": "d0", "attempt": 0, "doc_id": None, "group_id": "g", "skill": "optimization", "kind": "game"}
            | {
                "prompt": "[]",
                "completion": "no code",
                "code": None,
                "env_id": None,
                "model_ref": "base",
                "policy_step": 0,
            }
        ],
    )
    write_stage(store, "young", 1, "design", {"designs": frame})
    out = tmp_path / "out"
    (out).mkdir()
    (out / "training.png").write_bytes(b"stale")  # a figure of an earlier report must not linger
    page = write_report(store, "young", out_dir=out).read_text()
    assert "fig-funnel" in _section(page, "funnel")
    for anchor in (
        "scores",
        "designer-reward",
        "learning-curve",
        "training",
        "timeline",
        "evals",
        "top-envs",
        "config",
    ):
        assert "no data yet" in _section(page, anchor), anchor
    assert sorted(p.name for p in out.iterdir()) == ["funnel.png", "index.html"]


def test_unknown_run_is_one_line_naming_it_and_the_runs(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False)
    result = runner.invoke(app, ["spade-9", "--store", str(tmp_path / "store")])
    assert result.exit_code == 2
    assert result.stderr == (f"error: run 'spade-9' is not in the store {tmp_path / 'store'}; runs: fixed-1, spade-1\n")
    empty = runner.invoke(app, ["x", "--store", str(tmp_path / "empty")])
    assert (empty.exit_code, empty.stderr) == (
        2,
        f"error: run 'x' is not in the store {tmp_path / 'empty'}; the store holds no runs yet\n",
    )


def test_s3_store_reports_into_the_working_directory(
    tmp_path: Path, s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(s3_bucket, endpoint_url=s3_endpoint)
    fill(store, hostile=False, baseline=None)
    monkeypatch.chdir(tmp_path)
    args = ["spade-1", "--store", s3_bucket, "--set", f"store.endpoint_url={s3_endpoint}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "spade-report-spade-1/index.html"
    page = (tmp_path / "spade-report-spade-1" / "index.html").read_text()
    run = _section(page, "run")
    assert "1, 2" in run and "UTC" in run
    assert all(f'id="fig-{name}"' in page for name in FIGURES)


def test_out_must_be_a_local_directory(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False, baseline=None)
    result = runner.invoke(app, ["spade-1", "--store", str(tmp_path / "store"), "--out", "s3://bucket/x"])
    assert result.exit_code == 2 and "must be a local directory" in result.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["spade-1", "--store", str(tmp_path / "store"), "--out", str(blocker / "sub")])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: cannot write the report to '{blocker}/sub'")


def _colours(png: Path) -> set[tuple[int, int, int]]:
    with Image.open(png) as img:
        return {c for _, c in img.convert("RGB").getcolors(maxcolors=1 << 20)}


def test_a_baseline_run_draws_its_designer_curve_beside_the_runs(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False, baseline=None)
    ablation(store)
    data = load_run(store, "spade-1", baseline="ablation-1")
    assert data.designer_reward["raw_mean"].tolist() == pytest.approx([1.3 / 3, 1.5 / 3])
    assert data.baseline_designer_reward["raw_mean"].tolist() == pytest.approx([0.3, 0.3])
    out = tmp_path / "out"
    result = runner.invoke(app, ["spade-1", "--store", store.base, "--baseline", "ablation-1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    section = _section((out / "index.html").read_text(), "designer-reward")
    assert "baseline run ablation-1" in section and "designer.train=false" in section
    head = re.findall(r"<th[^>]*>([^<]*)</th>", section)
    assert head[-1] == "baseline ablation-1: raw blend (mean)"
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", section)[1:]]
    assert [(r[0], r[2], r[-1]) for r in rows] == [("1", "0.433", "0.300"), ("2", "0.500", "0.300")]
    orange = (255, 127, 14)  # tab:orange: the baseline's curve
    assert orange in _colours(out / "designer_reward.png")
    alone = tmp_path / "alone"
    write_report(store, "spade-1", out_dir=alone)  # no baseline: the run's curve alone
    assert orange not in _colours(alone / "designer_reward.png")


def test_a_generation_without_its_reward_stage_shows_no_value(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False, baseline=None)
    # gen 3: played, its reward stage not run yet; gen 4: its reward stage ran and rewarded nothing
    pool = [("seed000000000000", None, "optimization", "game", "class S: pass\n", "replay")]
    for gen in (3, 4):
        _pool_and_plays(store, "spade-1", gen, pool)
    write_stage(store, "spade-1", 4, "reward", {"designer_rewards": pd.DataFrame()})
    write_marker(store, StageRecord(stage="reward", run_id="spade-1", gen=4, artifact_hash="a", digest="d", seconds=1))
    data = load_run(store, "spade-1")
    table = data.designer_reward.set_index("gen")
    assert table.loc[3].isna().all()  # not run: no value at all, never 0
    assert (table.loc[4, "designs"], table.loc[4, "trained"]) == (0, 0) and pd.isna(table.loc[4, "raw_mean"])
    section = _section(write_report(store, "spade-1", out_dir=tmp_path / "out").read_text(), "designer-reward")
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", section)[1:]]
    assert rows[2] == ["3"] + ["–"] * 10
    assert rows[3][:3] == ["4", "0", "–"] and rows[3][7] == "0"  # designs kept, after the SE


def test_the_generation_summary_reads_the_trained_designer_reward(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False)
    summary = generation_summary(store, "spade-1", 1, {})
    assert (summary["designer_rewarded"], summary["designer_trained"], summary["designer_variant"]) == (3, 2, "blend")
    assert summary["designer_raw"] == pytest.approx(1.3 / 3)
    assert summary["designer_reward"] == pytest.approx(0.0) and summary["designer_reward_std"] == pytest.approx(
        0.08**0.5
    )
    text = summary_markdown(summary)
    assert "| designer reward (trained): mean ± std (designs kept) | 0.000 ± 0.283 (2) |" in text
    assert "| raw blend: mean (designs rewarded) | 0.433 (3) |" in text
    fixed = summary_markdown(generation_summary(store, "fixed-1", 1, {}))  # a fixed pool: no reward stage
    assert "| designer reward (trained): mean ± std (designs kept) | n/a (no reward stage) |" in fixed
    assert "| raw blend: mean (designs rewarded) | n/a (no reward stage) |" in fixed
    envs = store.read_table("env_scores", "spade-1", 1)["env_id"].tolist()
    top = {row["env_id"]: row for row in top_environments(store, "spade-1", 1, envs)}
    replayed = next(row for row in top.values() if row["replayed"])
    assert replayed["designer_raw"] is None and replayed["designer_reward"] is None
    designed = [(row["designer_raw"], row["designer_reward"]) for row in top.values() if not row["replayed"]]
    assert designed.count((None, None)) == 2  # the two invalid designs with code: never rewarded
    rewarded = sorted(pair for pair in designed if pair != (None, None))
    assert rewarded[0] == (-0.1, None)  # dropped: not trained
    assert rewarded[1:] == [pytest.approx((0.5, -0.2)), pytest.approx((0.9, 0.2))]


def _parameter_run(
    store: Store, run_id: str, people: dict[int, list[int]], overrides: list[str], copies: int = 0
) -> None:
    """A ``designer.mode: parameters`` run: per generation one rewarded design per entry of ``people[gen]``,
    a variant of the test bed's family listing that many people, with raw blend 0.1 x people; and ``copies``
    refused copies of the first design's code, rewarded unplayed (``scoring.parent_copy_raw=0``)."""
    _config(store, run_id, ["designer.mode=parameters", *overrides])
    names = ["Ann", "Ben", "Cleo", "Dan", "Eva", "Finn"]
    for gen, counts in people.items():
        pool, rewards = [], []
        for i, n in enumerate(counts):
            code = f"_NAMES = {names[:n]!r}\n_WORDS = {list('abcdef')!r}\n_SEEN = True\nclass E{i}:\n    pass\n"
            design_id = f"{run_id}-g{gen}-d{i}"
            pool.append((_env_id(code), design_id, "logical_deduction", "game", code, "design"))
            rewards.append(
                {"design_id": design_id, "env_id": _env_id(code), "skill": "logical_deduction", "window_win_rate": 0.5}
                | {"regret": 0.0, "raw": 0.1 * n, "dropped": False, "scale": 1.0, "centred": 0.0, "reward": 0.0}
                | {"train_step": gen * K}
            )
        copy = rewards[0] | {"window_win_rate": None, "regret": None, "raw": 0.0}
        rewards += [copy | {"design_id": f"{run_id}-g{gen}-copy{i}"} for i in range(copies)]
        _pool_and_plays(store, run_id, gen, pool)
        write_stage(store, run_id, gen, "reward", {"designer_rewards": pd.DataFrame(rewards)})


def test_the_designer_curve_has_standard_errors_and_the_chosen_difficulty(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    # Two parent copies per generation in the trained run: trained, never played, so in no curve and no choice.
    _parameter_run(store, "bench", {1: [4, 4, 2], 2: [2, 1, 1, 2]}, ["scoring.parent_copy_raw=0"], copies=2)
    _parameter_run(store, "bench-ablation", {1: [4, 4, 2], 2: [4, 3]}, ["designer.train=false"])
    data = load_run(store, "bench", baseline="bench-ablation")
    curve = data.designer_reward.set_index("gen")
    # gen 2: raw 0.2, 0.1, 0.1, 0.2: std 0.0577, SE = std / sqrt(4)
    assert curve.loc[2, "raw_se"] == pytest.approx(0.0577350 / 2, rel=1e-4)
    assert curve.loc[2, ["designs", "raw_mean", "trained"]].tolist() == pytest.approx([4, 0.15, 6])
    chosen = data.chosen_parameters
    names = chosen[chosen["parameter"] == "len(_NAMES)"].set_index(["run_id", "gen"])
    assert names.loc[("bench", 2), "values"] == "1:2 2:2" and names.loc[("bench", 2), "mean"] == 1.5
    assert names.loc[("bench", 1), "designs"] == 3
    assert names.loc[("bench-ablation", 2), "values"] == "3:1 4:1" and names.loc[("bench-ablation", 1), "designs"] == 3
    assert set(chosen["parameter"]) == {"len(_NAMES)", "len(_WORDS)"}  # a bool is no number
    out = tmp_path / "out"
    result = runner.invoke(app, ["bench", "--store", store.base, "--baseline", "bench-ablation", "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    rows = [
        re.findall(r"<td[^>]*>([^<]*)</td>", r)
        for r in re.findall(r"<tr>(.*?)</tr>", _section(page, "designer-reward"))
    ]
    assert rows[2][:5] == ["2", "4", "0.150", "0.058", "0.029"]  # gen, designs, mean, std, std / sqrt(designs)
    section = _section(page, "chosen-parameters")
    assert "len(_NAMES)" in section and "1:2 2:2" in section and "3:1 4:1" in section
    orange = (255, 127, 14)  # the baseline's values beside the run's
    assert orange in _colours(out / "chosen_parameters.png")
    alone = tmp_path / "alone"
    write_report(store, "bench-ablation", out_dir=alone)  # the ablation alone shows its own choices
    assert "len(_NAMES)" in _section((alone / "index.html").read_text(), "chosen-parameters")


def test_a_run_that_writes_whole_modules_has_no_chosen_parameters(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    fill(store, hostile=False, baseline=None)
    data = load_run(store, "spade-1")
    assert data.chosen_parameters.empty
    assert "chosen-parameters" not in write_report(store, "spade-1", out_dir=tmp_path / "out").read_text()
