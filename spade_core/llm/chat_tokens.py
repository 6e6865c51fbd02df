"""Token bookkeeping for multi-turn episodes: the conversation as token ids plus a loss mask.

The agent's sampled tokens are appended as they were generated (mask 1); everything else — the prompt,
the end of each assistant turn as the chat template writes it, and each environment observation or tool
result — is rendered with the chat template and appended with mask 0. Generating from these ids (backends
that take token prompts) means training sees exactly the tokens the model saw.
"""

from __future__ import annotations

from typing import Any


def template_kwargs(enable_thinking: bool | None) -> dict[str, Any]:
    """Extra chat-template variables for ``model.enable_thinking`` (None: none), as the authors'
    ``--apply-chat-template-kwargs '{"enable_thinking":false}'``.

    >>> template_kwargs(False), template_kwargs(None)
    ({'enable_thinking': False}, {})
    """
    return {} if enable_thinking is None else {"enable_thinking": enable_thinking}


class ChatTokens:
    """Renders chat turns into token-id deltas with a tokenizer's chat template.

    ``extra`` holds template variables (``enable_thinking``); each is passed only when the template reads it,
    so a template that does not take it renders as before.
    """

    def __init__(
        self, tokenizer: Any, tools: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        template = getattr(tokenizer, "chat_template", None) or ""
        self.tools = tools if tools and "tools" in template else None
        self.extra = {k: v for k, v in (extra or {}).items() if k in template}
        self.eos_text = tokenizer.eos_token or ""
        self.eos_id = tokenizer.eos_token_id

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

    def after_assistant(
        self, history: list[dict[str, str]], assistant: str, ended_with_eos: bool, following: list[dict[str, str]]
    ) -> list[int]:
        """Tokens that close the assistant turn and add the messages that follow it (all mask 0): one
        observation (a user message), or every tool result of the turn (tool messages), rendered together
        as one delta, so a template that groups consecutive tool results renders them as it would whole.

        ``history`` is the conversation before the assistant turn.
        """
        turn = {"role": "assistant", "content": assistant}
        before = self.render([*history, turn], add_generation_prompt=False)
        after = self.render([*history, turn, *following], add_generation_prompt=True)
        env_text = after[len(before) :] if after.startswith(before) else after
        cut = before.rfind(assistant) if assistant else -1
        closing = before[cut + len(assistant) :] if cut >= 0 else self.eos_text + "\n"
        if ended_with_eos and closing.startswith(self.eos_text):
            closing = closing[len(self.eos_text) :]
        return self.encode(closing + env_text)

    def completion_ids(self, text: str, stopped: bool) -> list[int]:
        """Token ids for an assistant reply that came back as text only (server backends); the end-of-turn
        token is included only when the model stopped by itself (not when it hit the token limit)."""
        ids = self.encode(text)
        return [*ids, self.eos_id] if stopped and self.eos_id is not None else ids
