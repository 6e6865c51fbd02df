"""The paper presets' play rules that are settings, each played in real jails with a scripted agent, both
ways: the agent prompt (``rollout.agent_prompt``), the hinted arm's rules (``rollout.hinted_play_rules``) and
the tool-use turn count and format feedback (``rollout.tool_turns``, ``rollout.malformed_call_feedback``)."""

from __future__ import annotations

import pytest
from agents import Scripted
from test_episode_rules import ECHO
from test_tool_protocol import DEPOSIT_AND_LOOK, MALFORMED, NATIVE, SAFE

from sandbox.session import EnvSession
from spade_core.config import RolloutConfig
from spade_core.envs.contract import env_id_for
from spade_core.llm.base import SamplingParams
from spade_core.play.agent_prompts import AUTHORS_GAME_USER, AUTHORS_RLVE_INSTRUCTION, game_system
from spade_core.play.rollout import MALFORMED_CALL_FEEDBACK, EpisodeSpec, RolloutEngine

pytestmark = pytest.mark.usefixtures("jail_processes_checked")

GAME = RolloutConfig(max_turns=5, max_tokens_per_turn=16, max_context_tokens=2048)


def play(agent: Scripted, code: str, specs: list[tuple[int, str, str | None]], cfg: RolloutConfig, tokenizer=None):  # type: ignore[no-untyped-def]
    engine = RolloutEngine(agent, cfg, SamplingParams(seed=0), call_timeout_s=1.5, tokenizer=tokenizer)
    rows = engine.run([EpisodeSpec(env_id_for(code), code, seed, cond, hint) for seed, cond, hint in specs])
    return rows, engine


# -- rollout.agent_prompt -------------------------------------------------------------------------------------
def test_our_prompt_names_the_box_the_engine_plays() -> None:
    reply = "\\boxed{a} no wait \\boxed{b}"
    for action, returned in (("boxed", 1.0), ("reply", 0.0)):
        (row,), _ = play(
            Scripted({0: [reply]}), ECHO, [(0, "no_hint", None)], GAME.model_copy(update={"action": action})
        )
        system = row["transcript"][0]
        assert system == {"role": "system", "content": game_system(action)}
        # boxed: the first box is played and the prompt says so; reply: the game reads the reply (its last box)
        assert ("Only the first" in system["content"]) == (action == "boxed")
        assert row["episode_return"] == returned


def test_the_authors_prompt_is_one_user_message_wrapping_the_first_observation_and_its_hint() -> None:
    cfg = GAME.model_copy(update={"agent_prompt": "authors", "action": "boxed"})
    specs = [(0, "no_hint", None), (1, "hint", "say a")]
    rows, _ = play(Scripted({0: ["\\boxed{b}", "\\boxed{a}"], 1: ["\\boxed{a}"]}), ECHO, specs, cfg)
    plain, hinted = rows
    assert [m["role"] for m in plain["transcript"]] == ["user", "assistant", "user", "assistant"]
    assert plain["transcript"][0]["content"] == AUTHORS_GAME_USER.format(observation="seed 0: say a")
    assert plain["transcript"][2]["content"] == "got \\boxed{b}"  # later observations come as they are
    assert hinted["transcript"][0]["content"] == AUTHORS_GAME_USER.format(observation="seed 1: say a\n\nHINT: say a")
    assert plain["episode_return"] == hinted["episode_return"] == 1.0
    tool_cfg = NATIVE.model_copy(update={"agent_prompt": "authors"})  # tool use: the same under both
    (tool,), _ = play(Scripted({0: ["<answer>15</answer>"]}), SAFE, [(0, "no_hint", None)], tool_cfg)
    assert tool["transcript"][0]["role"] == "system" and tool["transcript"][1]["content"].startswith("seed 0:")


