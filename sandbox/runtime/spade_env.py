"""Stdlib-only helpers importable by generated environments inside the jail (``import spade_env``).

- :func:`parse_boxed` — the command inside the last ``\\boxed{...}`` of a game action (nested braces ok).
- :func:`parse_tool_calls`, :func:`parse_answer` — the tool-use action format.
- :func:`parse_native_calls`, :func:`run_tool` — the native protocol: every call of a reply, in the chat
  template's JSON or XML format, and one tool run (``ToolEnv.execute_tool``; no turn is counted).
- :func:`split_actions` — a reference solution split into the actions it is made of.
- :class:`InstructionEnv` — a :class:`ToolEnv` that plays a script of user instructions, one after another.
- :class:`ToolEnv` — base class for tool-use environments: parses ``<tool_call>`` / ``<answer>``,
  runs one tool call per turn, checks the answer (a wrong one continues the episode; numbers match
  within 0.01), scores a format error -0.1 and exposes OpenAI-format tool schemas. A subclass writes
  ``reset`` (setting ``self.expected_answer`` or overriding ``is_solved``), ``solution`` and its tools.

This file runs under the jail's system ``python3`` (3.11) and under the project's interpreter, so it
uses the standard library only and no syntax newer than 3.10.
"""

import html
import inspect
import json
import re

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_FUNCTION = re.compile(r"<function=([\w.-]+)>(.*?)</function>", re.S)
_PARAMETER = re.compile(r"<parameter=([\w.-]+)>(.*?)</parameter>", re.S)
_JSON_CALL = re.compile(r'\{\s*"name"\s*:\s*"([\w.-]+)"\s*,\s*"arguments"\s*:', re.S)
_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}


def _boxed_spans(text):
    """(start, end, content) of every balanced ``\\boxed{...}`` in ``text``."""
    spans = []
    start = text.find("\\boxed{")
    while start != -1:
        depth, i = 0, start + len("\\boxed")
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    spans.append((start, i + 1, text[start + len("\\boxed{") : i]))
                    break
            i += 1
        else:
            break
        start = text.find("\\boxed{", i + 1)
    return spans


def parse_boxed(action):
    """Return the stripped content of the last ``\\boxed{...}`` in ``action``, or None.

    >>> parse_boxed("I think {x} so \\\\boxed{move {1,2}}")
    'move {1,2}'
    """
    if not isinstance(action, str):
        return None
    spans = _boxed_spans(action)
    return spans[-1][2].strip() if spans else None


def parse_tool_calls(action):
    """Parse every ``<tool_call>{json}</tool_call>``: a list of (name, arguments) or (None, error)."""
    calls = []
    for raw in _TOOL_CALL.findall(action if isinstance(action, str) else ""):
        try:
            call = json.loads(raw)
        except ValueError as exc:
            calls.append((None, "invalid JSON in <tool_call>: %s" % exc))
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            calls.append((None, 'a tool call must be {"name": ..., "arguments": {...}}'))
            continue
        args = call.get("arguments", {})
        if not isinstance(args, dict):
            calls.append((None, "tool call arguments must be a JSON object"))
            continue
        calls.append((call["name"], args))
    return calls


def _loads_or(text, default):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return default


def _native_call(block):
    """One ``<tool_call>`` body as (name, arguments), or None when it names no function.

    Tried in the authors' order (their ``spade/core/utils/tool_call_parser.py``): the XML format
    (``<function=NAME><parameter=P>V</parameter></function>``, each value JSON when it parses, else its
    text), then the JSON format (``{"name": ..., "arguments": {...}}``, ``arguments`` may be a JSON string
    or be called ``parameters``). Arguments that are no JSON object become ``{}``: the call still runs.
    """
    function = _FUNCTION.search(block)
    if function:
        params = {}
        for key, value in _PARAMETER.findall(function.group(2)):
            params[key] = _loads_or(html.unescape(value.strip()), html.unescape(value.strip()))
        return function.group(1), params
    data = _loads_or(block.strip(), None)
    if isinstance(data, dict) and isinstance(data.get("name"), str):
        args = data.get("arguments", data.get("parameters", {}))
        args = _loads_or(args, {}) if isinstance(args, str) else args
        return data["name"], args if isinstance(args, dict) else {}
    named = _JSON_CALL.search(block)  # a name followed by arguments that are no JSON
    return (named.group(1), {}) if named else None


