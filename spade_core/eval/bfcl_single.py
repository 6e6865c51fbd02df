"""BFCL's single-turn checks, as its ``eval_checker.eval_runner`` runs them, with BFCL's error types.

Every single-turn category is one of two kinds (BFCL's ``_evaluate_single_ast_entry`` and
``_evaluate_single_relevance_entry``):

- **AST** (simple, multiple, parallel, parallel_multiple, java, javascript and their ``live_`` forms): the
  reply is decoded for the category's language (:func:`~spade_core.eval.bfcl_calls.parse_calls_in`); a reply
  that does not decode fails with ``ast_decoder:decoder_failed``, one that decodes to something other than a
  list of calls with ``ast_decoder:decoder_wrong_output_format``; otherwise BFCL's ``ast_checker`` compares
  the calls with the possible answers and its own ``error_type`` names the first mismatch
  (``simple_function_checker:wrong_func_name``, ``type_error:simple``, ...). The checker gets the entry's
  function docs as the dataset has them (BFCL: no language hints), while the prompt shows the hinted ones.
- **Relevance** (irrelevance, live_irrelevance: no function fits; live_relevance: some function fits, no
  answer is given): the reply is decoded as Python; it "contains a call" when it decodes to a non-empty call
  list. Irrelevance passes without a call (else ``irrelevance_error:decoder_success``), relevance with one
  (else ``relevance_error:decoder_failed``).

A checker that raises on an odd value fails the item with ``ast_checker:exception``, never the evaluation.

:func:`gold_calls` writes a reply that carries an item's first listed possible answer, in the category's
language, leaving out an optional parameter that may be omitted. Some entries no reply passes, the gold one
included (bfcl-eval 2026.3.23): 13 of the 100 ``simple_java`` ones, because BFCL's Java decoder drops a
``HashMap``'s initialiser body and keeps an array's quoted elements quoted, or the answer gives a string for
an array parameter; and 5 live ones whose answer omits a required parameter or names one the docs lack.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from spade_core.eval.bfcl_calls import Call, CallSyntaxError, bfcl_checkers, parse_calls_in

# single-turn categories by BFCL's name: whether a call is expected (relevance) or checked (AST)
RELEVANCE: dict[str, bool] = {"irrelevance": False, "live_irrelevance": False, "live_relevance": True}
NO_CALL_REPLY = "None of the given functions can be used for this request."
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Verdict:
    """The check of one response: passed or not, and BFCL's ``error_type`` (with its message) when not."""

    passed: bool
    error_type: str | None = None
    error: str = ""

    @property
    def score(self) -> float:
        return 1.0 if self.passed else 0.0


PASSED = Verdict(True)


def language_of(bfcl_category: str) -> str:
    """The language BFCL decodes a category's replies in (its ``is_java`` / ``is_js``).

    >>> language_of("simple_javascript"), language_of("simple_java"), language_of("live_multiple")
    ('javascript', 'java', 'python')
    """
    if "javascript" in bfcl_category:
        return "javascript"
    return "java" if "java" in bfcl_category else "python"


def contains_call(text: str) -> bool:
    """BFCL's relevance test: the reply decodes (as Python) to a non-empty list of calls."""
    try:
        decoded = parse_calls_in(text, "python")
    except (CallSyntaxError, RecursionError):
        return False
    return not bfcl_checkers().is_empty_output(decoded)


def relevance_verdict(text: str, expects_call: bool) -> Verdict:
    """Irrelevance (no call expected) or relevance (a call expected), BFCL's error types on failure.

    >>> relevance_verdict("I cannot help with that.", expects_call=False).passed
    True
    >>> relevance_verdict("[get_time(zone='UTC')]", expects_call=False).error_type
    'irrelevance_error:decoder_success'
    """
    if contains_call(text) == expects_call:
        return PASSED
    if expects_call:
        return Verdict(False, "relevance_error:decoder_failed", "no function call decoded where one was expected")
    return Verdict(False, "irrelevance_error:decoder_success", "a function call decoded where none was expected")


def ast_verdict(text: str, bfcl_category: str, functions: list[dict[str, Any]], answer: Any) -> Verdict:
    """Decode ``text`` for the category's language and run BFCL's ``ast_checker`` against ``answer``."""
    language = language_of(bfcl_category)
    checkers = bfcl_checkers()
    try:
        decoded = parse_calls_in(text, language)
    except (CallSyntaxError, RecursionError) as exc:
        return Verdict(False, "ast_decoder:decoder_failed", str(exc)[:300])
    if not checkers.is_call_list(decoded):
        return Verdict(False, "ast_decoder:decoder_wrong_output_format", f"decoded to {str(decoded)[:200]}")
    try:
        result = checkers.ast_checker(functions, decoded, answer, checkers.Language(language), bfcl_category, "spade")
    except Exception as exc:  # the checker tripping over an odd value is a failed item, not a crash
        return Verdict(False, "ast_checker:exception", f"{type(exc).__name__}: {str(exc)[:300]}")
    if result.get("valid"):
        return PASSED
    return Verdict(False, str(result.get("error_type") or "ast_checker:invalid"), str(result.get("error", ""))[:500])


