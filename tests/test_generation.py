"""One generation end to end on the tiny preset, run by the local runner over the stage registry (the
production order): documents → designs → validation → pool → hints → rollouts (hint and no hint) → scores
→ memory; the tables join by id in SQL, and rows other commands write into the same partition (``spade
demo``, ``spade rollout --run-id``) never leak into the generation. The model is the micro one: a real model
that writes noise in milliseconds, since what is tested is the pipeline, not the replies (the tiny model
plays the same stages in the flow tests)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from samples import as_stage, design_row, run_body, write_stage

from spade_core.config import load_config
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.local import run_generation
from spade_core.pipeline.stage import fixed_lease
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query

# The module's generation fixture runs real jails and a model: allow for a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200), pytest.mark.usefixtures("jail_processes_checked")]

OVERRIDES = [
    "designer.documents_per_generation=2",
    "designer.group_size=2",
    "designer.max_attempts=1",
    "designer.max_new_tokens=96",
    "designer.skills_per_generation=1",
    "designer.kind=game",
    "rollout.plays_no_hint=2",
    "rollout.plays_hint=2",
    "rollout.max_turns=2",
    "rollout.max_tokens_per_turn=12",
    "rollout.replay_envs=2",
    "rollout.starter_envs=1",
    "rollout.hint_max_words=30",
    "corpus.max_words=60",
    "corpus.max_words_tool=60",
    "designer.memory_negative=0",
    "training.enabled=false",
    "training.steps_per_generation=1",
]


class Result:
    """What one generation wrote, read back from the store by the stages' own names."""

    def __init__(self, cfg, store: Store, run_id: str, gen: int, records) -> None:  # type: ignore[no-untyped-def]
        ctx = GenerationContext(cfg, store, run_id, gen)
        self.records = records
        self.designs = ctx.read("designs", ["design", "validate"])  # validate's marker lists its retries' designs
        self.envs = ctx.pool()
        self.memory = ctx.read("memory", ["memory"])
        self.diversity = records["pool"].info["diversity"]


@pytest.fixture(scope="module")
def generation(tmp_path_factory: pytest.TempPathFactory, micro_generator):  # type: ignore[no-untyped-def]
    from spade_core.envs.seed_check import run_seed_check

    root = tmp_path_factory.mktemp("gen-store")
    cfg = load_config("tiny", overrides=[*OVERRIDES, f"store.root={root}"])
    store = Store(str(root))
    # `spade demo` first, into the same run and generation: its scripted 'reference' episodes and seed
    # validations must not leak into the generation (they once broke scoring).
    run_seed_check(cfg, store, "it", 1, seeds=1)
    records = run_generation(cfg, store, "it", 1, lambda: fixed_lease(micro_generator))
    return store, Result(cfg, store, "it", 1, records)


def test_every_stage_wrote_its_table(generation) -> None:  # type: ignore[no-untyped-def]
    store, result = generation
    counts = query(
        store,
        "select (select count(*) from documents) d, (select count(*) from designs) x, "
        "(select count(*) from validations where design_id is not null) v, (select count(*) from hints) h, "
        "(select count(*) from episodes where condition in ('hint', 'no_hint')) e, "
        "(select count(*) from env_scores) s, (select count(*) from memory) m",
    ).iloc[0]
    assert counts.d == 2 and counts.x == 4 and counts.v == 4
    assert counts.h == len(result.envs) >= 2  # the two replayed seed envs at least
    assert counts.e == len(result.envs) * 4  # 2 no-hint + 2 hinted plays per env
    assert counts.s >= 2 and counts.m >= 12


