"""The fixed text of the design prompts (docs/DESIGN.md §7 step 3): system prompts, the skills' wording, the
authors' interactive spec and action rules, the multi-turn domains and task variants, grounding and
robustness. :mod:`spade_core.designer.design` lays these out into chat messages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from spade_core.config import GAME_SKILLS, TOOL_SKILLS

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


TRUNCATION_MARKER = "[Document truncated at ~{n} words]"
CONTRACT_EXAMPLE_HEADING = "Example (game):"
REPLY_FORMAT = (
    "Reply with the complete module in ONE ```python block first, starting with its imports (`import random`, "
    "`from spade_env import ...`), then one sentence after the block that summarises the environment."
)

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
