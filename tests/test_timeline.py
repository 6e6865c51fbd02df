"""spade_core.report.timeline: stage intervals from markers, and the overlap of generation g+1's design chain with
generation g's training steps, on hand-computed intervals (seconds after T0)."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from spade_core.report.timeline import (
    chain_seconds,
    overlap_fraction,
    parse_time,
    saved_seconds_with_own_devices,
    stage_timeline,
    train_seconds,
)
from spade_core.store.markers import StageRecord

T0 = dt.datetime(2026, 12, 3, 16, 0, 0, tzinfo=dt.UTC)


def iso(offset: float, ms: bool = False) -> str:
    """T0 + ``offset`` seconds as a marker writes it: ``started_at`` to the ms, ``finished_at`` to the second
    (truncated)."""
    moment = T0 + dt.timedelta(seconds=offset)
    if ms:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def record(stage: str, gen: int, start: float, end: float, shard: int | None = None, old: bool = False) -> StageRecord:
    """A marker of a stage that ran from ``start`` to ``end``; ``old``: written before ``started_at`` existed."""
    fields: dict[str, object] = {"finished_at": iso(end), "seconds": end - start}
    if not old:
        fields["started_at"] = iso(start, ms=True)
    return StageRecord(stage=stage, shard=shard, run_id="r", gen=gen, artifact_hash="a", digest="d", **fields)


def markers(*records: StageRecord) -> dict[int, dict[str, StageRecord]]:
    """``list_markers``' shape: ``{gen: {name: record}}``."""
    out: dict[int, dict[str, StageRecord]] = {}
    for r in records:
        out.setdefault(r.gen, {})[r.name] = r
    return out


def generation(gen: int, at: float, trains: tuple[float, ...] = (40.0, 40.0), old: bool = False) -> list[StageRecord]:
    """A whole serial generation from ``at``: chain 0–40 (documents 10, design 20, pool 5, hint 5), then per
    step rollout 20 (10 after step 0) and train ``trains[k]``, score 2 and memory 1 in step 0, reward 2."""
    out, t = [], at

    def add(stage: str, seconds: float) -> None:
        nonlocal t
        out.append(record(stage, gen, t, t + seconds, old=old))
        t += seconds

    for stage, seconds in (("documents", 10), ("design", 20), ("pool", 5), ("hint", 5)):
        add(stage, seconds)
    for k, train in enumerate(trains):
        add(f"rollout-s{k}", 20 if k == 0 else 10)
        if k == 0:
            add("score", 2)
            add("memory", 1)
        add(f"train-s{k}", train)
    add("reward", 2)
    return out


def test_parse_time_accepts_both_marker_formats() -> None:
    assert parse_time("2026-12-03T16:40:01.123Z") == dt.datetime(2026, 12, 3, 16, 40, 1, 123000, tzinfo=dt.UTC)
    assert parse_time("2026-12-03T16:40:01Z") == dt.datetime(2026, 12, 3, 16, 40, 1, tzinfo=dt.UTC)
    assert parse_time("") is None
    with pytest.raises(ValueError, match="not a marker timestamp"):
        parse_time("yesterday")


def test_timeline_rows_kinds_steps_and_order() -> None:
    # generation 1 from T0: chain 0-40, rollout-s0 40-60, score 60-62, memory 62-63, train-s0 63-103,
    # rollout-s1 103-113, train-s1 113-153, reward 153-155
    timeline = stage_timeline(markers(*generation(1, 0.0)))
    assert list(timeline.columns) == ["gen", "stage", "kind", "step", "start", "end", "seconds"]
    assert timeline["stage"].tolist() == [
        "documents",
        "design",
        "pool",
        "hint",
        "rollout-s0",
        "score",
        "memory",
        "train-s0",
        "rollout-s1",
        "train-s1",
        "reward",
    ]
    assert timeline["kind"].tolist() == ["chain"] * 4 + ["rollout", "other", "other", "train", "rollout", "train"] + [
        "other"
    ]
    steps = timeline["step"].tolist()
    assert steps[4] == 0 and steps[7] == 0 and steps[8] == 1 and steps[9] == 1
    assert all(pd.isna(steps[i]) for i in (0, 1, 2, 3, 5, 6, 10))
    train = timeline[timeline["stage"] == "train-s0"].iloc[0]
    assert (train["start"], train["end"], train["seconds"]) == pytest.approx((63.0, 103.0, 40.0))
    assert timeline["start"].iloc[0] == 0.0  # seconds since the earliest start
    assert chain_seconds(timeline) == {1: pytest.approx(40.0)}
    assert train_seconds(timeline) == {1: pytest.approx(80.0)}