def test_tables_join_by_id(generation) -> None:  # type: ignore[no-untyped-def]
    store, _ = generation
    orphans = query(
        store,
        """
        select
          (select count(*) from designs x left join documents d using (doc_id) where d.doc_id is null) as designs,
          (select count(*) from validations v left join designs x using (design_id)
            where x.design_id is null and v.design_id is not null) as validations,
          (select count(*) from episodes e left join hints h using (env_id)
            where h.env_id is null and e.condition in ('hint', 'no_hint')) as episodes,
          (select count(*) from env_scores s left join (select distinct env_id from episodes) e using (env_id)
            where e.env_id is null and s.design_id is null) as replayed_scores_without_plays
    """,
    ).iloc[0]
    assert orphans.to_dict() == {"designs": 0, "validations": 0, "episodes": 0, "replayed_scores_without_plays": 0}


def test_regret_is_hint_minus_no_hint_in_sql(generation) -> None:  # type: ignore[no-untyped-def]
    store, _ = generation
    frame = query(
        store,
        """
        with plays as (
          select env_id,
                 avg(episode_return) filter (where condition = 'hint') as r_hint,
                 avg(episode_return) filter (where condition = 'no_hint') as r_no_hint
          from episodes where model_ref not like 'scripted:%' group by env_id)
        select s.env_id, s.regret, s.r_hint, s.r_no_hint, p.r_hint - p.r_no_hint as sql_regret, s.win_rate
        from env_scores s join plays p using (env_id) where not s.hint_leaked
    """,
    )
    assert not frame.empty
    assert (frame.regret - frame.sql_regret).abs().max() < 1e-12
    assert (frame.r_hint - (frame.regret + frame.r_no_hint)).abs().max() < 1e-12
    assert (frame.win_rate == frame.r_no_hint).all()


def test_rows_other_commands_write_change_neither_scores_nor_the_training_batch(generation, micro_generator) -> None:  # type: ignore[no-untyped-def]
    import pandas as pd

    from spade_core.train.step import build_batch

    store, _ = generation
    cfg = load_config("tiny", overrides=[*OVERRIDES, f"store.root={store.base}"])
    ctx = GenerationContext(cfg, store, "it", 1)
    scores = ctx.read("env_scores", ["score"])
    batch = build_batch(cfg, store, "it", 1, 0, micro_generator.tokenizer)
    # What `spade rollout --run-id it` writes: plays of a pool environment, won, under stage 'rollout-cli'.
    played = ctx.read("episodes", ["rollout-s0"]).drop(columns=["run_id", "gen"])
    won = played.assign(episode_id=played["episode_id"] + "-cli", episode_return=1.0, error_type=None)
    store.write_table("episodes", won, run_id="it", gen=1, stage="rollout-cli")
    run_body(ctx, "score", micro_generator)  # score again, over the partition as it is now
    pd.testing.assert_frame_equal(ctx.read("env_scores", ["score"]), scores)
    rebuilt = build_batch(cfg, store, "it", 1, 0, micro_generator.tokenizer)
    assert [(s.source_id, s.advantage) for s in rebuilt.samples()] == [
        (s.source_id, s.advantage) for s in batch.samples()
    ]


def test_invalid_designs_score_zero_and_are_never_rewarded(generation) -> None:  # type: ignore[no-untyped-def]
    store, _ = generation
    frame = query(
        store,
        """
        with final as (
          select design_id, ok from validations where design_id is not null
          qualify row_number() over (partition by run_id, gen, design_id order by attempt desc) = 1)
        select s.win_rate, s.regret, r.design_id as rewarded
        from env_scores s join final f on f.design_id = s.design_id
        left join designer_rewards r on r.design_id = s.design_id
        where not f.ok
    """,
    )
    assert (frame.win_rate == 0.0).all() and (frame.regret == 0.0).all()
    assert frame.rewarded.isna().all()  # the reward stage rewards valid designs only


def test_memory_snapshot_continues_in_the_next_generation(generation) -> None:  # type: ignore[no-untyped-def]
    from spade_core.designer.memory import Memory

    store, result = generation
    again = Memory.load(store, "it", 1)
    assert {e.env_id for e in again} == set(result.memory["env_id"])
    played = result.envs[result.envs["source"] != "starter"]
    assert set(played["env_id"]) <= set(result.memory["env_id"])  # every pool env but the starters
    starters = set(result.envs.loc[result.envs["source"] == "starter", "env_id"])
    assert len(starters) == 1 and not starters & set(result.memory["env_id"])


