"""When each stage of a run ran, from its markers; how much generation g+1's design chain overlapped
generation g's training steps.

With asynchronous generations, generation g+1's design chain (documents → design → validate → topup →
novelty → pool → hint) runs while generation g trains its steps (``train-s{k}``). Every stage marker
(:class:`~spade_core.store.markers.StageRecord`) records its wall time (``seconds``), when it finished
(``finished_at``, to the second) and, in newer markers, when it started (``started_at``, to the
millisecond). :func:`stage_timeline` turns a run's markers into one interval per stage; the other functions
measure those intervals with union semantics, so overlapping stages (or shards) are never counted twice.

Pure functions: nothing here reads the store (``list_markers`` does).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping

import pandas as pd

from spade_core.pipeline.registry import CHAIN
from spade_core.store.markers import StageRecord

KINDS: tuple[str, ...] = ("chain", "rollout", "train", "other")
COLUMNS: list[str] = ["gen", "stage", "kind", "step", "start", "end", "seconds"]
_DTYPES = {"gen": "int64", "step": "Int64", "start": "float64", "end": "float64", "seconds": "float64"}

_FORMATS = ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ")
_STEP = re.compile(r"^(?P<base>.+)-s(?P<step>\d+)$")

Interval = tuple[float, float]


def parse_time(text: str) -> dt.datetime | None:
    """A marker timestamp (UTC, ``…Z``, with or without fractional seconds) as an aware datetime; None when
    empty.

    >>> parse_time("2026-12-03T16:40:01.123Z")
    datetime.datetime(2026, 12, 3, 16, 40, 1, 123000, tzinfo=datetime.timezone.utc)
    >>> parse_time("2026-12-03T16:40:01Z"), parse_time("")
    (datetime.datetime(2026, 12, 3, 16, 40, 1, tzinfo=datetime.timezone.utc), None)
    """
    if not text:
        return None
    for fmt in _FORMATS:
        try:
            return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
    raise ValueError(f"not a marker timestamp: {text!r} (expected e.g. 2026-12-03T16:40:01.123Z)")


def split_step(stage: str) -> tuple[str, int | None]:
    """A stage instance name as (stage, step): per-step instances carry ``-s{k}``.

    >>> split_step("train-s2"), split_step("design")
    (('train', 2), ('design', None))
    """
    match = _STEP.match(stage)
    return (match["base"], int(match["step"])) if match else (stage, None)


def stage_kind(stage: str) -> str:
    """``chain`` (the design chain before the first step), ``rollout``, ``train`` or ``other``.

    >>> [stage_kind(s) for s in ("validate", "rollout-s0", "train-s1", "score", "evaluate")]
    ['chain', 'rollout', 'train', 'other', 'other']
    """
    base, _ = split_step(stage)
    if base in CHAIN:
        return "chain"
    return base if base in ("rollout", "train") else "other"


def interval(record: StageRecord) -> tuple[dt.datetime, dt.datetime] | None:
    """When one marker's execution ran: from ``started_at`` (or, in markers written before it existed,
    ``finished_at`` − ``seconds``) for ``seconds``; None when the marker has neither time."""
    started = parse_time(record.started_at)
    took = dt.timedelta(seconds=max(0.0, float(record.seconds)))
    if started is not None:
        return started, started + took
    finished = parse_time(record.finished_at)
    if finished is None:
        return None
    return finished - took, finished


def stage_timeline(markers: Mapping[int, Mapping[str, StageRecord]]) -> pd.DataFrame:
    """One row per whole-stage marker of a run (``list_markers``' ``{gen: {name: record}}``), sorted by start.

    Columns: ``gen``; ``stage`` (the instance name, e.g. ``train-s1``); ``kind`` (:func:`stage_kind`);
    ``step`` (``k`` of a ``-s{k}`` instance, else NA; nullable Int64); ``start`` and ``end`` in seconds
    since the earliest start in the run; ``seconds`` = ``end`` − ``start``.

    A sharded stage's whole marker is written after its last shard and takes no time itself, so its row
    spans its shards too: from the earliest shard start to the latest end. Markers without any time are
    left out.
    """
    spans: dict[tuple[int, str], tuple[dt.datetime, dt.datetime]] = {}
    wholes: set[tuple[int, str]] = set()
    for gen, records in markers.items():
        for record in records.values():
            found = interval(record)
            key = (int(gen), record.stage)
            if record.shard is None:
                wholes.add(key)
            if found is None:
                continue
            if key in spans:
                start, end = spans[key]
                found = (min(start, found[0]), max(end, found[1]))
            spans[key] = found
    timed = {key: spans[key] for key in wholes if key in spans}
    if not timed:
        return pd.DataFrame(columns=COLUMNS).astype(_DTYPES)
    origin = min(start for start, _ in timed.values())
    rows = []
    for (gen, stage), (start, end) in timed.items():
        begin, finish = (start - origin).total_seconds(), (end - origin).total_seconds()
        rows.append(
            {
                "gen": gen,
                "stage": stage,
                "kind": stage_kind(stage),
                "step": split_step(stage)[1],
                "start": begin,
                "end": finish,
                "seconds": finish - begin,
            }
        )
    frame = pd.DataFrame(rows, columns=COLUMNS).astype(_DTYPES)
    return frame.sort_values(["start", "end", "gen", "stage"], kind="stable").reset_index(drop=True)


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The disjoint, sorted union of intervals (empty ones dropped).

    >>> union([(3.0, 5.0), (0.0, 1.0), (0.5, 2.0), (4.0, 4.0)])
    [(0.0, 2.0), (3.0, 5.0)]
    """
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The intersection of two unions of intervals, as a disjoint sorted list.

    >>> intersect([(0.0, 4.0), (6.0, 9.0)], [(3.0, 7.0)])
    [(3.0, 4.0), (6.0, 7.0)]
    """
    left, right = union(a), union(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(left) and j < len(right):
        start, end = max(left[i][0], right[j][0]), min(left[i][1], right[j][1])
        if end > start:
            out.append((start, end))
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return out


def length(intervals: Iterable[Interval]) -> float:
    """The total length of a union of intervals (overlaps counted once)."""
    return sum(end - start for start, end in union(intervals))


def _intervals(timeline: pd.DataFrame, kind: str, gen: int | None = None) -> list[Interval]:
    rows = timeline[timeline["kind"] == kind]
    if gen is not None:
        rows = rows[rows["gen"] == gen]
    return [(float(s), float(e)) for s, e in zip(rows["start"], rows["end"], strict=True)]


def _per_gen(timeline: pd.DataFrame, kind: str) -> dict[int, float]:
    gens = sorted({int(g) for g in timeline.loc[timeline["kind"] == kind, "gen"]})
    return {g: length(_intervals(timeline, kind, g)) for g in gens}


def chain_seconds(timeline: pd.DataFrame) -> dict[int, float]:
    """Per generation: the wall time during which some design-chain stage of it ran (union of intervals)."""
    return _per_gen(timeline, "chain")


def train_seconds(timeline: pd.DataFrame) -> dict[int, float]:
    """Per generation: the wall time during which some training step of it ran (union of intervals)."""
    return _per_gen(timeline, "train")


def overlap_seconds(timeline: pd.DataFrame) -> dict[int, float]:
    """Per generation g with training time: |T_g ∩ C_{g+1}|, how long generation g+1's design chain ran
    while generation g trained (see :func:`overlap_fraction`)."""
    return {
        g: length(intersect(_intervals(timeline, "train", g), _intervals(timeline, "chain", g + 1)))
        for g in train_seconds(timeline)
    }


def overlap_fraction(timeline: pd.DataFrame, with_next_only: bool = False) -> float:
    """The share of the run's training-step wall time during which the next generation's design chain ran.

    With T_g the union of generation g's ``train`` intervals and C_g the union of its ``chain`` intervals:
    |∪_g (T_g ∩ C_{g+1})| / |∪_g T_g| (lengths of unions: nothing counted twice). 0.0 without training
    time; 0.0 for a run whose generations ran one after another; 1.0 when the next design chain was busy
    for the whole of every training step. ``with_next_only``: only the generations whose next generation
    has a design chain in the timeline count (the run's last generation has none to overlap with).
    """
    gens = sorted({int(g) for g in timeline["gen"]})
    if with_next_only:
        gens = [g for g in gens if not timeline[(timeline["gen"] == g + 1) & (timeline["kind"] == "chain")].empty]
    trained = [(g, _intervals(timeline, "train", g)) for g in gens]
    total = length(i for _, spans in trained for i in spans)
    if total <= 0:
        return 0.0
    both = [i for g, spans in trained for i in intersect(spans, _intervals(timeline, "chain", g + 1))]
    return length(both) / total


def saved_seconds_with_own_devices(timeline: pd.DataFrame) -> float:
    """Wall time a machine with separate generation and training devices would save on this run's work.

    Σ_g min(|C_{g+1}|, |T_g|): generation g+1's design chain (wall time |C_{g+1}|) no longer queues
    behind generation g's training steps (|T_g|) but runs beside them, which hides the shorter of the two.
    An estimate from this run's measured times: it assumes the chain needs no training device and that
    neither job slows the other; where this run already overlapped them, that part is already saved.
    """
    chain, train = chain_seconds(timeline), train_seconds(timeline)
    return sum(min(chain.get(g + 1, 0.0), seconds) for g, seconds in train.items())
