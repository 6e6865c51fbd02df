"""The run's chat template, checked before a run writes anything (docs/models.md, "Chat templates").

A rollout assembles each multi-turn episode from the token ids the engine was sent and sampled, turn after
turn (:mod:`spade_core.llm.chat_tokens`); a template that cannot be split that way (it repeats history after
each turn, renders what follows a reply differently depending on the conversation before it, or refuses the
roles the run sends) stops the run at once with one line naming the model and the template's problem, for
each conversation shape the run plays: games (an observation as a user message) and, when the run may play
tool-use environments, tool results. The tokenizer is read from a local model directory, the converted
embedded model or the Hugging Face cache, never from the network: a model not on this machine is checked
by the rollout when its engine has loaded it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from spade_core.config import ConfigError, SpadeConfig
from spade_core.llm.chat_tokens import TemplateError, check_template, template_kwargs
from spade_core.llm.context import local_model_file

# The files a tokenizer and its chat template are read from (a change to any reloads it).
TOKENIZER_FILES = ("tokenizer_config.json", "chat_template.jinja", "tokenizer.json")


@lru_cache(maxsize=4)
def _tokenizer(directory: str, stamp: float) -> Any:
    """The tokenizer of a local model directory, loaded once per directory and modification time."""
    from spade_core.llm.hf import load_tokenizer  # loads transformers: only when a run is checked

    return load_tokenizer(directory)


def local_tokenizer(name_or_path: str) -> Any | None:
    """The model's tokenizer when its files are on this machine (None otherwise, or when it does not load)."""
    config = local_model_file(name_or_path, "tokenizer_config.json")
    if config is None or not config.is_file():
        return None
    files = [config.parent / name for name in TOKENIZER_FILES]
    try:
        return _tokenizer(str(config.parent), max(f.stat().st_mtime for f in files if f.is_file()))
    except Exception:  # a directory the engine will refuse with its own message
        return None


def conversation_shapes(cfg: SpadeConfig) -> list[dict[str, bool]]:
    """The conversation shapes the run's rollouts render, as :func:`check_template`'s keywords: a game (a
    system prompt only under our agent prompt) and, unless the designer writes games only, a tool-use
    episode (under the native protocol its results come back as ``tool`` messages, and the schemas travel in
    the template, without a system prompt, when the template takes them).

    >>> from spade_core.config import load_config
    >>> conversation_shapes(load_config(None, overrides=["designer.kind=game"]))
    [{'system': True, 'tool_messages': False, 'tools': False}]
    >>> len(conversation_shapes(load_config("paper-tool-use")))
    2
    """
    rollout = cfg.rollout
    shapes = [{"system": rollout.agent_prompt == "ours", "tool_messages": False, "tools": False}]
    if cfg.designer.kind != "game" or cfg.designer.fixed_pool:
        native = rollout.tool_protocol == "native"
        shapes.append({"system": True, "tool_messages": native, "tools": True})
    return shapes


def check_run_template(cfg: SpadeConfig) -> None:
    """Refuse a run whose model's chat template cannot be rendered turn by turn (one line).

    Raises:
        ConfigError: names the model, the template's problem and the conversation it was checking.
    """
    tokenizer = local_tokenizer(cfg.model.name_or_path)
    if tokenizer is None:
        return
    extra = template_kwargs(cfg.model.enable_thinking)
    for shape in conversation_shapes(cfg):
        tools = shape["tools"]
        # Native tool calls with the schemas in the template: no system prompt (spade_core.play.agent_prompts).
        in_template = tools and "tools" in (getattr(tokenizer, "chat_template", None) or "")
        system = shape["system"] and not (shape["tool_messages"] and in_template)
        try:
            check_template(
                tokenizer,
                tools,
                extra,
                model=cfg.model.name_or_path,
                system=system,
                tool_messages=shape["tool_messages"],
            )
        except TemplateError as exc:
            kind = "tool-use" if tools else "game"
            raise ConfigError(
                f"{exc} (checking a {kind} episode); use a model whose template renders each turn alone, "
                "or fix its chat_template in tokenizer_config.json"
            ) from None
