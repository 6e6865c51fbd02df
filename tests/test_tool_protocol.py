"""The native tool-calling protocol (``rollout.tool_protocol: native``): every call of a reply runs in the jail,
outside ``step``, each result comes back as a ``tool`` message, and a malformed call can be masked out of the
loss (the authors' orchestrator.py:786-1031). Scripted replies where the point is the protocol, the tiny
model where it is what a model says."""

from __future__ import annotations

import copy

import pytest
from agents import Scripted

from sandbox.runtime.spade_env import is_malformed_call, parse_native_calls
from sandbox.session import EnvSession
from spade_core.config import RolloutConfig
from spade_core.envs.contract import env_id_for
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import SamplingParams
from spade_core.play.agent_prompts import TOOL_HOW
from spade_core.play.rollout import EpisodeSpec, RolloutEngine

pytestmark = pytest.mark.usefixtures("jail_processes_checked")

SAFE = """
from spade_env import ToolEnv

class Safe(ToolEnv):
    def reset(self, seed=None):
        self.balance = 10
        self.expected_answer = None
        return "seed %s: deposit 5, then tell me the balance." % seed, {}

    def tool_deposit(self, amount: int) -> str:
        \"\"\"Deposit an amount.\"\"\"
        self.balance += amount
        return "deposited %s" % amount

    def tool_balance(self) -> str:
        \"\"\"The balance, and how many turns step() has counted.\"\"\"
        return "balance %s (turns counted: %s)" % (self.balance, self.turn_count)

    def tool_broken(self) -> str:
        \"\"\"Always fails.\"\"\"
        raise ValueError("the vault is stuck")

    def is_solved(self):
        return self.balance >= 15

    def solution(self):
        return '<tool_call>{"name": "deposit", "arguments": {"amount": 5}}</tool_call><answer>15</answer>'
"""
DEPOSIT_AND_LOOK = (
    'Let me do both. <tool_call>{"name": "deposit", "arguments": {"amount": 5}}</tool_call>\n'
    '<tool_call>{"name": "balance", "arguments": {}}</tool_call>'
)
XML_DEPOSIT = "<tool_call>\n<function=deposit>\n<parameter=amount>\n5\n</parameter>\n</function>\n</tool_call>"
MALFORMED = "<tool_call>deposit five please</tool_call>"
NATIVE = RolloutConfig(
    max_turns=4, max_tokens_per_turn=64, max_context_tokens=4096, tool_protocol="native", mask_malformed_tool_calls=True
)

# A chat template in the shape of Qwen2.5's: tool schemas in the system turn, consecutive tool results grouped
# into one user turn of <tool_response> blocks. Rendering each result as its own delta breaks on it.
QWEN_LIKE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}You are a helpful assistant.{% endif %}"
    "\n\n# Tools\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first and tools %}"
    "{% elif message.role == 'tool' %}"
    "{% if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def play(scripts, tokenizer, cfg: RolloutConfig = NATIVE, code: str = SAFE) -> list[dict]:  # type: ignore[no-untyped-def]
    engine = RolloutEngine(
        Scripted(scripts), cfg, SamplingParams(temperature=0.6, seed=0), call_timeout_s=3.0, tokenizer=tokenizer
    )
    return engine.run([EpisodeSpec(env_id_for(code), code, seed) for seed in scripts])


def masked_replies(row, tokenizer) -> list[str]:  # type: ignore[no-untyped-def]
    """The text of each stretch of loss-mask-1 tokens."""
    out, cur = [], []
    for tok, m in zip(row["token_ids"], row["loss_mask"], strict=True):
        if m:
            cur.append(tok)
        elif cur:
            out.append(cur)
            cur = []
    return [tokenizer.decode(s, skip_special_tokens=True) for s in ([*out, cur] if cur else out)]


@pytest.fixture(scope="module")
def qwen_like(tiny_generator):  # type: ignore[no-untyped-def]
    tokenizer = copy.deepcopy(tiny_generator.tokenizer)
    tokenizer.chat_template = QWEN_LIKE
    return tokenizer


