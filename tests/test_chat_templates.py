"""Multi-turn episode ids (:mod:`spade_core.llm.chat_tokens`) against the chat templates of the model families
users train (``tests/fixtures/chat_templates``, each reproducing its family's published template), each on a
copy of the bundled tokenizer with the family's special tokens added.

Every episode is assembled exactly as the rollout engine does (``spade_core/play/player.py`` and
``recorder.py``): the prompt's ids; then per turn the sampled ids (the reply's tokens, plus the turn-end token
when the model stopped by itself), and the delta ``after_assistant`` renders. Checked: (a) each turn's ids
start with what the engine was sent and returned, token for token; (b) the text holds every message once;
(c) the text equals the template's rendering of the conversation, or, where the template renders history
differently from what the model saw (Qwen3, Mistral), the rendering this module says it equals instead."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spade_core.llm.chat_tokens import ChatTokens, TemplateError, check_template, ensure_template

TEMPLATES = Path(__file__).parent / "fixtures" / "chat_templates"
Messages = list[dict[str, str]]

SYSTEM = "You play games. Think briefly, then answer."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "deposit",
            "description": "Deposit an amount.",
            "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "balance",
            "description": "The balance.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
TOOL_SYSTEM = "You use tools. Call them with <tool_call> blocks, then give <answer>."


@dataclass(frozen=True)
class Family:
    """A model family's template and tokens. ``stop``: the token its model samples to end a turn (Gemma's
    ``<end_of_turn>`` is not its tokenizer's eos); ``reply_lead``: what its replies start with (Mistral's
    sentencepiece models write a leading space after ``[/INST]``)."""

    name: str
    specials: tuple[str, ...] = ()
    added: tuple[str, ...] = ()  # tokens of their own that are not special (decoded replies keep them)
    bos: str | None = None
    eos: str | None = None
    stop: str = "<|im_end|>"
    extra: tuple[tuple[str, Any], ...] = ()
    system: bool = True
    tool_messages: bool = True
    reply_lead: str = ""
    think: bool = False  # replies open with a <think> block (Qwen3 with thinking on)
    fixture: str = ""
    expected: Callable[[ChatTokens, Messages, Family], str] = field(default=lambda chat, m, f: rendered(chat, m))

    @property
    def template(self) -> str:
        return (TEMPLATES / f"{self.fixture or self.name}.jinja").read_text()


def rendered(chat: ChatTokens, messages: Messages) -> str:
    """The template's rendering of the whole conversation, ready for the next reply."""
    return chat.render(messages, add_generation_prompt=True)


def qwen3_expected(chat: ChatTokens, messages: Messages, family: Family) -> str:
    """Qwen3 renders an earlier assistant turn as its answer alone: it drops the ``<think>`` block (the empty
    one the generation prompt wrote with thinking off, the reasoning with thinking on) of every turn before the
    last user message, and of a turn after it without reasoning. The assembled text is that rendering with each
    turn as the model saw it: the generation prompt's block and the reply as sampled."""
    text = rendered(chat, messages)
    opened = "<think>\n\n</think>\n\n" if dict(family.extra).get("enable_thinking") is False else ""
    for m in messages:
        if m["role"] == "assistant":
            shown = m["content"].split("</think>")[-1].lstrip("\n")
            text = text.replace(
                f"<|im_start|>assistant\n{shown}<|im_end|>", f"<|im_start|>assistant\n{opened}{m['content']}<|im_end|>"
            )
    return text


def mistral_expected(chat: ChatTokens, messages: Messages, family: Family) -> str:
    """Mistral v0.3 writes the system prompt into the LAST user message, so it moves each turn; the assembled
    text keeps it where the opening prompt put it: the rendering with the system prompt folded into the first
    user message."""
    if messages[0]["role"] != "system":
        return rendered(chat, messages)
    system, first, *rest = messages
    return rendered(chat, [{"role": "user", "content": f"{system['content']}\n\n{first['content']}"}, *rest])


CHATML = ("<|im_start|>", "<|im_end|>")
QWEN_ADDED = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
LLAMA = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>")
MISTRAL = ("<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
           "[/TOOL_RESULTS]", "[TOOL_CALLS]")  # fmt: skip
