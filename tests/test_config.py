from __future__ import annotations

from pathlib import Path

import pytest

from spade_core.config import PRESET_DIR, ConfigError, SpadeConfig, available_presets, load_config, load_config_text


@pytest.mark.parametrize("preset", ["tiny", "gpu-1x", "gpu-8x"])
def test_every_preset_loads(preset: str) -> None:
    cfg = load_config(preset)
    assert isinstance(cfg, SpadeConfig)


def test_presets_listed() -> None:
    assert {"tiny", "gpu-1x", "gpu-8x"} <= set(available_presets())


def test_paper_defaults_without_preset() -> None:
    cfg = load_config(None)
    assert (cfg.rollout.plays_no_hint, cfg.rollout.plays_hint, cfg.rollout.max_turns) == (8, 16, 25)
    assert (cfg.training.epsilon, cfg.training.epsilon_high) == (0.2, 0.28)
    assert cfg.memory.capacity == 200 and cfg.scoring.designer_reward == "blend"


def test_overrides_are_typed() -> None:
    cfg = load_config(
        "tiny",
        overrides=[
            "rollout.plays_no_hint=5",
            "training.lora=true",
            "store.root=s3://b/p",
            "evaluation.suites=[humaneval, bfcl]",
            "model.base_url=null",
        ],
    )
    assert cfg.rollout.plays_no_hint == 5
    assert cfg.training.lora is True
    assert cfg.store.root == "s3://b/p"
    assert cfg.evaluation.suites == ["humaneval", "bfcl"]
    assert cfg.model.base_url is None


def test_config_file_applies_on_top_of_preset(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("rollout:\n  plays_hint: 3\n")
    cfg = load_config("tiny", f)
    assert cfg.rollout.plays_hint == 3
    assert cfg.rollout.plays_no_hint == load_config("tiny").rollout.plays_no_hint


def test_hash_is_stable_and_tracks_changes() -> None:
    a, b = load_config("tiny"), load_config("tiny")
    assert a.config_hash() == b.config_hash()
    assert len(a.config_hash()) == 16
    assert load_config("tiny", overrides=["seed=1"]).config_hash() != a.config_hash()


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (["rollout.plays=3"], "unknown config key 'rollout.plays'; allowed at rollout:"),
        (["nope=1"], "unknown config key 'nope'"),
        (["rollout.plays_no_hint=abc"], "config key 'rollout.plays_no_hint' has bad value 'abc'"),
        (["rollout.plays_no_hint=0"], "config key 'rollout.plays_no_hint' has bad value 0"),
        (["model.backend=foo"], "config key 'model.backend' has bad value 'foo'; allowed: 'transformers', 'openai'"),
        (["scoring.designer_reward=max"], "'solve_rate', 'learnability' or 'learning_potential'"),
        (["rollout.max_turns.x=1"], "config key 'rollout.max_turns' is a value, not a section"),
        (["rollout"], "override 'rollout' must look like key.path=value"),
        (["designer.training_delay=1"], "designer.training_delay 1 must be >= training.steps_per_generation 2"),
        (["training.tis_low=3"], "training.tis_low 3.0 must be <= training.tis_high 2.0"),
        (["training.global_batch_size=0"], "config key 'training.global_batch_size' has bad value 0"),
        (["scoring.plateau_weight=-0.5"], "config key 'scoring.plateau_weight' has bad value -0.5"),
        (["validation.code_repairs=[imports]"], "config key 'validation.code_repairs.0' has bad value 'imports'"),
        (["training.beta=0.01"], "training.drop_zero_advantage needs training.beta 0, got 0.01"),
        (["orchestration.max_staleness=2"], "config key 'orchestration.max_staleness' has bad value 2"),
        (["scoring.parent_copy_raw=1.5"], "config key 'scoring.parent_copy_raw' has bad value 1.5"),
        (
            ["scoring.parent_copy_raw=0", "designer.mode=write"],
            "scoring.parent_copy_raw 0.0 needs designer.mode mutate or parameters (got 'write')",
        ),
        (
            ["orchestration.generation_devices=[0,1]", "orchestration.training_devices=[1,2]"],
            "orchestration.generation_devices [0, 1] and training_devices [1, 2] must be disjoint",
        ),
    ],
)
def test_bad_overrides_fail_with_one_line(overrides: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("tiny", overrides=overrides)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_preset_names_the_available_ones() -> None:
    # every preset file, sorted (a preset added beside these is named too)
    names = sorted(available_presets())
    assert {"gpu-1x", "gpu-8x", "paper-games", "paper-tool-use", "tiny"} <= set(names)
    with pytest.raises(ConfigError, match=f"unknown preset 'huge'; available: {', '.join(names)}$"):
        load_config("huge")


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match=r"config file '/nope\.yaml' does not exist"):
        load_config("tiny", "/nope.yaml")


