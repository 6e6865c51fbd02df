"""Stdlib-only helpers importable by generated environments inside the jail (``import spade_env``).

- :func:`parse_boxed` — the command inside the last ``\\boxed{...}`` of a game action (nested braces ok).
- :func:`parse_tool_calls`, :func:`parse_answer` — the tool-use action format.
- :func:`split_actions` — a reference solution split into the actions it is made of.
- :class:`ToolEnv` — base class for tool-use environments: parses ``<tool_call>`` / ``<answer>``,
  dispatches to ``tool_*`` methods, checks the answer and exposes OpenAI-format tool schemas. A subclass
  writes ``reset`` (setting ``self.expected_answer`` or overriding ``is_solved``), ``solution`` and its
  tools.

This file runs under the jail's system ``python3`` (3.11) and under the project's interpreter, so it
uses the standard library only and no syntax newer than 3.10.
"""

import inspect
import json
import re

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
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


def _normalise(value):
    return re.sub(r"\s+", " ", str(value)).strip().lower()


class ToolEnv:
    """Base class of tool-use environments (DESIGN.md §5).

    Subclasses write ``reset(seed)`` (which must return ``(observation, info)``), ``solution()`` and
    ``tool_*`` methods with docstrings. Success is ``check_answer(answer)``: by default the answer equals
    ``self.expected_answer`` (case and whitespace insensitive) or, when that is None, ``is_solved()``.
    ``progress()`` in [0, 1] gives partial reward before the answer.
    """

    max_tool_calls_per_turn = 8

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.turn_count = 0
        self.expected_answer = None
        self.reset()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        user_reset = cls.__dict__.get("reset")
        if user_reset is not None:

            def reset(self, seed=None, _user_reset=user_reset):
                self.turn_count = 0
                self.expected_answer = None
                return _user_reset(self, seed=seed)

            reset.__doc__ = user_reset.__doc__
            cls.reset = reset

    # -- what a subclass may override ----------------------------------------------------------------
    def is_solved(self):
        """State-based success criterion, used when ``expected_answer`` is None."""
        return False

    def check_answer(self, answer):
        if self.expected_answer is not None:
            return _normalise(answer) == _normalise(self.expected_answer)
        return bool(self.is_solved())

    def progress(self):
        """Partial progress in [0, 1] shown as the reward of non-final turns."""
        return 0.0

    # -- the contract --------------------------------------------------------------------------------
    @classmethod
    def get_tool_schemas(cls):
        """OpenAI-format schemas of this environment's tools (see :func:`tool_schemas`)."""
        return tool_schemas(cls)

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        answer = parse_answer(action)
        calls = parse_tool_calls(action)
        if answer is None and not calls:
            return (
                (
                    'Format error: call a tool with <tool_call>{"name": ..., "arguments": {...}}'
                    "</tool_call> or finish with <answer>...</answer>."
                ),
                0.0,
                False,
                truncated,
                {},
            )
        outputs = []
        tools = tool_methods(type(self))
        for name, args in calls[: self.max_tool_calls_per_turn]:
            if name is None:
                outputs.append("error: %s" % args)
            elif name not in tools:
                outputs.append("error: unknown tool %r; tools: %s" % (name, ", ".join(tools)))
            else:
                try:
                    outputs.append(str(getattr(self, "tool_" + name)(**args)))
                except TypeError as exc:
                    outputs.append("error: bad arguments for %s: %s" % (name, exc))
                except Exception as exc:  # a failing tool is feedback to the agent, not a crash
                    outputs.append("error: %s: %s" % (type(exc).__name__, exc))
        if answer is not None:
            solved = bool(self.check_answer(answer))
            outputs.append("Correct." if solved else "Incorrect.")
            return "\n".join(outputs), 1.0 if solved else 0.0, True, False, {"solved": solved}
        partial = min(max(float(self.progress()), 0.0), 1.0)
        return "\n".join(outputs), 0.5 * partial, False, truncated, {}

    def close(self):
        pass
