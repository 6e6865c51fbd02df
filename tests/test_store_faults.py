"""Store I/O through a flaky S3 endpoint: tests/flaky_s3.py's proxy on 127.0.0.1 in front of moto's server
drops, cuts, delays and throttles requests; the store's S3 filesystem (spade_core/store/fs.py) retries them, so a
generation written through it equals the same generation written on a clean endpoint, and reads and
``spade sql`` through it see every row. A permanent error (no such bucket, access denied) fails on its
first answer (docs/DESIGN.md §12)."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest
from flaky_s3 import FaultPlan, flaky_s3
from samples import frame, write_stage
from test_resume import OVERRIDES as RESUME_OVERRIDES
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.config import load_config
from spade_core.pipeline.local import run_generation
from spade_core.pipeline.stage import fixed_lease
from spade_core.store.artifacts import Store, StoreError
from spade_core.store.catalog import connect, query
from spade_core.store.fs import MAX_ATTEMPTS, S3FS_RETRIES

runner = CliRunner()
NO_FAULTS = FaultPlan(drop=0, lost=0, truncate=0, slowdown=0, unavailable=0, delay=0)
# The cheapest generation that runs every stage: one short design, two replayed seed environments, one play
# of each kind, one step, no training; on the micro model (a random two-layer model: its text is noise).
OVERRIDES = [
    *(o for o in RESUME_OVERRIDES if not o.startswith(("rollout.plays_", "orchestration.", "training.steps_"))),
    "rollout.plays_no_hint=1",
    "rollout.plays_hint=1",
    "training.steps_per_generation=1",
]
IDS = {  # what identifies a row of each table within one generation
    "documents": "doc_id",
    "designs": "design_id || ':' || attempt",
    "validations": "design_id || ':' || attempt",
    "pool": "env_id",
    "hints": "env_id",
    "episodes": "episode_id",
    "env_scores": "coalesce(design_id, env_id)",
    "memory": "env_id",
}


def _bucket(endpoint: str, name: str) -> str:
    """Create bucket ``name`` (a fixed name: the proxy's faults follow the request paths) on the clean endpoint."""
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/store"


def _sql_args(root: str, endpoint: str) -> list[str]:
    return ["sql", "--store", root, "--set", f"store.endpoint_url={endpoint}", "--format", "json"]


def _ids(store: Store, run_id: str) -> dict[str, list[str]]:
    """The sorted ids of every table's rows of run ``run_id``, through one catalog connection."""
    con = connect(store)
    try:
        return {
            table: [
                str(v)
                for (v,) in con.execute(f"select {key} from {table} where run_id = ? order by 1", [run_id]).fetchall()
            ]
            for table, key in IDS.items()
        }
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("jail_processes_checked")
def test_a_generation_through_a_flaky_endpoint_equals_the_same_generation_on_a_clean_one(
    s3_endpoint: str, micro_model_dir: str, micro_generator: object
) -> None:
    roots = {"clean": _bucket(s3_endpoint, "spade-gen-clean"), "flaky": _bucket(s3_endpoint, "spade-gen-flaky")}

    def generation(root: str, endpoint: str) -> float:
        where = [f"store.root={root}", f"store.endpoint_url={endpoint}", f"model.name_or_path={micro_model_dir}"]
        cfg = load_config("tiny", overrides=[*OVERRIDES, *where])
        started = time.monotonic()
        run_generation(cfg, Store(root, endpoint_url=endpoint), "g", 1, lambda: fixed_lease(micro_generator))  # type: ignore[arg-type]
        return time.monotonic() - started

    clean_s = generation(roots["clean"], s3_endpoint)
    plan = FaultPlan(drop=0.04, lost=0.03, truncate=0.04, slowdown=0.04, unavailable=0.02, delay=0.08)
    with flaky_s3(s3_endpoint, seed=26, plan=plan, lifetime_s=400) as proxy:
        flaky_s = generation(roots["flaky"], proxy.url)
        counts = "select run_id, gen, count(*) as n from episodes group by all order by all"
        through_proxy = runner.invoke(app, [*_sql_args(roots["flaky"], proxy.url), counts])
        stats = proxy.stats()
    print(f"\nclean {clean_s:.1f} s, flaky {flaky_s:.1f} s, proxy {stats}")
    dropped = stats["drop"] + stats["lost"] + stats["truncate"]
    assert dropped > 0 and stats["slowdown"] + stats["unavailable"] > 0 and stats["delay"] > 0, stats
    assert stats["retried"] >= 0.8 * (dropped + stats["slowdown"] + stats["unavailable"]), stats  # by the client

    stores = {name: Store(root, endpoint_url=s3_endpoint) for name, root in roots.items()}
    clean, flaky = _ids(stores["clean"], "g"), _ids(stores["flaky"], "g")
    for table in IDS:
        assert clean[table], f"{table}: the clean generation wrote no rows"
        assert flaky[table] == clean[table], f"{table}: flaky {flaky[table]} != clean {clean[table]}"
        assert len(set(flaky[table])) == len(flaky[table]), f"{table}: duplicate ids {flaky[table]}"
    files = {name: sorted(p.split("/store/", 1)[1] for p in st.fs.find(st.base)) for name, st in stores.items()}
    assert files["flaky"] == files["clean"]  # the same tables, markers and run config: nothing extra, nothing lost
    assert through_proxy.exit_code == 0, through_proxy.output
    clean_counts = runner.invoke(app, [*_sql_args(roots["clean"], s3_endpoint), counts])
    assert json.loads(through_proxy.stdout) == json.loads(clean_counts.stdout) != []


def _fill(store: Store) -> None:
    for gen in (1, 2):
        for shard in range(2):
            write_stage(store, "r", gen, "rollout", {"episodes": frame("episodes", 3)}, shard=shard)
    write_stage(store, "r", 1, "hint", {"hints": frame("hints")})
    store.write_text(store.run_dir("r") + "/config.yaml", "seed: 0\n")


def test_writes_reads_and_sql_through_a_flaky_endpoint_see_every_row(s3_endpoint: str) -> None:
    root = _bucket(s3_endpoint, "spade-faults-rw")
    plan = FaultPlan(drop=0.05, lost=0.03, truncate=0.05, slowdown=0.04, unavailable=0.03, delay=0.05, max_delay_s=0.1)
    with flaky_s3(s3_endpoint, seed=7, plan=plan, lifetime_s=120) as proxy:
        store = Store(root, endpoint_url=proxy.url)
        _fill(store)
        episodes = store.read_table("episodes", "r")
        config = store.read_bytes(store.run_dir("r") + "/config.yaml")
        sql = "select gen, count(*) as n, count(distinct episode_id || '/' || gen) as ids from episodes group by all"
        result = runner.invoke(app, [*_sql_args(root, proxy.url), sql + " order by gen"])
        stats = proxy.stats()
    print(f"\nproxy {stats}")
    assert stats["retried"] > 0 and stats["drop"] + stats["lost"] + stats["truncate"] > 0, stats
    assert len(episodes) == 12 and config == b"seed: 0\n"
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"gen": 1, "n": 6, "ids": 3}, {"gen": 2, "n": 6, "ids": 3}]
    clean = Store(root, endpoint_url=s3_endpoint)
    pd.testing.assert_frame_equal(clean.read_table("episodes", "r"), episodes)
    assert [query(clean, f"select count(*) as n from {t}").n[0] for t in ("episodes", "hints")] == [12, 2]


