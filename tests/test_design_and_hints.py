"""Designer prompt, skills, code extraction from messy replies, hints and leak detection (pure functions)."""

from __future__ import annotations

import json

import pytest

from spade_core.config import GAME_SKILLS, TOOL_SKILLS, DesignerConfig
from spade_core.designer.design import contract_sections, design_messages, repair_messages
from spade_core.designer.memory import MemoryEntry
from spade_core.designer.replies import design_row, extract_code
from spade_core.designer.skills import skills_for_generation
from spade_core.envs.contract import CONTRACT, env_id_for
from spade_core.play.hints import clean_hint, hint_messages, leaks_solution

ENV = (
    "import random\n\nclass E:\n    def reset(self, seed=None):\n        return 'x', {}\n\n"
    "    def step(self, a):\n        return 'x', 0.0, True, False, {}\n"
)


@pytest.mark.parametrize(
    "reply",
    [
        f"Sure! Here is the environment:\n```python\n{ENV}```\nHope it helps.",
        f"```py\n{ENV}```",
        f"```\n{ENV}```",
        f"Summary first.\n```python\n{ENV}",  # the model ran out of tokens before closing the fence
        f"```python\nimport math\nHELPER = 1\n```\nand the env:\n```python\n{ENV}```",  # picks the env block
        f"```Python\n{ENV}```   ",
        ENV,  # no fence at all, but clearly a module with an env class
    ],
    ids=["python-fence", "py-fence", "bare-fence", "unclosed", "two-blocks", "capitalised", "no-fence"],
)
def test_extract_code_from_messy_replies(reply: str) -> None:
    assert extract_code(reply) == ENV


@pytest.mark.parametrize("reply", ["", "   ", "I cannot do that.", '```json\n{"a": 1}\n```'])
def test_extract_code_none_when_there_is_no_code(reply: str) -> None:
    assert extract_code(reply) is None


def test_extract_code_falls_back_to_the_longest_python_block() -> None:
    assert extract_code("```python\nx = 1\n```\n```python\ny = 22222\n```") == "y = 22222\n"


def test_skills_round_robin_over_generations() -> None:
    cfg = DesignerConfig(kind="both", skills_per_generation=3)
    seen = [skills_for_generation(g, cfg) for g in (1, 2, 3)]
    assert seen[0] == [*GAME_SKILLS[:3], *TOOL_SKILLS]  # games: 3 of 6 in turn; tool use: all 6 [paper]
    assert seen[1] == [*GAME_SKILLS[3:], *TOOL_SKILLS]
    assert seen[2] == seen[0]
    tool4 = DesignerConfig(kind="tool", skills_per_generation=1, tool_skills_per_generation=4)
    assert skills_for_generation(1, tool4) == list(TOOL_SKILLS[:4])
    assert skills_for_generation(2, tool4) == [*TOOL_SKILLS[4:], *TOOL_SKILLS[:2]]


def test_design_prompt_quotes_contract_document_skill_and_memory() -> None:
    good = MemoryEntry("g", "optimization", "game", "class Good: ...", 0.5, 0.3, 1)
    bad = MemoryEntry("b", "optimization", "game", "class Bad:\n    def reset(self): ...", 0.95, 0.0, 1)
    messages = design_messages("Ada Lovelace wrote the first program.", "optimization", "hard", [good], [bad])
    user = messages[1]["content"]
    assert messages[0]["role"] == "system"
    rules, example = contract_sections(CONTRACT)  # the contract's rules, its example as a fenced module
    assert rules in user and f"```python\n{example}```" in user and "Ada Lovelace" in user
    assert "Target skill: optimization. Difficulty: hard" in user and "GAME environment" in user
    assert "class Good" in user and "win rate 0.50" in user
    assert "- too easy (win_rate=0.95): class Bad" in user and "def reset(self)" not in user
    assert "different from the examples" in user


def test_design_prompt_without_document_is_the_no_corpus_ablation() -> None:
    user = design_messages(None, "data_retrieval", "easy")[1]["content"]
    assert "<document>" not in user and "TOOL-USE environment" in user


def test_unknown_skill_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown skill 'juggling'"):
        design_messages(None, "juggling", "easy")


def test_design_row_keeps_prompt_messages_and_env_id() -> None:
    messages = design_messages(None, "optimization", "easy")
    row = design_row(
        design_id="d",
        doc_id=None,
        group_id="g",
        skill="optimization",
        messages=messages,
        completion=f"```python\n{ENV}```",
        model_ref="m",
    )
    assert json.loads(row["prompt"]) == messages
    assert (row["code"], row["env_id"], row["kind"]) == (ENV, env_id_for(ENV), "game")
    empty = design_row(
        design_id="d",
        doc_id=None,
        group_id="g",
        skill="optimization",
        messages=messages,
        completion="no idea",
        model_ref="m",
    )
    assert (empty["code"], empty["env_id"]) == (None, None)


def test_repair_round_feeds_the_error_back() -> None:
    messages = design_messages(None, "optimization", "easy")
    repaired = repair_messages(messages, "bad reply", "unsolvable", "reward 0.0")
    assert repaired[-2] == {"role": "assistant", "content": "bad reply"}
    assert "(unsolvable): reward 0.0" in repaired[-1]["content"]


@pytest.mark.parametrize(
    ("hint", "solutions", "leaks"),
    [
        ("The code is 417.", ["\\boxed{417}"], True),
        ("Answer with \\boxed{417}", ["\\boxed{417}"], True),
        ("Compare each digit with your last probe.", ["\\boxed{417}"], False),
        ("Try 4 first.", ["\\boxed{4}"], False),  # a one-character payload is too generic to call a leak
        (
            "Call lookup with key 'alpha' then answer.",
            ['<tool_call>{"name": "lookup", "arguments": {"key": "alpha"}}</tool_call><answer>blue</answer>'],
            True,
        ),
        (
            "Call lookup first, then answer with the colour.",
            ['<tool_call>{"name": "lookup", "arguments": {"key": "alpha"}}</tool_call><answer>blue</answer>'],
            False,
        ),
        ("The answer is BLUE.", ["<answer>blue</answer>"], True),
        ("Think about 4170 vs the rest.", ["\\boxed{417}"], False),  # whole tokens only
    ],
)
def test_hint_leak_detection(hint: str, solutions: list[str], leaks: bool) -> None:
    assert leaks_solution(hint, solutions) is leaks


def test_clean_hint_strips_label_fences_and_cuts_words() -> None:
    assert (
        clean_hint("Hint: look   at\nthe digits ```python\nx=1\n``` carefully", 100) == "look at the digits carefully"
    )
    assert clean_hint(" ".join(["w"] * 150), 100).count("w") == 100


def test_hint_prompt_rules_per_kind() -> None:
    assert "value-free procedural plan" in hint_messages(ENV, "tool", 100)[1]["content"]
    game = hint_messages(ENV, "game", 60)[1]["content"]
    assert "at most 60 words" in game and "Never state the answer" in game and ENV.strip() in game
