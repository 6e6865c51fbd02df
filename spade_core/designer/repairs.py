"""Code repairs applied to a designed environment before validation (docs/DESIGN.md §7 step 4), as the authors.

A small model's designs often fail on two faults that say nothing about the game: an f-string whose braces
hold prose (``f"Answer with \\boxed{your guess}"``) or are never closed, and a standard-library module used
without its import (``random.randint`` with no ``import random``). The authors (github spade-rl/spade)
repair the first before loading (``spade/core/utils/parsing.py``, ``repair_fstring_braces``) and make the
second resolvable by putting common standard-library names into the namespace the game runs in
(``spade/core/envs/synthetic_game_env.py``). Here both rewrite the code itself, so the repaired code is what
is validated, stored, played and shown to the hint writer, and the store records which repairs a design
needed (the ``repairs`` and ``unrepaired_env_id`` columns of ``designs``).

- ``fstring_braces``: while the module does not parse, on the line of the syntax error, inside f-string
  literals, a replacement field whose content is no expression becomes literal text (its braces doubled,
  as the authors), and a lone ``{`` or ``}`` (never closed, never opened) is doubled (beyond the authors,
  who leave those). Kept only if the module then parses; at most :data:`MAX_FSTRING_ROUNDS` lines.
  Limits: f-strings on one line (not a triple-quoted f-string spanning lines); the grammar is the host's.
- ``stdlib_imports``: each name of :data:`STDLIB_NAMES` that the module reads but binds nowhere (no
  import, assignment, parameter, definition) gets its import, inserted after the module docstring and any
  ``from __future__`` import. The table is the authors' minus ``numpy`` (not in the jail's interpreter).
  A name bound anywhere in the module is left alone, as the authors never override a binding.

Pure functions over source text: nothing here runs the code (:mod:`ast` only).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spade_core.envs.contract import env_id_for

MAX_FSTRING_ROUNDS = 20  # the authors' max_iter

# name -> the import that binds it: the authors' table of injected names, less numpy.
_MODULES = [
    "collections",
    "copy",
    "functools",
    "heapq",
    "itertools",
    "json",
    "math",
    "operator",
    "random",
    "re",
    "statistics",
    "string",
]
_FROM = {
    "collections": ["Counter", "OrderedDict", "defaultdict", "deque", "namedtuple"],
    "copy": ["deepcopy"],
    "functools": ["lru_cache", "reduce"],
    "heapq": ["heappop", "heappush"],
    "itertools": ["accumulate", "chain", "combinations", "permutations", "product"],
    "typing": [
        "Any",
        "Callable",
        "Dict",
        "FrozenSet",
        "Iterable",
        "List",
        "Mapping",
        "Optional",
        "Sequence",
        "Set",
        "Tuple",
        "Union",
    ],
}
STDLIB_NAMES: dict[str, str] = {m: f"import {m}" for m in _MODULES} | {
    name: module for module, names in _FROM.items() for name in names
}


@dataclass(frozen=True)
class Repaired:
    """The code after the repairs, which ones changed it (in order), and the env_id of the code before."""

    code: str
    applied: tuple[str, ...]
    unrepaired_env_id: str


def _parses(code: str) -> SyntaxError | None:
    """None when ``code`` parses, else its SyntaxError (a null byte or absurd nesting: a SyntaxError at 0)."""
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError):
        return SyntaxError("unparseable", ("<design>", 0, 0, ""))
    return None


# -- f-string braces -------------------------------------------------------------------------------------
def _field_end(body: str, start: int) -> int | None:
    """Index of the ``}`` closing the replacement field opened at ``body[start]``, or None (never closed)."""
    depth, quote = 0, ""
    for i in range(start, len(body)):
        ch = body[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _escape_fields(body: str, prefix: str, quote: str) -> str:
    """The body of one f-string literal with its no-expression fields and lone braces made literal.

    >>> _escape_fields("Answer with \\\\boxed{your guess} in {n} turns", "f", '"')
    'Answer with \\\\boxed{{your guess}} in {n} turns'
    >>> _escape_fields("score: {", "f", '"'), _escape_fields("{{a}", "f", '"')
    ('score: {{', '{{a}}')
    """
    raw = "r" in prefix.lower()
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if body.startswith(("{{", "}}"), i):
            out.append(body[i : i + 2])
            i += 2
        elif ch == "\\" and not raw and i + 1 < len(body) and body[i + 1] != "{":
            end = body.find("}", i) + 1 if body.startswith("\\N{", i) else i + 2  # \N{NAME} is one escape
            out.append(body[i : end or i + 2])
            i = end or i + 2
        elif ch == "}":
            out.append("}}")  # never opened
            i += 1
        elif ch == "{":
            close = _field_end(body, i)
            if close is None:
                out.append("{{")  # never closed
                i += 1
                continue
            field = body[i : close + 1]
            if _parses(f"{prefix}{quote}{field}{quote}") is not None:
                field = field.replace("{", "{{").replace("}", "}}")  # prose, not an expression
            out.append(field)
            i = close + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _escape_line(line: str) -> str:
    """``line`` with :func:`_escape_fields` applied to the body of every f-string literal on it.

    >>> _escape_line('msg = f"Reply \\\\boxed{row col}" + "{x}"  # {note}')
    'msg = f"Reply \\\\boxed{{row col}}" + "{x}"  # {note}'
    """
    out: list[str] = []
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "#":
            out.append(line[i:])
            break
        if ch not in "'\"":
            out.append(ch)
            i += 1
            continue
        start = i
        while start > 0 and line[start - 1].isalpha():
            start -= 1
        prefix = line[start:i]
        quote = line[i : i + 3] if line.startswith((ch * 3,), i) else ch
        j = i + len(quote)
        while j < len(line) and not line.startswith(quote, j):
            j += 2 if line[j] == "\\" else 1
        body, closing = line[i + len(quote) : j], line[j : j + len(quote)]
        if prefix.lower() in ("f", "rf", "fr"):
            body = _escape_fields(body, prefix, quote)
        out.append(quote + body + closing)
        i = j + len(closing)
    return "".join(out)


def repair_fstring_braces(code: str) -> str:
    """``code`` with the f-string braces of its failing lines made literal, if the module then parses.

    >>> print(repair_fstring_braces('def hint():\\n    return f"Answer with \\\\\\\\boxed{your guess}"\\n'), end="")
    def hint():
        return f"Answer with \\\\boxed{{your guess}}"
    >>> repair_fstring_braces('x = f"total: {"\\n')
    'x = f"total: {{"\\n'
    >>> repair_fstring_braces("x = (1,\\n")  # not a brace fault: unchanged
    'x = (1,\\n'
    """
    repaired = code
    for _ in range(MAX_FSTRING_ROUNDS):
        error = _parses(repaired)
        if error is None:
            return repaired
        lines = repaired.split("\n")
        if not error.lineno or error.lineno > len(lines):
            break
        fixed = _escape_line(lines[error.lineno - 1])
        if fixed == lines[error.lineno - 1]:
            break
        lines[error.lineno - 1] = fixed
        repaired = "\n".join(lines)
    return repaired if _parses(repaired) is None else code


# -- standard-library imports ----------------------------------------------------------------------------
def _bound_and_read(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(every name the module binds anywhere, every name it reads)."""
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
    return bound, read