def test_a_missing_bucket_fails_on_its_first_answer(s3_endpoint: str) -> None:
    with flaky_s3(s3_endpoint, plan=NO_FAULTS, lifetime_s=60) as proxy:
        started = time.monotonic()
        with pytest.raises(StoreError, match="bucket 'spade-no-such-bucket' does not exist"):
            Store("s3://spade-no-such-bucket/store", endpoint_url=proxy.url)
        elapsed, stats = time.monotonic() - started, proxy.stats()
    assert stats["requests"] == 1 and elapsed < 2, (stats, elapsed)


def test_access_denied_fails_on_its_first_answer(s3_endpoint: str) -> None:
    root = _bucket(s3_endpoint, "spade-faults-denied")
    with flaky_s3(s3_endpoint, plan=NO_FAULTS, lifetime_s=60) as proxy:
        store = Store(root, endpoint_url=proxy.url)
        write_stage(store, "r", 1, "hint", {"hints": frame("hints")})
        path = store.table_files("hints", "r", 1)[0]
        proxy.deny.add("spade-faults-denied")
        before, started = proxy.stats()["requests"], time.monotonic()
        with pytest.raises(PermissionError):
            store.read_bytes(path)
        with pytest.raises(PermissionError):
            store.write_bytes(path, b"x")
        elapsed, requests = time.monotonic() - started, proxy.stats()["requests"] - before
        with pytest.raises(StoreError, match="not reachable"):
            Store(root, endpoint_url=proxy.url)
    assert requests == 2 and elapsed < 2, (requests, elapsed)


def test_a_gone_endpoint_fails_after_bounded_retries(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _bucket(s3_endpoint, "spade-faults-gone")
    with flaky_s3(s3_endpoint, plan=NO_FAULTS, lifetime_s=60) as proxy:
        url = proxy.url
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # the standard variable bounds botocore's attempts
    started = time.monotonic()
    with pytest.raises(StoreError, match="not reachable: Could not connect to the endpoint URL"):
        Store(root, endpoint_url=url)
    assert time.monotonic() - started < 2 * S3FS_RETRIES + 1


def test_every_s3_store_retries_with_the_standard_mode(s3_bucket: str, s3_endpoint: str) -> None:
    fs = Store(s3_bucket, endpoint_url=s3_endpoint).fs
    config = fs.s3.meta.config
    assert config.retries == {"mode": "standard", "total_max_attempts": MAX_ATTEMPTS}
    assert (fs.retries, config.connect_timeout, config.read_timeout) == (S3FS_RETRIES, 5, 30)


def test_the_flaky_proxy_is_bounded_in_requests_and_time(s3_endpoint: str) -> None:
    import http.client

    def status(url: str) -> int:
        conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=5)
        try:
            conn.request("GET", "/spade-faults-bounds")
            answer = conn.getresponse()
            answer.read()
            return answer.status
        finally:
            conn.close()

    _bucket(s3_endpoint, "spade-faults-bounds")
    with flaky_s3(s3_endpoint, plan=NO_FAULTS, max_requests=2, lifetime_s=1.0) as proxy:
        assert [status(proxy.url) for _ in range(3)] == [200, 200, 503]  # the third: ProxyExhausted
        time.sleep(1.5)
        with pytest.raises(ConnectionRefusedError):
            status(proxy.url)  # stopped by itself
