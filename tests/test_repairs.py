"""Code repairs before validation, as the authors: f-string braces that hold prose or are never closed, and
standard-library names used without their import. The two faults that failed a 0.5B coder's designs (a
missing ``import random``; a ``{`` never closed) go through the real validator in the real jail, and the
design stage records on each design row which repairs it needed."""

from __future__ import annotations

import doctest
from pathlib import Path
from textwrap import dedent

import pandas as pd
import pytest
from samples import as_stage

from spade_core.config import ValidationConfig, load_config
from spade_core.designer import repairs
from spade_core.designer.repairs import (
    STDLIB_NAMES,
    add_stdlib_imports,
    missing_stdlib_names,
    repair_code,
    repair_fstring_braces,
)
from spade_core.envs.contract import env_id_for
from spade_core.envs.validate import validate_code
from spade_core.llm.base import Completion
from spade_core.pipeline.context import GenerationContext
from spade_core.store.artifacts import Store

FAST = ValidationConfig(call_timeout_s=3.0, max_turns=8)

# A design that passes every check of the full validator once it imports random (the 0.5B model's first fault).
GUESS = dedent('''
    """Guess the three-digit code."""
    import re


    class CodeGuessEnv:
        def __init__(self, max_turns=12, **kwargs):
            self.max_turns = max_turns
            self.reset()

        def reset(self, seed=None):
            self.turns = 0
            self.secret = random.Random(seed).randint(100, 999)
            return PROMPT, {}

        def step(self, action):
            self.turns += 1
            m = re.search(r"\\\\boxed\\{(.*?)\\}", action)
            if m and m.group(1) == str(self.secret):
                return "correct", 1.0, True, False, {}
            return "wrong", 0.0, False, self.turns >= self.max_turns, {}

        def solution(self):
            return "\\\\boxed{%d}" % self.secret
''')
MISSING_IMPORT = GUESS.replace("PROMPT", '"Guess the code (100-999), answer as \\\\boxed{code}."')
# The second fault: an f-string whose brace is never closed.
UNCLOSED_BRACE = ("import random\n" + GUESS).replace(
    "PROMPT", 'f"Guess the code in {self.max_turns} turns: \\\\boxed{"'
)


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(repairs)
    assert result.failed == 0 and result.attempted >= 8


# -- f-string braces: the authors' rule, and the lone brace they leave ----------------------------------------
@pytest.mark.parametrize(
    ("line", "repaired"),
    [
        # authors (spade/core/utils/parsing.py): a field that is no expression becomes literal text
        ('x = f"Answer as \\\\boxed{your answer}"', 'x = f"Answer as \\\\boxed{{your answer}}"'),
        ('x = f"{n} left, reply {row col}"', 'x = f"{n} left, reply {{row col}}"'),  # valid fields stay
        ('x = f"empty {} field"', 'x = f"empty {{}} field"'),
        # beyond the authors: a lone brace, never closed or never opened, becomes literal
        ('x = f"Guess: \\\\boxed{"', 'x = f"Guess: \\\\boxed{{"'),
        ('x = f"{{a}"', 'x = f"{{a}}"'),
        # other string kinds on the failing line are left alone
        ('x = "{a b}" + f"{a b}"', 'x = "{a b}" + f"{{a b}}"'),
    ],
)
def test_fstring_braces_that_hold_no_expression_become_literal(line: str, repaired: str) -> None:
    assert repair_fstring_braces(line + "\n") == repaired + "\n"


def test_only_the_failing_lines_change() -> None:
    code = 'a = f"{x}"\nb = f"reply {like this}"\nc = "{not an f-string}"\nd = f"{y} and {"\n'
    assert repair_fstring_braces(code) == 'a = f"{x}"\nb = f"reply {{like this}}"\nc = "{not an f-string}"\n' + (
        'd = f"{y} and {{"\n'
    )


def test_code_that_still_fails_to_parse_is_returned_unchanged() -> None:
    broken = 'x = f"{a b}"\ndef f(:\n'
    assert repair_fstring_braces(broken) == broken
    assert repair_code(broken).applied == ()


# -- standard-library imports: the authors' names, never overriding a binding ---------------------------------
@pytest.mark.parametrize("name", ["random", "re", "math", "itertools", "json", "collections", "string"])
def test_a_module_used_without_import_is_imported(name: str) -> None:
    code = f"def f():\n    return {name}\n"
    assert add_stdlib_imports(code) == f"import {name}\n{code}"


def test_names_the_authors_inject_get_their_from_import() -> None:
    code = "def f(xs: List[int]) -> Optional[int]:\n    return reduce(max, deque(xs))\n"
    assert add_stdlib_imports(code) == (
        "from collections import deque\nfrom functools import reduce\nfrom typing import List, Optional\n" + code
    )


@pytest.mark.parametrize(
    "code",
    [
        "import random\nrandom.random()\n",
        "from random import random\nrandom()\n",
        "def f(math):\n    return math.pi\n",
        "[random for random in range(3)]\n",
        "re = None\nprint(re)\n",
        "np.zeros(3)\n",  # numpy is not in the jail's interpreter: never imported
    ],
)
def test_a_bound_name_or_one_outside_the_table_gets_no_import(code: str) -> None:
    assert missing_stdlib_names(code) == [] and add_stdlib_imports(code) == code


