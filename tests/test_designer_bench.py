"""The designer's test bed: its parent families pass the validator in the jail at every difficulty, the
preset holds the sizes the benchmark states (benchmarks/designer_learning.py), and ``designer.parents`` makes a
family every game skill's library parent."""

from __future__ import annotations

import doctest
import importlib.util
import math
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from samples import ROWS, write_stage

from spade_core.config import GAME_SKILLS, ConfigError, MemoryConfig, ScoringConfig, ValidationConfig, load_config
from spade_core.designer import mutation
from spade_core.designer.memory import Memory, MemoryEntry
from spade_core.designer.parameters import make_variant, parameter_block
from spade_core.envs.seeds import SEED_DIR, load_seed_envs
from spade_core.envs.validate import validate_code
from spade_core.method.scoring import blend_reward
from spade_core.store.artifacts import Store
from spade_core.store.schemas import SCHEMAS

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "designer_learning.py"
(FAMILY,) = load_seed_envs(SEED_DIR / "difficulty")
(WORDS_FAMILY,) = load_seed_envs(SEED_DIR / "use_the_words")
NAMES = ["Ann", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gus", "Hana", "Ivo", "Jade", "Kai", "Lena"]


def _bench():  # type: ignore[no-untyped-def]
    """The benchmark script as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location("designer_learning", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("people", [1, 2, 8, 12])
def test_the_family_passes_the_validator_at_every_length(people: int) -> None:
    code = make_variant(FAMILY.code, f"_NAMES = {NAMES[:people]!r}")
    result = validate_code(code, ValidationConfig(), seeds=(0, 1, 2, 3))
    assert result.ok, result.message


@pytest.mark.parametrize("words", [1, 2, 8, 12])
def test_the_words_family_passes_the_validator_at_every_length(words: int) -> None:
    code = _bench().FAMILIES["words"].variant(words)
    result = validate_code(code, ValidationConfig(), seeds=(0, 1))
    assert result.ok, result.message


def test_the_words_family_pays_only_a_first_reply_that_holds_every_word() -> None:
    namespace: dict[str, object] = {}
    exec(make_variant(WORDS_FAMILY.code, "_WORDS = ['Oak', 'elm', 'oak', ' ']"), namespace)
    env = namespace["UseTheWordsEnv"]()  # type: ignore[operator]
    observation, _ = env.reset(seed=0)
    assert observation == "Write one sentence that uses all of these words: Oak, elm, oak."
    assert env.step("The OAK and the elm.")[1:3] == (1.0, True)
    env.reset(seed=1)
    reward, done = env.step("An elm.")[1:3]
    assert (reward, done) == (0.0, True) and env.step("oak elm")[1] == 0.0  # the first reply is final
    assert parameter_block(WORDS_FAMILY.code).startswith("_WORDS = [")
    assert (WORDS_FAMILY.skill, WORDS_FAMILY.kind) == ("logical_deduction", "game")
    assert WORDS_FAMILY.env_id not in {e.env_id for e in load_seed_envs()}


def test_each_family_counts_its_difficulty_as_its_environment_does() -> None:
    bench = _bench()
    people, words = bench.FAMILIES["people"], bench.FAMILIES["words"]
    assert [people.difficulty(people.variant(v)) for v in (1, 3, 12)] == [1, 3, 10]  # capped by the 10 words
    assert [words.difficulty(words.variant(v)) for v in (1, 3, 12)] == [1, 3, 12]
    assert words.difficulty(WORDS_FAMILY.code) == len(bench.parameters_of(WORDS_FAMILY.code)["_WORDS"])
    assert bench.run_ids("designer", "words") == {
        "trained": "designer-bench-words",
        "ablation": "designer-bench-words-ablation",
    }
    assert bench.run_ids("designer")["trained"] == "designer-bench"


def test_the_family_shows_its_difficulty_as_a_parameter_the_designer_writes() -> None:
    block = parameter_block(FAMILY.code)
    assert block.startswith("_NAMES = [") and "_WORDS = [" in block
    assert FAMILY.skill == "logical_deduction" and FAMILY.kind == "game"
    assert FAMILY.env_id not in {e.env_id for e in load_seed_envs()}  # not part of the seed library


def test_the_preset_has_the_sizes_the_test_bed_needs() -> None:
    cfg = load_config("designer-bench")
    assert cfg.training.roles == "designer" and cfg.designer.train
    assert cfg.designer.mode == "parameters" and cfg.designer.skills_per_generation == 1
    assert cfg.designer.documents_per_generation >= 8  # the centring group of one skill
    window = cfg.rollout.plays_no_hint * cfg.training.steps_per_generation
    assert 0.5 / math.sqrt(window) <= 0.15 and 0.5 / math.sqrt(cfg.rollout.plays_hint) <= 0.15
    assert cfg.training.learning_rate == 5e-5  # benchmarks/learning.py's rate for the agent
    assert cfg.rollout.starter_envs == 0 and cfg.rollout.replay_envs == 0


def test_the_family_is_every_game_skills_parent_where_the_config_names_it() -> None:
    cfg = load_config("designer-bench")
    assert cfg.designer.parents == "difficulty"
    memory = Memory(cfg.memory)
    # an in-band played design of the family: the preset's band admits no memory entry as a parent
    variant = make_variant(FAMILY.code, "_NAMES = ['Ann']")
    memory.add(MemoryEntry("e" * 16, "logical_deduction", "game", variant, 0.5, 0.3, 1))
    for skill in GAME_SKILLS:
        parent = mutation.choose_parent(memory, skill, random.Random(0), parameters=True, parents="difficulty")
        assert (parent.env_id, parent.code, parent.source) == (FAMILY.env_id, FAMILY.code, "seed")
    assert mutation.parent_codes(memory, "difficulty")[FAMILY.env_id] == FAMILY.code
    outside = mutation.choose_parent(Memory(MemoryConfig()), "optimization", random.Random(0), parameters=True)
    assert outside.env_id != FAMILY.env_id and FAMILY.env_id not in mutation.parent_codes(Memory(MemoryConfig()))
    with pytest.raises(ConfigError, match=r"no seed environment .* in data/seed_envs/nowhere"):
        load_config("designer-bench", overrides=["designer.parents=nowhere"])
    words = mutation.choose_parent(memory, "optimization", random.Random(0), parameters=True, parents="use_the_words")
    assert (words.env_id, words.code) == (WORDS_FAMILY.env_id, WORDS_FAMILY.code)


def test_a_parent_value_writes_the_shorter_parent_that_every_mutation_then_starts_from(tmp_path: Path) -> None:
    bench = _bench()
    folder = bench.write_parent(str(tmp_path), bench.FAMILIES["people"], 1)
    cfg = load_config("designer-bench", overrides=[f"designer.parents={folder}"])
    assert cfg.designer.parents == folder
    variant = make_variant(FAMILY.code, "_NAMES = ['Ann']")
    for skill in GAME_SKILLS:
        parent = mutation.choose_parent(Memory(cfg.memory), skill, random.Random(0), parameters=True, parents=folder)
        assert (parent.code, parent.source) == (variant, "seed") and bench.people_shown(parent.code) == 1
    assert mutation.parent_codes(Memory(cfg.memory), folder) == {parent.env_id: variant}
    # another value gets its own folder, so the runs' configs (and what a store resumes) tell the parents apart
    assert bench.write_parent(str(tmp_path), bench.FAMILIES["people"], 2) != folder


@pytest.mark.parametrize(
    ("value", "message"),
    [("../seed_envs", "neither a folder name"), ("Difficulty", "neither a folder name"), ("/nowhere", "in /nowhere")],
)
def test_a_parents_value_that_is_no_folder_of_environments_fails_naming_it(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        load_config("designer-bench", overrides=[f"designer.parents={value}"])
    assert value in str(error.value)


def test_people_shown_is_the_distinct_names_capped_by_the_words() -> None:
    bench = _bench()
    assert bench.people_shown(FAMILY.code) == 4
    assert bench.people_shown(make_variant(FAMILY.code, "_NAMES = ['A', 'B', 'A', 'C']")) == 3
    assert bench.people_shown(make_variant(FAMILY.code, f"_NAMES = {NAMES!r}\n_WORDS = ['x', 'y']")) == 2
    assert bench.people_shown("_SIZE = 3\n") is None


def test_people_shown_counts_as_the_environment_does_at_the_edges() -> None:
    bench = _bench()
    # blank words are dropped, and an empty list still shows one person (the environment's fallback)
    assert bench.people_shown("_NAMES = ['A', 'B', 'C']\n_WORDS = ['x', ' ', 'y']\n") == 2
    assert bench.people_shown("_NAMES = []\n_WORDS = ['x', 'y']\n") == 1
    assert bench.people_shown("_NAMES = 'Ann'\n_WORDS = ['x']\n") is None


def test_the_designer_updates_table_reads_what_each_update_trained_on(tmp_path: Path) -> None:
    bench, store = _bench(), Store(str(tmp_path))
    samples = pd.DataFrame(
        {
            "step": [2, 2, 2, 2, 4],
            "role": ["designer", "designer", "designer", "agent", "designer"],
            "group_id": ["g"] * 5,
            "source_id": ["a", "b", "c", "d", "e"],
            "env_id": ["e"] * 5,
            "skill": ["logical_deduction"] * 5,
            "reward": [0.5, 0.0, 0.0, 1.0, 0.2],
            "advantage": [0.4, -0.2, 0.0, 1.0, -0.1],
            "behaviour_step": [0, 0, 0, 1, 2],
            "tokens": [100, 110, 90, 50, 120],
        }
    )
    metrics = pd.DataFrame({"role": ["designer", "agent"], "step": [2, 2], "loss": [0.01, 0.02]})
    metrics["grad_norm"], metrics["kl"] = [1.5, 2.0], None
    for column in SCHEMAS["train_metrics"].names:  # the rest of the row: not read by the table
        if column not in metrics:
            metrics[column] = 0.0 if column != "tokens" else 0
    store.write_table("train_samples", samples, run_id="r", gen=1, stage="train-s1")
    store.write_table("train_metrics", metrics, run_id="r", gen=1, stage="train-s1")
    frame = bench.designer_updates(str(tmp_path), "r")
    assert frame["step"].tolist() == [2, 4]
    assert frame["samples"].tolist() == [3, 1] and frame["nonzero"].tolist() == [2, 1]
    assert frame["mean_abs_adv"].tolist() == pytest.approx([0.2, 0.1])
    assert frame["tokens"].tolist() == [300, 120]
    assert frame["grad_norm"].iloc[0] == 1.5 and math.isnan(frame["grad_norm"].iloc[1])  # step 4: no metrics row
    assert "| 2 | 3 | 2 | 0.200 | 300 | 0.0100 | 1.500 | n/a |" in bench.updates_table(frame)


def test_the_blend_counts_the_designs_played_not_the_parent_copies_rewarded_unplayed(tmp_path: Path) -> None:
    bench, store = _bench(), Store(str(tmp_path))
    two = make_variant(FAMILY.code, "_NAMES = ['Ann', 'Ben']")
    pool = pd.DataFrame(
        [ROWS["pool"] | {"env_id": "e2", "code": two}, ROWS["pool"] | {"env_id": "e4", "code": FAMILY.code}]
    )
    rewards = pd.DataFrame([ROWS["designer_rewards"]] * 2).assign(
        design_id=["d2", "copy"], env_id=["e2", "e4"], window_win_rate=[0.5, None], regret=[0.1, None], raw=[0.6, 0.0]
    )
    plays = pd.DataFrame([ROWS["episodes"]] * 5).assign(
        episode_id=[f"p{i}" for i in range(5)], env_id="e2", condition=["no_hint"] * 4 + ["hint"]
    )
    write_stage(store, "r", 1, "pool", {"pool": pool})
    write_stage(store, "r", 1, "rollout-s0", {"episodes": plays})
    write_stage(store, "r", 1, "reward", {"designer_rewards": rewards})
    frame = bench.generation_designs(store, bench.FAMILIES["people"], "r", 1)
    assert frame[["design_id", "raw", "value", "n_no_hint"]].values.tolist() == [["d2", 0.6, 2, 4]]


def _designs(win_rates: list[float], plays: int, seed: int) -> pd.DataFrame:
    """Designs of one value whose raw blend is measured on ``plays`` no-hint plays each, as the reward does
    (regret 0): each design's agent wins with its probability in ``win_rates``."""
    rng, cfg = random.Random(seed), ScoringConfig()
    measured = [sum(rng.random() < p for _ in range(plays)) / plays for p in win_rates]
    raw = [blend_reward(p, 0.0, cfg) for p in measured]
    return pd.DataFrame({"value": 2, "raw": raw, "window_win_rate": measured, "n_no_hint": plays})


def test_the_sampling_share_is_near_one_when_designs_differ_only_by_the_plays_luck() -> None:
    bench = _bench()
    same = bench.noise_rows(_designs([0.38] * 400, 12, seed=0), ScoringConfig())
    apart = bench.noise_rows(_designs([0.05, 0.5] * 200, 12, seed=0), ScoringConfig())
    assert same[0]["designs"] == 400 and same[0]["plays"] == 12
    assert 0.8 < bench.sampling_share(same) < 1.25  # 0.91-1.17 over seeds 0-4
    assert bench.sampling_share(apart) < 0.75  # 0.66-0.68: the designs' own win rates add variance


def test_a_parent_copy_is_a_design_that_writes_back_both_of_the_parents_lists() -> None:
    bench = _bench()
    assert bench.is_parent_copy(FAMILY.code, FAMILY.code)
    assert bench.is_parent_copy(make_variant(FAMILY.code, "_NAMES = ['Ann', 'Ben', 'Cleo', 'Dan']"), FAMILY.code)
    assert not bench.is_parent_copy(make_variant(FAMILY.code, "_NAMES = ['Ann', 'Ben']"), FAMILY.code)
    assert not bench.is_parent_copy(make_variant(FAMILY.code, "_WORDS = ['falcon', 'copper']"), FAMILY.code)
    assert not bench.is_parent_copy("_SIZE = 3\n", FAMILY.code)


def test_the_benchmarks_doctests_pass() -> None:
    """benchmarks/ is outside the doctest collection: its counts of people shown and its table of the
    untrained designer's choices are checked here."""
    result = doctest.testmod(_bench())
    assert result.failed == 0 and result.attempted >= 2


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--choice-parents", "1,x"),
        ("--curve-values", "0"),
        ("--choice-designs", "0"),
        ("--family", "colours"),
        ("--parent-value", "1,2"),
    ],
)
def test_a_bad_flag_value_on_the_command_line_fails_at_once_naming_it(flag: str, value: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--choices-only", flag, value], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert flag in done.stderr.strip().splitlines()[-1] and value in done.stderr
