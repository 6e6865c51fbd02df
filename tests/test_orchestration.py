"""Orchestration without a model: the stage registry, resumable stages and their markers, the run's config
binding, the status of a run from the store, the Prefect tasks, and validation shards on Dask vs threads."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from samples import design_row

from spade_core.config import load_config
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.registry import STAGES
from spade_core.pipeline.run_config import RunConfigMismatch, bind_run_config
from spade_core.pipeline.stage import Body, GeneratorLease, Stage, execute
from spade_core.pipeline.status import generation_stages, next_generation
from spade_core.pipeline.status import stage_names as stages_for
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord, read_marker


def _run(
    ctx: GenerationContext,
    name: str,
    body: Body,
    upstream: list[StageRecord] = (),  # type: ignore[assignment]
    lease: GeneratorLease | None = None,
    shard: int | None = None,
) -> StageRecord:
    stage = Stage(name, body, reads=("documents",), writes=("documents",))
    return execute(stage, ctx, {r.name: r for r in upstream}, (lambda _step: lease) if lease else None, shard)


def _ctx(tmp_path: Path, *overrides: str, run_id: str = "r") -> GenerationContext:
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}", *overrides])
    return GenerationContext(cfg, Store(str(tmp_path)), run_id, 1)


def _docs(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        [{"doc_id": f"d{i}", "source": "s", "title": None, "text": f"text {i}", "n_words": 2} for i in range(n)]
    )


def test_a_stage_is_reused_from_its_marker_and_rerun_when_its_inputs_change(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    calls = []

    def body(run: GenerationContext, model: object) -> dict[str, int]:
        calls.append(1)
        run.write("documents", _docs(len(calls)))
        return {"n": len(calls)}

    upstream = StageRecord(stage="up", run_id="r", gen=1, artifact_hash="h", digest="aaa")
    first = _run(ctx, "documents", body, [upstream])
    again = _run(ctx, "documents", body, [upstream])
    assert (first.status, again.status, len(calls)) == ("ran", "reused", 1)
    assert again.digest == first.digest and again.rows == {"documents": 1}
    changed = upstream.model_copy(update={"digest": "bbb"})
    third = _run(ctx, "documents", body, [changed])
    assert (third.status, len(calls), third.inputs) == ("ran", 2, {"gen1/up": "bbb"})
    assert third.digest != first.digest
    # The rerun replaced its own file: 2 rows now, not 1 + 2.
    assert len(ctx.store.read_table("documents", "r", 1)) == 2
    # A file another command wrote into the same partition is not this stage's: readers that name the
    # stage never see it.
    ctx.store.write_table("documents", _docs(5), run_id="r", gen=1, stage="other-command")
    assert len(ctx.read("documents", ["documents"])) == 2


def test_a_reused_stage_never_loads_the_model(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    loads = []

    @contextlib.contextmanager
    def lease():  # type: ignore[no-untyped-def]
        loads.append(1)
        yield SimpleNamespace(model_ref="fake", supports_token_prompts=False)

    def body(run: GenerationContext, model) -> dict[str, str]:  # type: ignore[no-untyped-def]
        return {"model": model.model_ref}

    record = _run(ctx, "hint", body, [], lease)
    assert (record.info, record.model_calls, len(loads)) == ({"model": "fake"}, 0, 1)
    assert _run(ctx, "hint", body, [], lease).status == "reused" and len(loads) == 1


def test_the_lazy_generator_releases_the_kv_caches_of_the_generator_it_leased() -> None:
    from contextlib import ExitStack

    from spade_core.pipeline.stage import LazyGenerator

    released: list[str] = []

    class Owner:
        model_ref = "owner"

        def generate(self, requests, params):  # type: ignore[no-untyped-def]
            return []

        def release(self, keys) -> None:  # type: ignore[no-untyped-def]
            released.extend(keys)

    with ExitStack() as stack:
        lazy = LazyGenerator(lambda: contextlib.nullcontext(Owner()), stack)  # type: ignore[arg-type,return-value]
        lazy.release(["before-use"])  # nothing leased yet: nothing to free, nothing loaded
        lazy.generate([], None)  # type: ignore[arg-type]
        lazy.release(["k1", "k2"])
    assert released == ["k1", "k2"]


def test_a_run_id_is_bound_to_the_settings_that_decide_its_artifacts(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}"])
    bind_run_config(store, "r", cfg)
    # Execution-only settings and the store's location may change between generations.
    bind_run_config(store, "r", load_config("tiny", overrides=["orchestration.task_runner=dask", "store.root=x"]))
    with pytest.raises(RunConfigMismatch, match=r"rollout.plays_no_hint: 2 -> 5.*spade resume r"):
        bind_run_config(store, "r", load_config("tiny", overrides=["rollout.plays_no_hint=5"]))


def test_status_and_next_generation_come_from_the_markers(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, "training.enabled=false")
    cfg, store = ctx.cfg, ctx.store
    assert next_generation(store, cfg, "r") == 1
    for stage in stages_for(cfg, 1):
        _run(ctx, stage, lambda run, model: {"shards": 2})
    g2 = GenerationContext(cfg, store, "r", 2)
    _run(g2, "documents", lambda run, model: None)
    _run(g2, "rollout-s0", lambda run, model: {"shards": 3}, shard=0)
    assert next_generation(store, cfg, "r") == 2
    states = generation_stages(store, cfg, "r", 2)
    assert states["documents"] == "done" and states["rollout-s0"] == "1/3 shards" and states["train-s1"] == "todo"
    assert read_marker(store, "r", 2, "rollout-s0", 0) is not None and read_marker(store, "r", 2, "rollout-s0") is None


def test_fixed_pool_runs_skip_the_designer_stages_and_evaluation_follows_its_schedule() -> None:
    fixed = load_config("tiny", overrides=["designer.fixed_pool=seeds", "evaluation.every=2"])
    assert "design" not in stages_for(fixed, 1) and "evaluate" not in stages_for(fixed, 1)
    assert stages_for(fixed, 2)[-1] == "evaluate"


def test_the_registry_is_one_ordered_list_whose_inputs_come_before_each_stage() -> None:
    names = [s.name for s in STAGES]
    assert len(set(names)) == len(names)
    for i, stage in enumerate(STAGES):
        assert set(stage.inputs) <= set(names[:i]), stage.name
        assert stage.shard_by is None or stage.shard_by in stage.inputs, stage.name
    assert names[0] == "documents" and names[-3:] == ["train", "reward", "evaluate"]
    write = load_config("tiny", overrides=["designer.mode=write"])
    novelty = load_config("tiny", overrides=["designer.mode=write", "memory.novelty_threshold=0.9"])
    assert "novelty" in stages_for(novelty, 1) and "novelty" not in stages_for(write, 1)
    assert "novelty" in stages_for(load_config("tiny"), 1)  # parameters: a copy of the parent is refused


def test_a_generation_expands_into_k_steps_each_playing_the_weights_the_step_before_trained() -> None:
    from spade_core.pipeline.registry import previous_names
    from spade_core.pipeline.registry import stages_for as instances

    cfg = load_config("tiny", overrides=["training.steps_per_generation=3", "evaluation.every=1"])
    by_name = {s.name: s for s in instances(cfg, 2)}
    assert list(by_name)[:6] == ["documents", "design", "validate", "novelty", "pool", "hint"]
    assert list(by_name)[6:] == [
        "rollout-s0", "score", "memory", "train-s0", "rollout-s1", "train-s1", "rollout-s2", "train-s2", "reward",
        "evaluate",
    ]  # fmt: skip
    assert by_name["rollout-s0"].inputs == ("pool", "hint") and by_name["rollout-s0"].step == 0
    assert by_name["rollout-s2"].inputs == ("pool", "hint", "train-s1")
    assert by_name["train-s1"].inputs == ("memory", "rollout-s1", "score", "train-s0")
    assert by_name["score"].inputs[-1] == "rollout-s0" and by_name["evaluate"].inputs == ("train-s2",)
    # The designer's reward needs every step's plays: it follows the last rollout.
    assert by_name["reward"].inputs[-1] == "rollout-s2"
    # Asynchronous generations (the default): the design chain needs generation g - 1's memory, not its
    # last update (it takes the newest checkpoint when it starts) ...
    assert by_name["design"].previous == ("memory",) and by_name["pool"].previous == ("memory",)
    # ... and generation g's first step trains generation g - 1's designs (D = K): it needs their reward.
    assert by_name["train-s0"].previous == ("reward",)
    assert previous_names(cfg) == {"memory", "reward"}
    synchronous = load_config(
        "tiny", overrides=["training.steps_per_generation=3", "orchestration.async_generations=false"]
    )
    sync = {s.name: s for s in instances(synchronous, 2)}
    assert sync["design"].previous == ("memory", "train-s2")  # the last step of generation g - 1
    assert previous_names(synchronous) == {"memory", "train-s2", "reward"}


def test_with_max_staleness_one_a_steps_plays_wait_for_the_update_before_the_previous_one() -> None:
    from spade_core.pipeline.registry import chain_for
    from spade_core.pipeline.registry import stages_for as instances
    from spade_core.pipeline.stage import target_step

    cfg = load_config("tiny", overrides=["training.steps_per_generation=3", "orchestration.max_staleness=1"])
    by_name = {s.name: s for s in instances(cfg, 2)}
    assert by_name["rollout-s0"].inputs == ("pool", "hint")
    assert by_name["rollout-s1"].inputs == ("pool", "hint", "rollout-s0")  # beside train-s0
    assert by_name["rollout-s2"].inputs == ("pool", "hint", "train-s0", "rollout-s1")  # beside train-s1
    assert by_name["train-s2"].inputs == ("memory", "rollout-s2", "score", "train-s1")  # the update never lags
    # Generation 2 starts at global step 3: its plays use checkpoints 3, 3, 4; its updates train 3, 4, 5.
    assert [target_step(cfg, 2, by_name[f"rollout-s{k}"]) for k in range(3)] == [3, 3, 4]
    assert [target_step(cfg, 2, by_name[f"train-s{k}"]) for k in range(3)] == [3, 4, 5]
    assert [s.name for s in chain_for(cfg, 2)] == ["documents", "design", "validate", "novelty", "pool", "hint"]


def test_the_schedule_runs_a_stage_once_its_inputs_are_done_and_raises_the_first_failure() -> None:
    import threading

    from spade_core.pipeline.schedule import run_stages
    from spade_core.pipeline.stage import Stage, always

    stages = [
        Stage("a", always),
        Stage("b", always, inputs=("a",)),
        Stage("c", always, inputs=("a",)),
        Stage("d", always, inputs=("b", "c")),
    ]
    both = threading.Barrier(2, timeout=10)  # b and c can only pass it together: they must run at once
    order: list[str] = []

    def run_one(stage: Stage) -> StageRecord:
        if stage.name in ("b", "c"):
            both.wait()
        order.append(stage.name)
        return StageRecord(stage=stage.name, run_id="r", gen=1, artifact_hash="h", digest=stage.name)

    records = run_stages(stages, run_one, {}, concurrent=True)
    assert set(records) == set(order) and order[0] == "a" and order[-1] == "d" and set(order[1:3]) == {"b", "c"}
    seen: list[str] = []

    def plain(stage: Stage) -> StageRecord:
        seen.append(stage.name)
        return StageRecord(stage=stage.name, run_id="r", gen=1, artifact_hash="h", digest=stage.name)

    run_stages([stages[0], stages[3], stages[1], stages[2]], plain, {}, concurrent=False)
    assert seen == ["a", "d", "b", "c"]  # sequential: the list's order (the registry's is a valid one)

    def fail_c(stage: Stage) -> StageRecord:
        if stage.name == "c":
            raise ValueError("c broke")
        return StageRecord(stage=stage.name, run_id="r", gen=1, artifact_hash="h", digest=stage.name)

    done: dict[str, StageRecord] = {}
    with pytest.raises(ValueError, match="c broke"):
        run_stages(stages, fail_c, done, concurrent=True)
    assert set(done) == {"a", "b"}  # d never started


def test_stage_tasks_never_use_prefects_cache_and_retry_only_model_and_io_stages() -> None:
    from prefect.cache_policies import NO_CACHE

    from tasks.stages import task_for

    cfg = load_config("tiny", overrides=["orchestration.retries=3"])
    by_name = {s.name: task_for(s, cfg) for s in STAGES}
    assert all(t.cache_policy is NO_CACHE for t in by_name.values())
    assert {n for n, t in by_name.items() if t.retries} == {s.name for s in STAGES if s.retried}
    assert by_name["rollout"].retries == 3 and by_name["score"].retries == 0
    assert {t.name for t in by_name.values()} == {s.name for s in STAGES}


def _write_designs(ctx: GenerationContext) -> StageRecord:
    """Four designs in two shards: two seed environments, a broken module, a reply without code."""
    from spade_core.envs.seeds import load_seed_envs

    seeds = load_seed_envs()[:2]
    codes = [seeds[0].code, "class Broken:\n    def reset(self, seed=None):\n        return 1\n", None, seeds[1].code]
    rows = [design_row(code, f"x{i}", f"e{i}" if code else None) for i, code in enumerate(codes)]
    frame = pd.DataFrame(rows)
    for shard in range(2):
        ctx.execution("design").write("designs", frame.iloc[2 * shard : 2 * shard + 2], shard)
    files = {"designs": [ctx.store.table_path("designs", ctx.run_id, 1, "design", shard) for shard in range(2)]}
    return StageRecord(
        stage="design", run_id=ctx.run_id, gen=1, artifact_hash="h", digest="d", files=files, info={"shards": 2}
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_validation_shards_on_processes_and_a_local_dask_cluster_match_threads(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from prefect import flow, unmapped
    from prefect.testing.utilities import prefect_test_harness

    from flows.runners import task_runner_for
    from spade_core.pipeline.registry import stage
    from tasks.stages import task_for

    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

    @flow
    def validation(config: dict, designs: StageRecord) -> list[StageRecord]:  # type: ignore[type-arg]
        from spade_core.config import SpadeConfig

        cfg = SpadeConfig.model_validate(config)
        validate = task_for(stage("validate"), cfg)
        upstream = {"design": designs}
        shards = validate.map(
            unmapped(cfg), unmapped("r"), unmapped(1), unmapped("validate"), range(2), unmapped(upstream)
        )
        return [f.result() for f in shards]

    rows = {}
    with prefect_test_harness(server_startup_timeout=120):
        for runner in ("threads", "processes", "dask"):
            # The stored designs as written: no retry asks the model for new ones.
            retries = "designer.max_attempts=1"
            ctx = _ctx(tmp_path / runner, f"orchestration.task_runner={runner}", "orchestration.shard_size=2", retries)
            designs = _write_designs(ctx)
            run = validation.with_options(task_runner=task_runner_for(ctx.cfg))
            records = run(ctx.cfg.model_dump(mode="json"), designs)
            assert [r.name for r in records] == ["validate-0", "validate-1"]
            assert all(r.status == "ran" for r in records)
            rows[runner] = ctx.store.read_files("validations", [p for r in records for p in r.files["validations"]])
            rows[runner] = rows[runner].drop(columns=["seconds"])
    expected = rows["threads"].to_dict("records")
    assert rows["processes"].to_dict("records") == expected and rows["dask"].to_dict("records") == expected
    assert list(rows["dask"]["ok"]) == [True, False, False, True]


def test_spade_status_reads_the_store_and_resume_says_when_there_is_nothing_to_do(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spade_core.cli import app

    runner = CliRunner()
    missing = runner.invoke(app, ["status", "nope", "--store", str(tmp_path)])
    assert missing.exit_code == 2 and "run 'nope' is not in the store" in missing.stderr
    ctx = _ctx(tmp_path, "training.enabled=false")
    bind_run_config(ctx.store, "r", ctx.cfg)
    for stage in stages_for(ctx.cfg, 1):
        _run(ctx, stage, lambda run, model: None)
    shown = runner.invoke(app, ["status", "r", "--store", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "gen 1 complete" in shown.stdout and "train-s0:✓" in shown.stdout and "train-s1:✓" in shown.stdout
    assert "next: generation 2  (spade run --run-id r --generations 2)" in shown.stdout
    resumed = runner.invoke(app, ["resume", "r", "--store", str(tmp_path)])
    assert resumed.exit_code == 0 and "nothing to resume" in resumed.stderr
    changed = runner.invoke(app, ["run", "--run-id", "r", "--store", str(tmp_path), "--set", "seed=7"])
    assert changed.exit_code == 2 and "seed: 0 -> 7" in changed.stderr
