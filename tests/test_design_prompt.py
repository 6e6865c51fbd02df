"""The designer prompt against the authors' spec: the interactive requirements, the document truncation
marker, memory examples (same skill; negatives by name only; code cut as the authors', or whole or not at
all), the code a copying designer sees (complete modules), the reply format (code first), skills per
generation by kind, and the memory's start per preset (docs/DESIGN.md §7 steps 1-3, §7.3)."""

from __future__ import annotations

import ast
import random
import re
import textwrap

import pytest

from spade_core.config import GAME_SKILLS, TOOL_SKILLS, DesignerConfig, MemoryConfig, load_config
from spade_core.designer.design import (
    contract_sections,
    design_messages,
    env_class_name,
    interaction_steps,
    truncate_document,
)
from spade_core.designer.memory import Memory, MemoryEntry
from spade_core.designer.prompt_text import REPLY_FORMAT
from spade_core.designer.skills import skills_for_generation
from spade_core.envs.contract import CONTRACT
from spade_core.envs.seeds import load_seed_envs
from spade_core.envs.validate import validate_code

FENCED = re.compile(r"```python\n(.*?)```", re.S)


def user_text(*args, **kwargs) -> str:  # type: ignore[no-untyped-def]
    messages = design_messages(*args, **kwargs)
    assert [m["role"] for m in messages] == ["system", "user"]
    return messages[1]["content"]


def entry(name: str, code: str, win: float, regret: float = 0.0, skill: str = "optimization") -> MemoryEntry:
    return MemoryEntry(name, skill, "tool" if skill in TOOL_SKILLS else "game", code, win, regret, 1)


# -- the interactive spec ----------------------------------------------------------------------------------
@pytest.mark.parametrize("skill", ["optimization", "data_retrieval"])
def test_prompt_states_every_requirement_of_the_interactive_spec(skill: str) -> None:
    user = user_text("A document about heat exchangers.", skill, "medium")
    lowered = user.lower()
    assert "not a one-shot question" in lowered  # multi-turn, not a quiz
    assert "hidden state" in lowered and "stays hidden until" in lowered  # hidden state
    assert "several turns" in lowered and "cannot be reached with one action" in lowered  # several turns
    assert "partial reward" in lowered and "strictly" in lowered and "below the success reward" in lowered
    assert "terminated=true only when the goal is reached" in lowered
    assert "the goal should need 3+ interaction steps" in lowered  # a goal of 3+ steps at medium
    assert "new observation" in lowered and "updates its state" in lowered  # actions change the state
    for forbidden in ("grade it and end the episode", "check one submitted value", '"wrong, try again"'):
        assert forbidden in lowered  # the three ways back to a one-shot quiz, each named
    assert "reminds the agent how to write its next action" in lowered
    assert "trace two different action sequences" in lowered  # the self-check
    assert "literal brace must be doubled" in lowered and "before calling `reset`" in lowered  # robustness
    rules, example = contract_sections()
    assert rules in user and f"```python\n{example}```" in user  # our contract still rules, quoted whole
    assert CONTRACT.startswith(rules) and textwrap.indent(example.rstrip(), "    ") in CONTRACT  # one source


def test_goal_steps_follow_the_difficulty() -> None:
    assert [interaction_steps(d) for d in ("easy", "medium", "hard")] == [2, 3, 3]
    assert "need 2+ interaction steps" in user_text(None, "optimization", "easy")
    assert "need 3+ interaction steps" in user_text(None, "optimization", "hard")


def test_prompt_explains_the_action_of_its_kind() -> None:
    game = user_text(None, "logical_deduction", "medium")
    tool = user_text(None, "api_orchestration", "medium")
    assert "How the agent acts in a game" in game and "How the agent acts in a tool-use environment" not in game
    assert "How the agent acts in a tool-use environment" in tool and "How the agent acts in a game" not in tool
    assert "ONE tool call" in tool and "No single tool call may return enough" in tool and "progress()" in tool
    assert r"\boxed{<command>}" in game and "parse_boxed(action)" in game