GEMMA = ("<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>")

FAMILIES = {
    f.name: f
    for f in (
        Family("smollm2"),
        Family("qwen2_5", CHATML, QWEN_ADDED),
        Family("qwen3_no_thinking", CHATML, QWEN_ADDED, extra=(("enable_thinking", False),), fixture="qwen3",
               expected=qwen3_expected),
        Family("qwen3_thinking", CHATML, QWEN_ADDED, extra=(("enable_thinking", True),), think=True, fixture="qwen3",
               expected=qwen3_expected),
        Family("llama3_1", LLAMA, bos="<|begin_of_text|>", eos="<|eot_id|>", stop="<|eot_id|>"),
        Family("mistral_v0_3", MISTRAL, bos="<s>", eos="</s>", stop="</s>", tool_messages=False, reply_lead=" ",
               expected=mistral_expected),
        Family("gemma2", GEMMA, bos="<bos>", eos="<eos>", stop="<end_of_turn>", system=False, tool_messages=False),
        Family("gemma3", GEMMA, bos="<bos>", eos="<eos>", stop="<end_of_turn>", tool_messages=False),
    )
}  # fmt: skip


@pytest.fixture(scope="module")
def bundled(tiny_model_dir: str) -> Any:
    from spade_core.llm.hf import load_tokenizer

    return load_tokenizer(tiny_model_dir)


def family_tokenizer(bundled: Any, family: Family) -> Any:
    """A copy of the bundled tokenizer with the family's template, special tokens, bos and eos."""
    tok = copy.deepcopy(bundled)
    tok.chat_template = family.template
    missing = [t for t in family.specials if t not in tok.get_vocab()]
    if missing:
        tok.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    tok.add_tokens([t for t in family.added if t not in tok.get_vocab()])
    if family.bos:
        tok.bos_token = family.bos
    if family.eos:
        tok.eos_token = family.eos
    tok.name_or_path = f"fixture/{family.name}"
    return tok


# -- episodes, as the rollout plays them ------------------------------------------------------------------------
Turn = tuple[str, bool, Messages | None]  # the reply, whether the model stopped by itself, what follows it


def think(family: Family, reasoning: str, answer: str) -> str:
    lead = family.reply_lead
    return f"{lead}<think>\n{reasoning}\n</think>\n\n{answer}" if family.think else f"{lead}{answer}"


def game(family: Family) -> tuple[Messages, list[Turn]]:
    """A 3-turn game; the second reply is cut at the token limit (no turn-end token sampled)."""
    opening = [{"role": "user", "content": "Guess my number between 1 and 9."}]
    if family.system:
        opening.insert(0, {"role": "system", "content": SYSTEM})
    turns: list[Turn] = [
        (think(family, "Start in the middle.", "I guess \\boxed{5}"), True, [{"role": "user", "content": "Higher."}]),
        (think(family, "Above five.", "I guess \\boxed{7} and"), False, [{"role": "user", "content": "Lower."}]),
        (think(family, "Between five and seven.", "It is \\boxed{6}"), True, None),
    ]
    return opening, turns


def tool_use(family: Family, chat: ChatTokens) -> tuple[Messages, list[Turn]]:
    """A 3-turn tool episode with the native protocol: two results grouped after one turn, one after the next.
    No system prompt when the template renders the tools (as ``system_prompt`` has it)."""
    opening = [{"role": "user", "content": "Deposit 5, then tell me the balance."}]
    if chat.tools is None:
        opening.insert(0, {"role": "system", "content": TOOL_SYSTEM})
    deposit = '<tool_call>{"name": "deposit", "arguments": {"amount": 5}}</tool_call>'
    look = '<tool_call>{"name": "balance", "arguments": {}}</tool_call>'
    turns: list[Turn] = [
        (
            think(family, "Deposit first.", f"Both at once. {deposit}\n{look}"),
            True,
            [{"role": "tool", "content": "deposited 5"}, {"role": "tool", "content": "balance 15"}],
        ),
        (think(family, "Check again.", f"Once more. {look}"), True, [{"role": "tool", "content": "balance still 15"}]),
        (think(family, "Done.", "<answer>15</answer>"), True, None),
    ]
    return opening, turns


