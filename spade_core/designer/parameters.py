"""Parameter mutation (``designer.mode: parameters``): the designer rewrites a parent environment's parameters.

POET's mutation operator works on an environment's *encoding*, its parameters, not on its code. Here an
environment's parameters are its module-level constants: single assignments to an upper-case name whose
value is a Python literal (``_WORDS = ["falcon", ...]``, ``_SIZE = 5``). The designer is shown the parent's
parameter block and the document and writes new values; the variant is the parent's module with those
assignments replaced. It is the design mode a 135M model can do: it copies a block of literals reliably and
varies it (new words, more names, other sizes), where it cannot write or edit a whole module that loads.

Rules (each a pure function below):

- :func:`parameters_of`: the parameters of a module, in source order;
- :func:`parse_parameters`: the values a reply assigns, statement by statement, so one statement cut off by
  the token budget loses only itself. A value counts when its name is a parent parameter and it has the
  parent value's shape (:func:`same_shape`); anything else in the reply is ignored. The reply is model
  output: the statements are found in linear time, and a statement or value beyond the bounds
  (:func:`bounded_literal`: items per container from ``designer.max_parameter_items``, nesting, integer
  size) is refused on its syntax tree before the value is built, outside the jail;
- :func:`make_variant`: the parent with the parsed values, each replacing its node's source span in the
  parsed tree, its module docstring cut to the first paragraph (the rest describes the parent: its
  measurements); every failure is a :class:`ParameterError` whose ``error_type`` the validations row takes
  (``unknown_parent``, ``parameters_too_large``, ``syntax_error``); :func:`variant_code` is None instead;
- :func:`parameter_similarity`: the share of the parent's parameters the variant leaves as they were; the
  novelty stage refuses a variant above ``designer.parent_max_similarity`` (a copy is 1.0).
"""

from __future__ import annotations

import ast
import io
import re
from typing import Any

