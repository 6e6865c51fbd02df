"""The environment memory: FIFO, retrieval rules, seeding, stored win rate and code, persistence, the ablation
(docs/DESIGN.md §7 steps 3, 8)."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest
from samples import write_stage

from spade_core.config import MemoryConfig, ScoringConfig
from spade_core.designer.memory import STAGE, Memory, MemoryEntry, win_fractions
from spade_core.envs.seeds import load_seed_envs
from spade_core.method.scoring import score_environments
from spade_core.store.artifacts import Store
from spade_core.store.schemas import SCHEMAS, to_arrow


def entry(name: str, skill: str = "optimization", win: float = 0.5, regret: float = 0.0, gen: int = 1) -> MemoryEntry:
    kind = "tool" if skill == "data_retrieval" else "game"
    return MemoryEntry(name, skill, kind, f"class {name}: ...", win, regret, gen)


def ids(entries: list[MemoryEntry] | Memory) -> list[str]:
    return [e.env_id for e in entries]


def write_snapshot(store: Store, run_id: str, gen: int, memory: Memory) -> None:
    """Generation ``gen``'s snapshot, as the memory stage writes it (its file of the ``memory`` table and
    the marker listing it)."""
    write_stage(store, run_id, gen, STAGE, {"memory": memory.to_frame()})


# -- FIFO ------------------------------------------------------------------------------------------------
def test_default_capacity_is_the_papers_200() -> None:
    memory = Memory(entries=[entry(f"e{i}") for i in range(250)])
    assert len(memory) == 200 and ids(memory)[0] == "e50" and ids(memory)[-1] == "e249"


def test_fifo_evicts_the_oldest_beyond_capacity() -> None:
    memory = Memory(MemoryConfig(capacity=3), [entry(f"e{i}") for i in range(5)])
    assert ids(memory) == ["e2", "e3", "e4"]


def test_adding_an_existing_env_replaces_it_and_makes_it_newest() -> None:
    memory = Memory(MemoryConfig(capacity=3), [entry("e0"), entry("e1"), entry("e2")])
    memory.add(entry("e0", win=0.9, regret=0.2, gen=4))
    assert ids(memory) == ["e1", "e2", "e0"]
    assert memory.get("e0") == entry("e0", win=0.9, regret=0.2, gen=4)
    memory.add(entry("e3"))
    assert ids(memory) == ["e2", "e0", "e3"]  # e1 is now the oldest, not e0


# -- positives ---------------------------------------------------------------------------------------------
def test_positive_band_edges_are_inclusive() -> None:
    wins = {"lo_out": 0.149, "lo_edge": 0.15, "mid": 0.5, "hi_edge": 0.85, "hi_out": 0.851}
    memory = Memory(entries=[entry(name, win=win) for name, win in wins.items()])
    assert sorted(ids(memory.positives("optimization", k=10))) == ["hi_edge", "lo_edge", "mid"]


def test_positives_keep_only_the_requested_skill() -> None:
    memory = Memory(entries=[entry("opt"), entry("logic", skill="logical_deduction", regret=0.9)])
    assert ids(memory.positives("optimization", k=2)) == ["opt"]
    assert ids(memory.positives("causal_inference", k=2)) == []


def test_positives_without_rng_are_the_top_k_by_regret() -> None:
    memory = Memory(entries=[entry(f"r{r}", regret=r / 10) for r in (3, 6, 1, 5, 4, 2)])
    assert ids(memory.positives("optimization", k=2)) == ["r6", "r5"]


def test_positives_with_rng_come_from_the_top_10_by_regret_when_3k_is_smaller() -> None:
    memory = Memory(entries=[entry(f"r{r:02d}", regret=r / 100) for r in range(15)])
    seen: set[str] = set()
    for seed in range(200):
        chosen = memory.positives("optimization", k=2, rng=random.Random(seed))
        assert len(chosen) == 2 and [e.regret for e in chosen] == sorted((e.regret for e in chosen), reverse=True)
        seen.update(ids(chosen))
    assert seen == {f"r{r:02d}" for r in range(5, 15)}  # the top max(3 * 2, 10) = 10; r00 … r04 never


def test_positives_with_rng_come_from_the_top_3k_when_it_exceeds_10() -> None:
    memory = Memory(entries=[entry(f"r{r:02d}", regret=r / 100) for r in range(20)])
    memory.add(entry("other_skill", skill="logical_deduction", regret=0.99))
    memory.add(entry("too_easy", win=0.95, regret=0.98))
    seen = {e.env_id for seed in range(200) for e in memory.positives("optimization", k=4, rng=random.Random(seed))}
    assert seen == {f"r{r:02d}" for r in range(8, 20)}  # the top max(3 * 4, 10) = 12 of the skill's in-band


def test_regret_ties_prefer_the_newest_entry() -> None:
    memory = Memory(entries=[entry("old", regret=0.1), entry("new", regret=0.1)])
    assert ids(memory.positives("optimization", k=1)) == ["new"]


def test_fewer_candidates_than_k_returns_them_all() -> None:
    memory = Memory(entries=[entry("a", regret=0.1), entry("b", regret=0.3)])
    assert ids(memory.positives("optimization", k=5, rng=random.Random(0))) == ["b", "a"]


def test_positives_for_an_unknown_skill_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'optimisation'"):
        Memory().positives("optimisation")


# -- negatives ---------------------------------------------------------------------------------------------
def test_negatives_are_same_skill_strictly_above_high_or_below_low() -> None:
    wins = {"easy": 0.95, "hard": 0.05, "high_edge": 0.9, "low_edge": 0.1, "mid": 0.5, "solved": 1.0}
    memory = Memory(entries=[entry(n, win=w) for n, w in wins.items()])
    memory.add(entry("other_easy", skill="logical_deduction", win=1.0))
    memory.add(entry("tool_hard", skill="data_retrieval", win=0.0))
    assert sorted(ids(memory.negatives("optimization", k=10))) == ["easy", "hard", "solved"]
    assert ids(memory.negatives("logical_deduction", k=10)) == ["other_easy"]
    assert memory.negatives("causal_inference", k=10) == []


def test_negatives_without_rng_are_the_newest() -> None:
    memory = Memory(entries=[entry("a", win=0.0), entry("b", win=1.0), entry("c", win=0.5)])
    assert ids(memory.negatives("optimization", k=1)) == ["b"]


def test_negatives_with_rng_sample_among_all_candidates() -> None:
    memory = Memory(entries=[entry(f"n{i}", win=0.0) for i in range(5)] + [entry("mid")])
    seen = {e.env_id for seed in range(50) for e in memory.negatives("optimization", k=1, rng=random.Random(seed))}
    assert seen == {f"n{i}" for i in range(5)}


def test_negatives_for_an_unknown_skill_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'optimisation'"):
        Memory().negatives("optimisation")


def test_negative_class_name_is_the_env_class_parsed_from_the_code() -> None:
    code = "import random\n\nclass Cell:\n    pass\n\nclass FurnaceEnv:\n    def reset(self, seed=None): ...\n"
    assert MemoryEntry("e1", "optimization", "game", code, 0.95, 0.0, 1).class_name == "FurnaceEnv"
    assert MemoryEntry("e2", "optimization", "game", "x = 1", 0.95, 0.0, 1).class_name == "e2"


# -- determinism, ablation ---------------------------------------------------------------------------------
def test_retrieval_is_deterministic_given_the_seed() -> None:
    memory = Memory(entries=[entry(f"p{i}", regret=i / 20, win=0.5 if i % 3 else 0.0) for i in range(12)])

    def prompts(rng: random.Random) -> list[tuple[list[MemoryEntry], list[MemoryEntry]]]:
        return [(memory.positives("optimization", 2, rng), memory.negatives("optimization", 2, rng)) for _ in range(4)]

    assert prompts(random.Random(7)) == prompts(random.Random(7))
    assert memory.positives("optimization", 2, 7) == memory.positives("optimization", 2, random.Random(7))
    assert len({tuple(ids(memory.positives("optimization", 2, s))) for s in range(20)}) > 1


def test_no_memory_ablation_retrieves_nothing_but_still_records() -> None:
    memory = Memory(MemoryConfig(enabled=False), [entry("a", regret=0.5), entry("b", win=0.0)])
    assert memory.positives("optimization", 2, random.Random(0)) == []
    assert memory.negatives("optimization", 1, random.Random(0)) == []
    assert len(memory) == 2


def test_k_zero_retrieves_nothing() -> None:
    memory = Memory(entries=[entry("a"), entry("b", win=0.0)])
    assert memory.positives("optimization", k=0) == [] and memory.negatives("optimization", k=0) == []


# -- seeding, stored code ---------------------------------------------------------------------------------
def test_seeded_memory_holds_every_seed_env_as_an_in_band_positive() -> None:
    seeds = load_seed_envs()
    memory = Memory.seeded()
    assert ids(memory) == [s.env_id for s in seeds]
    for seed in seeds:
        got = memory.get(seed.env_id)
        assert got == MemoryEntry(seed.env_id, seed.skill, seed.kind, seed.code, 0.5, 0.0, 0)
        assert ids(memory.positives(seed.skill, k=2)) == [seed.env_id]
        assert memory.negatives(seed.skill, k=1) == []


def test_initial_memory_follows_seed_with_library() -> None:
    assert len(Memory.initial()) == 0 and len(Memory.initial(MemoryConfig(seed_with_library=False))) == 0
    assert list(Memory.initial(MemoryConfig(seed_with_library=True))) == list(Memory.seeded())
    assert len(Memory.seeded(MemoryConfig(seed_with_library=False))) == len(load_seed_envs())  # explicit


def test_positives_show_code_cut_to_code_chars_while_the_entry_keeps_it_whole() -> None:
    long_code = "class LongEnv:\n" + "    # padding line\n" * 400
    assert len(long_code) > 2000
    memory = Memory(entries=[MemoryEntry("L", "optimization", "game", long_code, 0.5, 0.2, 1)])
    (shown,) = memory.positives("optimization", k=1)
    assert shown.code == long_code[:2000] and len(shown.code) == 2000
    stored = memory.get("L")
    assert stored is not None and stored.code == long_code  # replay and novelty need it all
    assert memory.replay(1)[0].code == long_code
    (short,) = Memory(MemoryConfig(code_chars=15), list(memory)).positives("optimization", k=1)
    assert short.code == "class LongEnv:\n"


def test_whole_positives_show_the_whole_module_or_leave_the_entry_out() -> None:
    short = "import random\n\nclass ShortEnv:\n    def reset(self, seed=None): ...\n"
    long_code = "class LongEnv:\n" + "    # padding line\n" * 400
    entries = [
        MemoryEntry("S", "optimization", "game", short, 0.5, 0.1, 1),
        MemoryEntry("L", "optimization", "game", long_code, 0.5, 0.9, 1),  # higher regret, but too long
    ]
    memory = Memory(MemoryConfig(code_chars=2000), entries)
    assert [(e.env_id, e.code) for e in memory.positives("optimization", k=2, whole=True)] == [("S", short)]
    for seed in range(10):  # drawn from the modules that fit: never the long one, never a cut
        assert ids(memory.positives("optimization", k=1, rng=random.Random(seed), whole=True)) == ["S"]
    assert ids(memory.positives("optimization", k=2, whole=False)) == ["L", "S"]  # the authors' cut keeps both
    wide = Memory(MemoryConfig(code_chars=len(long_code)), entries)
    assert [e.code for e in wide.positives("optimization", k=2, whole=True)] == [long_code, short]


def test_positives_cut_by_default_as_the_authors_and_whole_when_the_config_says_so() -> None:
    (shown,) = Memory.seeded().positives("optimization", k=1)
    assert len(shown.code) == MemoryConfig().code_chars
    assert Memory.seeded(MemoryConfig(example_code="whole")).positives("optimization", k=1) == []  # too long
    whole = Memory.seeded(MemoryConfig(example_code="whole", code_chars=10_000))
    seed_code = next(s.code for s in load_seed_envs() if s.skill == "optimization")
    assert [e.code for e in whole.positives("optimization", k=1)] == [seed_code]


def test_seeded_positives_are_cut_to_2000_characters() -> None:
    memory = Memory.seeded()
    for seed in load_seed_envs():
        (shown,) = memory.positives(seed.skill, k=1)
        assert len(seed.code) > 2000 and shown.code == seed.code[:2000]


# -- frames and persistence --------------------------------------------------------------------------------
def test_to_frame_has_exactly_the_memory_columns_oldest_first() -> None:
    frame = Memory(entries=[entry("a"), entry("b")]).to_frame()
    assert list(frame.columns) == SCHEMAS["memory"].names and frame["env_id"].tolist() == ["a", "b"]
    to_arrow("memory", frame)
    to_arrow("memory", Memory().to_frame())


def test_a_snapshot_loads_back_with_its_entries_in_order(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    memory = Memory.seeded()
    memory.add(entry("new", regret=0.3, gen=1))
    write_snapshot(store, "run", 1, memory)
    restored = Memory.load(store, "run")
    assert list(restored) == list(memory)
    pos = memory.positives("optimization", 2, 3)
    assert restored.positives("optimization", 2, 3) == pos and ids(pos)[0] == "new"


def test_load_takes_the_latest_snapshot_at_or_before_gen(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    write_snapshot(store, "run", 1, Memory(entries=[entry("g1")]))
    write_snapshot(store, "run", 3, Memory(entries=[entry("g1"), entry("g3", gen=3)]))
    write_snapshot(store, "other-run", 5, Memory(entries=[entry("other")]))
    assert ids(Memory.load(store, "run")) == ["g1", "g3"]
    assert ids(Memory.load(store, "run", gen=2)) == ["g1"]
    assert ids(Memory.load(store, "run", gen=3)) == ["g1", "g3"]


def test_a_snapshot_file_no_marker_lists_is_never_read(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    write_snapshot(store, "run", 1, Memory(entries=[entry("g1")]))
    # written into the run's partitions around the pipeline: generation 1's and a later one's
    store.write_table("memory", Memory(entries=[entry("forged")]).to_frame(), run_id="run", gen=1, stage="x")
    store.write_table("memory", Memory(entries=[entry("forged")]).to_frame(), run_id="run", gen=2, stage=STAGE)
    assert ids(Memory.load(store, "run")) == ["g1"] and ids(Memory.load(store, "run", gen=2)) == ["g1"]
    write_snapshot(store, "run", 2, Memory(entries=[entry("g1"), entry("g2", gen=2)]))  # the stage's own word
    assert ids(Memory.load(store, "run", gen=2)) == ["g1", "g2"]


def test_load_without_a_snapshot_gives_the_initial_memory(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    seeded_cfg = MemoryConfig(seed_with_library=True)
    assert list(Memory.load(store, "run", cfg=seeded_cfg)) == list(Memory.seeded())
    assert len(Memory.load(store, "run")) == 0  # the paper's memory starts empty
    write_snapshot(store, "run", 2, Memory(entries=[entry("g2")]))
    assert list(Memory.load(store, "run", gen=1, cfg=seeded_cfg)) == list(Memory.seeded())
    assert len(Memory.load(store, "run", gen=1)) == 0 and len(Memory.load(store, "run", gen=0)) == 0
    assert ids(Memory.load(store, "run", gen=2)) == ["g2"]


def test_an_empty_snapshot_loads_as_an_empty_memory_that_still_replays(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    write_snapshot(store, "run", 1, Memory())
    memory = Memory.load(store, "run", gen=1)
    assert len(memory) == 0 and memory.replay(2) == []
    assert memory.positives("optimization", 2, 0) == [] and memory.negatives("optimization", 1, 0) == []


def test_writing_a_generation_again_replaces_its_snapshot(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    write_snapshot(store, "run", 1, Memory(entries=[entry("first")]))
    write_snapshot(store, "run", 1, Memory(entries=[entry("second")]))
    assert len(store.table_files("memory", "run", 1)) == 1
    assert ids(Memory.load(store, "run", gen=1)) == ["second"]


def test_load_applies_the_configured_capacity_keeping_the_newest(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    write_snapshot(store, "run", 1, Memory(entries=[entry(f"e{i}") for i in range(5)]))
    restored = Memory.load(store, "run", cfg=MemoryConfig(capacity=2, enabled=False))
    assert ids(restored) == ["e3", "e4"] and restored.positives("optimization") == []


# -- adding scored environments (step 8) -------------------------------------------------------------------
def test_add_scored_adds_valid_envs_once_with_their_gen_and_skips_invalid() -> None:
    seed = load_seed_envs()[0]
    envs = pd.DataFrame(
        {
            "env_id": ["A", "A", "C", seed.env_id],
            "design_id": ["a1", "a2", "c", None],
            "skill": ["optimization", "optimization", "data_retrieval", seed.skill],
            "valid": [True, True, False, True],
            "code": ["class A: ...", "class A: ...", "broken(", seed.code],
        }
    )
    episodes = pd.DataFrame(
        {
            "env_id": ["A", "A", seed.env_id, seed.env_id],
            "condition": ["no_hint", "hint", "no_hint", "hint"],
            "episode_return": [0.0, 1.0, 1.0, 1.0],
            "error_type": [None] * 4,
        }
    )
    memory = Memory.seeded()
    added = memory.add_scored(score_environments(episodes, envs, ScoringConfig()), envs, gen=2)
    assert added == 2 and "C" not in memory and len(memory) == 13
    assert ids(memory)[-2:] == ["A", seed.env_id]  # the replayed seed moved to the newest position
    assert memory.get("A") == MemoryEntry("A", "optimization", "game", "class A: ...", 0.0, 1.0, 2)
    assert memory.get(seed.env_id) == MemoryEntry(seed.env_id, seed.skill, seed.kind, seed.code, 1.0, 0.0, 2)


def test_add_scored_without_a_valid_column_adds_every_env() -> None:
    envs = pd.DataFrame({"env_id": ["A"], "skill": ["data_retrieval"], "code": ["class A: ..."]})
    scores = pd.DataFrame({"env_id": ["A"], "skill": ["data_retrieval"], "win_rate": [0.5], "regret": [0.25]})
    memory = Memory()
    assert memory.add_scored(scores, envs, gen=3) == 1
    assert memory.get("A") == MemoryEntry("A", "data_retrieval", "tool", "class A: ...", 0.5, 0.25, 3)


def test_win_fraction_counts_no_hint_plays_with_return_above_zero() -> None:
    episodes = pd.DataFrame(
        {
            "env_id": ["A"] * 6 + ["B"] * 4,
            "condition": ["no_hint"] * 4 + ["hint"] * 2 + ["no_hint"] * 4,
            "episode_return": [0.2, -0.5, 0.0, 1.0, 1.0, 1.0, 0.4, 0.4, 0.9, 0.7],
            "error_type": [None] * 7 + ["timeout", None, "model_error"],
        }
    )
    # A: 0.2 and 1.0 win, -0.5 and 0.0 do not (the hinted plays are ignored). B: the play the environment
    # broke (timeout) and the one whose model call failed are left out: 2 of 2.
    assert win_fractions(episodes) == {"A": 0.5, "B": 1.0}
    assert win_fractions(episodes.drop(columns=["error_type"]))["B"] == 1.0


def test_add_scored_stores_the_fraction_of_won_plays_not_the_mean_return() -> None:
    envs = pd.DataFrame(
        {"env_id": ["A"], "design_id": ["a"], "skill": ["optimization"], "valid": [True], "code": ["class A: ..."]}
    )
    episodes = pd.DataFrame(
        {
            "env_id": ["A"] * 4,
            "condition": ["no_hint"] * 4,
            "episode_return": [1.0, 1.0, -1.0, -1.0],  # mean return 0.0, but half of the plays were won
            "error_type": [None] * 4,
        }
    )
    scores = score_environments(episodes, envs, ScoringConfig())
    assert scores["win_rate"].iloc[0] == 0.0
    memory = Memory()
    memory.add_scored(scores, envs, gen=1, wins=win_fractions(episodes))
    stored = memory.get("A")
    assert stored is not None and stored.win_rate == 0.5
    assert ids(memory.positives("optimization", k=1)) == ["A"]  # mid-band by fraction; a negative by mean
    with pytest.raises(ValueError, match="'A'"):
        Memory().add_scored(scores, envs, gen=1, wins={})


# -- replay (step 6) ---------------------------------------------------------------------------------------
def test_replay_takes_the_top_k_in_band_of_any_skill_by_regret() -> None:
    memory = Memory(
        entries=[
            entry("low", regret=0.1),
            entry("top_out_of_band", win=0.95, regret=0.9),
            entry("logic", skill="logical_deduction", regret=0.5),
            entry("mid", regret=0.3),
            entry("excluded", regret=0.8),
        ]
    )
    assert ids(memory.replay(2, exclude={"excluded"})) == ["logic", "mid"]
    assert ids(memory.replay(10)) == ["excluded", "logic", "mid", "low"]
    assert memory.replay(0) == []


def test_replay_from_a_seeded_memory_gives_seed_envs_newest_first() -> None:
    seeds = load_seed_envs()
    assert ids(Memory.seeded().replay(2)) == [seeds[-1].env_id, seeds[-2].env_id]


def test_replay_from_an_empty_memory_replays_nothing() -> None:
    assert Memory().replay(2) == [] and Memory.initial().replay(2, exclude={"x"}) == []