def single_turn_verdict(text: str, bfcl_category: str, functions: list[dict[str, Any]], answer: Any) -> Verdict:
    """The check BFCL runs for a single-turn category (relevance or AST)."""
    if bfcl_category in RELEVANCE:
        return relevance_verdict(text, RELEVANCE[bfcl_category])
    return ast_verdict(text, bfcl_category, functions, answer)


# -- oracle replies --------------------------------------------------------------------------------------


def first_answer(options: Any) -> Any:
    """The first listed possible answer of a parameter ("" = may be omitted), its dicts resolved too.

    >>> first_answer(["", {"unit": ["", "celsius"], "days": [3]}])
    {'unit': 'celsius', 'days': 3}
    """
    if not isinstance(options, list):  # a few nested answers give the value itself
        return _resolve(options)
    chosen = next((o for o in options if o != ""), "")
    return _resolve(chosen)


def _resolve(value: Any) -> Any:
    if isinstance(value, dict):  # a dict answer lists the possible answers of each key
        return {k: first_answer(v) for k, v in value.items() if first_answer(v) != ""}
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


def _java_element(value: Any, element_type: str | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{value}L" if element_type == "long" else str(value)
    text = str(value)  # BFCL's Java decoder keeps a quoted element's quotes: bare identifiers compare equal
    return text if _IDENTIFIER.fullmatch(text) else json.dumps(text)


_JAVA_ARRAY_TYPE = {"String": "String", "integer": "int", "long": "long", "char": "char"}


def java_source(value: Any, schema: dict[str, Any]) -> str:
    """A Java argument that BFCL's decoder and type converter turn back into ``value`` (see module doc).

    >>> java_source(["a", "b c"], {"type": "ArrayList"}), java_source(7, {"type": "long"})
    ('new ArrayList<>(Arrays.asList(a, "b c"))', '7L')
    """
    kind, element = schema.get("type"), schema.get("items", {}).get("type")
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "long":
        return f"{value}L"
    if kind == "float":
        return f"{value}f"
    if kind in ("Array", "ArrayList") and isinstance(value, list):
        inner = ", ".join(_java_element(v, element) for v in value)
        if kind == "ArrayList":
            return f"new ArrayList<>(Arrays.asList({inner}))"
        return f"new {_JAVA_ARRAY_TYPE.get(element or '', 'Object')}[]{{{inner}}}"
    if kind == "HashMap" and isinstance(value, dict):
        puts = " ".join(f"put({json.dumps(str(k))}, {_java_element(v, None)});" for k, v in value.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
    if isinstance(value, int | float) and kind not in ("String", "any"):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False)


def javascript_source(value: Any, schema: dict[str, Any]) -> str:
    """A JavaScript argument that BFCL's decoder and type converter turn back into ``value``.

    >>> javascript_source({"a": 1}, {"type": "dict"}), javascript_source(True, {"type": "Boolean"})
    ('{a: 1}', 'true')
    """
    if schema.get("type") == "dict" and isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def gold_calls(bfcl_category: str, functions: list[dict[str, Any]], answer: Any) -> str:
    """A reply carrying ``answer`` (BFCL's possible answers) in the category's language, or, for a relevance
    category, a reply that calls (relevance) or declines (irrelevance)."""
    if bfcl_category in RELEVANCE:
        return f"[{functions[0]['name']}()]" if RELEVANCE[bfcl_category] else NO_CALL_REPLY
    language = language_of(bfcl_category)
    calls = []
    for call in answer:
        ((name, params),) = call.items()
        doc: dict[str, Any] = next((f["parameters"] for f in functions if f["name"] == name), {})
        required = set(doc.get("required", []))
        # an optional parameter that may be omitted is (a few answers list one the function docs lack)
        values = {
            k: first_answer(v)
            for k, v in params.items()
            if first_answer(v) != "" and (k in required or not (isinstance(v, list) and "" in v))
        }
        if language == "python":
            calls.append(Call(name, values).source())
            continue
        schema = doc.get("properties", {})
        write = java_source if language == "java" else javascript_source
        calls.append(f"{name}({', '.join(f'{k}={write(v, schema.get(k, {}))}' for k, v in values.items())})")
    return f"[{', '.join(calls)}]"