def test_episodes_carry_hints_in_the_hint_condition(generation) -> None:  # type: ignore[no-untyped-def]
    store, _ = generation
    frame = query(
        store,
        "select e.transcript[2].content as first, h.hint from episodes e join hints h using "
        "(env_id) where e.condition = 'hint'",
    )
    assert all(f.endswith("HINT: " + h) for f, h in zip(frame["first"], frame["hint"], strict=True) if h)


def test_designs_keep_their_group_and_document(generation) -> None:  # type: ignore[no-untyped-def]
    store, _ = generation
    groups = query(
        store, "select group_id, count(*) n, count(distinct doc_id) docs from designs where attempt = 0 group by all"
    )
    assert list(groups.n) == [2, 2] and list(groups.docs) == [1, 1]


def test_no_corpus_ablation_designs_without_documents(tmp_path: Path, micro_generator) -> None:  # type: ignore[no-untyped-def]
    from spade_core.designer.memory import Memory
    from spade_core.pipeline.stages.design import design

    cfg = load_config(
        "tiny",
        overrides=[
            *OVERRIDES,
            "corpus.enabled=false",
            "designer.documents_per_generation=1",
            "designer.group_size=1",
            "designer.max_new_tokens=8",
        ],
    )
    ctx = GenerationContext(cfg, Store(str(tmp_path)), "abl", 1)
    assert run_body(ctx, "documents", micro_generator) == {"rows": 0}
    docs = ctx.store.read_table("documents", ctx.run_id, ctx.gen, stages=["documents"])
    designs = as_stage(ctx, "design", lambda run: design(run, docs, micro_generator, Memory.seeded(cfg.memory)))
    assert docs.empty and designs["doc_id"].isna().all() and "<document>" not in designs["prompt"][0]


def test_a_trained_arm_and_its_ablation_on_one_seed_make_the_same_designs_and_plays(
    tmp_path: Path, micro_generator
) -> None:  # type: ignore[no-untyped-def]
    """Two runs of one store on the same seed, the designer trained in one and not in the other: until their
    weights part (here: never, one model), every sample is the same, designs and plays alike."""
    store = Store(str(tmp_path))
    made = {}
    for run_id, train in (("trained", "true"), ("ablation", "false")):
        cfg = load_config("tiny", overrides=[*OVERRIDES, f"store.root={tmp_path}", f"designer.train={train}"])
        run_generation(cfg, store, run_id, 1, lambda: fixed_lease(micro_generator))
        ctx = GenerationContext(cfg, store, run_id, 1)
        designs = ctx.read("designs", ["design", "validate"]).sort_values(["doc_id", "attempt"])
        episodes = ctx.read("episodes", ["rollout-s0"]).sort_values(["env_id", "condition", "seed"])
        made[run_id] = (
            designs[["doc_id", "skill", "completion", "code"]].reset_index(drop=True),
            episodes[["env_id", "condition", "seed", "episode_return", "transcript"]].reset_index(drop=True),
            [list(ids) for ids in episodes["token_ids"]],
        )
    (designs, episodes, ids), (same_designs, same_episodes, same_ids) = made["trained"], made["ablation"]
    assert len(designs) and len(episodes)
    pd.testing.assert_frame_equal(designs, same_designs)
    pd.testing.assert_frame_equal(episodes, same_episodes)
    assert ids == same_ids


