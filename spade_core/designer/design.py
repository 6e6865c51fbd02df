"""The designer (docs/DESIGN.md §7 steps 1–4): skills, the design prompt, code extraction, repair rounds.

One document prompt yields ``designer.group_size`` designs [1]. The prompt holds the document (cut by
:func:`truncate_document`, with the authors' marker), the authors' interactive spec (hidden state, several
turns, partial reward, a goal that needs 3+ interaction steps; 2+ when easy), the environment contract from
its single source (:data:`spade_core.envs.contract.CONTRACT`), the target skill and difficulty, and memory
examples of the same skill (positive: in-band win rate, high regret, with code; negative: too easy or too
hard, by class name only), and asks for a *different* environment. Code is taken from the reply's
```python block; validation happens in the jail.

What a small model copies decides whether its design loads (a 135M designer mostly copies the nearest
example), so every piece of code the prompt shows is a complete module that passes the validator: the
contract's example is shown as a fenced module with its imports (:func:`contract_sections`), and memory
examples come whole or not at all (:meth:`spade_core.designer.memory.Memory.positives`; the paper presets keep the
authors' cut). The reply is asked for code first, its one-sentence summary after the block, so a reply
cut by the token budget loses the summary, not the code.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from spade_core.config import GAME_SKILLS, TOOL_SKILLS, DesignerConfig, skill_kind
from spade_core.designer.parameters import MAX_ITEMS, variant_code
from spade_core.envs.contract import CONTRACT, env_id_for
from spade_core.hashing import short_hash

SKILL_TEXT = {skill: skill.replace("_", " ") for skill in GAME_SKILLS + TOOL_SKILLS}
# What each skill asks of the agent, in our words after the authors' skill tables (their game_generator.py:39-115
# and tool_use_template.py:11-80): the authors' layout names the skill with its description.
SKILL_DESCRIPTIONS = {
    "mathematical_reasoning": "working problems and equations out to a number",
    "logical_deduction": "drawing conclusions from premises and rules",
    "spatial_reasoning": "reasoning about positions, shapes and rotations",
    "pattern_recognition": "finding the rule behind sequences, numbers or text",
    "optimization": "finding the best solution under constraints",
    "causal_inference": "working out what causes what",
    "api_orchestration": "chaining tool calls that change the state one after another",
    "data_retrieval": "finding information with query tools first, then acting on it exactly",
    "state_modification": "a sequence of changes, each depending on the state the one before left",
    "error_recovery": "coping with failing tools: check the state, correct the call and retry",
    "tool_selection": "choosing the right tool among alternatives for the current state",
    "multi_step_workflows": "ordered steps whose later ones depend on the results of earlier ones",
}

DESIGNER_SYSTEM = (
    "You are an expert designer of multi-turn text environments that train and test a language-model "
    "agent. You write complete, self-contained Python code that follows the contract exactly."
)

# The authors' system prompt of multi-turn game design (spade/core/prompts/template.py:324-329, the
# qwen3_multiturn_game_generation template of their games scripts), in our words; their tool-use design sends
# no system prompt (spade/core/orchestrator.py:270-272). designer.system_prompt: authors picks these.
AUTHORS_GAME_DESIGNER_SYSTEM = (
    "You are an expert Python programmer and game designer who specialises in interactive, multi-turn "
    "text games. You build environments in which the player makes a sequence of decisions over several "
    "turns, and each action changes the state of the game."
)


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


TRUNCATION_MARKER = "[Document truncated at ~{n} words]"
CONTRACT_EXAMPLE_HEADING = "Example (game):"
REPLY_FORMAT = (
    "Reply with the complete module in ONE ```python block first, starting with its imports (`import random`, "
    "`from spade_env import ...`), then one sentence after the block that summarises the environment."
)

_FENCE = re.compile(r"```[ \t]*(?P<lang>[\w+-]*)[ \t]*\n(?P<body>.*?)(?:```|\Z)", re.S)

# The authors' interactive spec (spade/core/prompts/corpus_template.py:18-96), in our words and under our
# contract: hidden state, several turns, partial reward, a goal that needs several interaction steps.
INTERACTIVE_SPEC = r"""
The environment MUST be genuinely interactive and multi-turn, NOT a one-shot question to answer.

What makes it interactive (all of these are required):
- ONE ACTION PER TURN, AND IT IS A COMMAND: each action changes the environment (a move, a probe, a
  measurement, an operation); it is not a final answer that is graded once. The environment parses the
  action, UPDATES its state and returns a NEW observation that shows the changed state.