def parse_native_calls(action):
    """Every tool call of a reply in the chat template's tool-call format, in order: (name, arguments).

    A block that names no function is dropped; a reply that writes ``<tool_call>`` yet yields no call is
    *malformed* (:func:`is_malformed_call`).

    >>> parse_native_calls('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    ...     '<tool_call><function=ls><parameter=path>/tmp</parameter></function></tool_call>'
    ...     '<tool_call>{"name": "f", "arguments": {oops}}</tool_call><tool_call>hello</tool_call>')
    [('add', {'a': 1}), ('ls', {'path': '/tmp'}), ('f', {})]
    """
    calls = []
    for block in _TOOL_CALL.findall(action if isinstance(action, str) else ""):
        call = _native_call(block)
        if call is not None:
            calls.append(call)
    return calls


def is_malformed_call(action, calls):
    """The authors' malformed tool call (their orchestrator.py:923-928): the reply writes ``<tool_call>`` and
    no call was parsed from it.

    >>> is_malformed_call("<tool_call>oops</tool_call>", []), is_malformed_call("no tools", [])
    (True, False)
    """
    return not calls and "<tool_call>" in (action if isinstance(action, str) else "")


def run_tool(env, name, arguments):
    """Run the tool ``name`` of ``env`` with ``arguments``: (its result as text, whether it ran). An unknown
    tool, bad arguments or a tool that raises is feedback text for the agent, never an exception."""
    tools = tool_methods(type(env))
    if not isinstance(name, str) or name not in tools:
        return "Unknown tool %s. Available: %s" % (_short_repr(name), ", ".join(tools)), False
    try:
        return str(getattr(env, "tool_" + name)(**(arguments if isinstance(arguments, dict) else {}))), True
    except TypeError as exc:
        return "error: bad arguments for %s: %s" % (name, exc), False
    except Exception as exc:  # a failing tool is feedback to the agent, not a crash
        return "error: %s: %s" % (type(exc).__name__, exc), False


def parse_answer(action):
    """The stripped text of the last ``<answer>...</answer>`` in ``action``, or None."""
    found = _ANSWER.findall(action if isinstance(action, str) else "")
    return found[-1].strip() if found else None


def split_actions(solution):
    """Split a reference solution into its actions, in order.

    Games: each ``\\boxed{...}`` is one action. Tool use: each ``<tool_call>...</tool_call>`` block and
    the final ``<answer>...</answer>`` are one action each. Returns [] when the solution is not an
    action sequence (e.g. a bare value).
    """
    if not isinstance(solution, str):
        return []
    spans = [(s, e, solution[s:e]) for s, e, _ in _boxed_spans(solution)]
    for pattern in (_TOOL_CALL, _ANSWER):
        spans.extend((m.start(), m.end(), m.group(0)) for m in pattern.finditer(solution))
    spans.sort()
    actions, last_end = [], -1
    for start, end, text in spans:
        if start >= last_end:  # skip a \boxed{} nested inside a tool call or answer
            actions.append(text)
            last_end = end
    return actions


def _json_type(annotation):
    """JSON schema type of a parameter annotation (a type, or a string under postponed annotations)."""
    if isinstance(annotation, str):
        name = annotation.split("[")[0].strip()
        return next((v for k, v in _JSON_TYPES.items() if k.__name__ == name), "string")
    return _JSON_TYPES.get(getattr(annotation, "__origin__", annotation), "string")


def tool_methods(cls):
    """The ``tool_*`` methods of an environment class, by tool name."""
    return {
        name[len("tool_") :]: getattr(cls, name)
        for name in sorted(dir(cls))
        if name.startswith("tool_") and callable(getattr(cls, name))
    }


def tool_schemas(cls):
    """OpenAI-format schemas of the ``tool_*`` methods, from their signatures and docstrings."""
    schemas = []
    for name, fn in tool_methods(cls).items():
        params, required = {}, []
        for pname, p in list(inspect.signature(fn).parameters.items())[1:]:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            params[pname] = {"type": _json_type(p.annotation)}
            if p.default is p.empty:
                required.append(pname)
        doc = inspect.getdoc(fn) or ""
        schemas.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": doc.split("\n\n")[0],
                    "parameters": {"type": "object", "properties": params, "required": required},
                },
            }
        )
    return schemas


FORMAT_ERROR_REWARD = -0.1  # a turn with neither a tool call nor an answer, or an unparseable call
NUMERIC_TOLERANCE = 0.01  # numeric answers match when they differ by less than this
INCORRECT = "Incorrect. Keep using tools."
FORMAT_ERROR = (
    'Format error: call one tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>, '
    "or submit <answer>...</answer>."
)