def missing_stdlib_names(code: str) -> list[str]:
    """The names of :data:`STDLIB_NAMES` that ``code`` reads but never binds, sorted; [] if it does not parse.

    >>> missing_stdlib_names("def f():\\n    return random.choice(list(Counter('ab')))\\n")
    ['Counter', 'random']
    >>> missing_stdlib_names("import random as random\\nrandom.random()\\ndef g(math):\\n    return math\\n")
    []
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    bound, read = _bound_and_read(tree)
    return sorted(n for n in read - bound if n in STDLIB_NAMES)


def _import_lines(names: Sequence[str]) -> list[str]:
    """``import m`` lines, then one ``from m import a, b`` line per module, each sorted."""
    modules = sorted(STDLIB_NAMES[n] for n in names if STDLIB_NAMES[n].startswith("import "))
    grouped: dict[str, list[str]] = {}
    for name in names:
        if not STDLIB_NAMES[name].startswith("import "):
            grouped.setdefault(STDLIB_NAMES[name], []).append(name)
    return modules + [f"from {m} import {', '.join(sorted(grouped[m]))}" for m in sorted(grouped)]


def _insertion_line(tree: ast.Module) -> int:
    """The 0-based line after the module docstring and any ``from __future__`` imports (0 if none)."""
    line = 0
    for i, node in enumerate(tree.body):
        docstring = (
            i == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        )
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            break
        line = node.end_lineno or node.lineno
    return line


def add_stdlib_imports(code: str) -> str:
    """``code`` with an import for each name :func:`missing_stdlib_names` finds.

    >>> print(add_stdlib_imports("'''A game.'''\\nclass G:\\n    n = math.pi + len(deque())\\n"), end="")
    '''A game.'''
    import math
    from collections import deque
    class G:
        n = math.pi + len(deque())
    """
    names = missing_stdlib_names(code)
    if not names:
        return code
    lines = code.splitlines(keepends=True)
    at = _insertion_line(ast.parse(code))
    if at and lines and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    block = "".join(f"{line}\n" for line in _import_lines(names))
    return "".join(lines[:at]) + block + "".join(lines[at:])


# The one registry of repairs, in the order they run (the imports need a module that parses); keys are
# ValidationConfig.code_repairs' choices.
REPAIRS: dict[str, Callable[[str], str]] = {
    "fstring_braces": repair_fstring_braces,
    "stdlib_imports": add_stdlib_imports,
}


def repair_code(code: str, repairs: Sequence[str] = tuple(REPAIRS)) -> Repaired:
    """Apply the named repairs (in :data:`REPAIRS` order); ``applied`` lists those that changed the code.

    >>> r = repair_code('import re\\nx = f"use \\\\\\\\boxed{a b}" + str(random.random())\\n')
    >>> r.applied
    ('fstring_braces', 'stdlib_imports')
    >>> print(r.code, end="")
    import random
    import re
    x = f"use \\\\boxed{{a b}}" + str(random.random())
    >>> repair_code("x = 1\\n").applied, repair_code("x = 1\\n").code
    ((), 'x = 1\\n')
    """
    unknown = [name for name in repairs if name not in REPAIRS]
    if unknown:
        raise ValueError(f"unknown code repair(s) {unknown}; repairs: {', '.join(REPAIRS)}")
    applied: list[str] = []
    current = code
    for name, repair in REPAIRS.items():
        if name in repairs:
            fixed = repair(current)
            if fixed != current:
                applied.append(name)
                current = fixed
    return Repaired(code=current, applied=tuple(applied), unrepaired_env_id=env_id_for(code))
