# Over 400 lines: the prompt's four layouts (design, mutation, parameters, repair) share their parts.
"""The design prompt (docs/DESIGN.md §7 step 3): the chat messages of a design, a mutation, a parameter
mutation and a repair round, laid out from the fixed text of :mod:`spade_core.designer.prompt_text`.

One document prompt yields ``designer.group_size`` designs [1]. The prompt holds the document (cut by
:func:`truncate_document`, with the authors' marker), the authors' interactive spec (hidden state, several
turns, partial reward, a goal that needs 3+ interaction steps; 2+ when easy), the environment contract from
its single source (:data:`spade_core.envs.contract.CONTRACT`), the target skill and difficulty, and memory
examples of the same skill (positive: in-band win rate, high regret, with code; negative: too easy or too
hard, by class name only), and asks for a *different* environment. Code is taken from the reply's
```python block (:mod:`spade_core.designer.replies`); validation happens in the jail. The skills come from
:mod:`spade_core.designer.skills`.

What a small model copies decides whether its design loads (a 135M designer mostly copies the nearest
example), so every piece of code the prompt shows is a complete module that passes the validator: the
contract's example is shown as a fenced module with its imports (:func:`contract_sections`), and memory
examples come whole or not at all (:meth:`spade_core.designer.memory.Memory.positives`; the paper presets keep the
authors' cut). The reply is asked for code first, its one-sentence summary after the block, so a reply
cut by the token budget loses the summary, not the code.
"""

from __future__ import annotations

import itertools
import re
import textwrap
from collections.abc import Sequence
from typing import Protocol

from spade_core.config import skill_kind
from spade_core.designer.prompt_text import (
    AUTHORS_GAME_DESIGNER_SYSTEM,
    CONTRACT_EXAMPLE_HEADING,
    DESIGNER_SYSTEM,
    GAME_ACTIONS,
    GROUNDING,
    INTERACTIVE_SPEC,
    MULTITURN_TOOL_ACTIONS,
    REPLY_FORMAT,
    ROBUSTNESS,
    SKILL_DESCRIPTIONS,
    SKILL_TEXT,
    TASK_VARIANTS,
    TOOL_ACTIONS,
    TRUNCATION_MARKER,
    MultiTurnBrief,
)
from spade_core.envs.contract import CONTRACT


def designer_system(kind: str, style: str = "ours") -> str | None:
    """The designer's system prompt for an environment ``kind`` under ``designer.system_prompt`` = ``style``
    (None: no system message).

    >>> designer_system("tool", "authors") is None, designer_system("tool") == DESIGNER_SYSTEM
    (True, True)
    """
    if style != "authors":
        return DESIGNER_SYSTEM
    return AUTHORS_GAME_DESIGNER_SYSTEM if kind == "game" else None