def _normalise(value):
    return re.sub(r"\s+", " ", str(value)).strip().lower()


def _number(text):
    """``text`` as a float, ignoring ``$`` and thousands separators; None when it is not a number."""
    try:
        return float(text.replace("$", "").replace(",", "").strip())
    except (ValueError, OverflowError):
        return None


def answers_match(answer, expected):
    """Case- and whitespace-insensitive equality, or numbers within :data:`NUMERIC_TOLERANCE`.

    >>> answers_match(" Blue ", "blue"), answers_match("$1,234.005", "1234"), answers_match("3.02", "3")
    (True, True, False)
    """
    a, e = _normalise(answer), _normalise(expected)
    if a == e:
        return True
    x, y = _number(a), _number(e)
    return x is not None and y is not None and abs(x - y) < NUMERIC_TOLERANCE


def _first_call(action):
    """The first ``<tool_call>`` of ``action``: (found, call dict or None when its body is no JSON object),
    and how many further calls the action holds."""
    bodies = _TOOL_CALL.findall(action)
    if not bodies:
        return False, None, 0
    try:
        call = json.loads(bodies[0])
    except (ValueError, RecursionError):
        call = None
    return True, call if isinstance(call, dict) else None, len(bodies) - 1


class ToolEnv:
    """Base class of tool-use environments (DESIGN.md §5), with the authors' semantics
    (their ``spade/core/envs/tool_use_base_env.py:108-218``).

    Subclasses write ``reset(seed)`` (which must return ``(observation, info)``), ``solution()`` and
    ``tool_*`` methods with docstrings. Each turn:

    - an ``<answer>`` comes first: the first one in the reply is checked with ``check_answer`` (by default
      :func:`answers_match` against ``self.expected_answer`` or, when that is None, ``is_solved()``). Right:
      reward 1, terminated. Wrong: reward 0 and the episode goes on ("Incorrect. Keep using tools."), unless
      ``max_answers`` wrong answers are used up (terminated, reward 0) or it was the last turn (truncated).
      Tool calls in a reply with an answer are not run.
    - otherwise ONE tool call per turn: the first ``<tool_call>`` runs, further ones are ignored (the
      observation says so). Its reward is ``0.5 * progress()`` (``progress()`` in [0, 1], default 0).
      An unknown tool or a failing tool is feedback with reward 0.
    - a format error, a reply with neither an answer nor a tool call, or whose first tool call is not a JSON
      object, scores :data:`FORMAT_ERROR_REWARD` (-0.1), except on the last turn (then 0, truncated).

    Only a right answer terminates (unless ``max_answers`` runs out), so a tool-use return is 1 or 0: the
    other rewards are per-turn signals kept for logging.
    """

    max_answers: int | None = None  # wrong answers allowed before the episode ends; None = until the turns run out

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self._clear_episode()
        self.reset()

    def _clear_episode(self):
        """What every ``reset`` starts from, before the subclass's own ``reset`` runs."""
        self.turn_count = 0
        self.wrong_answers = 0
        self.expected_answer = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        user_reset = cls.__dict__.get("reset")
        if user_reset is not None:

            def reset(self, seed=None, _user_reset=user_reset):
                self._clear_episode()
                return _user_reset(self, seed=seed)

            reset.__doc__ = user_reset.__doc__
            cls.reset = reset

    # -- what a subclass may override ----------------------------------------------------------------
    def is_solved(self):
        """State-based success criterion, used when ``expected_answer`` is None."""
        return False

    def check_answer(self, answer):
        if self.expected_answer is not None:
            return answers_match(answer, self.expected_answer)
        return bool(self.is_solved())

    def progress(self):
        """Partial progress in [0, 1]; half of it is the reward of a tool-call turn."""
        return 0.0

    def incorrect_feedback(self):
        """The observation after a wrong answer that leaves the episode going."""
        return INCORRECT

    def after_tool(self):
        """Text appended to every tool result (both protocols); nothing here."""
        return ""

    # -- the contract --------------------------------------------------------------------------------
    def step(self, action):
        self.turn_count += 1
        last = self.turn_count >= self.max_turns
        action = action if isinstance(action, str) else ""
        answers = _ANSWER.findall(action)
        if answers:
            return self._answer(answers[0].strip(), last)
        found, call, extra = _first_call(action)
        if call is None:
            if last:
                return "Time is up.", 0.0, False, True, {}
            reason = FORMAT_ERROR if not found else "Format error: the tool call is not a JSON object."
            return reason, FORMAT_ERROR_REWARD, False, False, {"format_error": True}
        obs, reward = self._call(call)
        if extra:
            obs += "\n(%d more tool call(s) in your reply were ignored: one tool call per turn.)" % extra
        if last:
            obs += "\nTime is up."
        return obs, reward, False, last, {}

    def _answer(self, answer, last):
        if self.check_answer(answer):
            return "Correct!", 1.0, True, False, {"solved": True}
        self.wrong_answers += 1
        if self.max_answers is not None and self.wrong_answers >= self.max_answers:
            return "Incorrect. No answers left.", 0.0, True, False, {"solved": False}
        if last:
            return "Incorrect. Time is up.", 0.0, False, True, {"solved": False}
        return self.incorrect_feedback(), 0.0, False, False, {"solved": False}

    def _call(self, call):
        """Run one parsed tool call: (observation, reward)."""
        out, ran = self._run_tool(call.get("name"), call.get("arguments", {}))
        if not ran:
            return out, 0.0
        return out, 0.5 * min(max(float(self.progress()), 0.0), 1.0)

    def execute_tool(self, name, arguments):
        """Run one tool outside ``step`` (the native protocol: every call of a reply runs, no turn is
        counted; the authors' ``execute_tool``): its result as text (:func:`run_tool`)."""
        return self._run_tool(name, arguments)[0]

    def _run_tool(self, name, arguments):
        """:func:`run_tool`, its text followed by :meth:`after_tool`'s."""
        out, ran = run_tool(self, name, arguments)
        return out + self.after_tool(), ran

    def close(self):
        pass