@dataclass
class Played:
    prompts: list[list[int]]  # the ids sent to the engine before each reply
    ids: list[int]
    messages: Messages
    conversations: list[Messages]  # the conversation at each prompt


def play(chat: ChatTokens, stop_id: int, opening: Messages, turns: list[Turn]) -> Played:
    """The rollout's bookkeeping (``Player._open``, ``Recorder.reply``, ``Recorder.observations``) with scripted
    replies."""
    ids = chat.prompt(opening)
    messages = list(opening)
    played = Played([list(ids)], ids, messages, [list(messages)])
    for reply, stopped, following in turns:
        sent = list(ids)
        sampled = chat.encode(reply) + ([stop_id] if stopped else [])
        ids += sampled
        messages.append({"role": "assistant", "content": chat.decode(sampled)})
        ended = bool(sampled) and sampled[-1] == chat.eos_id
        if following is None:
            break
        ids += chat.after_assistant(messages[:-1], messages[-1]["content"], ended, following)
        messages.extend(following)
        assert ids[: len(sent) + len(sampled)] == sent + sampled  # (a) what the engine was sent and returned
        played.prompts.append(list(ids))
        played.conversations.append(list(messages))
    return played


def check_played(chat: ChatTokens, family: Family, played: Played) -> None:
    text = chat.tokenizer.decode(played.ids, skip_special_tokens=False)
    for m in played.messages:  # (b) every message once, the system prompt included
        assert text.count(m["content"]) == 1, (m, text)
    for prompt, conversation in zip(played.prompts, played.conversations, strict=True):  # (c)
        assert chat.tokenizer.decode(prompt, skip_special_tokens=False) == family.expected(chat, conversation, family)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_game_episode_holds_each_message_once_and_what_the_model_saw(bundled: Any, name: str) -> None:
    family = FAMILIES[name]
    tok = family_tokenizer(bundled, family)
    chat = ChatTokens(tok, None, dict(family.extra))
    stop_id = tok.convert_tokens_to_ids(family.stop)
    assert chat.eos_id == stop_id and chat.eos_text == family.stop  # the turn's end, from the template
    check_template(tok, None, dict(family.extra), system=family.system)
    check_played(chat, family, play(chat, stop_id, *game(family)))


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f.tool_messages])
def test_a_tool_episode_holds_each_message_once_and_what_the_model_saw(bundled: Any, name: str) -> None:
    family = FAMILIES[name]
    tok = family_tokenizer(bundled, family)
    chat = ChatTokens(tok, TOOLS, dict(family.extra))
    check_template(tok, TOOLS, dict(family.extra), system=chat.tools is None, tool_messages=True)
    played = play(chat, tok.convert_tokens_to_ids(family.stop), *tool_use(family, chat))
    check_played(chat, family, played)
    text = tok.decode(played.ids, skip_special_tokens=False)
    if chat.tools is not None:  # the schemas once, in the opening prompt
        assert text.count('"name": "deposit"') + text.count('"name":"deposit"') >= 1
        assert text.count("Deposit an amount.") == 1