_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*$")
# One line per statement start, no backtracking across lines: linear in the reply's length.
_STATEMENT_START = re.compile(r"^_?[A-Z][A-Z0-9_]*[ \t]*(?::[^=\n]*)?=", re.M)
_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n(.*?)(?:```|\Z)", re.S)

MAX_ITEMS = 1000
"""Items of one container a reply's value may hold (``designer.max_parameter_items``)."""
MAX_STATEMENT_CHARS = 65_536
"""A reply's statement longer than this is not parsed (a literal of at most MAX_ITEMS short items fits)."""
MAX_INT_BITS = 1024
"""An integer of a reply's value has at most this many bits (about 308 decimal digits)."""
MAX_DEPTH = 8
"""Containers nested in a reply's value, at most."""


class ParameterError(ValueError):
    """A reply's value or variant the parameters mode refuses; ``error_type`` is its validations class."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def parameters_of(code: str) -> dict[str, Any]:
    """The module-level constants of ``code`` with literal values, by name, in source order ({} when the
    code does not parse).

    >>> parameters_of('import random\\n_WORDS = ["a", "b"]\\n_SIZE = 3\\nrng = random.Random()\\nlower = 1\\n')
    {'_WORDS': ['a', 'b'], '_SIZE': 3}
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return {}
    return {name: value for name, value, _ in _assignments(tree)}


def bounded_literal(node: ast.expr, max_items: int = MAX_ITEMS) -> Any:
    """The value of a literal expression no larger than the bounds (:data:`MAX_ITEMS` items per container,
    :data:`MAX_DEPTH` levels, :data:`MAX_INT_BITS`-bit integers), checked on the tree before it is built.

    Raises:
        ParameterError: ``parameters_too_large``, naming the bound.
        ValueError: not a literal (``ast.literal_eval``'s error).

    >>> bounded_literal(ast.parse("[1, 2, 3]", mode="eval").body, max_items=2)
    Traceback (most recent call last):
    ...
    spade_core.designer.parameters.ParameterError: a container of 3 items (at most 2)
    >>> bounded_literal(ast.parse("0x" + "f" * 3580, mode="eval").body)
    Traceback (most recent call last):
    ...
    spade_core.designer.parameters.ParameterError: an integer of 14320 bits (at most 1024)
    """
    stack: list[tuple[ast.AST, int]] = [(node, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ParameterError("parameters_too_large", f"containers nested more than {MAX_DEPTH} deep")
        if isinstance(item, ast.List | ast.Tuple | ast.Set | ast.Dict):
            count = len(item.keys) if isinstance(item, ast.Dict) else len(item.elts)
            if count > max_items:
                raise ParameterError("parameters_too_large", f"a container of {count} items (at most {max_items})")
        bits = item.value.bit_length() if isinstance(item, ast.Constant) and type(item.value) is int else 0
        if bits > MAX_INT_BITS:
            raise ParameterError("parameters_too_large", f"an integer of {bits} bits (at most {MAX_INT_BITS})")
        stack += [(child, depth + 1) for child in ast.iter_child_nodes(item)]
    return ast.literal_eval(node)


def _assignments(tree: ast.Module, max_items: int | None = None) -> list[tuple[str, Any, ast.stmt]]:
    """The module-level literal assignments to a parameter name: ``(name, value, node)``. ``max_items``
    (a reply's): values beyond the bounds of :func:`bounded_literal` raise its ParameterError."""
    found: list[tuple[str, Any, ast.stmt]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value_node = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value_node = node.target.id, node.value
        else:
            continue
        if not _NAME.match(name):
            continue
        try:
            value = ast.literal_eval(value_node) if max_items is None else bounded_literal(value_node, max_items)
        except ParameterError:
            raise
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        found.append((name, value, node))
    return found


def parameter_block(code: str) -> str:
    """The source of the parameter assignments of ``code``, one after the other (what the prompt shows).

    >>> print(parameter_block('import random\\n\\n# words\\n_WORDS = ["a",\\n          "b"]\\nX = f()\\n'))
    _WORDS = ["a",
              "b"]
    """
    tree = ast.parse(code)
    return "\n".join(ast.get_source_segment(code, node) or "" for _, _, node in _assignments(tree))


def same_shape(value: Any, reference: Any) -> bool:
    """Whether ``value`` may stand in for ``reference``: the same type (an int for a float too); a tuple of
    the same length, field by field; a list, set or dict non-empty when the reference is, each item (key,
    value) shaped like one of the reference's.

    >>> same_shape(["x", "y"], ["a"]), same_shape([], ["a"]), same_shape([1], ["a"]), same_shape(4, 2.5)
    (True, False, False, True)
    >>> same_shape({"k": 1}, {"a": 2}), same_shape(True, 1), same_shape(("a", 1), ("b", 2))
    (True, False, True)
    >>> same_shape([("a", 1, None)], [("b", 2, None), ("c", 3, (2, 4))]), same_shape([("a", 1)], [("b", 2, None)])
    (True, False)
    """
    if isinstance(reference, bool) or isinstance(value, bool):
        return type(value) is type(reference)
    if isinstance(reference, float):
        return isinstance(value, int | float)
    if type(value) is not type(reference):
        return False
    if isinstance(reference, tuple):  # a record: its length and each field's type
        return len(value) == len(reference) and all(same_shape(v, r) for v, r in zip(value, reference, strict=True))
    if isinstance(reference, list | set | frozenset):
        if reference and not value:
            return False
        return all(_item_fits(v, reference) for v in value)
    if isinstance(reference, dict):
        if reference and not value:
            return False
        return all(_item_fits(k, list(reference)) for k in value) and all(
            _item_fits(v, list(reference.values())) for v in value.values()
        )
    return True


def _item_fits(item: Any, reference_items: Any) -> bool:
    return not reference_items or any(same_shape(item, r) for r in reference_items)


def _statements(reply: str) -> list[str]:
    """The reply's top-level assignment statements to an upper-case name: from each fenced block (or the
    whole reply when it has none), cut where the next such statement starts."""
    blocks = _FENCE.findall(reply) or [reply]
    statements = []
    for block in blocks:
        starts = [m.start() for m in _STATEMENT_START.finditer(block)]
        statements += [block[a:b] for a, b in zip(starts, [*starts[1:], len(block)], strict=False)]
    return statements


def parse_parameters(reply: str, parent: dict[str, Any], max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """The new values ``reply`` assigns to ``parent``'s parameters (see the module doc); the first
    assignment of a name counts. Linear in the reply's length; a statement longer than
    :data:`MAX_STATEMENT_CHARS` or a value beyond :func:`bounded_literal`'s bounds is refused.

    Raises:
        ParameterError: ``parameters_too_large`` for a statement or value beyond the bounds.

    >>> parent = {"_WORDS": ["falcon", "copper"], "_SIZE": 3}
    >>> parse_parameters('Here:\\n```python\\n_WORDS = ["river", "delta"]\\n_SIZE = "big"\\n```', parent)
    {'_WORDS': ['river', 'delta']}
    >>> parse_parameters('_SIZE = 4\\n_WORDS = ["river", "del', parent)
    {'_SIZE': 4}
    >>> parse_parameters("no code", parent)
    {}
    """
    found: dict[str, Any] = {}
    for statement in _statements(reply if isinstance(reply, str) else ""):
        if len(statement) > MAX_STATEMENT_CHARS:
            what = statement.split("=", 1)[0].strip()[:40]
            raise ParameterError(
                "parameters_too_large",
                f"the statement {what} = ... has {len(statement)} characters (at most {MAX_STATEMENT_CHARS})",
            )
        try:
            tree = ast.parse(statement.strip())
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
        for name, value, _ in _assignments(tree, max_items):
            if name in parent and name not in found and same_shape(value, parent[name]):
                found[name] = value
    return found


def variant_code(parent_code: str, reply: str, max_items: int = MAX_ITEMS) -> str | None:
    """The parent module with the parameter values ``reply`` sets, or None when it sets none or the variant
    cannot be made (:func:`make_variant` says why).

    >>> parent = '\"\"\"Repeat a word.\\n\\nMeasured: 0.2.\"\"\"\\n\\nimport random\\n\\n_WORDS = ["a", "b"]\\nX = 1\\n'
    >>> print(variant_code(parent, '```python\\n_WORDS = ["river", "delta", "bank"]\\n```'))
    \"\"\"Repeat a word.\"\"\"
    <BLANKLINE>
    import random
    <BLANKLINE>
    _WORDS = ['river', 'delta', 'bank']
    X = 1
    <BLANKLINE>
    >>> variant_code(parent, "I cannot do that.") is None
    True
    """
    try:
        return make_variant(parent_code, reply, max_items)
    except ParameterError:
        return None


def make_variant(parent_code: str | None, reply: str, max_items: int = MAX_ITEMS) -> str:
    """The parent module with the parameter values ``reply`` sets.

    Each edit replaces exactly the source span of its node in the parsed tree (never a count of lines, which
    form feeds and Unicode line separators in the parent would shift); the module docstring is cut to its
    first paragraph. The variant must parse and differ from its parent in a parameter.

    Raises:
        ParameterError: ``unknown_parent`` (no parent code: a repair of a design whose parent is gone),
            ``parameters_too_large`` (see :func:`parse_parameters`), ``syntax_error`` (the reply sets none of
            the parent's parameters, or the variant does not parse or lacks a value the reply set).
    """
    if parent_code is None:
        raise ParameterError("unknown_parent", "the design's parent environment is not in the memory")
    tree = ast.parse(parent_code)
    parent = {name: value for name, value, _ in _assignments(tree)}
    values = parse_parameters(reply, parent, max_items)
    if not values:
        raise ParameterError(
            "syntax_error", "the reply sets none of the parent's parameters (a value of its type, in a ```python block)"
        )
    edits: list[tuple[ast.stmt, str]] = [
        (node, f"{name} = {values[name]!r}") for name, _, node in _assignments(tree) if name in values
    ]
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        paragraph = first.value.value.strip().split("\n\n", 1)[0].strip()
        escaped = paragraph.replace("\\", "\\\\").replace('"', '\\"')  # a closing quote cannot end it early
        edits.append((first, f'"""{escaped}"""'))
    code = _replace_spans(parent_code, edits)
    try:
        made = parameters_of(code) if ast.parse(code) else {}
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ParameterError("syntax_error", f"the variant does not parse: {exc}") from None
    missed = [name for name in values if name not in made or made[name] != values[name]]
    if missed:  # an edit that did not land where the tree said: never a variant that silently is its parent
        raise ParameterError("syntax_error", f"the variant does not hold the reply's {', '.join(missed)}")
    return code