- HIDDEN STATE: the first observation does not reveal everything. Part of the state stays hidden until
  the agent acts to uncover it (probing, querying, exploring); the observation grows or changes as it acts.
- SEVERAL TURNS: the goal cannot be reached with one action. It takes a sequence of actions: explore to
  learn the hidden facts and then act on them, or change the state step by step towards a target.
- PARTIAL REWARD: an action that makes real progress towards the goal earns a partial reward, strictly
  below the success reward; terminated=True only when the goal is reached.
- Every observation shows the updated state and reminds the agent how to write its next action.

Do NOT (each of these turns it back into a one-shot quiz):
- read one answer, grade it and end the episode;
- state the whole problem in the first observation and just check one submitted value;
- repeat the same unchanged task every turn with only "wrong, try again" as feedback.
""".strip()

GAME_ACTIONS = r"""
How the agent acts in a game: every turn it replies with ONE command inside \boxed{...}, for example
\boxed{measure node 3}, \boxed{move north} or \boxed{open valve A}. Read it with `parse_boxed(action)` and
treat the text as a command that changes the state. List the available commands in the first observation
(but never the solution), and end every observation by asking for the next command as \boxed{<command>}.
""".strip()

TOOL_ACTIONS = r"""
How the agent acts in a tool-use environment: every turn it makes ONE tool call, and each tool either
reads part of the hidden state or changes it. Provide tools that query the state AND tools that change
it; a tool called before its preconditions hold answers with an error message, so the agent must look
before it acts. No single tool call may return enough to finish the task: the agent must combine the
results of several different tools, each call depending on what an earlier one revealed or changed.
Report partial progress through `progress()`. The first observation states the task and the answer
format, but neither the hidden data nor the answer.
""".strip()

# The authors' multi-turn tool-use framing (SPADE_MULTITURN_ENV_GEN, spade/core/prompts/tool_use_template.py:
# 347-767, its six solvability rules at :440-496), in our words and on spade_env.InstructionEnv.
MULTITURN_TOOL_ACTIONS = r"""
Write a MULTI-TURN INSTRUCTION environment: a user gives the agent 3-5 instructions ONE AT A TIME, each a
small task it carries out with the tools. Subclass `spade_env.InstructionEnv` (a ToolEnv) and in
`reset(seed)` set:
- `self.user_messages`: the 3-5 instructions in order; `reset` returns an observation that introduces the
  tools and gives the first instruction;
- `self.criteria`: one function per instruction that takes the environment and returns True once that
  instruction is satisfied, judged on the state alone, e.g. `lambda env: env.cwd == "/home/docs"`.
