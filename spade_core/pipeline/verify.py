"""Whether the files a stage marker lists are still in the store, whole (docs/DESIGN.md §10, "Verified reuse").

A marker is written LAST, so when it exists its files were complete at that moment. What can happen
afterwards is outside the pipeline: a file deleted, truncated, replaced or changed in place (a partial sync,
a disk error, a user's ``rm``), a marker cut short, or a marker edited to name a file elsewhere. The checks:

- :func:`spade_core.store.integrity.file_problems` (every reuse, ``spade status``, ``spade verify``, and
  ``spade sql``'s views through :class:`spade_core.store.reader.RunReader`): each listed file lies inside the
  store, exists with its recorded size and has its recorded digest (``spade verify --quick``: sizes only). A
  checkpoint's weights (gigabytes each) are read for their digest by ``spade verify`` alone (``weights``);
  a reuse checks their sizes, and a checkpoint is checked whole before it is loaded
  (:func:`spade_core.store.checkpoints.check_checkpoint`);
- :func:`schema_problems` (``spade verify --deep``): each Parquet file opens with its table's schema;
- :func:`missing_inputs`: markers that a later marker names as its input but that are gone.

:func:`dependants` closes a set of damaged markers over the markers whose input digests name them (the
stages after them, in this generation and the next): ``spade verify --repair`` removes exactly those, so
``spade resume`` redoes exactly what the damage touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from spade_core.store.artifacts import Store, StoreError
from spade_core.store.integrity import Problem, listed_files
from spade_core.store.markers import MarkerScan, StageRecord, stages_dir
from spade_core.store.schemas import SCHEMAS


def schema_problems(store: Store, record: StageRecord) -> list[Problem]:
    """The Parquet files of ``record`` that do not open as their table (``spade verify --deep``).

    Files outside the store, missing or changed are :func:`file_problems`' to report; here they are passed over.
    """
    problems = []
    for table, recorded in listed_files(record):
        if table not in SCHEMAS:  # a checkpoint's marker file: its digest is the check
            continue
        try:
            path = store.confine(recorded)
            data = store.read_bytes(path)
        except (StoreError, FileNotFoundError):
            continue
        try:
            pq.read_table(pa.BufferReader(_arrow_copy(data)), schema=SCHEMAS[table])
        except Exception as exc:  # pyarrow raises several kinds for a damaged file; its first line says which
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            problems.append(Problem(record.gen, record.name, path, f"does not open as table {table!r}: {first}"))
    return problems


def _arrow_copy(data: bytes) -> pa.Buffer:
    """``data`` copied into memory Arrow owns. A Parquet reader over Python bytes (``io.BytesIO``) leaves
    futures on pyarrow's I/O threads that hold the Python buffer; when one is released while the interpreter
    exits, it asks for the GIL, the thread is torn down inside a C++ destructor and the process aborts
    ("terminate called without an active exception", exit 134, about 1 run in 20). Arrow's own buffer needs
    no GIL to be released."""
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()


def missing_inputs(store: Store, run_id: str, scan: MarkerScan) -> list[Problem]:
    """One problem per marker of this run that a marker names as its input but that is not in the store (a
    damaged marker file is reported as itself, not here).

    The stage runs again on the next ``spade run``; the markers after it follow through their input digests.
    """
    present = {f"gen{g}/{name}" for g, records in scan.records.items() for name in records}
    present |= {f"gen{bad.gen}/{bad.name}" for bad in scan.bad}
    wanted: dict[str, str] = {}
    for gen in sorted(scan.records):
        for name, record in scan.records[gen].items():
            for key in record.inputs:
                wanted.setdefault(key, f"gen {gen} {name}")
    problems = []
    for key in sorted(set(wanted) - present):
        place = _INPUT_KEY.match(key)
        if place is None:
            continue
        gen, name = int(place["gen"]), place["name"]
        path = f"{stages_dir(store, run_id, gen)}/{name}.json"
        problems.append(Problem(gen, name, path, f"is missing (the marker of {wanted[key]} names it as its input)"))
    return problems


_INPUT_KEY = re.compile(r"^gen(?P<gen>\d+)/(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-]*)$")


def dependants(markers: dict[int, dict[str, StageRecord]], damaged: Iterable[tuple[int, str]]) -> set[tuple[int, str]]:
    """``damaged`` (``(gen, marker name)`` pairs) and every marker that depends on one of them, transitively.

    A marker depends on another when its input digests name it (``gen{g}/{name}``): the whole marker of a
    sharded stage on its shards, a later stage on its inputs, the next generation on what it carries over.

    >>> from spade_core.store.markers import digests
    >>> def rec(name, gen=1, *after):
    ...     return StageRecord(stage=name, run_id="r", gen=gen, artifact_hash="a", digest=name,
    ...                        inputs=digests(*after))
    >>> a = rec("a"); b = rec("b", 1, a); c = rec("c", 2, b); d = rec("d")
    >>> sorted(dependants({1: {"a": a, "b": b, "d": d}, 2: {"c": c}}, [(1, "a")]))
    [(1, 'a'), (1, 'b'), (2, 'c')]
    """
    out = set(damaged)
    keys = {f"gen{g}/{name}" for g, name in out}
    grew = True
    while grew:
        grew = False
        for gen, records in markers.items():
            for name, record in records.items():
                if (gen, name) not in out and keys.intersection(record.inputs):
                    out.add((gen, name))
                    keys.add(f"gen{gen}/{name}")
                    grew = True
    return out