def _replace_spans(code: str, edits: list[tuple[ast.stmt, str]]) -> str:
    """``code`` with each node's source span replaced by its text. Lines are split as the parser splits
    them (``\\n``, ``\\r\\n``, ``\\r``; not form feeds or U+2028), columns are UTF-8 byte offsets."""
    lines = io.StringIO(code, newline="").readlines()
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        return starts[lineno - 1] + len(lines[lineno - 1].encode()[:col].decode(errors="ignore"))

    spans = sorted(
        ((offset(n.lineno, n.col_offset), offset(n.end_lineno or n.lineno, n.end_col_offset or 0), text)
         for n, text in edits),
        reverse=True,
    )  # fmt: skip
    for start, end, text in spans:
        code = code[:start] + text + code[end:]
    return code


def parameter_similarity(code: str, parent_code: str) -> float:
    """The share of ``parent_code``'s parameters that ``code`` keeps with the same value (1.0: a copy; a
    parameter ``code`` lacks counts as changed; 1.0 when the parent has none).

    >>> parent = '_WORDS = ["a", "b"]\\n_SIZE = 3\\n'
    >>> parameter_similarity(parent, parent), parameter_similarity(parent.replace("3", "4"), parent)
    (1.0, 0.5)
    """
    reference = parameters_of(parent_code)
    if not reference:
        return 1.0
    values = parameters_of(code)
    return sum(1 for name, value in reference.items() if name in values and values[name] == value) / len(reference)
