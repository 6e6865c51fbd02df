"""Token bookkeeping for multi-turn episodes: the conversation as token ids plus a loss mask.

The agent's sampled tokens are appended as they were generated (mask 1); everything else — the prompt,
the end of each assistant turn as the chat template writes it, and each environment observation or tool
result — is rendered with the chat template and appended with mask 0. Generating from these ids (backends
that take token prompts) means training sees exactly the tokens the model saw.

What follows an assistant turn (its end and the next messages) is rendered after a fixed stand-in history,
never by re-rendering the real conversation: many templates render an earlier assistant turn differently
once a user message follows it (Qwen3 drops its ``<think>`` block, Mistral moves the system prompt into the
last user message), and the difference of two such renderings is not a suffix. :func:`check_template` says
at the start of a run whether a template can be split this way at all.
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from typing import Any

# Stand-in message contents: plain words, so no template's trim or escaping changes them.
STAND_IN_USER = "SPADEPROBE user question"
STAND_IN_REPLY = "SPADEPROBE assistant reply"
PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "spade_probe_tool",
        "description": "SPADEPROBE tool description",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}
_PROBE_TOOL_TEXT = PROBE_TOOL["function"]["description"]


class TemplateError(ValueError):
    """A chat template that cannot be rendered turn by turn: one line naming the model and what breaks
    (``problem``, a clause such as "cannot render tool messages after an assistant turn: ...")."""

    def __init__(self, model: str, problem: str) -> None:
        super().__init__(f"model {model}: the chat template {problem}")
        self.problem = problem


def template_kwargs(enable_thinking: bool | None) -> dict[str, Any]:
    """Extra chat-template variables for ``model.enable_thinking`` (None: none), as the authors'
    ``--apply-chat-template-kwargs '{"enable_thinking":false}'``.

    >>> template_kwargs(False), template_kwargs(None)
    ({'enable_thinking': False}, {})
    """
    return {} if enable_thinking is None else {"enable_thinking": enable_thinking}


def one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut at ``limit`` characters.

    >>> one_line("a\\n  b" + "c" * 10, limit=6)
    'a b…'
    """
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: max(limit - 3, 1)].rstrip() + "…"


def text_after(rendered: str, marker: str) -> str | None:
    """The text after the one occurrence of ``marker`` in ``rendered``; None when it occurs not exactly once
    (a template that dropped the content, or repeats it).

    >>> text_after("<a>X</a><b>", "X"), text_after("X and X", "X"), text_after("none", "X")
    ('</a><b>', None, None)
    """
    return rendered.split(marker, 1)[1] if rendered.count(marker) == 1 else None


def without_moved_system(delta: str, system: str) -> str:
    """``delta`` without a system prompt the template placed in it (and the blank lines after it): Mistral's
    templates write the system prompt into the LAST user message, so it moves along as the conversation
    grows. Assembled ids keep it where the opening prompt put it.

    >>> without_moved_system("</s>[INST] Be brief.\\n\\nHi[/INST]", "Be brief.")
    '</s>[INST] Hi[/INST]'
    """
    return re.sub(re.escape(system) + r"\s*", "", delta)