def test_unknown_key_in_config_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("rollout:\n  temperature: 0.3\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'rollout\.temperature'"):
        load_config("tiny", f)


def test_config_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    f = tmp_path / "list.yaml"
    f.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping, got list"):
        load_config("tiny", f)


def test_invalid_yaml(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("rollout: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config("tiny", f)


# The authors' launch scripts (github spade-rl/spade: cmd/games/train_spade_30b.sh,
# cmd/tool_use/_train_spade_blend.sh, spade/slime/arguments.py), value by value.
PAPER = {
    "model.temperature": 0.6,
    "model.top_p": 0.95,
    "model.top_k": 20,
    "rollout.max_tokens_per_turn": 8192,
    "rollout.max_context_tokens": 32768,
    "rollout.max_turns": 25,
    "rollout.plays_no_hint": 8,
    "rollout.plays_hint": 16,
    "rollout.hint_temperature": 0.3,
    "rollout.replay_envs": 0,
    "designer.documents_per_generation": 24,
    "designer.group_size": 1,
    "designer.max_new_tokens": 16384,
    "designer.memory_positive": 2,
    "designer.memory_negative": 1,
    "corpus.max_words": 6000,
    "corpus.max_words_tool": 4000,
    "memory.capacity": 200,
    "training.learning_rate": 1e-6,
    "training.lr_schedule": "constant",
    "training.weight_decay": 0.1,
    "training.adam_beta1": 0.9,
    "training.adam_beta2": 0.98,
    "training.epsilon": 0.2,
    "training.epsilon_high": 0.28,
    "training.tis_low": 0.0,
    "training.tis_high": 2.0,
    "designer.max_attempts": 5,
    "designer.training_delay": None,  # D = K: 4 games, 8 tool use
    "scoring.designer_reward": "blend",
    "scoring.reward_scale_cap": 50.0,
    "scoring.lp_gamma_fast": 0.98,
    "scoring.lp_gamma_slow": 0.85,
    "memory.seed_with_library": False,
    "memory.code_chars": 2000,
    "validation.mode": "smoke",
    # Slime's aggregation (slime/backends/megatron_utils/cp_utils.py get_sum_of_sample_mean, loss.py
    # loss_function): each sample's token mean, summed, over the batch's sample count = TRL's grpo.
    "training.loss_type": "grpo",
    # Two independent blend weights (--spade-regret-weight 0.4, --spade-plateau-weight 0.6).
    "scoring.regret_weight": 0.4,
    "scoring.plateau_weight": 0.6,
    # Repairs before validation (spade/core/utils/parsing.py repair_fstring_braces, the standard-library
    # names of spade/core/envs/synthetic_game_env.py).
    "validation.code_repairs": ["fstring_braces", "stdlib_imports"],
    # Neither codebase designs the next pool while training the current one.
    "orchestration.async_generations": False,
    # The authors check no hint for leaks: no rewrite, no regret zeroed.
    "rollout.hint_rewrites": 0,
    "scoring.zero_leaked_regret": False,
    # --spade-corpus-seed 42; the corpus file is the user's (--spade-corpus-file), ours ships Wikipedia leads.
    "seed": 42,
    "corpus.source": "embedded",
    # --global-batch-size 192 (spade/slime/spade_rollout.py:821-842), plays ceil(192 / n) per game.
    "training.global_batch_size": 192,
    # Episode rules (orchestrator.py:403-491, synthetic_game_env.py:226-246, 429-434): the game's own
    # max_turns capped at 25, stop at <= 64 context tokens left, the first \boxed{} as the action, no EOS ends
    # the episode, a raising step scores -1; and the optimizer steps whatever the advantages.
    "rollout.game_max_turns": True,
    "rollout.context_margin_tokens": 64,
    "rollout.action": "boxed",
    "rollout.end_without_eos": True,
    "rollout.step_error_return": -1.0,
    # a raising reset plays on from their wrapper's placeholder observation (synthetic_game_env.py:356-359)
    "rollout.reset_failure": "placeholder",
    "training.step_on_zero_signal": True,
    # --apply-chat-template-kwargs '{"enable_thinking":false}' (train_spade_30b.sh:107, _train_spade_blend.sh:161).
    "model.enable_thinking": False,
    # The actor template (orchestrator.py:256-265): one user message wrapping the first observation.
    "rollout.agent_prompt": "authors",
    # Hints (hint_generator.py:23-74; the model adapter's top_p 0.9 and no top-k) and the hinted arm's rules
    # (orchestrator.py:1783-1917: actor_max_tokens always, no EOS / context checks, a failed play is 0).
    "rollout.hint_prompt": "authors",
    "rollout.hint_top_p": 0.9,
    "rollout.hint_top_k": 0,
    "rollout.hinted_play_rules": "authors",
    # TIS: Megatron's log-probs at --rollout-temperature 1.0 (Slime loss.py:78-79), SGLang's at the sampling
    # temperature (SGLANG_RETURN_ORIGINAL_LOGPROB is set nowhere).
    "training.logprob_temperature": 1.0,
    "training.behaviour_logprob_temperature": 0.6,
    # Admission: their smoke test's types (synthetic_game_env.py:262-335), ENV_STEP_TIMEOUT 30 s
    # (orchestrator.py:27), their designer system prompt (template.py:324-329; none for tool use).
    "validation.contract": "authors",
    "validation.call_timeout_s": 30.0,
    "designer.system_prompt": "authors",
    # Their designer user prompt's layout (corpus_template.py:101-127, tool_use_template.py, orchestrator.py:
    # 1204-1228) and a negative example named by its file stem (env_memory.py:150, game_files.py:33).
    "designer.user_prompt": "authors",
    "memory.negative_name": "file_stem",
    # Deadlines: 300 s per design reply, 120 s per judgement (corpus_orchestrator.py:118-130, 166-169), 900 s per
    # batch of designs (orchestrator.py:1459-1475), 300 s per play (orchestrator.py:1521-1541).
    "designer.attempt_deadline_s": 300.0,
    "validation.llm_validator_deadline_s": 120.0,
    "designer.batch_deadline_s": 900.0,
    "rollout.play_deadline_s": 300.0,
    # The batch and the pool's edges: real plays repeated up to 192 - new designs (orchestrator.py:2607-2620),
    # the pool topped up at each later step (orchestrator.py:2299-2301), the last designs flushed at the final
    # rollout of --num-rollout 400 (spade_rollout.py:557-561).
    "training.batch_fill": "duplicate",
    "designer.top_up_at": "steps",
    "training.total_steps": 400,
    # ...but their loop fetches delayed designs, and flushes, only at a step that made designs of its own
    # (spade_rollout.py:548-563): step 399 makes none, so the last generation's designs are never trained.
    "training.delayed_designs": "authors",
}
PAPER_GAMES = {
    **PAPER,
    "designer.kind": "game",
    "designer.skills_per_generation": 3,
    "training.steps_per_generation": 4,
    "designer.top_up_rounds": 3,  # K - 1: one round at each later step of the pool
    "training.beta": 0.0,
    "rollout.hint_max_new_tokens": 4096,
    "evaluation.every": 0,  # --eval-interval 100000 --skip-eval-before-train: no in-loop eval
    # their _games_gem.yaml: the reasoning-gym hard split, 100 tasks x 8 episodes (AIME, GPQA, LCB: not offline)
    "evaluation.suites": ["reasoning_gym_hard"],
    "evaluation.limit": 800,
}
PAPER_TOOL_USE = {
    **PAPER,
    "designer.kind": "tool",
    "designer.tool_skills_per_generation": 6,
    "training.steps_per_generation": 8,
    "designer.top_up_rounds": 7,
    "training.beta": 0.005,
    "rollout.hint_max_new_tokens": 2048,
    "evaluation.every": 4,  # --eval-interval 32 rollout steps = 4 generations of K = 8
    # theirs: AIME avg32 (not offline) and BFCL v4's 17 categories, greedy, every entry once
    "evaluation.suites": ["reasoning_gym", "bfcl_full"],
    "evaluation.suite_limits": {"bfcl_full": 4441},
    # Native tool calls (orchestrator.py:786-1031), malformed ones masked (SPADE_MASK_MALFORMED_TOOLCALL=1).
    "rollout.tool_protocol": "native",
    "rollout.mask_malformed_tool_calls": True,
    # SPADE_MULTITURN_ENV_GEN=1, SPADE_RESET_GATE=1 (_train_spade_blend.sh:270-273).
    "designer.multiturn": True,
    "validation.reset_gate": True,
    # --spade-use-env-validator with its defaults: the training model, temperature 0.3, 16384 tokens.
    "validation.llm_validator": True,
    "validation.llm_validator_temperature": 0.3,
    "validation.llm_validator_max_new_tokens": 16384,
    "validation.llm_validator_top_p": 0.9,
    "validation.llm_validator_top_k": 0,
    # 25 agent turns, tool calls outside the environment's max_turns; the [FORMAT] line after a masked
    # malformed call (orchestrator.py:835-1003, 937-945).
    "rollout.tool_turns": "free",
    "rollout.malformed_call_feedback": True,
}


# The authors' fixed-RLVE baseline (cmd/games/train_fixed_rlve_4b.sh and the play of
# spade/core/fixed_env_orchestrator.py, spade/slime/fixed_env_rollout.py), where it differs from SPADE's own play.
PAPER_FIXED_RLVE = {
    # one user message, no system prompt, their "\\boxed{{}}" line as sent (fixed_env_orchestrator.py:59-63)
    "rollout.agent_prompt": "authors_rlve",
    # no top-k passed (fixed_env_orchestrator.py:347-355): Slime's -1, off
    "model.top_k": None,
    # --apply-chat-template-kwargs '{"enable_thinking":false}' (train_fixed_rlve_4b.sh:91)
    "model.enable_thinking": False,
    # a short batch padded with random.choice copies of real samples (fixed_env_rollout.py:448-462)
    "training.batch_fill": "random",
    "training.global_batch_size": 256,
    # the SPADE authors' copy of RLVE's controller (difficulty_controller.py:138-159), not RLVE's own
    "designer.rlve_controller": "spade",
}


@pytest.mark.parametrize(
    ("preset", "expected"),
    [("paper-games", PAPER_GAMES), ("paper-tool-use", PAPER_TOOL_USE), ("paper-fixed-rlve", PAPER_FIXED_RLVE)],
)
def test_paper_presets_reproduce_the_authors_launch_scripts(preset: str, expected: dict[str, object]) -> None:
    cfg = load_config(preset)
    for key, value in expected.items():
        node: object = cfg
        for part in key.split("."):
            node = getattr(node, part)
        assert node == value, key


@pytest.mark.parametrize(("preset", "generations"), [("paper-games", 100), ("paper-tool-use", 50)])
def test_paper_presets_state_the_400_step_horizon(preset: str, generations: int) -> None:
    # --num-rollout 400 rollout steps; the generation count is spade run's option, so the preset says it.
    assert generations * load_config(preset).training.steps_per_generation == 400
    text = (PRESET_DIR / f"{preset}.yaml").read_text()
    assert f"spade run --preset {preset} --generations {generations}" in text


def test_tool_use_evaluates_every_32_rollout_steps() -> None:
    cfg = load_config("paper-tool-use")
    assert cfg.evaluation.every * cfg.training.steps_per_generation == 32


def test_what_the_paper_presets_turn_off_stays_on_elsewhere() -> None:
    for preset in ("tiny", "gpu-1x", "gpu-8x", None):
        cfg = load_config(preset)
        assert cfg.orchestration.async_generations, preset
        assert cfg.scoring.zero_leaked_regret and cfg.rollout.hint_rewrites >= 1, preset
        assert cfg.training.global_batch_size is None, preset  # every sample of the step is trained
        rules = cfg.rollout
        assert not rules.game_max_turns and not rules.end_without_eos and rules.action == "reply", preset
        assert rules.context_margin_tokens is None and rules.step_error_return is None, preset
        assert rules.tool_protocol == "user_messages" and not rules.mask_malformed_tool_calls, preset
        assert not cfg.designer.multiturn and not cfg.validation.reset_gate, preset
        assert not cfg.validation.llm_validator, preset
        assert not cfg.training.step_on_zero_signal, preset
        assert cfg.model.enable_thinking is None, preset
        assert (rules.agent_prompt, rules.hint_prompt, rules.hinted_play_rules) == ("ours", "ours", "same"), preset
        assert rules.hint_top_p is None and rules.hint_top_k is None, preset
        assert rules.tool_turns == "count" and not rules.malformed_call_feedback, preset
        assert cfg.validation.llm_validator_top_p is None and cfg.validation.llm_validator_top_k is None, preset
        assert cfg.training.logprob_temperature == cfg.training.behaviour_logprob_temperature == 1.0, preset
        assert cfg.validation.contract == "ours" and cfg.designer.system_prompt == "ours", preset
        assert cfg.validation.call_timeout_s == 5.0, preset
        assert (cfg.designer.user_prompt, cfg.memory.negative_name) == ("ours", "class"), preset
        deadlines = (cfg.designer.attempt_deadline_s, cfg.designer.batch_deadline_s, cfg.rollout.play_deadline_s)
        assert deadlines == (None, None, None) and cfg.validation.llm_validator_deadline_s is None, preset
        assert cfg.training.batch_fill == "pad" and cfg.training.total_steps is None, preset
        assert cfg.training.delayed_designs == "ours", preset
        assert rules.reset_failure == "error", preset
        assert cfg.designer.top_up_at == "pool", preset


def test_tiny_shows_memory_examples_whole_and_the_paper_presets_cut_them_as_the_authors() -> None:
    assert load_config("tiny").memory.example_code == "whole"
    assert load_config("paper-games").memory.example_code == "cut"
    assert load_config("paper-tool-use").memory.example_code == "cut"


def test_a_stored_config_with_a_retired_key_still_loads_and_a_new_file_with_it_is_refused(tmp_path: Path) -> None:
    stored = load_config("tiny").to_yaml().replace("scoring:\n", "scoring:\n  invalid_reward: -1.0\n", 1)
    assert "invalid_reward" in stored
    assert load_config_text(stored) == load_config("tiny")  # a run stored before the key was retired
    path = tmp_path / "mine.yaml"
    path.write_text("scoring:\n  invalid_reward: -1.0\n")
    with pytest.raises(ConfigError, match="invalid_reward"):
        load_config("tiny", str(path))
