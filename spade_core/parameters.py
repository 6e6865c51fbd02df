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
  parent value's shape (:func:`same_shape`); anything else in the reply is ignored;
- :func:`variant_code`: the parent with the parsed values, its module docstring cut to the first paragraph
  (the rest describes the parent: its measurements), or None when the reply sets no parameter;
- :func:`parameter_similarity`: the share of the parent's parameters the variant leaves as they were; the
  novelty stage refuses a variant above ``designer.parent_max_similarity`` (a copy is 1.0).
"""

from __future__ import annotations

import ast
import re
from typing import Any

_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*$")
_STATEMENT_START = re.compile(r"^_?[A-Z][A-Z0-9_]*\s*(?::[^=]*)?=", re.M)
_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n(.*?)(?:```|\Z)", re.S)


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


def _assignments(tree: ast.Module) -> list[tuple[str, Any, ast.stmt]]:
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
            found.append((name, ast.literal_eval(value_node), node))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
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


def parse_parameters(reply: str, parent: dict[str, Any]) -> dict[str, Any]:
    """The new values ``reply`` assigns to ``parent``'s parameters (see the module doc); the first
    assignment of a name counts.

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
        try:
            tree = ast.parse(statement.strip())
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
        for name, value, _ in _assignments(tree):
            if name in parent and name not in found and same_shape(value, parent[name]):
                found[name] = value
    return found


def _docstring(tree: ast.Module) -> tuple[int, int, str] | None:
    """(first line, last line, first paragraph) of the module docstring, or None."""
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        return None
    if not isinstance(first.value.value, str):
        return None
    paragraph = first.value.value.strip().split("\n\n", 1)[0].strip()
    return first.lineno, first.end_lineno or first.lineno, paragraph


def variant_code(parent_code: str, reply: str) -> str | None:
    """The parent module with the parameter values ``reply`` sets, or None when it sets none.

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
    tree = ast.parse(parent_code)
    values = parse_parameters(reply, {name: value for name, value, _ in _assignments(tree)})
    if not values:
        return None
    lines = parent_code.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (first line, last line, replacement), 1-based, inclusive
    for name, _, node in _assignments(tree):
        if name in values:
            edits.append((node.lineno, node.end_lineno or node.lineno, f"{name} = {values[name]!r}\n"))
    doc = _docstring(tree)
    if doc is not None:
        start, end, paragraph = doc
        escaped = paragraph.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        edits.append((start, end, f'"""{escaped}"""\n'))
    for start, end, text in sorted(edits, reverse=True):
        lines[start - 1 : end] = [text]
    return "".join(lines)


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