def _stand_in_history(system: str | None = None, earlier_turn: bool = False) -> list[dict[str, str]]:
    """A conversation ending with an assistant turn whose content is :data:`STAND_IN_REPLY`."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    if earlier_turn:
        messages += [
            {"role": "user", "content": "SPADEPROBE earlier question"},
            {"role": "assistant", "content": "SPADEPROBE earlier reply"},
        ]
    return [*messages, {"role": "user", "content": STAND_IN_USER}, {"role": "assistant", "content": STAND_IN_REPLY}]


class ChatTokens:
    """Renders chat turns into token-id deltas with a tokenizer's chat template.

    ``extra`` holds template variables (``enable_thinking``); each is passed only when the template reads it,
    so a template that does not take it renders as before.
    """

    def __init__(
        self, tokenizer: Any, tools: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.template = getattr(tokenizer, "chat_template", None) or ""
        self.tools = tools if tools and "tools" in self.template else None
        self.extra = {k: v for k, v in (extra or {}).items() if k in self.template}
        self.model = str(getattr(tokenizer, "name_or_path", "") or "the model")

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                messages, tools=self.tools, add_generation_prompt=add_generation_prompt, tokenize=False, **self.extra
            )
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        """The text of sampled token ids, special tokens left out (as a backend returns a reply's text)."""
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """The opening prompt (system + first observation + generation prompt)."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def following_text(self, following: list[dict[str, str]], history: list[dict[str, str]] | None = None) -> str:
        """The text that closes an assistant turn and adds ``following`` (and the generation prompt): what the
        template writes after the assistant content of ``history`` when ``following`` comes next. ``history``
        (default: a stand-in user question and reply) must end with the reply :data:`STAND_IN_REPLY`.

        Raises:
            TemplateError: the template cannot render it, or renders the assistant content not exactly once.
        """
        messages = [*(history or _stand_in_history()), *following]
        try:
            rendered = self.render(messages, add_generation_prompt=True)
        except Exception as exc:  # jinja's TemplateError, or whatever the template's raise_exception raises
            roles = "+".join(dict.fromkeys(m["role"] for m in following))
            problem = f"cannot render {roles} messages after an assistant turn: {one_line(str(exc))}"
            raise TemplateError(self.model, problem) from exc
        delta = text_after(rendered, STAND_IN_REPLY)
        if delta is None:
            n = rendered.count(STAND_IN_REPLY)
            problem = (
                f"repeats earlier messages after an assistant turn (a reply is rendered {n} times)"
                if n
                else "does not render an assistant reply's content as given once a message follows it"
            )
            raise TemplateError(self.model, problem)
        return delta

    @cached_property
    def eos_text(self) -> str:
        """The text of the token that ends an assistant turn: the special token the template writes right after
        a reply (``<|im_end|>``, ``<|eot_id|>``, ``</s>``, Gemma's ``<end_of_turn>``), else the tokenizer's eos."""
        try:
            closing = self.following_text([{"role": "user", "content": "SPADEPROBE next question"}])
        except TemplateError:
            closing = ""
        ids = self.encode(closing)[:1] if closing else []
        if ids and ids[0] in self._special_ids():
            return str(self.tokenizer.decode(ids, skip_special_tokens=False))
        return str(self.tokenizer.eos_token or "")

    @cached_property
    def eos_id(self) -> int | None:
        """The id of :attr:`eos_text`: a reply whose sampled ids end with it ended its turn by itself."""
        ids = self.encode(self.eos_text) if self.eos_text else []
        return ids[0] if len(ids) == 1 else self.tokenizer.eos_token_id

    def _special_ids(self) -> set[int]:
        tok = self.tokenizer
        ids = set(getattr(tok, "all_special_ids", None) or [])
        decoder = getattr(tok, "added_tokens_decoder", None) or {}
        return ids | {int(i) for i, added in decoder.items() if getattr(added, "special", False)}

    def after_assistant(
        self, history: list[dict[str, str]], assistant: str, ended_with_eos: bool, following: list[dict[str, str]]
    ) -> list[int]:
        """Tokens that close the assistant turn and add the messages that follow it (all mask 0): one
        observation (a user message), or every tool result of the turn (tool messages), rendered together
        as one delta, so a template that groups consecutive tool results renders them as it would whole.

        The delta is rendered after a stand-in history (:meth:`following_text`), so it never depends on how
        the template re-renders the real ``history`` and ``assistant`` (kept for the call signature). When the
        sampled ids already end with the turn's end token (``ended_with_eos``: their last id is
        :attr:`eos_id`), the template's copy of it is left out.
        """
        text = self.following_text(following)
        if ended_with_eos and self.eos_text and text.startswith(self.eos_text):
            text = text[len(self.eos_text) :]
        return self.encode(text)

    def completion_ids(self, text: str, stopped: bool) -> list[int]:
        """Token ids for an assistant reply that came back as text only (server backends); the end-of-turn
        token is included only when the model stopped by itself (not when it hit the token limit)."""
        ids = self.encode(text)
        return [*ids, self.eos_id] if stopped and self.eos_id is not None else ids


# -- the split check -------------------------------------------------------------------------------------------
def _following(tool_messages: bool) -> list[dict[str, str]]:
    if tool_messages:
        return [
            {"role": "tool", "content": "SPADEPROBE first tool result"},
            {"role": "tool", "content": "SPADEPROBE second tool result"},
        ]
    return [{"role": "user", "content": "SPADEPROBE next observation"}]


def _delta_problem(chat: ChatTokens, following: list[dict[str, str]], system: str | None) -> str | None:
    """What is wrong with the text after an assistant turn, rendered after the stand-in history and after a
    longer one (a system message when ``system``, an earlier turn); None when nothing."""
    delta = chat.following_text(following)
    for m in following:
        if (n := delta.count(m["content"])) != 1:
            return f"renders a {m['role']} message's content {n} times after an assistant turn (expected once)"
    if STAND_IN_USER in delta:
        return "repeats earlier messages after each assistant turn"
    if chat.tools is not None and _PROBE_TOOL_TEXT in delta:
        return "renders the tool schemas again with the messages after each assistant turn"
    longer = _stand_in_history(system, earlier_turn=True)
    rendered = chat.render([*longer, *following], add_generation_prompt=True)
    earlier = [m["content"] for m in longer if m["role"] != "system"]
    if any(rendered.count(c) != 1 for c in earlier):
        return "repeats earlier messages after each assistant turn"
    other = chat.following_text(following, longer)
    if system is not None and system in other:
        other = without_moved_system(other, system)
    if other != delta:
        return (
            "renders the text after an assistant turn differently depending on the conversation before it "
            f"({one_line(repr(delta), 60)} vs {one_line(repr(other), 60)})"
        )
    return None


def _conversation_problem(chat: ChatTokens, following: list[dict[str, str]], system: str | None) -> str | None:
    """Assemble a two-turn conversation as a rollout does (prompt, sampled reply with its end token, delta) and
    say which message's content its text does not hold exactly once; None when every one is there once."""
    opening = [
        *([{"role": "system", "content": system}] if system is not None else []),
        {"role": "user", "content": "SPADEPROBE first observation"},
    ]
    reply = "SPADEPROBE sampled reply"
    sampled = chat.completion_ids(reply, stopped=True)
    ended = bool(sampled) and sampled[-1] == chat.eos_id
    ids = chat.prompt(opening) + sampled + chat.after_assistant(opening, reply, ended, following)
    text = str(chat.tokenizer.decode(ids, skip_special_tokens=False))
    for m in [*opening, {"role": "assistant", "content": reply}, *following]:
        if (n := text.count(m["content"])) != 1:
            return f"holds the {m['role']} message {n} times in an assembled two-turn conversation (expected once)"
    return None


def template_problem(chat: ChatTokens, system: bool = True, tool_messages: bool = False) -> str | None:
    """Why ``chat``'s template cannot be rendered turn by turn, as a clause ("cannot render …"); None when
    it can. ``system``: conversations open with a system message; ``tool_messages``: the environment answers
    with ``tool`` messages (the native tool protocol), else with a user message."""
    probe_system = "SPADEPROBE system prompt" if system else None
    opening = [
        *([{"role": "system", "content": probe_system}] if probe_system is not None else []),
        {"role": "user", "content": STAND_IN_USER},
    ]
    try:
        chat.prompt(opening)
    except Exception as exc:
        with_system = " with a system message" if system else ""
        return f"cannot render the opening prompt{with_system}: {one_line(str(exc))}"
    following = _following(tool_messages)
    try:
        return _delta_problem(chat, following, probe_system) or _conversation_problem(chat, following, probe_system)
    except TemplateError as exc:
        return exc.problem
    except Exception as exc:
        return f"cannot render a longer conversation: {one_line(str(exc))}"


def check_template(
    tokenizer: Any,
    tools: list[dict[str, Any]] | bool | None = None,
    extra: dict[str, Any] | None = None,
    *,
    model: str | None = None,
    system: bool = True,
    tool_messages: bool = False,
) -> None:
    """Check that ``tokenizer``'s chat template can be rendered turn by turn as rollouts assemble episodes.

    ``tools``: the tool schemas (or True) when the template is given tools (tool-use environments; a stand-in
    schema is added to see where the template writes them), ``extra`` the template variables
    (:func:`template_kwargs`), ``model`` the name in the message (default: the tokenizer's), ``system`` whether
    conversations open with a system message, ``tool_messages`` whether results come back as ``tool`` messages.

    Raises:
        TemplateError: one line naming the model and what about its template breaks.
    """
    schemas = [*(tools if isinstance(tools, list) else []), PROBE_TOOL] if tools else None
    chat = ChatTokens(tokenizer, schemas, extra)
    problem = template_problem(chat, system=system, tool_messages=tool_messages)
    if problem is not None:
        raise TemplateError(model or chat.model, problem)


_CHECKED: dict[tuple[Any, ...], str | None] = {}


def ensure_template(chat: ChatTokens, *, system: bool = True, tool_messages: bool = False) -> None:
    """:func:`check_template` for the template of a :class:`ChatTokens` a rollout built (tools or not, as it
    was built), run once per template, tokenizer and conversation shape in a process; later calls are a dict
    look-up.

    Raises:
        TemplateError: as :func:`check_template`.
    """
    key = (
        id(chat.tokenizer),
        chat.template,
        chat.tools is not None,
        json.dumps(chat.extra, sort_keys=True, default=str),
        system,
        tool_messages,
    )
    if key not in _CHECKED:
        probe = ChatTokens(chat.tokenizer, [PROBE_TOOL] if chat.tools is not None else None, chat.extra)
        _CHECKED[key] = template_problem(probe, system=system, tool_messages=tool_messages)
    if (problem := _CHECKED[key]) is not None:
        raise TemplateError(chat.model, problem)
