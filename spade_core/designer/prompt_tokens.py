"""The token ids of a design prompt: rendered once, sent to the engine, stored with the design, trained on.

The designer renders each prompt's chat messages with the generator's tokenizer and chat template
(``model.enable_thinking`` passed when the template reads it, as the backends render a request) and sends
those ids as :attr:`~spade_core.llm.base.GenerationRequest.prompt_ids` when the backend takes token prompts;
the ``designs`` row stores exactly those ids (``prompt_ids``), so the trainer trains the designer on the
prompt the engine saw (:func:`spade_core.train.data.designer_samples`). A text-only backend (``openai``) gets
the messages alone and the row stores no ids; the trainer then renders the messages itself, with
:func:`render_prompt_ids`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spade_core.llm.base import Generator
from spade_core.llm.chat_tokens import ChatTokens, template_kwargs


def render_prompt_ids(tokenizer: Any, messages: list[dict[str, str]], enable_thinking: bool | None) -> list[int]:
    """The chat template's token ids of ``messages`` with the generation prompt, as the ``transformers`` and
    ``vllm`` backends render a request without ids (``enable_thinking`` reaches a template that reads it)."""
    extra = ChatTokens(tokenizer, None, template_kwargs(enable_thinking)).extra
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **extra)
    return [int(t) for t in (ids["input_ids"] if hasattr(ids, "keys") else ids)]


def request_prompt_ids(
    generator: Generator, messages: list[dict[str, str]], enable_thinking: bool | None
) -> list[int] | None:
    """The ids to send for ``messages``: rendered with the generator's own tokenizer when it takes token
    prompts (:func:`render_prompt_ids`); None for a text-only backend, one without a tokenizer, or messages
    the template refuses (the backend then renders, or refuses, the request itself, and nothing is stored)."""
    tokenizer = getattr(generator, "tokenizer", None) if generator.supports_token_prompts else None
    if tokenizer is None:
        return None
    try:
        return render_prompt_ids(tokenizer, messages, enable_thinking)
    except Exception:  # a template refusing these messages: this request's failure only, as the backend's
        return None


def first_difference(stored: Sequence[int], rendered: Sequence[int]) -> int | None:
    """The index of the first token where two prompts differ (the shorter one's length when one is a prefix of
    the other), None when they are equal.

    >>> first_difference([1, 2, 3], [1, 2, 3]) is None, first_difference([1, 2, 3], [1, 5, 3])
    (True, 1)
    >>> first_difference([1, 2], [1, 2, 3]), first_difference([], [7])
    (2, 0)
    """
    for i, (a, b) in enumerate(zip(stored, rendered, strict=False)):
        if int(a) != int(b):
            return i
    return None if len(stored) == len(rendered) else min(len(stored), len(rendered))