def test_qwen3_groups_tool_results_and_llama_renders_them_as_ipython(bundled: Any) -> None:
    qwen = ChatTokens(family_tokenizer(bundled, FAMILIES["qwen3_no_thinking"]), TOOLS, {"enable_thinking": False})
    results = [{"role": "tool", "content": "one"}, {"role": "tool", "content": "two"}]
    assert qwen.following_text(results) == (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    llama = ChatTokens(family_tokenizer(bundled, FAMILIES["llama3_1"]), TOOLS)
    assert llama.following_text(results[:1]) == (
        '<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n"one"<|eot_id|>'
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    opening = llama.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024" in opening
    assert "Environment: ipython" in opening and "Given the following functions" in opening


def test_qwen3_thinking_is_kept_as_sampled_where_a_rerendering_drops_it(bundled: Any) -> None:
    """The old assembly re-rendered the conversation and, as Qwen3's rendering of it does not extend the
    previous one, appended all of it again: here every message would be twice in the ids."""
    family = FAMILIES["qwen3_thinking"]
    tok = family_tokenizer(bundled, family)
    chat = ChatTokens(tok, None, {"enable_thinking": True})
    played = play(chat, tok.convert_tokens_to_ids("<|im_end|>"), *game(family))
    text = tok.decode(played.ids, skip_special_tokens=False)
    assert text.count("<think>\nStart in the middle.\n</think>") == 1
    assert "Start in the middle." not in rendered(chat, played.conversations[-1])  # Qwen3 drops it from history


def test_the_sampled_turn_end_is_not_doubled_and_a_cut_reply_gets_the_templates(bundled: Any) -> None:
    family = FAMILIES["gemma3"]
    tok = family_tokenizer(bundled, family)
    chat = ChatTokens(tok)
    following = [{"role": "user", "content": "Higher."}]
    ended = tok.decode(chat.after_assistant([], "x", True, following), skip_special_tokens=False)
    cut = tok.decode(chat.after_assistant([], "x", False, following), skip_special_tokens=False)
    assert ended == "\n<start_of_turn>user\nHigher.<end_of_turn>\n<start_of_turn>model\n"
    assert cut == "<end_of_turn>" + ended
    assert chat.completion_ids("hi", stopped=True)[-1] == tok.convert_tokens_to_ids("<end_of_turn>") != tok.eos_token_id


# -- templates that cannot be split ------------------------------------------------------------------------------
ECHO_HISTORY = (  # writes every earlier message again into each user turn
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'user' %}{% for p in messages[:loop.index0] %}{{ p.content }}\n{% endfor %}{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
NUMBERED = (  # numbers the turns, as ChatGLM2's "[Round n]"
    "{% for m in messages %}{% if m.role == 'user' %}[Round {{ loop.index0 // 2 + 1 }}]\n\nQ: {{ m.content }}\n\n"
    "{% else %}A: {{ m.content }}\n\n{% endif %}{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
)


def failure(tok: Any, **kwargs: Any) -> str:
    with pytest.raises(TemplateError) as raised:
        check_template(tok, model="org/some-model", **kwargs)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("model org/some-model: the chat template ")
    return message


@pytest.mark.parametrize(
    ("name", "kwargs", "says"),
    [
        ("gemma2", {"system": True}, "cannot render the opening prompt with a system message: System role not"),
        ("gemma2", {"system": False, "tool_messages": True}, "cannot render tool messages after an assistant turn: "
                                                             "Conversation roles must alternate"),
        ("gemma3", {"tool_messages": True}, "Conversation roles must alternate"),
        ("mistral_v0_3", {"tools": TOOLS, "system": False, "tool_messages": True}, "Tool call IDs should be"),
        ("mistral_v0_3", {"tools": TOOLS}, "renders the tool schemas again with the messages after each assistant"),
    ],
)  # fmt: skip
def test_a_template_that_cannot_render_the_episode_fails_in_one_line(
    bundled: Any, name: str, kwargs: dict[str, Any], says: str
) -> None:
    assert says in failure(family_tokenizer(bundled, FAMILIES[name]), **kwargs)


def test_a_template_that_repeats_or_numbers_history_fails_in_one_line(bundled: Any) -> None:
    tok = copy.deepcopy(bundled)
    tok.chat_template = ECHO_HISTORY
    assert "repeats earlier messages after an assistant turn (a reply is rendered 2 times)" in failure(tok)
    tok.chat_template = NUMBERED
    assert "differently depending on the conversation before it" in failure(tok, system=False)


def test_the_rollout_helper_checks_once_per_template_and_shape(bundled: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import spade_core.llm.chat_tokens as chat_tokens

    calls: list[bool] = []
    real = chat_tokens.template_problem

    def counted(*args: Any, **kwargs: Any) -> str | None:
        calls.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(chat_tokens, "template_problem", counted)
    monkeypatch.setattr(chat_tokens, "_CHECKED", {})
    gemma = family_tokenizer(bundled, FAMILIES["gemma2"])
    for _ in range(3):
        ensure_template(ChatTokens(bundled, TOOLS), system=True, tool_messages=True)
        with pytest.raises(TemplateError, match=r"^model fixture/gemma2: the chat template cannot render the opening"):
            ensure_template(ChatTokens(gemma))
    assert len(calls) == 2


# -- at the start of a run -----------------------------------------------------------------------------------------
def test_a_run_on_a_model_whose_template_cannot_be_split_is_refused_before_it_writes(
    tiny_model_dir: str, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from spade_core.cli import app

    model = tmp_path / "echo-model"
    model.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(Path(tiny_model_dir) / name, model / name)
    (model / "chat_template.jinja").write_text(ECHO_HISTORY)
    store = tmp_path / "store"
    args = ["run", "--run-id", "echo", "--store", str(store), "--set", f"model.name_or_path={model}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: model {model}: the chat template repeats earlier messages")
    assert "(checking a game episode)" in line
    assert not store.exists() or not any(store.rglob("*.yaml")), "nothing may be written"
    # the same files with the model's own template pass the check (and the run goes on to load the model)
    (model / "chat_template.jinja").write_text((Path(tiny_model_dir) / "chat_template.jinja").read_text())
    from spade_core.config import load_config
    from spade_core.llm.run_template import check_run_template

    check_run_template(load_config("tiny", overrides=[f"model.name_or_path={model}", "designer.kind=both"]))


# -- through the rollout engine, with the tiny model ---------------------------------------------------------------
class Recorded:
    """The tiny model's generator, keeping each request's prompt ids and each completion's sampled ids."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.turns: list[tuple[list[int], list[int]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, requests: list[Any], params: Any) -> list[Any]:
        out = self.inner.generate(requests, params)
        self.turns += [(list(r.prompt_ids), list(c.token_ids)) for r, c in zip(requests, out, strict=True)]
        return out


@pytest.fixture(scope="module")
def tiny_generator(tiny_model_dir: str, bundled: Any) -> Any:
    """The tiny model on transformers, its embeddings grown to hold every family's added tokens."""
    from spade_core.llm.hf import TransformersGenerator

    generator = TransformersGenerator(tiny_model_dir, device="cpu", dtype="float32", batch_size=4)
    generator.model.resize_token_embeddings(max(len(family_tokenizer(bundled, f)) for f in FAMILIES.values()))
    yield generator
    generator.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_rollout_of_the_tiny_model_sends_and_keeps_each_message_once(
    bundled: Any, tiny_generator: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spade_core.config import RolloutConfig
    from spade_core.envs.seeds import load_seed_envs
    from spade_core.llm.base import SamplingParams
    from spade_core.play.rollout import EpisodeSpec, RolloutEngine

    family = FAMILIES[name]
    tokenizer = family_tokenizer(bundled, family)
    monkeypatch.setattr(tiny_generator, "tokenizer", tokenizer)  # the replies decode with the family's tokens
    recorded = Recorded(tiny_generator)
    env = {e.skill: e for e in load_seed_envs()}["pattern_recognition"]
    style = "ours" if family.system else "authors"  # Gemma 2 takes no system message
    cfg = RolloutConfig(max_turns=3, max_tokens_per_turn=24, max_context_tokens=4096, agent_prompt=style)
    thinking = dict(family.extra).get("enable_thinking")
    engine = RolloutEngine(recorded, cfg, SamplingParams(temperature=1.0, seed=0), enable_thinking=thinking)
    (row,) = engine.run([EpisodeSpec(env.env_id, env.code, 3)])
    assert row["error_type"] is None, row
    ids, mask = row["token_ids"], row["loss_mask"]
    assert len(recorded.turns) == row["turns"] >= 2, row["turns"]
    for k, (sent, sampled) in enumerate(recorded.turns):  # what the engine was sent and returned, token for token
        assert ids[: len(sent) + len(sampled)] == sent + sampled, k
        assert mask[len(sent) : len(sent) + len(sampled)] == [1] * len(sampled), k
        if k + 1 < len(recorded.turns):
            assert recorded.turns[k + 1][0][: len(sent) + len(sampled)] == sent + sampled, k
    assert sum(mask) == sum(len(s) for _, s in recorded.turns)  # no other token is trained
    text = tokenizer.decode(ids, skip_special_tokens=False)
    for m in row["transcript"]:  # one copy of the conversation: each message as often as the conversation has it
        if m["role"] != "assistant":  # (a reply may be empty, or a few characters found anywhere)
            copies = sum(other["content"].count(m["content"]) for other in row["transcript"])
            assert text.count(m["content"]) == copies, (m["content"], text)