def test_grounding_rules_come_with_a_document_only() -> None:
    with_doc = user_text("The Carnot cycle has four stages.", "optimization", "medium")
    assert "<document>\nThe Carnot cycle has four stages.\n</document>" in with_doc
    assert "never refers to the document" in with_doc and "carries the algorithm out step by step" in with_doc
    without = user_text(None, "optimization", "medium")
    assert "<document>" not in without and "never refers to the document" not in without
    assert "hidden state" in without.lower()  # the spec does not depend on the corpus


def test_the_prompt_orders_document_spec_contract_target_then_memory() -> None:
    good = entry("g", "class GoodEnv:\n    def reset(self, seed=None): ...\n", 0.5, 0.3)
    bad = entry("b", "class BadEnv:\n    def reset(self, seed=None): ...\n", 0.0)
    user = user_text("Doc text.", "optimization", "medium", [good], [bad])
    marks = ["<document>", "HIDDEN STATE", CONTRACT[:40], "Target skill:", "### Example 1", "Avoid environments"]
    positions = [user.index(m) for m in marks]
    assert positions == sorted(positions)
    assert user.rstrip().endswith(REPLY_FORMAT)


def test_the_reply_is_asked_for_code_first_and_the_summary_after_it() -> None:
    # A reply cut by the token budget then loses its summary, not its code; a model that writes the
    # summary first may stop before any code.
    last = user_text(None, "optimization", "medium").rstrip().rsplit("\n\n", 1)[-1]
    assert last.index("```python block first") < last.index("one sentence after the block")
    assert "import random" in last  # the imports open the module


# -- what a copying designer copies: complete modules only -------------------------------------------------
def test_the_contract_example_in_the_prompt_is_a_complete_module_that_passes_the_validator() -> None:
    user = user_text(None, "optimization", "medium")
    (example,) = FENCED.findall(user)
    assert example == contract_sections()[1] and example.startswith("import random\n")
    result = validate_code(example, load_config("tiny").validation)
    assert result.ok, (result.error_type, result.message)


def test_contract_sections_refuse_a_contract_without_its_example() -> None:
    with pytest.raises(ValueError, match="Example"):
        contract_sections("Rules only.")


@pytest.mark.parametrize("skill", [*GAME_SKILLS, *TOOL_SKILLS])
def test_whole_memory_examples_reach_the_prompt_as_modules_that_parse(skill: str) -> None:
    memory = Memory.seeded(MemoryConfig(code_chars=10_000))
    positives = memory.positives(skill, 2, random.Random(0), whole=True)
    (seed,) = [s for s in load_seed_envs() if s.skill == skill]
    assert [p.code for p in positives] == [seed.code]  # the whole module, not a cut
    blocks = FENCED.findall(user_text("Doc.", skill, "medium", positives))
    assert len(blocks) == 2  # the contract's example and the memory example
    for block in blocks:
        ast.parse(block)  # a module cut mid-way would not parse


def test_whole_mode_leaves_out_a_memory_example_that_does_not_fit() -> None:
    memory = Memory.seeded()  # code_chars 2000: every seed module is longer
    assert all(len(s.code) > 2000 for s in load_seed_envs())
    assert memory.positives("optimization", 2, random.Random(0), whole=True) == []
    user = user_text("Doc.", "optimization", "medium", memory.positives("optimization", 2, whole=True))
    assert "### Example" not in user and len(FENCED.findall(user)) == 1


# -- the truncation marker ---------------------------------------------------------------------------------
def test_truncation_cuts_at_max_words_and_marks_the_cut() -> None:
    text = " ".join(f"w{i}" for i in range(10))
    cut = truncate_document(text, 4)
    body, marker = cut.rsplit("\n", 1)
    assert body.split() == ["w0", "w1", "w2", "w3"] and marker == "[Document truncated at ~4 words]"