def test_imports_go_after_the_docstring_and_future_imports() -> None:
    code = '"""Doc."""\nfrom __future__ import annotations\n\nx = math.pi\n'
    assert add_stdlib_imports(code) == '"""Doc."""\nfrom __future__ import annotations\nimport math\n\nx = math.pi\n'


def test_the_table_is_the_authors_without_numpy() -> None:
    assert {"random", "re", "math", "deque", "Counter", "combinations", "deepcopy", "Tuple"} <= set(STDLIB_NAMES)
    assert "np" not in STDLIB_NAMES and "numpy" not in STDLIB_NAMES


def test_repair_code_records_what_changed_and_the_digest_before() -> None:
    fixed = repair_code(MISSING_IMPORT)
    assert fixed.applied == ("stdlib_imports",)
    assert fixed.unrepaired_env_id == env_id_for(MISSING_IMPORT) != env_id_for(fixed.code)
    assert repair_code(MISSING_IMPORT, []).code == MISSING_IMPORT  # repairs off
    with pytest.raises(ValueError, match="unknown code repair"):
        repair_code("x = 1\n", ["imports"])


# -- the two faults through the real validator, in the jail (our 8 checks and the authors' smoke test) ----------
MODES = pytest.mark.parametrize("mode", ["full", "smoke"])


@MODES
@pytest.mark.usefixtures("jail_processes_checked")
def test_a_design_missing_import_random_passes_only_once_repaired(mode: str) -> None:
    cfg = FAST.model_copy(update={"mode": mode})
    before = validate_code(MISSING_IMPORT, cfg)
    assert not before.ok and "NameError in load: \"name 'random' is not defined\"" in (before.message or "")
    fixed = repair_code(MISSING_IMPORT)
    assert fixed.code.startswith('\n"""Guess the three-digit code."""\nimport random\nimport re\n')
    after = validate_code(fixed.code, cfg)
    assert after.ok, after.message


@MODES
@pytest.mark.usefixtures("jail_processes_checked")
def test_a_design_with_an_unclosed_fstring_brace_passes_only_once_repaired(mode: str) -> None:
    cfg = FAST.model_copy(update={"mode": mode})
    before = validate_code(UNCLOSED_BRACE, cfg)
    assert (before.ok, before.error_type) == (False, "syntax_error"), before.message
    fixed = repair_code(UNCLOSED_BRACE)
    assert fixed.applied == ("fstring_braces",)
    assert 'f"Guess the code in {self.max_turns} turns: \\\\boxed{{"' in fixed.code
    after = validate_code(fixed.code, cfg)
    assert after.ok, after.message


# -- the design stage records the repairs on each design row ---------------------------------------------------
class ScriptedDesigner:
    """Replies with the given designs in turn, as a model would (one reply per request)."""

    model_ref = "scripted:designer"
    supports_token_prompts = False

    def __init__(self, codes: list[str]) -> None:
        self.codes = codes

    def generate(self, requests, params):  # type: ignore[no-untyped-def]
        return [Completion(text=f"```python\n{c}```", token_ids=[1], logprobs=[-0.1]) for c in self.codes]

    def close(self) -> None:
        pass


@pytest.mark.usefixtures("jail_processes_checked")
def test_the_store_shows_which_designs_passed_only_thanks_to_a_repair(tmp_path: Path) -> None:
    from spade_core.pipeline.stages.design import design
    from spade_core.pipeline.stages.validate import validate_shard
    from spade_core.store.verdicts import final_designs

    overrides = ["designer.mode=write", "designer.documents_per_generation=3", "designer.max_attempts=1"]
    overrides += ["corpus.enabled=false"]
    overrides += ["validation.call_timeout_s=3.0", "validation.max_turns=8", f"store.root={tmp_path}"]
    cfg = load_config("tiny", overrides=overrides)
    ctx = GenerationContext(cfg, Store(str(tmp_path)), "rep", 1)
    codes = [MISSING_IMPORT, UNCLOSED_BRACE, "import random\n" + MISSING_IMPORT]
    as_stage(ctx, "design", lambda run: design(run, pd.DataFrame(), ScriptedDesigner(codes), run.previous_memory()))
    as_stage(ctx, "validate", lambda run: validate_shard(run, run.read_shard("designs", "design", 0), 0, None))
    final = final_designs(ctx.store, "rep", 1).set_index("completion")
    rows = [final.loc[f"```python\n{c}```"] for c in codes]
    assert [list(r.repairs) for r in rows] == [["stdlib_imports"], ["fstring_braces"], []]
    assert [bool(r.ok) for r in rows] == [True, True, True]
    assert [r.unrepaired_env_id for r in rows] == [env_id_for(c) for c in codes]
    assert rows[0].env_id == env_id_for(rows[0].code) != rows[0].unrepaired_env_id
    assert rows[2].env_id == rows[2].unrepaired_env_id  # nothing repaired: the same digest
    thanks_to_repairs = final[final["ok"] & (final["repairs"].map(len) > 0)]
    assert len(thanks_to_repairs) == 2