def test_partial_overlap() -> None:
    # gen 2's chain runs 73-105 (documents 73-83, design 83-103, pool 103-105): 73-103 inside gen 1's
    # train-s0 (63-103); 103-105 beside gen 1's rollout-s1, which is no training. Gen 2 trains 20 s later on.
    gen2 = [
        record("documents", 2, 73, 83),
        record("design", 2, 83, 103),
        record("pool", 2, 103, 105),
        record("rollout-s0", 2, 155, 165),
        record("train-s0", 2, 165, 185),
    ]
    timeline = stage_timeline(markers(*generation(1, 0.0), *gen2))
    # training: 80 s (gen 1) + 20 s (gen 2); overlapped by the next chain: 30 s
    assert overlap_fraction(timeline) == pytest.approx(30 / 100)
    # Only the generations with a next chain (gen 1; gen 3 has none): 30 of gen 1's 80 s of training.
    assert overlap_fraction(timeline, with_next_only=True) == pytest.approx(30 / 80)
    assert chain_seconds(timeline)[2] == pytest.approx(32.0)
    # min(chain 2 = 32, train 1 = 80) + min(chain 3 = 0, train 2 = 20)
    assert saved_seconds_with_own_devices(timeline) == pytest.approx(32.0)


def test_serial_generations_do_not_overlap() -> None:
    # gen 2 starts after gen 1's reward (155): nothing overlaps, but own devices would still save
    # min(chain 2 = 40, train 1 = 80) + min(chain 3 = 0, train 2 = 30) = 40
    timeline = stage_timeline(markers(*generation(1, 0.0), *generation(2, 155.0, trains=(15.0, 15.0))))
    assert overlap_fraction(timeline) == 0.0
    assert train_seconds(timeline) == {1: pytest.approx(80.0), 2: pytest.approx(30.0)}
    assert saved_seconds_with_own_devices(timeline) == pytest.approx(40.0)


def test_overlapping_chain_stages_and_shards_count_once() -> None:
    # gen 1 trains 50-100. Gen 2: documents 60-80 and design 70-90 overlap each other; validate's two
    # shards (85-95, 88-99) overlap too, and its whole marker (written at 99, taking no time) spans them.
    # Chain union 60-99.01 = 39.01 s, all inside training: 39.01 / 50. Gen 3's chain (60-70) overlaps gen 1's
    # training too, but gen 3 is not gen 1's next generation.
    records = [
        record("train-s0", 1, 50, 100),
        record("documents", 2, 60, 80),
        record("design", 2, 70, 90),
        record("validate", 2, 85, 95, shard=0),
        record("validate", 2, 88, 99, shard=1),
        record("validate", 2, 99, 99.01),
        record("documents", 3, 60, 70),
    ]
    timeline = stage_timeline(markers(*records))
    validate = timeline[(timeline["gen"] == 2) & (timeline["stage"] == "validate")]
    assert len(validate) == 1  # shards are no rows of their own
    assert (validate["start"].iloc[0], validate["end"].iloc[0]) == pytest.approx((35.0, 49.01))  # T = 50 + x
    assert chain_seconds(timeline)[2] == pytest.approx(39.01)
    assert overlap_fraction(timeline) == pytest.approx(39.01 / 50)
    assert saved_seconds_with_own_devices(timeline) == pytest.approx(39.01)  # min(39.01, 50)


def test_old_markers_without_started_at_use_finished_at_minus_seconds() -> None:
    old = stage_timeline(markers(*generation(1, 0.0, old=True), record("documents", 2, 70, 80, old=True)))
    new = stage_timeline(markers(*generation(1, 0.0), record("documents", 2, 70, 80)))
    pd.testing.assert_frame_equal(old, new)
    assert overlap_fraction(old) == pytest.approx(10 / 80)
    # an old marker whose finish was truncated to the second: 5.75-7.75 is placed at 5.0-7.0
    timeline = stage_timeline(markers(record("documents", 1, 0, 3), record("design", 1, 5.75, 7.75, old=True)))
    design = timeline.iloc[1]
    assert (design["start"], design["end"], design["seconds"]) == pytest.approx((5.0, 7.0, 2.0))


def test_started_at_is_used_when_present() -> None:
    # finished_at says 7 (truncated from 7.75); started_at (5.75) and seconds (2) place the stage exactly
    timeline = stage_timeline(markers(record("documents", 1, 0, 3), record("design", 1, 5.75, 7.75)))
    design = timeline.iloc[1]
    assert (design["start"], design["end"]) == pytest.approx((5.75, 7.75))


def test_no_training_time_and_no_markers() -> None:
    chain_only = stage_timeline(markers(record("documents", 1, 0, 10), record("design", 1, 10, 20)))
    assert overlap_fraction(chain_only) == 0.0 and saved_seconds_with_own_devices(chain_only) == 0.0
    empty = stage_timeline({})
    assert empty.empty and list(empty.columns) == ["gen", "stage", "kind", "step", "start", "end", "seconds"]
    assert overlap_fraction(empty) == 0.0 and chain_seconds(empty) == {} and train_seconds(empty) == {}
    timeless = StageRecord(stage="documents", run_id="r", gen=1, artifact_hash="a", digest="d")
    assert stage_timeline({1: {"documents": timeless}}).empty  # a marker with no time is left out