After every tool call the base class checks the current instruction and hands the agent the next one in
the tool's result; once all are satisfied the agent submits <answer>done</answer> (reward 1).
Solvability (an impossible instruction is fatal, a hard one is fine):
- every value a criterion checks can be set by some tool with arguments the agent can know;
- a hidden value the agent needs can be read with a tool before it is needed;
- no criterion holds at reset, and each instruction needs 2+ tool calls;
- instructions say WHAT to do, never which tool to call;
- argument types match the schema (an `int` parameter gets a number).
Give 3-8 tools, at least one that only reads the state, one whose parameter takes one of a few fixed
values (name them in its docstring), and one the script never needs. `solution()` returns every tool call
of the script in order, then <answer>done</answer>.
""".strip()

# The authors rotate a real-world domain and a task variant per multi-turn design prompt
# (tool_use_template.py:643-701: 10 domains; execute x3, read_then_write x2, miss_param x1, irrelevant x1).
TOOL_DOMAINS = (
    "retail order management (orders, items, refunds, shipping)",
    "flight and hotel booking (search, reserve, pay, cancel)",
    "telecom account management (plans, lines, billing, data add-ons)",
    "personal banking and payments (accounts, transfers, cards, invoices)",
    "a calendar and reminders assistant (events, invites, reminders)",
    "a file system (files, folders, move, copy, search)",
    "an e-commerce shopping cart (catalog, cart, checkout, coupons)",
    "customer-support tickets (tickets, status, assignment, notes)",
    "smart-home device control (lights, thermostat, locks, scenes)",
    "a project and task tracker (tasks, assignees, status, due dates)",
)
TASK_VARIANTS = {
    "execute": "The user gives plain instructions; the agent calls the right tools in order, and each criterion "
    "checks the state they leave.",
    "read_then_write": "At least one instruction makes the agent first read the state with a tool, pick what a "
    "condition selects (every order over $100, each line past its data cap), then change exactly those; its "
    "criterion checks the state those changes leave, not that a tool was called.",
    "miss_param": "At least one instruction refers to a value the user does not state (cancel my latest order, "
    "with no order id); the agent must find it with a read tool first, and the write tool refuses a wrong or "
    "guessed value, so a made-up argument cannot satisfy the criterion.",
    "irrelevant": "Exactly one instruction asks for something no domain tool can do (the weather, in a shop). Add "
    "a tool decline_request(reason: str) that records the refusal; that instruction's criterion holds only once "
    "decline_request was called, and no other tool could plausibly do it.",
}
TASK_ROTATION = ("execute",) * 3 + ("read_then_write",) * 2 + ("miss_param", "irrelevant")


@dataclass(frozen=True)
class MultiTurnBrief:
    """What a multi-turn instruction design is asked for (``designer.multiturn``): the example module shown
    whole, the real-world domain and the task variant (:func:`multiturn_brief` draws the last two)."""

    example: str
    domain: str
    task: str


def multiturn_brief(example: str, rng: random.Random) -> MultiTurnBrief:
    """A domain and a task variant drawn as the authors rotate them, per prompt.

    >>> brief = multiturn_brief("class E: ...", random.Random(0))
    >>> brief.domain in TOOL_DOMAINS and brief.task in TASK_VARIANTS
    True
    """
    return MultiTurnBrief(example, rng.choice(TOOL_DOMAINS), rng.choice(TASK_ROTATION))


GROUNDING = """
Grounding: playing the environment must require understanding a concept or technique from the document:
if it describes an algorithm, the agent carries the algorithm out step by step; if it describes a system,
the agent operates that system over several turns. The agent never sees the document, so the environment
must stand on its own: its text never refers to the document ("according to the passage", "the text").
""".strip()

ROBUSTNESS = r"""
Robustness (the most common failures; follow all of them or the environment will not load):
- Braces: in f-strings and str.format a {name} is a field; a literal brace must be doubled, so an
  f-string that shows \boxed{<command>} is written f"... \\boxed{{<command>}} ...".
- Set every attribute in `__init__` before calling `reset`, so that no attribute is missing mid-episode.
- Only the standard library, and import everything you use (`math.cos(x)`, never a bare `cos` or numpy).
- Games: every path of `step` returns the 5-tuple (str, float, bool, bool, dict); `info` is always a
  dict. Tool use: every tool returns a string, also when its arguments are wrong.
- An unknown or garbage action gets a helpful observation and the reward the contract gives a malformed
  action, never an exception.
- Never divide by a value that can be zero; never overwrite a method with data (keep the answer in
  `self._solution`, not `self.solution`).

Check your work before you answer:
- Trace two different action sequences from `reset(seed=0)`: the observations must differ with the
  actions. If they never change, the environment is not interactive: fix it.