def test_every_call_of_a_reply_runs_in_order_outside_step_and_returns_as_tool_messages(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    (row,) = play({0: [DEPOSIT_AND_LOOK, "<answer>15</answer>"]}, tiny_generator.tokenizer)
    assert row["error_type"] is None and (row["terminated"], row["episode_return"]) == (True, 1.0)
    assert row["rewards"] == [0.0, 1.0]  # a tool turn's reward is 0, the answer's 1
    roles = [m["role"] for m in row["transcript"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    tools = [m["content"] for m in row["transcript"] if m["role"] == "tool"]
    assert tools == ["deposited 5", "balance 15 (turns counted: 0)"]  # in order; step counted no turn
    # the template renders no tools, so the system prompt carries the schemas and the native call format
    system = row["transcript"][0]["content"]
    assert TOOL_HOW["native"] in system and '"name":"deposit"' in system


def test_the_xml_call_format_runs_and_a_failing_tool_is_feedback(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    broken = '<tool_call>{"name": "broken", "arguments": {}}</tool_call><tool_call>{"name": "nope"}</tool_call>'
    (row,) = play({0: [XML_DEPOSIT, broken, "<answer>15</answer>"]}, tiny_generator.tokenizer)
    tools = [m["content"] for m in row["transcript"] if m["role"] == "tool"]
    assert tools[0] == "deposited 5"
    assert tools[1] == "error: ValueError: the vault is stuck" and tools[2].startswith("Unknown tool 'nope'")
    assert row["error_type"] is None and row["episode_return"] == 1.0


def test_a_malformed_call_is_masked_and_scored_as_the_environment_scores_it(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    scripts = {0: [MALFORMED, DEPOSIT_AND_LOOK, "<answer>15</answer>"]}
    unmasked = NATIVE.model_copy(update={"mask_malformed_tool_calls": False})
    masked, kept = play(scripts, tok), play(scripts, tok, unmasked)
    for (row,) in (masked, kept):
        assert row["rewards"] == [-0.1, 0.0, 1.0] and row["episode_return"] == 1.0
        # the malformed reply went to step: its format error comes back as a user message
        assert row["transcript"][3]["role"] == "user" and row["transcript"][3]["content"].startswith("Format error")
    assert masked_replies(masked[0], tok) == [DEPOSIT_AND_LOOK, "<answer>15</answer>"]
    assert masked_replies(kept[0], tok) == [MALFORMED, DEPOSIT_AND_LOOK, "<answer>15</answer>"]


def test_tool_turns_count_against_the_turn_limit(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    (row,) = play({0: [DEPOSIT_AND_LOOK]}, tiny_generator.tokenizer)
    assert row["turns"] == NATIVE.max_turns and row["rewards"] == [0.0] * NATIVE.max_turns
    assert (row["terminated"], row["episode_return"], row["error_type"]) == (False, 0.0, None)


def test_user_messages_protocol_runs_one_call_per_turn_inside_step(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    cfg = NATIVE.model_copy(update={"tool_protocol": "user_messages"})
    (row,) = play({0: [DEPOSIT_AND_LOOK, "<answer>15</answer>"]}, tiny_generator.tokenizer, cfg)
    assert [m["role"] for m in row["transcript"]] == ["system", "user", "assistant", "user", "assistant"]
    assert row["transcript"][3]["content"].startswith("deposited 5\n(1 more tool call(s) in your reply were ignored")


def test_a_template_with_tools_gets_no_system_prompt_and_one_delta_per_turn(qwen_like) -> None:  # type: ignore[no-untyped-def]
    (row,) = play({0: [DEPOSIT_AND_LOOK, MALFORMED, XML_DEPOSIT, "<answer>20</answer>"]}, qwen_like)
    assert [m["role"] for m in row["transcript"]][:2] == ["user", "assistant"]  # the authors': one user message
    with EnvSession(SAFE) as session:
        schemas = session.open().data["tools"]
    rendered = qwen_like.apply_chat_template(row["transcript"], tools=schemas, tokenize=False)
    # the episode's tokens are the template's rendering of the whole conversation, two tool results grouped
    assert qwen_like.decode(row["token_ids"]) == rendered.rstrip("\n")
    assert rendered.count("<tool_response>") == 3 and rendered.count("<|im_start|>user\n<tool_response>") == 2
    assert row["rewards"] == [0.0, -0.1, 0.0, 1.0]


def test_the_tiny_model_plays_a_seed_with_the_native_protocol(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tool = next(e for e in load_seed_envs() if e.kind == "tool")
    cfg = NATIVE.model_copy(update={"max_turns": 2, "max_tokens_per_turn": 48})
    engine = RolloutEngine(tiny_generator, cfg, SamplingParams(temperature=0.6, seed=0), call_timeout_s=5.0)
    rows = engine.run([EpisodeSpec(tool.env_id, tool.code, seed) for seed in (0, 1)])
    tok = tiny_generator.tokenizer
    for row in rows:
        assert row["error_type"] is None and 1 <= row["turns"] <= 2
        replies = [m["content"] for m in row["transcript"] if m["role"] == "assistant"]
        trained = [r for r in replies if not is_malformed_call(r, parse_native_calls(r))]
        assert masked_replies(row, tok) == trained