@pytest.mark.parametrize("max_words", [10, 11, 1000])
def test_no_marker_when_nothing_was_cut(max_words: int) -> None:
    text = "para one\n\npara  two " + " ".join(["x"] * 6)
    assert len(text.split()) == 10
    assert truncate_document(text, max_words) == text  # untouched, whitespace included


def test_truncation_keeps_the_documents_whitespace_up_to_the_cut() -> None:
    text = "Title\n\nFirst paragraph here.\n\nSecond paragraph."
    assert truncate_document(text, 4) == "Title\n\nFirst paragraph here.\n[Document truncated at ~4 words]"
    assert truncate_document("", 5) == "" and truncate_document("   ", 5) == "   "
    with pytest.raises(ValueError, match="max_words"):
        truncate_document("a b", 0)


def test_the_marker_reaches_the_prompt() -> None:
    document = truncate_document(" ".join(["word"] * 50), 20)
    assert "word\n[Document truncated at ~20 words]\n</document>" in user_text(document, "optimization", "easy")


# -- memory examples in the prompt -------------------------------------------------------------------------
def test_negatives_are_shown_by_name_only_never_their_code() -> None:
    code = (
        "import random\n\nclass Helper:\n    pass\n\nclass OvenSecretEnv:\n    def reset(self, seed=None):\n"
        "        self.zz_unique_marker = 1\n"
    )
    easy = entry("e1", code, 0.95)
    hard = entry("e2", code.replace("OvenSecretEnv", "IceSecretEnv"), 0.05)
    user = user_text(None, "optimization", "medium", (), [easy, hard])
    assert "- too easy (win_rate=0.95): class OvenSecretEnv" in user
    assert "- too hard (win_rate=0.05): class IceSecretEnv" in user
    assert "zz_unique_marker" not in user and "class Helper" not in user and "class OvenSecretEnv:" not in user
    lines = [ln for ln in user.splitlines() if "SecretEnv" in ln]
    line = re.compile(r"- too (easy|hard) \(win_rate=\d\.\d\d\): class \w+")
    assert len(lines) == 2 and all(line.fullmatch(ln) for ln in lines)


def test_positives_are_shown_with_code_win_rate_and_regret() -> None:
    good = entry("g", "class GoodEnv:\n    def reset(self, seed=None): ...\n", 0.42, 0.25)
    user = user_text(None, "optimization", "medium", [good])
    assert "### Example 1 (skill: optimization; agent win rate 0.42; regret +0.25)" in user
    assert "```python\nclass GoodEnv:\n    def reset(self, seed=None): ...\n```" in user
    assert "create a DIFFERENT environment" in user


@pytest.mark.parametrize("which", ["positives", "negatives"])
def test_examples_of_another_skill_are_an_error(which: str) -> None:
    other = entry("o", "class OtherEnv: ...", 0.5 if which == "positives" else 0.0, skill="logical_deduction")
    with pytest.raises(ValueError, match=r"target skill 'optimization'.*logical_deduction"):
        design_messages(None, "optimization", "medium", **{which: [other]})


def test_memory_to_prompt_same_skill_examples_with_code_cut_to_2000_as_the_authors() -> None:
    tail = "# tail_marker_beyond_2000\n"
    long_code = "class LongGoodEnv:\n    def reset(self, seed=None): ...\n" + "    # pad\n" * 300 + tail
    assert len(long_code) > 2100
    memory = Memory(
        entries=[
            entry("good", long_code, 0.5, 0.4),
            entry("other_good", "class OtherSkillEnv: ...", 0.5, 0.9, skill="logical_deduction"),
            entry("easy", "class TooEasyEnv:\n    def reset(self): ...\n", 1.0),
            entry("other_easy", "class OtherEasyEnv: ...", 1.0, skill="logical_deduction"),
        ]
    )
    rng = random.Random(0)
    user = user_text(
        None,
        "optimization",
        "medium",
        memory.positives("optimization", 2, rng),
        memory.negatives("optimization", 1, rng),
    )
    assert long_code[:2000] in user and "tail_marker_beyond_2000" not in user
    assert "- too easy (win_rate=1.00): class TooEasyEnv" in user and "def reset(self): ..." not in user
    assert "OtherSkillEnv" not in user and "OtherEasyEnv" not in user


