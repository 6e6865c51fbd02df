"""Function calls in BFCL's Python return format, parsed with ``ast`` as data: model text is never evaluated.

BFCL asks prompting models for ``[func_name1(param=value, ...), func_name2(...)]``. BFCL's own decoder
(``model_handler.utils.ast_parse``) ``eval``\\ s some argument expressions (binary operations, lambdas); this
one reads literals only: constants, signed numbers, lists, tuples, dicts, bare names (as their name string,
as BFCL does), nested calls (as data), subscripts (as source text), and ``+ - * /`` between numbers
(computed here, bounded). Anything else makes the whole reply undecodable. Positional arguments are dropped,
as BFCL's decoder drops them. A reply wrapped in a Markdown code fence is unwrapped first.

Java and JavaScript replies (BFCL's ``simple_java`` / ``simple_javascript``) are decoded by BFCL's own
decoders (:func:`parse_calls_in`): ``tree_sitter`` parsers that read the call's text and never run it, as
BFCL's ``default_decode_ast_prompting`` calls them (backticks and whitespace stripped, then the reply's
outer brackets dropped). Their values stay Java / JavaScript source text (``"new int[]{1, 2}"``, ``"true"``;
a top-level string literal loses its quotes); BFCL's checker converts them by the parameter's type.

Also here, in ONE place: :func:`bfcl_checkers` imports BFCL's checker and dataset helpers offline.
``bfcl_eval`` is installed with ``--no-deps``, and ``bfcl_eval.constants.model_config`` imports every provider
SDK (openai, anthropic, cohere, ...) only to build ``MODEL_CONFIG_MAPPING``; the checker needs that mapping
for one thing: whether a model's names had "." rewritten to "_". We prompt with the original dotted names, so
the stub module installed in ``sys.modules`` answers every lookup with ``underscore_to_dot=False``.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
import sys
import types
from dataclasses import dataclass
from typing import Any

MAX_REPLY_CHARS = 20_000
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
MAX_NUMBER = 1e300


class CallSyntaxError(ValueError):
    """A reply that is not a list of function calls with literal arguments."""


@dataclass(frozen=True)
class Call:
    """One decoded call: a (possibly dotted) function name and its keyword arguments as plain data."""

    name: str
    kwargs: dict[str, Any]

    def as_bfcl(self) -> dict[str, dict[str, Any]]:
        """BFCL's decoded form ``{name: {param: value}}``."""
        return {self.name: dict(self.kwargs)}

    def source(self) -> str:
        """The call as Python source built from ``repr`` of its literal values (BFCL's execution format).

        >>> Call("cd", {"folder": "doc's"}).source()
        'cd(folder="doc\\'s")'
        """
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.kwargs.items())})"


def _dotted_name(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise CallSyntaxError(f"a call target must be a (dotted) name, got {ast.unparse(node)[:60]!r}")
    parts.append(node.id)
    return ".".join(reversed(parts))


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CallSyntaxError(f"arithmetic on a non-number: {value!r}")
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_NUMBER:
        raise CallSyntaxError("arithmetic result out of range")
    return value


def _value(node: ast.expr) -> Any:
    """A literal argument value, mirroring BFCL's ``resolve_ast_by_type`` without its ``eval`` branches."""
    match node:
        case ast.Constant(value=value):
            return "..." if value is Ellipsis else value
        case ast.UnaryOp(op=ast.USub() | ast.UAdd() as op, operand=operand):
            number = _number(_value(operand))
            return -number if isinstance(op, ast.USub) else number
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _ARITHMETIC:
            try:
                return _number(_ARITHMETIC[type(op)](_number(_value(left)), _number(_value(right))))
            except (ZeroDivisionError, OverflowError):
                raise CallSyntaxError("arithmetic error in an argument") from None
        case ast.List(elts=elts):
            return [_value(e) for e in elts]
        case ast.Tuple(elts=elts):
            return tuple(_value(e) for e in elts)
        case ast.Dict(keys=keys, values=values):
            if any(k is None for k in keys):
                raise CallSyntaxError("dict unpacking (**) in an argument")
            return {_value(k): _value(v) for k, v in zip(keys, values, strict=True) if k is not None}
        case ast.Name(id=name):
            return name
        case ast.Call(keywords=[]):
            return ast.unparse(node)
        case ast.Call():
            return _call(node).as_bfcl()
        case ast.Subscript():
            return ast.unparse(node)
    raise CallSyntaxError(f"unsupported argument expression {type(node).__name__}")


def _call(node: ast.Call) -> Call:
    kwargs: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise CallSyntaxError("keyword unpacking (**) in a call")
        kwargs[keyword.arg] = _value(keyword.value)
    return Call(_dotted_name(node.func), kwargs)


def parse_calls(text: str) -> list[Call]:
    """Decode a reply in BFCL's Python format; raise :class:`CallSyntaxError` when it is not one.

    >>> parse_calls("[get_weather(city='Paris', days=2 * 3), math.factorial(number=-5)]")
    [Call(name='get_weather', kwargs={'city': 'Paris', 'days': 6}), Call(name='math.factorial', kwargs={'number': -5})]
    >>> parse_calls("```python\\nls(a=True)\\n```")
    [Call(name='ls', kwargs={'a': True})]
    >>> try_parse_calls("[__import__('os').system(cmd='ls')]") is None  # a call target must be a name
    True
    """
    if len(text) > MAX_REPLY_CHARS:
        raise CallSyntaxError(f"reply longer than {MAX_REPLY_CHARS} characters")
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1)
    # BFCL's default_decode_ast_prompting: strip backticks and whitespace, then make it a list.
    text = text.strip("`\n ")
    text = text if text.startswith("[") else "[" + text
    text = text if text.endswith("]") else text + "]"
    text = text.strip().strip("'")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CallSyntaxError(f"not Python call syntax: {type(exc).__name__}") from None
    nodes = [tree] if isinstance(tree, ast.Call) else getattr(tree, "elts", None)
    if nodes is None:
        raise CallSyntaxError("reply is not a list of calls")
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            raise CallSyntaxError(f"list element is not a call: {ast.unparse(node)[:60]!r}")
        calls.append(_call(node))
    return calls