def test_spade_envs_list_and_show(tmp_path: Path) -> None:
    import json

    import pandas as pd
    from typer.testing import CliRunner

    from spade_core.cli import app
    from spade_core.envs.seeds import load_seed_envs
    from spade_core.pipeline.stages import validate

    seed = load_seed_envs()[0]
    ctx = GenerationContext(load_config("tiny", overrides=[f"store.root={tmp_path}"]), Store(str(tmp_path)), "it", 1)
    as_stage(ctx, "design", lambda run: run.write("designs", pd.DataFrame([design_row(seed.code, env_id=seed.env_id)])))
    as_stage(ctx, "validate", lambda run: validate.run(run, None))
    runner = CliRunner()
    listed = runner.invoke(app, ["envs", "list", "--store", str(tmp_path), "--run-id", "it", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["env_id"] for r in json.loads(listed.stdout)] == [seed.env_id]
    shown = runner.invoke(app, ["envs", "show", seed.env_id, "--store", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert f"env {seed.env_id}" in shown.stdout and "validation:" in shown.stdout
    missing = runner.invoke(app, ["envs", "show", "0" * 16, "--store", str(tmp_path)])
    assert missing.exit_code == 2 and "is not in the store's designs table" in missing.stderr


def test_spade_design_shows_designs_for_a_text_file(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from spade_core.cli import app

    doc = tmp_path / "doc.txt"
    doc.write_text("The Tower of Hanoi is a puzzle with three rods and disks of different sizes.")
    result = CliRunner().invoke(
        app,
        [
            "design",
            "--text",
            str(doc),
            "--skill",
            "optimization",
            "--n",
            "1",
            "--json",
            "--set",
            "designer.max_new_tokens=16",
            "--store",
            str(tmp_path / "st"),
        ],
    )
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert row["skill"] == "optimization" and isinstance(row["completion"], str)
    assert row["ok"] in (True, False) and (row["code"] is None) == (row["env_id"] is None)


def test_fixed_pool_of_seeds_is_the_whole_library(tmp_path: Path) -> None:
    from spade_core.designer.pool import fixed_pool

    cfg = load_config("tiny", overrides=["designer.fixed_pool=seeds"])
    envs = fixed_pool(cfg, Store(str(tmp_path)), "base", 1)
    assert len(envs) == 12 and envs["design_id"].isna().all() and envs["code"].str.contains("def reset").all()


def test_fixed_pool_baseline_plays_a_stored_run_without_a_designer(tmp_path: Path, micro_generator) -> None:  # type: ignore[no-untyped-def]
    import pandas as pd

    from spade_core.envs.seeds import load_seed_envs

    store = Store(str(tmp_path))
    env = next(e for e in load_seed_envs() if e.skill == "pattern_recognition")
    other = next(e for e in load_seed_envs() if e.skill == "optimization")
    # The source run played a designed environment and a replayed one; only the designed one is its own.
    row = {"design_id": "d1", "skill": env.skill, "kind": env.kind, "code": env.code, "env_id": env.env_id}
    replayed = {"design_id": None, "skill": other.skill, "kind": other.kind, "code": other.code}
    pool = pd.DataFrame([{**row, "source": "design"}, {**replayed, "env_id": other.env_id, "source": "replay"}])
    write_stage(store, "src", 1, "pool", {"pool": pool})  # with its marker: a run's rows are what it lists
    cfg = load_config(
        "tiny",
        overrides=[
            *OVERRIDES,
            "designer.fixed_pool=run:src",
            "rollout.max_turns=1",
            "rollout.max_tokens_per_turn=6",
            "rollout.hint_max_words=12",
        ],
    )
    records = run_generation(cfg, store, "base", 1, lambda: fixed_lease(micro_generator))
    assert "design" not in records and records["pool"].info["env_ids"] == [env.env_id]
    counts = query(
        store,
        "select (select count(*) from designs where run_id = 'base') x, "
        "(select count(*) from env_scores) s, (select count(*) from episodes) e",
    ).iloc[0]
    assert (counts.x, counts.s, counts.e) == (0, 1, 4)


def test_fixed_pool_from_a_run_without_valid_envs_fails_clearly(tmp_path: Path, micro_generator) -> None:  # type: ignore[no-untyped-def]
    cfg = load_config("tiny", overrides=["designer.fixed_pool=run:nothing"])
    with pytest.raises(ValueError, match="run 'nothing' has no valid environments in the store"):
        run_generation(cfg, Store(str(tmp_path)), "base", 1, lambda: fixed_lease(micro_generator))


def test_pool_diversity_is_reported(generation) -> None:  # type: ignore[no-untyped-def]
    _, result = generation
    assert result.diversity is not None and 1.0 <= result.diversity <= len(result.envs) + 1e-6


def test_novelty_filter_rejects_a_copy_of_a_memory_env(tmp_path: Path) -> None:
    import pandas as pd

    from spade_core.designer.memory import Memory
    from spade_core.pipeline.stages import novelty, validate
    from spade_core.store.verdicts import final_verdicts

    cfg = load_config("tiny", overrides=["memory.novelty_threshold=0.95"])
    memory = Memory.seeded(cfg.memory)
    copied = next(iter(memory)).code + "\n# a cosmetic change\n"
    designs = pd.DataFrame([design_row(copied)])
    ctx = GenerationContext(cfg, Store(str(tmp_path)), "nov", 1)
    as_stage(ctx, "design", lambda run: run.write("designs", designs, 0))
    as_stage(ctx, "validate", lambda run: validate.run(run, None))
    assert as_stage(ctx, "novelty", lambda run: novelty.run(run, None)) == {"checked": 1, "rejected": 1}
    row = final_verdicts(ctx.store, "nov", 1).iloc[0]
    assert (bool(row.ok), row.error_type) == (False, "not_novel") and "cosine similarity" in row.message
    # The verdict is the novelty stage's own row: the validation stays as the validate stage wrote it.
    assert bool(ctx.store.read_table("validations", ctx.run_id, ctx.gen, stages=["validate"]).iloc[0].ok)


def test_repair_round_feeds_the_error_back_and_revalidates(tmp_path: Path) -> None:
    import json

    import pandas as pd

    from spade_core.designer.design import design_messages
    from spade_core.envs.seeds import load_seed_envs
    from spade_core.llm.base import Completion
    from spade_core.pipeline.stages.validate import validate_shard
    from spade_core.store.verdicts import final_designs

    fixed = next(e for e in load_seed_envs() if e.skill == "optimization").code

    class Repairer:
        """A scripted designer that answers every repair request with a working module."""

        model_ref = "scripted:repair"
        supports_token_prompts = False

        def __init__(self) -> None:
            self.seen: list = []

        def generate(self, requests, params):  # type: ignore[no-untyped-def]
            self.seen.extend(requests)
            return [Completion(text=f"Fixed:\n```python\n{fixed}```") for _ in requests]

        def close(self) -> None:
            pass

    cfg = load_config(
        "tiny",
        overrides=[
            "designer.repair_rounds=1",
            "designer.max_attempts=2",
            "memory.report_diversity=false",
            "designer.mode=write",  # a whole-module design: parameters mode would need the parent it varies
        ],
    )
    messages = design_messages(None, "optimization", "easy")
    designs = pd.DataFrame(
        [
            {
                "design_id": "d1",
                "doc_id": None,
                "group_id": "g",
                "skill": "optimization",
                "kind": "game",
                "prompt": json.dumps(messages),
                "completion": "```python\nx = (\n```",
                "code": "x = (\n",
                "env_id": "e0",
                "model_ref": "m",
                "attempt": 0,
                "policy_step": 0,
                "completion_ids": None,
                "logprobs": None,
            }
        ]
    )
    repairer = Repairer()
    ctx = GenerationContext(cfg, Store(str(tmp_path)), "rep", 1)
    as_stage(ctx, "design", lambda run: run.write("designs", designs, 0))
    repairs, validations = as_stage(ctx, "validate", lambda run: validate_shard(run, designs, 0, repairer))
    # The repair is a row of its own (attempt 1); the design stage's file is untouched.
    assert list(validations["attempt"]) == [0, 1] and list(validations["ok"]) == [False, True]
    assert (
        repairs.iloc[0].code == fixed
        and ctx.store.read_table("designs", ctx.run_id, ctx.gen, stages=["design"]).iloc[0].code == "x = (\n"
    )
    final = final_designs(ctx.store, "rep", 1).iloc[0]
    assert (final.attempt, final.code, bool(final.ok)) == (1, fixed, True)
    (request,) = repairer.seen
    assert "failed validation (syntax_error)" in request.messages[-1]["content"]


def test_a_failed_prompt_is_retried_with_a_fresh_document_until_valid(tmp_path: Path) -> None:
    import json

    import pandas as pd

    from spade_core.envs.seeds import load_seed_envs
    from spade_core.llm.base import Completion
    from spade_core.pipeline.stages.design import design
    from spade_core.pipeline.stages.validate import validate_shard
    from spade_core.store.verdicts import final_designs

    working = next(e for e in load_seed_envs() if e.skill == "optimization").code

    class Designer:
        """A scripted designer: the first two attempts of every prompt hold no code, the third works."""

        model_ref = "scripted:designer"
        supports_token_prompts = False

        def __init__(self) -> None:
            self.calls: list[list] = []

        def generate(self, requests, params):  # type: ignore[no-untyped-def]
            self.calls.append(requests)
            reply = f"```python\n{working}```" if len(self.calls) == 3 else "I cannot write code."
            return [Completion(text=reply, token_ids=[1, 2], logprobs=[-0.1, -0.2]) for _ in requests]

        def close(self) -> None:
            pass

    store = Store(str(tmp_path))
    overrides = ["designer.documents_per_generation=1", "designer.kind=game", "designer.skills_per_generation=1"]
    overrides += ["designer.mode=write", "designer.max_attempts=3", f"store.root={tmp_path}"]
    cfg = load_config("tiny", overrides=overrides)
    ctx = GenerationContext(cfg, store, "retry", 1)
    from spade_core.pipeline.stages import documents

    as_stage(ctx, "documents", lambda run: documents.run(run, None))
    docs = ctx.read("documents", ["documents"])
    designer = Designer()
    first = as_stage(ctx, "design", lambda run: design(run, docs, designer, run.previous_memory()))
    # As the validate stage reads its shard: the store's column order, not the design stage's dict order.
    retries, validations = as_stage(
        ctx, "validate", lambda run: validate_shard(run, run.read_shard("designs", "design", 0), 0, designer)
    )
    assert list(validations["attempt"]) == [0, 1, 2] and list(validations["ok"]) == [False, False, True]
    assert list(retries["design_id"]) == [first.iloc[0].design_id] * 2  # one prompt, its later attempts
    fresh = ctx.store.read_table("documents", ctx.run_id, ctx.gen, stages=["validate"])
    assert len(fresh) == 2 and set(retries["doc_id"]) == set(fresh["doc_id"])
    assert first.iloc[0].doc_id not in set(fresh["doc_id"])  # each retry reads a fresh document
    prompt = json.loads(retries.iloc[1].prompt)[-1]["content"]
    assert fresh.set_index("doc_id").loc[retries.iloc[1].doc_id].text.split()[0] in prompt
    final = final_designs(store, "retry", 1).iloc[0]
    assert (final.attempt, bool(final.ok), list(final.logprobs)) == (2, True, [-0.1, -0.2])
    # With one attempt fewer the prompt yields no valid design: nothing to reward, and it is counted.
    cfg2 = load_config("tiny", overrides=[*overrides, "designer.max_attempts=2", f"store.root={tmp_path}"])
    ctx2 = GenerationContext(cfg2, store, "retry2", 1)
    as_stage(ctx2, "documents", lambda run: documents.run(run, None))
    designer2 = Designer()
    designs2 = as_stage(
        ctx2, "design", lambda run: design(run, run.read("documents", ["documents"]), designer2, run.previous_memory())
    )
    as_stage(ctx2, "validate", lambda run: validate_shard(run, designs2, 0, designer2))
    for step in range(cfg2.training.steps_per_generation):  # nothing was valid, so nothing was played
        write_stage(store, "retry2", 1, f"rollout-s{step}", {"episodes": pd.DataFrame()})
    summary = run_body(ctx2, "reward")
    assert summary["rewarded"] == 0 and summary["failed_prompts"] == 1