def _with_system(kind: str, style: str, user: str) -> list[dict[str, str]]:
    system = designer_system(kind, style)
    return [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": user}]


class MemoryExample(Protocol):
    """A positive example from memory, shown with its code (:class:`spade_core.designer.memory.MemoryEntry` is one)."""

    @property
    def skill(self) -> str: ...

    @property
    def code(self) -> str: ...

    @property
    def win_rate(self) -> float: ...

    @property
    def regret(self) -> float: ...


class NegativeExample(Protocol):
    """A negative example from memory, shown by name only (:class:`spade_core.designer.memory.MemoryEntry` is one)."""

    @property
    def skill(self) -> str: ...

    @property
    def win_rate(self) -> float: ...

    @property
    def class_name(self) -> str: ...


def truncate_document(text: str, max_words: int) -> str:
    """``text`` cut after its first ``max_words`` words, with the authors' marker appended only when it cut
    (``spade/core/corpus.py:110-116``). Whitespace up to the cut is kept as it was (paragraphs survive).

    >>> truncate_document("one two  three\\nfour", 2)
    'one two\\n[Document truncated at ~2 words]'
    >>> truncate_document("one two  three", 3)
    'one two  three'
    """
    if max_words <= 0:
        raise ValueError(f"max_words must be positive, got {max_words}")
    words = list(itertools.islice(re.finditer(r"\S+", text), max_words + 1))
    if len(words) <= max_words:
        return text
    return text[: words[max_words - 1].end()] + "\n" + TRUNCATION_MARKER.format(n=max_words)


def interaction_steps(difficulty: str) -> int:
    """The interaction steps the goal should need: 2 when easy, else 3 (``corpus_template.py:116``).

    >>> interaction_steps("easy"), interaction_steps("medium"), interaction_steps("hard")
    (2, 3, 3)
    """
    return 2 if difficulty == "easy" else 3


def contract_sections(contract: str = CONTRACT) -> tuple[str, str]:
    """The contract's rules and its example module, dedented: the prompt shows the example as a fenced
    module, so a designer that copies it copies a complete one (docs/DESIGN.md §5).

    >>> rules, example = contract_sections("Rules here.\\n\\nExample (game):\\n\\n    import random\\n    class E: ...")
    >>> rules, example
    ('Rules here.', 'import random\\nclass E: ...\\n')
    """
    rules, found, example = contract.partition(CONTRACT_EXAMPLE_HEADING)
    if not found:
        raise ValueError(f"the contract has no {CONTRACT_EXAMPLE_HEADING!r} section")
    return rules.strip(), textwrap.dedent(example.strip("\n")).strip() + "\n"


def env_class_name(code: str) -> str | None:
    """The environment class of a module: the top-level class whose body defines ``reset`` or that subclasses
    ``ToolEnv``; else the last class named ``...Env``; else the first class; None without one. Works on code
    cut mid-module (memory keeps 2000 characters for the prompt).

    >>> env_class_name("class Cell:\\n    pass\\n\\nclass MazeEnv:\\n    def reset(self, seed=None): ...\\n")
    'MazeEnv'
    >>> env_class_name("class Ledger(ToolEnv):\\n    def tool_sum(self") , env_class_name("x = 1") is None
    ('Ledger', True)
    """
    heads = list(re.finditer(r"^class[ \t]+(\w+)[ \t]*(\([^)]*\))?", code, re.M))
    if not heads:
        return None
    for i, head in enumerate(heads):
        body = code[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(code)]
        if re.search(r"^[ \t]+def[ \t]+reset\b", body, re.M) or "ToolEnv" in (head.group(2) or ""):
            return head.group(1)
    named = [h.group(1) for h in heads if h.group(1).endswith("Env")]
    return named[-1] if named else heads[0].group(1)


def _check_skill(examples: Sequence[MemoryExample] | Sequence[NegativeExample], skill: str, what: str) -> None:
    other = sorted({e.skill for e in examples if e.skill != skill})
    if other:
        raise ValueError(f"{what} examples must be of the target skill {skill!r}, got {other}")


def _positive_block(example: MemoryExample, index: int) -> str:
    return (
        f"### Example {index} (skill: {SKILL_TEXT.get(example.skill, example.skill)}; agent win rate "
        f"{example.win_rate:.2f}; regret {example.regret:+.2f})\n```python\n{example.code.strip()}\n```"
    )


def _negative_line(example: NegativeExample) -> str:
    """One negative example: why, its win rate and its name (the class's, or with ``memory.negative_name:
    file_stem`` the authors' file stem, :meth:`spade_core.designer.memory.Memory.negatives`), never its code."""
    reason = "too easy" if example.win_rate > 0.5 else "too hard"
    return f"- {reason} (win_rate={example.win_rate:.2f}): class {example.class_name}"


def design_messages(
    document: str | None,
    skill: str,
    difficulty: str,
    positives: Sequence[MemoryExample] = (),
    negatives: Sequence[NegativeExample] = (),
    multiturn: MultiTurnBrief | None = None,
    system: str = "ours",
    layout: str = "ours",
) -> list[dict[str, str]]:
    """The chat prompt of one design (docs/DESIGN.md §7 step 3), with the system prompt of
    ``designer.system_prompt`` = ``system`` (:func:`designer_system`).

    In order: the document (already cut, see :func:`truncate_document`) with the grounding rules, the
    authors' interactive spec and how the agent acts in this kind, the contract's rules (they rule:
    interface, determinism, rewards) and its example as a complete fenced module, the robustness rules and
    self-check, target skill, difficulty and the number of interaction steps, then the memory: positives
    of the same skill with their code as the memory gives it (whole, or cut in the paper presets),
    negatives of the same skill by class name only (``spade/core/env_memory.py:125-151``), and last the
    reply format: the code block first, the summary after it. An example of another skill is an error:
    the memory retrieves by skill. With ``multiturn`` (``designer.multiturn``) a tool-use prompt asks, as the
    authors' multi-turn template, for a multi-turn instruction environment in the brief's domain and task
    variant, the document only as optional flavour, and shows the brief's example module whole after the
    contract's example. ``layout`` (``designer.user_prompt``) ``authors`` lays the same pieces out as the
    authors' prompt (:func:`authors_user_prompt`).
    """
    kind = skill_kind(skill)
    _check_skill(positives, skill, "positive")
    _check_skill(negatives, skill, "negative")
    brief = multiturn if kind == "tool" else None
    if layout == "authors":
        return _with_system(kind, system, authors_user_prompt(document, skill, difficulty, positives, negatives, brief))
    parts = []
    if brief is not None:
        parts.append(MULTITURN_TOOL_ACTIONS)
        parts.append(
            f"Domain: {brief.domain}. Build the tools, the state and the user's goal for this domain: a real user "
            f"getting something done (search, book, order, update, cancel, schedule), not an exam.\n"
            f"Task variant: {brief.task}. {TASK_VARIANTS[brief.task]}"
        )
        if document:
            parts.append(
                "Optional flavour: you may borrow names, numbers or entities from this snippet, but the domain "
                "above is fixed; never refer to the snippet in the instructions.\n\n"
                f"<document>\n{document.strip()}\n</document>"
            )
    else:
        if document:
            parts.append(
                "Here is a reference document. Create an interactive, multi-turn environment grounded in a "
                f"concept or technique from it.\n\n<document>\n{document.strip()}\n</document>\n\n{GROUNDING}"
            )
        parts.append(INTERACTIVE_SPEC)
        parts.append(GAME_ACTIONS if kind == "game" else TOOL_ACTIONS)
    rules, example = contract_sections()
    parts.append(f"Environment contract (its rules override anything above that disagrees):\n\n{rules}")
    parts.append(
        "A complete module that follows the contract (a game; it shows the interface only, not the "
        f"interactivity required above):\n\n```python\n{example}```"
    )
    if brief is not None:
        parts.append(f"A complete multi-turn instruction environment:\n\n```python\n{brief.example.strip()}\n```")
    parts.append(ROBUSTNESS)
    kind_text = (
        "a GAME environment (actions are \\boxed{...} commands)"
        if kind == "game"
        else "a MULTI-TURN INSTRUCTION environment (subclass spade_env.InstructionEnv; tools are tool_* methods)"
        if brief is not None
        else "a TOOL-USE environment (subclass spade_env.ToolEnv; tools are tool_* methods)"
    )
    steps = interaction_steps(difficulty)
    parts.append(
        f"Target skill: {SKILL_TEXT[skill]}. Difficulty: {difficulty}: the goal should need {steps}+ "
        f"interaction steps. Write {kind_text}. It should be solvable by a careful agent within the turn "
        "budget, but not by guessing."
    )
    if positives:
        parts.append(
            "Examples of environments that trained the agent well (win rate in the useful band; a hint "
            "helped, i.e. high regret). Use them as inspiration for structure and complexity, but create a "
            "DIFFERENT environment:\n\n" + "\n\n".join(_positive_block(e, i + 1) for i, e in enumerate(positives))
        )
    if negatives:
        parts.append(
            "Avoid environments like these (the agent almost always or almost never won them):\n"
            + "\n".join(_negative_line(e) for e in negatives)
        )
    parts.append(f"Create a NEW environment that is different from the examples. {REPLY_FORMAT}")
    return _with_system(kind, system, "\n\n".join(parts))


AUTHORS_REPLY = "Generate the complete Python code in a ```python block."
AUTHORS_POSITIVES = (
    "Here are examples of environments that trained the agent well, with a difficulty that suited it. Use them as "
    "inspiration for structure and complexity, but create a DIFFERENT environment:"
)


def authors_user_prompt(
    document: str | None,
    skill: str,
    difficulty: str,
    positives: Sequence[MemoryExample] = (),
    negatives: Sequence[NegativeExample] = (),
    brief: MultiTurnBrief | None = None,
) -> str:
    """A design's user prompt in the authors' layout (``designer.user_prompt: authors``), its prose in our words.

    Games (their ``corpus_template.py:101-127``): the document in ``<REFERENCE_DOCUMENT>`` under a one-line
    request, the spec (interactivity, how the agent acts, grounding, the interface contract with its example
    module, robustness and self-check), then the skill with its description and the difficulty, and "Generate
    the complete Python code in a ```python block.". Tool use (``tool_use_template.py:104-340``): the document
    and its grounding first, then "subclass ToolEnv; the environment tests: skill (description)" and the
    rules; multi-turn (``tool_use_template.py:361-640, 705-755``): that line first, the instructions, the
    difficulty, domain and task variant, the document as optional flavour in ``<REFERENCE_SNIPPET>``, the
    example module. Last, as their memory appends it (``orchestrator.py:1204-1228``), the positives in
    ``<REFERENCE_ENVIRONMENTS>`` and the negatives under "Avoid generating environments like:".
    """
    kind = skill_kind(skill)
    tests = f"{SKILL_TEXT[skill]} ({SKILL_DESCRIPTIONS[skill]})"
    steps = interaction_steps(difficulty)
    rules, example = contract_sections()
    contract = f"Interface contract:\n\n{rules}\n\n```python\n{example}```"
    parts: list[str] = []
    if kind == "game":
        request = "Create an interactive, multi-turn Python game environment"
        if document:
            parts.append(
                f"You are given a reference document. {request} grounded in a concept or technique from it.\n\n"
                f"<REFERENCE_DOCUMENT>\n{document.strip()}\n</REFERENCE_DOCUMENT>"
            )
        else:
            parts.append(f"{request}.")
        parts += [INTERACTIVE_SPEC, GAME_ACTIONS, *([GROUNDING] if document else []), contract, ROBUSTNESS]
        parts.append(
            f"Target skill: {tests}. Difficulty: {difficulty}: the goal should need {steps}+ interaction steps.\n\n"
            f"{AUTHORS_REPLY}"
        )
    elif brief is None:
        if document:
            parts.append(
                "You are given a reference document. Create a tool-use environment in the domain it describes.\n\n"
                f"<REFERENCE_DOCUMENT>\n{document.strip()}\n</REFERENCE_DOCUMENT>\n\n{GROUNDING}"
            )
        parts.append(
            f"Create a tool-use environment: subclass spade_env.ToolEnv; tools are tool_* methods. The environment "
            f"tests: {tests}. Difficulty: {difficulty}: the goal should need {steps}+ tool calls."
        )
        parts += [INTERACTIVE_SPEC, TOOL_ACTIONS, contract, ROBUSTNESS, AUTHORS_REPLY]
    else:
        parts.append(
            f"Create a MULTI-TURN tool-use environment: subclass spade_env.InstructionEnv. The environment tests: "
            f"{tests}."
        )
        parts.append(MULTITURN_TOOL_ACTIONS)
        parts.append(
            f"Difficulty: {difficulty}.\nDomain: {brief.domain}: a real user getting something done (search, book, "
            f"order, update, cancel, schedule), not an exam.\nTask variant: {brief.task}. {TASK_VARIANTS[brief.task]}"
        )
        if document:
            parts.append(
                "Optional flavour: you may borrow names, numbers or entities from this snippet, but the domain "
                "above is fixed; never refer to the snippet in the instructions.\n"
                f"<REFERENCE_SNIPPET>\n{document.strip()}\n</REFERENCE_SNIPPET>"
            )
        parts += [contract, f"An example structure:\n\n```python\n{brief.example.strip()}\n```", ROBUSTNESS]
        parts.append(AUTHORS_REPLY)
    if positives:
        blocks = "\n\n".join(
            f"### Example {i + 1} (skill: {SKILL_TEXT.get(e.skill, e.skill)}, win_rate: {e.win_rate:.2f}, regret: "
            f"{e.regret:.2f})\n```python\n{e.code}\n```"
            for i, e in enumerate(positives)
        )
        parts.append(f"<REFERENCE_ENVIRONMENTS>\n{AUTHORS_POSITIVES}\n\n{blocks}\n</REFERENCE_ENVIRONMENTS>")
    if negatives:
        parts.append("Avoid generating environments like:\n" + "\n".join(_negative_line(e) for e in negatives))
    return "\n\n".join(parts)


MUTATION_KEEP = (
    "Keep what makes it load: ONE class with `__init__(self, max_turns=12, **kwargs)`, `reset(self, seed=None)` "
    "returning (observation, {}), `step(self, action)` returning (observation, reward, terminated, truncated, {}), "
    "`solution(self)` returning the actions that win; everything random from `random.Random(seed)`; reward 1.0 "
    "only when the goal is reached."
)


def mutation_messages(
    document: str | None,
    skill: str,
    difficulty: str,
    parent_code: str,
    parent_win_rate: float | None,
    system: str = "ours",
) -> list[dict[str, str]]:
    """The chat prompt of one mutation (``designer.mode: mutate``, :mod:`spade_core.designer.mutation`): the parent
    environment whole, the document, and the request for a variant of it; short, so that a small model's
    context holds the parent and its reply.
    """
    kind = skill_kind(skill)
    played = f" (the agent wins it {parent_win_rate:.0%} of the time)" if parent_win_rate is not None else ""
    parts = [f"Here is an environment that works{played}:\n\n```python\n{parent_code.strip()}\n```"]
    if document:
        parts.append(f"Here is a reference document:\n\n<document>\n{document.strip()}\n</document>")
    about = "a concept or the facts of the document" if document else f"{SKILL_TEXT[skill]}"
    steps = interaction_steps(difficulty)
    parts.append(
        f"Write a VARIANT of this environment about {about}: change its rules, its sizes, its wording or its "
        f"goal, so that it is a different {'game' if kind == 'game' else 'tool-use environment'} for the skill "
        f"{SKILL_TEXT[skill]} ({difficulty}: the goal should need {steps}+ actions). {MUTATION_KEEP}"
    )
    parts.append(REPLY_FORMAT)
    return _with_system(kind, system, "\n\n".join(parts))


def parameters_messages(document: str | None, block: str) -> list[dict[str, str]]:
    """The chat prompt of one parameter mutation (``designer.mode: parameters``, :mod:`spade_core.designer.parameters`):
    the document, then the parent's parameter block and the request for new values, with no system prompt.

    As short as a 135M model needs it: on the embedded model 11 of 24 designs of generation 1 with this
    prompt passed validation and changed their parent (``benchmarks/design_valid_rate.py``), where a
    designer system prompt with a description of the parent got 0 of 8 (the model wrote functions) and a
    worked example before the task changed 1 parent block of 8 (the model continued the example).
    """
    parts = []
    if document:
        parts.append(f"Here is a document:\n\n<document>\n{document.strip()}\n</document>")
    source = "to use words from the document" if document else "to new values of your own"
    parts.append(f"Change these parameters {source}:\n\n```python\n{block.strip()}\n```")
    parts.append("Reply with the new parameters in one ```python block, the same names, new values.")
    return [{"role": "user", "content": "\n\n".join(parts)}]


REPAIR_MODULE = "Fix it. Reply with the complete corrected module in one ```python block."
REPAIR_PARAMETERS = "Fix it. Reply with the corrected parameters in one ```python block."


def repair_messages(
    messages: list[dict[str, str]], reply: str, error_type: str, message: str, ask: str = REPAIR_MODULE
) -> list[dict[str, str]]:
    """A repair round: the failed reply and the validator's message, asking (``ask``) for the full corrected
    module, or with ``designer.mode: parameters`` for the corrected parameters (:data:`REPAIR_PARAMETERS`)."""
    return [
        *messages,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": f"The environment failed validation ({error_type}): {message}\n{ask}"},
    ]