- Is each action a command that moves the state on, rather than a final answer that ends the episode?
- Does progress earn a partial reward below the success reward, and does playing `solution()` reach the goal?
""".strip()


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


def skills_for_generation(gen: int, cfg: DesignerConfig) -> list[str]:
    """The skills of generation ``gen`` (docs/DESIGN.md §7 step 1), round robin per kind: games take
    ``skills_per_generation`` [3] of the 6 game skills, tool use ``tool_skills_per_generation`` [6: all] of
    the 6 tool skills; kind ``both`` gets the game skills, then the tool skills. The window advances by its
    own size each generation (the authors' ``select_active_skills``, ``spade/slime/spade_rollout.py:198-215``).

    >>> from spade_core.config import DesignerConfig
    >>> skills_for_generation(1, DesignerConfig(kind="game", skills_per_generation=3))
    ['mathematical_reasoning', 'logical_deduction', 'spatial_reasoning']
    >>> skills_for_generation(2, DesignerConfig(kind="game", skills_per_generation=3))
    ['pattern_recognition', 'optimization', 'causal_inference']
    >>> len(skills_for_generation(2, DesignerConfig(kind="tool")))
    6
    """
    per_kind = {
        "game": [(GAME_SKILLS, cfg.skills_per_generation)],
        "tool": [(TOOL_SKILLS, cfg.tool_skills_per_generation)],
        "both": [(GAME_SKILLS, cfg.skills_per_generation), (TOOL_SKILLS, cfg.tool_skills_per_generation)],
    }[cfg.kind]
    chosen: list[str] = []
    for pool, count in per_kind:
        count = min(count, len(pool))
        start = ((gen - 1) * count) % len(pool)
        chosen += [pool[(start + i) % len(pool)] for i in range(count)]
    return chosen


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


def extract_code(reply: str) -> str | None:
    """The environment code in a model reply, or None.

    Prefers a fenced block (```python, ```py or bare ```; an unclosed final fence counts) that defines a
    class with ``reset`` and ``step``; else the longest fenced block; else the reply itself when it looks
    like a module with such a class.

    >>> extract_code("Here:\\n```python\\nclass E:\\n    def reset(self): ...\\n    def step(self, a): ...\\n```")
    'class E:\\n    def reset(self): ...\\n    def step(self, a): ...\\n'
    >>> extract_code("no code here") is None
    True
    """
    if not isinstance(reply, str) or not reply.strip():
        return None
    blocks = [
        m.group("body") for m in _FENCE.finditer(reply) if m.group("lang").lower() in ("", "python", "py", "python3")
    ]
    blocks = [b.strip("\n") + "\n" for b in blocks if b.strip()]
    env_like = [b for b in blocks if _looks_like_env(b)]
    if env_like:
        return max(env_like, key=len)
    if blocks:
        return max(blocks, key=len)
    return reply.strip() + "\n" if _looks_like_env(reply) else None


def _looks_like_env(text: str) -> bool:
    return bool(
        re.search(r"^class\s+\w+", text, re.M) and "def reset" in text and ("def step" in text or "ToolEnv" in text)
    )


# The stored completion of a design attempt whose reply did not come back by its deadline (designer.attempt_deadline_s
# or batch_deadline_s): no code, and its verdict is a ``deadline`` (spade_core.pipeline.stages.validate).
LATE_REPLY = "[deadline] "


def late_reply(error: str) -> str:
    """The completion stored for a reply abandoned at its deadline (``error``: the completion's error).

    >>> late_reply("deadline: no reply within 300 s (designer.attempt_deadline_s)")
    '[deadline] no reply within 300 s (designer.attempt_deadline_s)'
    """
    return LATE_REPLY + error.removeprefix("deadline:").strip()


def is_late_reply(completion: Any, completion_ids: Any) -> bool:
    """Whether a design row's reply was abandoned at its deadline (:func:`late_reply`; such a row has no tokens).

    >>> is_late_reply(late_reply("deadline: x"), None), is_late_reply("[deadline] x", [1, 2]), is_late_reply("hi", None)
    (True, False, False)
    """
    no_tokens = completion_ids is None or (not isinstance(completion_ids, str) and len(completion_ids) == 0)
    return isinstance(completion, str) and completion.startswith(LATE_REPLY) and no_tokens


def design_id_for(run_id: str, gen: int, doc_id: str | None, skill: str, index: int) -> str:
    key = f"{run_id}:{gen}:{doc_id}:{skill}:{index}"
    return short_hash(key)


def design_row(
    *,
    design_id: str,
    doc_id: str | None,
    group_id: str,
    skill: str,
    messages: list[dict[str, str]],
    completion: str,
    model_ref: str,
    parent_env_id: str | None = None,
    parent_code: str | None = None,
    parameters: bool = False,
    max_items: int = MAX_ITEMS,
) -> dict[str, Any]:
    """One ``designs`` row (``prompt`` = the chat messages as JSON); ``code`` / ``env_id`` are None when the
    reply holds no code; ``parent_env_id`` names the environment a mutation rewrote (None: written anew).
    ``parameters`` (``designer.mode: parameters``): the code is the parent (``parent_code``) with the
    parameter values the reply sets (:func:`spade_core.designer.parameters.variant_code`), None when it sets none, a
    value is beyond the bounds, or the parent is unknown (never a whole module of the reply's)."""
    if parameters or parent_code is not None:
        code = None if parent_code is None else variant_code(parent_code, completion, max_items)
    else:
        code = extract_code(completion)
    prompt = json.dumps(messages)  # the exact chat messages, so the trainer re-renders the same prompt
    return {
        "design_id": design_id,
        "doc_id": doc_id,
        "group_id": group_id,
        "skill": skill,
        "kind": skill_kind(skill),
        "prompt": prompt,
        "completion": completion,
        "code": code,
        "env_id": env_id_for(code) if code else None,
        "model_ref": model_ref,
        "parent_env_id": parent_env_id,
    }