def test_env_class_name_prefers_the_class_with_reset() -> None:
    assert env_class_name("class A:\n    x = 1\n\nclass GameEnv:\n    def reset(self, seed=None): ...\n") == "GameEnv"
    assert env_class_name("class Shop(ToolEnv):\n    def tool_buy(self, item: str) -> str: ...\n") == "Shop"
    assert env_class_name("class Node: ...\nclass TruncatedEnv:\n    def __init__(self") == "TruncatedEnv"
    assert env_class_name("class Only: ...") == "Only" and env_class_name("def f(): ...") is None


# -- skills per generation by kind -------------------------------------------------------------------------
def test_games_take_3_of_6_skills_round_robin() -> None:
    cfg = DesignerConfig(kind="game")
    assert cfg.skills_per_generation == 3
    windows = [skills_for_generation(g, cfg) for g in range(1, 5)]
    assert windows[0] == list(GAME_SKILLS[:3]) and windows[1] == list(GAME_SKILLS[3:])
    assert windows[2] == windows[0] and windows[3] == windows[1]
    assert set(windows[0]).isdisjoint(windows[1]) and set(windows[0]) | set(windows[1]) == set(GAME_SKILLS)


def test_tool_use_takes_all_6_skills_every_generation() -> None:
    cfg = DesignerConfig(kind="tool")
    assert cfg.tool_skills_per_generation == 6
    assert all(skills_for_generation(g, cfg) == list(TOOL_SKILLS) for g in range(1, 5))


def test_both_kinds_take_each_kinds_own_count() -> None:
    cfg = DesignerConfig(kind="both", skills_per_generation=2, tool_skills_per_generation=3)
    assert skills_for_generation(1, cfg) == [*GAME_SKILLS[:2], *TOOL_SKILLS[:3]]
    assert skills_for_generation(2, cfg) == [*GAME_SKILLS[2:4], *TOOL_SKILLS[3:]]
    assert skills_for_generation(4, cfg) == [*GAME_SKILLS[:2], *TOOL_SKILLS[3:]]


def test_paper_presets_skills_and_an_empty_starting_memory() -> None:
    games, tool, tiny = load_config("paper-games"), load_config("paper-tool-use"), load_config("tiny")
    assert skills_for_generation(1, games.designer) == list(GAME_SKILLS[:3])
    assert skills_for_generation(2, games.designer) == list(GAME_SKILLS[3:])
    assert skills_for_generation(1, tool.designer) == list(TOOL_SKILLS)
    assert not games.memory.seed_with_library and not tool.memory.seed_with_library
    assert len(Memory.initial(games.memory)) == 0 and len(Memory.initial(tool.memory)) == 0
    assert tiny.memory.seed_with_library and len(Memory.initial(tiny.memory)) > 0
    assert MemoryConfig().code_chars == 2000


# -- designer.user_prompt: the authors' layout, our words ------------------------------------------------------
def _pieces(user: str, *markers: str) -> list[int]:
    return [user.index(m) for m in markers]