ALL_DONE = "done"  # the answer that completes a multi-turn instruction episode


class InstructionEnv(ToolEnv):
    """A multi-turn instruction environment: a script of user instructions, each satisfied through the tools
    (the authors' SPADE_MULTITURN_ENV_GEN environments, their ``prompts/tool_use_template.py:347-767``).

    ``reset(seed)`` sets ``self.user_messages`` (3-5 instructions; the observation it returns is the first)
    and ``self.criteria``, one callable per instruction that takes the environment and says whether that
    instruction is satisfied (``lambda env: env.cwd == "/docs"``). After every tool call the current
    instruction's criterion is checked, once: when it holds, the next instruction is appended to the tool's
    result (``[STEP n COMPLETE - NEW INSTRUCTION] ...``), after the last one ``[ALL STEPS COMPLETE] Submit
    <answer>done</answer>.``. A criterion that raises counts as not satisfied. Only ``done`` with every step
    complete is right (reward 1); an earlier ``done`` is told which step is still open. ``progress()`` is the
    share of steps complete. ``solution()`` returns the tool calls of every step, then ``<answer>done</answer>``.
    """

    def _clear_episode(self):
        super()._clear_episode()
        self.user_messages = []
        self.criteria = []
        self.current_msg = 0

    def _satisfied(self, index):
        try:
            return bool(self.criteria[index](self))
        except Exception:
            return False

    def after_tool(self):
        """Advance past the current instruction if its criterion now holds (the authors' ``_advance_if_done``)."""
        total = len(self.user_messages)
        if self.current_msg >= total or self.current_msg >= len(self.criteria):
            return ""
        if not self._satisfied(self.current_msg):
            return ""
        self.current_msg += 1
        if self.current_msg < total:
            return "\n\n[STEP %d COMPLETE - NEW INSTRUCTION] %s" % (
                self.current_msg,
                self.user_messages[self.current_msg],
            )
        return "\n\n[ALL STEPS COMPLETE] Submit <answer>%s</answer>." % ALL_DONE

    @property
    def all_complete(self):
        return bool(self.user_messages) and self.current_msg >= len(self.user_messages)

    def check_answer(self, answer):
        return answers_match(answer, ALL_DONE) and self.all_complete

    def progress(self):
        return self.current_msg / len(self.user_messages) if self.user_messages else 0.0

    def incorrect_feedback(self):
        """Name the step still open, so the agent acts on it instead of repeating "done" (the authors'
        ``_incorrect_answer_feedback``)."""
        if self.current_msg < len(self.user_messages):
            return (
                '%s Not all steps are complete: you are still on step %d/%d: "%s" '
                "Complete it with the tools before submitting <answer>%s</answer>."
            ) % (
                INCORRECT,
                self.current_msg + 1,
                len(self.user_messages),
                self.user_messages[self.current_msg],
                ALL_DONE,
            )
        return INCORRECT


def _short_repr(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