def try_parse_calls(text: str) -> list[Call] | None:
    """:func:`parse_calls`, or None when the reply does not decode."""
    try:
        return parse_calls(text)
    except (CallSyntaxError, RecursionError):
        return None


def parse_calls_in(text: str, language: str) -> list[dict[str, Any]]:
    """Decode a reply into BFCL's form ``[{name: {param: value}}]`` for a category's ``language``.

    ``python`` is :func:`parse_calls`; ``java`` and ``javascript`` are BFCL's tree-sitter decoders (see the
    module doc), which return what BFCL's checker gets, possibly not a list of calls at all (BFCL's checker
    then reports the wrong output format). Raises :class:`CallSyntaxError` when the reply does not decode.

    >>> parse_calls_in('[Math.max(a=1, b="x y")]', "java")
    [{'Math.max': {'a': '1', 'b': 'x y'}}]
    """
    if language == "python":
        return [call.as_bfcl() for call in parse_calls(text)]
    if len(text) > MAX_REPLY_CHARS:
        raise CallSyntaxError(f"reply longer than {MAX_REPLY_CHARS} characters")
    fenced = _FENCE.search(text)
    text = (fenced.group(1) if fenced else text).strip("`\n ")
    text = text if text.startswith("[") else "[" + text
    text = text if text.endswith("]") else text + "]"
    parse = bfcl_decoders()[language]
    try:
        return parse(text[1:-1])  # type: ignore[no-any-return]
    except Exception as exc:  # BFCL's decoders raise SyntaxError and plain Exception
        raise CallSyntaxError(f"not a {language} call: {str(exc)[:120]}") from None


# -- BFCL's checkers, imported offline ---------------------------------------------------------------------


class _NoModelConfigs(dict[str, Any]):
    """Stands in for ``MODEL_CONFIG_MAPPING``: no model has its dotted names rewritten."""

    def __missing__(self, key: str) -> Any:
        return types.SimpleNamespace(underscore_to_dot=False)


@functools.cache
def bfcl_checkers() -> types.SimpleNamespace:
    """BFCL's ``ast_checker``, ``Language``, output-format tests and function-doc hints, imported with the
    model-config stub (see module doc)."""
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.MODEL_CONFIG_MAPPING = _NoModelConfigs()  # type: ignore[attr-defined]
        sys.modules[name] = stub
    from bfcl_eval import utils
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return types.SimpleNamespace(
        ast_checker=ast_checker,
        Language=Language,
        is_call_list=utils.is_function_calling_format_output,
        is_empty_output=utils.is_empty_output,
        language_docs=utils._func_doc_language_specific_pre_processing,
    )


@functools.cache
def bfcl_decoders() -> dict[str, Any]:
    """BFCL's Java and JavaScript decoders; they need ``tree_sitter`` and its two grammars (bfcl-eval's pins),
    which only the ``java`` and ``javascript`` categories use."""
    from bfcl_eval.model_handler.parser.java_parser import parse_java_function_call
    from bfcl_eval.model_handler.parser.js_parser import parse_javascript_function_call

    return {"java": parse_java_function_call, "javascript": parse_javascript_function_call}