def test_the_authors_layout_puts_the_document_first_and_the_memory_after_the_request() -> None:
    pos = [entry("p1", "class WarmEnv: ...", 0.5, 0.3)]
    neg = [entry("n1", "class FurnaceEnv:\n    def reset(self, seed=None): ...\n", 0.95)]
    theirs = user_text("Heat flows from hot to cold.", "optimization", "medium", pos, neg, layout="authors")
    assert theirs.startswith("You are given a reference document. Create an interactive, multi-turn Python game")
    order = _pieces(
        theirs,
        "<REFERENCE_DOCUMENT>\nHeat flows from hot to cold.\n</REFERENCE_DOCUMENT>",
        "HIDDEN STATE",  # the spec, in our words
        "Interface contract:",
        "Target skill: optimization (finding the best solution under constraints). Difficulty: medium: the goal "
        "should need 3+ interaction steps.",
        "Generate the complete Python code in a ```python block.",
        "<REFERENCE_ENVIRONMENTS>",
        "### Example 1 (skill: optimization, win_rate: 0.50, regret: 0.30)\n```python\nclass WarmEnv: ...\n```",
        "</REFERENCE_ENVIRONMENTS>",
        "Avoid generating environments like:\n- too easy (win_rate=0.95): class FurnaceEnv",
    )
    assert order == sorted(order)
    assert REPLY_FORMAT not in theirs and "<document>" not in theirs
    ours = user_text("Heat flows from hot to cold.", "optimization", "medium", pos, neg)
    assert ours.endswith(REPLY_FORMAT) and "<REFERENCE_ENVIRONMENTS>" not in ours and "<document>" in ours
    # The same rules either way: the contract's rules and its example module, the robustness rules.
    rules, example = contract_sections()
    assert all(piece in theirs and piece in ours for piece in (rules, example, "Robustness (the most common"))


def test_the_authors_tool_layouts_single_task_and_multi_turn() -> None:
    single = user_text("A shop's order system.", "data_retrieval", "hard", layout="authors")
    assert single.index("<REFERENCE_DOCUMENT>") < single.index("The environment tests: data retrieval (finding")
    assert single.rstrip().endswith("Generate the complete Python code in a ```python block.")
    from spade_core.designer.prompt_text import multiturn_brief

    brief = multiturn_brief("class ShopEnv(InstructionEnv): ...", random.Random(0))
    multi = user_text("Flavour text.", "api_orchestration", "medium", multiturn=brief, layout="authors")
    assert multi.startswith("Create a MULTI-TURN tool-use environment: subclass spade_env.InstructionEnv.")
    order = _pieces(multi, f"Domain: {brief.domain}", "<REFERENCE_SNIPPET>\nFlavour text.", "class ShopEnv", "Generate")
    assert order == sorted(order)


def test_the_paper_presets_design_with_the_authors_layout_and_the_others_with_ours() -> None:
    from spade_core.designer.batch import prompt_from_text
    from spade_core.designer.memory import Memory as Mem

    for preset, layout in (("paper-games", "authors"), ("tiny", "ours")):
        cfg = load_config(preset)
        prompt = prompt_from_text(cfg, cfg_skill(cfg), "d1", "A document.", Mem(cfg.memory), random.Random(0))
        assert ("<REFERENCE_DOCUMENT>" in prompt.messages[-1]["content"]) == (layout == "authors"), preset


def cfg_skill(cfg) -> str:  # type: ignore[no-untyped-def]
    return skills_for_generation(1, cfg.designer)[0]


# -- memory.negative_name: the class, or the authors' file stem ----------------------------------------------
def test_negatives_named_by_the_authors_file_stem_say_nothing_of_the_environment() -> None:
    furnace = "class FurnaceEnv:\n    def reset(self, seed=None): ...\n"
    entries = [entry("a", "class A: ...", 0.5), entry("n1", furnace, 0.95)]
    entries = [MemoryEntry(e.env_id, e.skill, e.kind, e.code, e.win_rate, e.regret, 3) for e in entries]
    stems = Memory(MemoryConfig(negative_name="file_stem"), entries).negatives("optimization", 1, None, 4)
    # generation 3 starts at step 8 (K = 4); the second entry of its generation; its skill
    assert [e.class_name for e in stems] == ["game_00008_001_optimization"]
    user = user_text("Doc.", "optimization", "medium", negatives=stems)
    assert "class game_00008_001_optimization" in user and "FurnaceEnv" not in user
    ours = Memory(MemoryConfig(), entries).negatives("optimization", 1, None, 4)
    assert [e.class_name for e in ours] == ["FurnaceEnv"]  # what it was
    assert load_config("paper-tool-use").memory.negative_name == "file_stem"
    assert Memory(MemoryConfig(negative_name="file_stem"), entries).to_frame().equals(Memory(None, entries).to_frame())