def test_the_authors_rlve_prompt_is_the_observation_and_their_line_with_its_doubled_braces() -> None:
    cfg = GAME.model_copy(update={"agent_prompt": "authors_rlve"})
    (row,), _ = play(Scripted({0: ["\\boxed{a}"]}), ECHO, [(0, "no_hint", None)], cfg)
    first = row["transcript"][0]
    assert first == {"role": "user", "content": "seed 0: say a" + AUTHORS_RLVE_INSTRUCTION}
    assert first["content"].endswith("put your final answer within \\boxed{{}}.")  # as they send it
    (ours,), _ = play(Scripted({0: ["\\boxed{a}"]}), ECHO, [(0, "no_hint", None)], GAME)
    assert [m["role"] for m in ours["transcript"][:2]] == ["system", "user"] and ours["transcript"][1]["content"] == (
        "seed 0: say a"
    )


# -- rollout.hinted_play_rules --------------------------------------------------------------------------------
PAPER_RULES = GAME.model_copy(
    update={"action": "boxed", "end_without_eos": True, "step_error_return": -1.0, "context_margin_tokens": 64}
)


def test_authors_hinted_plays_score_a_raising_step_as_the_game_wrapper_and_skip_the_no_eos_rule(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    script = {
        0: ["\\boxed{crash}"],
        1: [("\\boxed{a}", "length")],
        2: ["\\boxed{crash}"],
        3: [("\\boxed{a}", "length")],
    }
    specs = [(0, "hint", "h"), (1, "hint", "h"), (2, "no_hint", None), (3, "no_hint", None)]
    cfg = PAPER_RULES.model_copy(update={"hinted_play_rules": "authors"})
    rows, engine = play(Scripted(script), ECHO, specs, cfg, tok)
    crashed, cut, plain_crashed, plain_cut = rows
    # hinted: a raising step scores -1 as in the no-hint arm (their wrapper), not retried; a cut reply is played
    assert (crashed["episode_return"], crashed["error_type"], crashed["terminated"]) == (-1.0, None, True)
    assert (cut["turns"], cut["episode_return"]) == (1, 1.0)
    # no-hint plays keep the no-hint rules: -1 for the raising step, the cut reply unplayed
    assert (plain_crashed["episode_return"], plain_cut["turns"], plain_cut["episode_return"]) == (-1.0, 0, 0.0)
    assert engine.stats.retries == 0
    # without step_error_return a raising step in the authors' hinted arm is a failed play: a 0 that counts
    no_wrapper = cfg.model_copy(update={"step_error_return": None})
    (crashed,), engine = play(Scripted(script), ECHO, specs[:1], no_wrapper, tok)
    assert (crashed["episode_return"], crashed["error_type"], crashed["terminated"]) == (0.0, None, False)
    assert crashed["transcript"][-1]["content"].startswith("[play failed: exception]") and engine.stats.retries == 0
    rows, _ = play(Scripted(script), ECHO, specs[:2], PAPER_RULES, tok)  # same: the no-hint rules for both
    assert (rows[0]["episode_return"], rows[1]["turns"], rows[1]["episode_return"]) == (-1.0, 0, 0.0)


def test_authors_hinted_tool_use_plays_keep_the_no_eos_rule(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    script = {0: [("<answer>15</answer>", "length")], 1: [DEPOSIT_AND_LOOK, "<answer>15</answer>"]}
    specs = [(0, "hint", "h"), (1, "hint", "h")]
    cfg = NATIVE.model_copy(update={"end_without_eos": True, "hinted_play_rules": "authors"})
    cut, whole = play(Scripted(script), SAFE, specs, cfg, tok)[0]
    # theirs plays a hinted tool-use game on the no-hint tool path: a reply without its end of turn ends it
    assert (cut["turns"], cut["episode_return"], cut["error_type"]) == (0, 0.0, None)
    assert whole["episode_return"] == 1.0
    (game_cut,), _ = play(
        Scripted({0: [("\\boxed{a}", "length")]}), ECHO, specs[:1], cfg.model_copy(update={"action": "boxed"}), tok
    )
    assert (game_cut["turns"], game_cut["episode_return"]) == (1, 1.0)  # a hinted game play is not cut


def test_authors_hinted_plays_keep_a_model_failure_as_0_and_ignore_the_context_margin(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    words = " ".join(["word"] * 60) + " \\boxed{a}"
    agent = Scripted({0: ["x"], 1: [words]}, fail=frozenset({0}))
    specs = [(0, "hint", "h"), (1, "hint", "h")]
    (opened,), _ = play(Scripted({1: [words]}), ECHO, specs[1:], GAME.model_copy(update={"max_turns": 1}), tok)
    prompt = opened["loss_mask"].index(1)
    cfg = PAPER_RULES.model_copy(update={"max_context_tokens": prompt + 64 + 10, "hinted_play_rules": "authors"})
    failed, long = play(agent, ECHO, specs, cfg, tok)[0]
    assert (failed["error_type"], failed["episode_return"]) == (None, 0.0)
    assert sum(long["loss_mask"]) > 10 and long["episode_return"] == 1.0  # not cut to leave 64 tokens
    failed, long = play(agent, ECHO, specs, cfg.model_copy(update={"hinted_play_rules": "same"}), tok)[0]
    assert failed["error_type"] == "model_error" and sum(long["loss_mask"]) == 10 and long["episode_return"] == 0.0


# -- rollout.tool_turns, rollout.malformed_call_feedback ------------------------------------------------------
TWO_TURNS = """class Short(ToolEnv):
    def __init__(self, max_turns=2, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
"""
SHORT = SAFE.replace("class Safe(ToolEnv):", TWO_TURNS)
LOOK = '<tool_call>{"name": "balance", "arguments": {}}</tool_call>'


def test_free_tool_turns_count_only_toward_max_turns(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    script = {0: [DEPOSIT_AND_LOOK, LOOK, LOOK, "<answer>15</answer>"]}
    own = NATIVE.model_copy(update={"game_max_turns": True})  # the environment keeps its max_turns 2, cap 4
    (counted,), _ = play(Scripted(script), SHORT, [(0, "no_hint", None)], own, tok)
    assert (counted["turns"], counted["episode_return"], counted["terminated"]) == (2, 0.0, False)
    (free,), _ = play(
        Scripted(script), SHORT, [(0, "no_hint", None)], own.model_copy(update={"tool_turns": "free"}), tok
    )
    assert (free["turns"], free["episode_return"], free["rewards"]) == (4, 1.0, [0.0, 0.0, 0.0, 1.0])
    # free: max_turns still bounds the agent's turns
    (capped,), _ = play(
        Scripted({0: [LOOK]}), SHORT, [(0, "no_hint", None)], own.model_copy(update={"tool_turns": "free"}), tok
    )
    assert capped["turns"] == own.max_turns and capped["episode_return"] == 0.0


def test_a_masked_malformed_call_gets_the_authors_format_line(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    script = {0: [MALFORMED, DEPOSIT_AND_LOOK, "<answer>15</answer>"]}
    (row,), _ = play(
        Scripted(script), SAFE, [(0, "no_hint", None)], NATIVE.model_copy(update={"malformed_call_feedback": True}), tok
    )
    observation = row["transcript"][3]["content"]
    assert observation.startswith("Format error") and observation.endswith("\n\n" + MALFORMED_CALL_FEEDBACK)
    assert row["episode_return"] == 1.0 and sum(m["content"].count("[FORMAT]") for m in row["transcript"]) == 1
    (row,), _ = play(Scripted(script), SAFE, [(0, "no_hint", None)], NATIVE, tok)  # off: the format error alone
    assert "[FORMAT]" not in row["transcript"][3]["content"]


# -- model.enable_thinking ------------------------------------------------------------------------------------
THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def test_enable_thinking_reaches_a_template_that_reads_it_and_no_other(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    import copy

    import pandas as pd

    from spade_core.llm.chat_tokens import ChatTokens
    from spade_core.train.data import designer_samples

    reads = copy.deepcopy(tiny_generator.tokenizer)
    reads.chat_template = THINKING
    cfg = GAME.model_copy(update={"max_turns": 1})
    for enable, empty_think in ((False, True), (None, False)):
        engine = RolloutEngine(
            Scripted({0: ["\\boxed{a}"]}),
            cfg,
            SamplingParams(seed=0),
            call_timeout_s=1.5,
            tokenizer=reads,
            enable_thinking=enable,
        )
        (row,) = engine.run([EpisodeSpec(env_id_for(ECHO), ECHO, 0)])
        assert ("<think>\n\n</think>" in reads.decode(row["token_ids"])) is empty_think
    # a template that does not read it renders as before
    plain = tiny_generator.tokenizer
    messages = [{"role": "user", "content": "hi"}]
    assert ChatTokens(plain, None, {"enable_thinking": False}).prompt(messages) == ChatTokens(plain).prompt(messages)
    # the designer's training prompt is rendered the same way
    design = {"prompt": '[{"role": "user", "content": "design"}]', "completion": "x", "skill": "s", "design_id": "d"}
    design |= {"group_id": "g", "reward": 1.0, "raw": 1.0, "env_id": "e", "policy_step": 0}
    (sample,) = designer_samples(pd.DataFrame([design]), reads, enable_thinking=False)
    assert "<think>" in reads.decode(sample.prompt_ids)
    (sample,) = designer_samples(pd.DataFrame([design]), reads)
    assert "<think>" not in reads.decode(sample.prompt_ids)


def test_enable_thinking_reaches_the_backends_own_rendering_of_a_request(micro_model_dir: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Designer, hint and validator requests are rendered by the backend: model.enable_thinking gets there too."""
    import shutil

    from spade_core.llm.base import GenerationRequest
    from spade_core.llm.hf import TransformersGenerator

    model = tmp_path / "thinking"
    shutil.copytree(micro_model_dir, model)
    (model / "chat_template.jinja").write_text(THINKING)
    request = GenerationRequest(messages=[{"role": "user", "content": "design"}])
    for enable, empty_think in ((False, True), (None, False)):
        generator = TransformersGenerator(str(model), device="cpu", dtype="float32", enable_thinking=enable)
        try:
            assert ("<think>" in generator.tokenizer.decode(generator.prompt_ids(request))) is empty_think
        finally:
            generator.close()


# -- validation.contract at play, rollout.reset_failure -------------------------------------------------------
LOOSE = """
class Loose:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        if seed == 7:
            raise RuntimeError("no board for seed 7")
        return "seed %s: say a" % seed, {}

    def step(self, action):
        won = "a" in action
        return "got it", "1" if won else 0, 2 if won else 0, 0, None

    def solution(self):
        return "a"
"""


def test_the_authors_contract_converts_a_steps_types_at_play_and_holds_them_strict_at_load() -> None:
    def played(contract: str) -> dict:  # type: ignore[type-arg]
        engine = RolloutEngine(
            Scripted({0: ["a"]}), GAME, SamplingParams(seed=0), call_timeout_s=1.5, contract=contract
        )
        return engine.run([EpisodeSpec(env_id_for(LOOSE), LOOSE, 0)])[0]

    # theirs: float("1"), bool(2), bool(0), None info -> {} (their wrapper, synthetic_game_env.py:404-414)
    row = played("authors")
    assert (row["episode_return"], row["terminated"], row["error_type"]) == (1.0, True, None)
    assert played("ours")["error_type"] == "contract_error"  # ours: a str reward and a flag of 2 break it
    session = EnvSession(LOOSE, call_timeout_s=1.5, contract="authors")  # validation: their smoke test's types
    try:
        assert session.open().ok and session.reset(0).ok
        assert session.step("a").error_type == "contract_error"
    finally:
        session.close()


def test_a_raising_reset_plays_on_from_the_authors_placeholder_or_is_an_error_row() -> None:
    # the hint names the seed for the scripted agent, which the placeholder no longer shows
    spec = [EpisodeSpec(env_id_for(LOOSE), LOOSE, 7, "hint", "seed 7: say a")]
    cfg = GAME.model_copy(update={"reset_failure": "placeholder", "env_retries": 0})
    engine = RolloutEngine(Scripted({7: ["a"]}), cfg, SamplingParams(seed=0), call_timeout_s=1.5, contract="authors")
    (row,) = engine.run(spec)
    assert row["transcript"][1]["content"].startswith("Error during reset. Starting new game.\n\nHINT:")
    assert row["error_type"] is None
    assert row["episode_return"] == 1.0  # the play went on
    engine = RolloutEngine(
        Scripted({7: ["a"]}),
        cfg.model_copy(update={"reset_failure": "error"}),
        SamplingParams(seed=0),
        call_timeout_s=1.5,
        contract="authors",
    )
    (row,) = engine.run(spec)
    assert row["error_type"] == "exception" and row["turns"] == 0
