"""BFCL (Berkeley Function-Calling Leaderboard, ``bfcl-eval`` data, v4): single calls ("simple", Python),
"parallel" calls, "irrelevance" (no function fits: the right answer is no call) and the multi-turn sets,
each checked with BFCL's own checker. Suite ``bfcl`` runs the first three and the multi-turn base set;
suite ``bfcl_multi_turn`` the four multi-turn categories the paper reports: base, miss_func (functions held
out until a later turn reveals them, as BFCL's inference loop does), miss_param (a parameter the user has
not given: the agent should ask for it) and long_context (BFCL's executor fills the environment with long
content). The prompt is BFCL's default prompting-model system prompt (``ret_fmt=python``, function docs as
JSON; compact JSON here, which only drops whitespace).

Single-turn categories: the reply is decoded by :mod:`spade_core.eval.bfcl_calls` (``ast``, literals only)
and BFCL's ``ast_checker`` compares the calls with the possible answers on the host. Nothing runs.

Multi-turn (``multi_turn_base``): BFCL's inference loop. Each user turn, the model replies; a reply that
decodes to calls is executed and the results come back as a user message (BFCL's
``format_execution_results_prompting``, each result cut to 2,000 characters); a reply without calls ends the
turn; more than ``max_steps_per_turn`` call steps in one turn force-terminates the episode, which fails, as
in BFCL. The stored response is the JSON ``{"turns": [[reply, ...], ...]}``; scoring decodes it and runs
BFCL's ``multi_turn_checker`` (state and execution-result checks against the ground truth).

Is executing the model's calls code execution of model output? The calls are decoded here into a name and
literal keyword values, never evaluated; but BFCL's executor turns them back into source strings and
``eval``\\ s them against its stateful classes (file system, trading bot, ...), and those classes are not
safe to run on the host with arbitrary values: ``MathAPI.power(base=9, exponent=10**9)`` or
``square_root(precision=10**9)`` never return, and ``logarithm`` sets ``mpmath``'s precision process-wide.
So both the executor and the checker run INSIDE the jail (:mod:`spade_core.eval.bfcl_driver` with
``bfcl_eval`` and ``mpmath`` bound read-only): time, memory and no network or host files, like HumanEval.
The host keeps only the literal decoding and the pure AST comparison.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib.util
import inspect
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandbox.oneshot import Bind, run_program, run_programs
from sandbox.policy import JailLimits
from spade_core.eval.base import EvalItem, Message, Suite
from spade_core.eval.bfcl_calls import Call, bfcl_checkers, try_parse_calls

CATEGORIES: dict[str, str] = {
    "simple": "BFCL_v4_simple_python.json",
    "parallel": "BFCL_v4_parallel.json",
    "irrelevance": "BFCL_v4_irrelevance.json",
    "multi_turn_base": "BFCL_v4_multi_turn_base.json",
    "multi_turn_miss_func": "BFCL_v4_multi_turn_miss_func.json",
    "multi_turn_miss_param": "BFCL_v4_multi_turn_miss_param.json",
    "multi_turn_long_context": "BFCL_v4_multi_turn_long_context.json",
}
DEFAULT_CATEGORIES = ("simple", "parallel", "irrelevance", "multi_turn_base")  # suite "bfcl"
# suite "bfcl_multi_turn": the multi-turn categories the paper reports (their gem_eval_bfcl_only.yaml)
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."  # BFCL's language hint

MAX_RESULT_CHARS = 2000
DRIVER = Path(__file__).with_name("bfcl_driver.py")
BATCH_LIMITS = JailLimits(memory_mb=1024, max_pids=8, time_limit_s=60, cpu_seconds=60, tmpfs_mb=8)
JOB_LIMITS = JailLimits(memory_mb=1024, max_pids=8, time_limit_s=15, cpu_seconds=15, tmpfs_mb=8)


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"{name} is not installed (pip install --no-deps bfcl-eval)")
    return str(Path(spec.origin).parent)


@functools.cache
def data_dir() -> Path:
    return Path(_package_dir("bfcl_eval")) / "data"


@functools.cache
def _jsonl(relative: str) -> tuple[dict[str, Any], ...]:
    with open(data_dir() / relative) as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


@functools.cache
def _answers(category: str) -> dict[str, Any]:
    path = Path("possible_answer") / CATEGORIES[category]
    return {} if not (data_dir() / path).exists() else {e["id"]: e["ground_truth"] for e in _jsonl(str(path))}


def system_prompt(functions: list[dict[str, Any]]) -> str:
    """BFCL's default system prompt for prompting models (``DEFAULT_SYSTEM_PROMPT_FORMAT``)."""
    from bfcl_eval.constants import default_prompts as p

    style = p.PROMPT_STYLE_TEMPLATES["classic"]
    call_format = style["tool_call_no_tag"].format(
        output_format=p.OUTPUT_FORMAT_MAPPING["python"], param_types=p.PARAM_TYPE_MAPPING["python"]
    )
    return p.PROMPT_TEMPLATE_MAPPING["plaintext"].format(
        persona=style["persona"],
        task=style["task"],
        tool_call_format=call_format,
        multiturn_behavior=style["multiturn_behavior"],
        available_tools=style["available_tools"].format(format="json", functions=json.dumps(functions)),
    )


def _multi_turn_functions(involved: list[str]) -> list[dict[str, Any]]:
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    return [f for cls in involved for f in _jsonl(f"multi_turn_func_doc/{MULTI_TURN_FUNC_DOC_FILE_MAPPING[cls]}")]


def _pick(options: list[Any]) -> Any:
    """The first listed possible answer of a parameter ("" = may be omitted), its dicts resolved too."""
    chosen = next((o for o in options if o != ""), "")
    return _resolve(chosen)


def _resolve(value: Any) -> Any:
    if isinstance(value, dict):  # a dict answer lists the possible answers of each key
        return {k: _pick(v) for k, v in value.items() if _pick(v) != ""}
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    return value


class BFCLSuite(Suite):
    """BFCL categories in a fixed order; ``limit`` items are split evenly over them."""

    name = "bfcl"
    max_new_tokens = 256
    default_categories: tuple[str, ...] = DEFAULT_CATEGORIES

    def __init__(self, categories: Sequence[str] | None = None, max_steps_per_turn: int = 10) -> None:
        categories = self.default_categories if categories is None else categories
        unknown = [c for c in categories if c not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown BFCL categories {unknown}; allowed: {', '.join(CATEGORIES)}")
        self.categories = tuple(categories)
        self.max_steps_per_turn = max_steps_per_turn

    # -- items ------------------------------------------------------------------------------------------
    def items(self, limit: int, seed: int) -> list[EvalItem]:
        out: list[EvalItem] = []
        for i, category in enumerate(self.categories):
            count = limit // len(self.categories) + (1 if i < limit % len(self.categories) else 0)
            entries = _jsonl(CATEGORIES[category])
            rng = random.Random(f"spade-eval/bfcl/{seed}/{category}")
            for index in sorted(rng.sample(range(len(entries)), min(count, len(entries)))):
                out.append(self._item(category, entries[index]))
        return out

    def item(self, item_id: str) -> EvalItem:
        prefix, category, number = ([*item_id.split("/"), "", ""])[:3]
        if prefix != "bfcl" or category not in CATEGORIES:
            raise KeyError(f"not a BFCL item id: {item_id!r}")
        for entry in _jsonl(CATEGORIES[category]):
            if entry["id"].rsplit("_", 1)[1] == number:
                return self._item(category, entry)
        raise KeyError(f"no BFCL item {item_id!r}")

    def _item(self, category: str, entry: dict[str, Any]) -> EvalItem:
        number = entry["id"].rsplit("_", 1)[1]
        multi_turn = category.startswith("multi_turn")
        functions = copy.deepcopy(_multi_turn_functions(entry["involved_classes"]) if multi_turn else entry["function"])
        for function in functions:
            function["description"] = function.get("description", "") + PYTHON_HINT
        turns: list[list[Message]] = [list(turn) for turn in entry["question"]]
        held_out = entry.get("missed_function") or {}
        if held_out:  # miss_func: BFCL's populate_test_cases_with_predefined_functions and inference loop
            from bfcl_eval.constants.default_prompts import (
                DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING as reveal,
            )

            missing = {name for names in held_out.values() for name in names}
            revealed = {int(t): [f for f in functions if f["name"] in names] for t, names in held_out.items()}
            functions = [f for f in functions if f["name"] not in missing]
            for turn, docs in revealed.items():
                turns[turn] = [{"role": "user", "content": reveal.format(functions=docs)}]
        data: dict[str, Any] = {"category": category, "bfcl_id": entry["id"], "functions": functions}
        if multi_turn:
            data["entry"] = {k: entry[k] for k in ("id", "initial_config", "involved_classes")}
            data["turns"] = turns
        return EvalItem(
            suite=self.name,
            item_id=f"bfcl/{category}/{number}",
            messages=[{"role": "system", "content": system_prompt(functions)}, *turns[0]],
            answer=_answers(category).get(entry["id"]),
            data=data,
        )

    # -- multi-turn dialogue ------------------------------------------------------------------------------
    def new_state(self, item: EvalItem) -> dict[str, Any]:
        return {"turn": 0, "steps": 0, "turns": [[]], "executed": [], "force_terminated": False}

    def follow_up_many(
        self, items: Sequence[EvalItem], replies: Sequence[list[str]], states: Sequence[dict[str, Any]]
    ) -> list[list[Message] | None]:
        out: list[list[Message] | None] = [None] * len(items)
        jobs: list[tuple[int, list[str]]] = []
        for i, (item, reply, state) in enumerate(zip(items, replies, states, strict=True)):
            if "turns" not in item.data:
                continue  # single-turn category: one reply
            text = reply[-1] if reply else ""
            state["turns"][state["turn"]].append(text)
            calls = try_parse_calls(text)
            if calls:
                state["steps"] += 1
                if state["steps"] > self.max_steps_per_turn:
                    state["force_terminated"] = True
                    continue
                jobs.append((i, [c.source() for c in calls]))
                continue
            state["turn"] += 1
            state["steps"] = 0
            if state["turn"] < len(item.data["turns"]):
                state["turns"].append([])
                out[i] = list(item.data["turns"][state["turn"]])
        requests = [
            {"kind": "execute", "entry": items[i].data["entry"], "steps": [*states[i]["executed"], step]}
            for i, step in jobs
        ]
        for (i, step), results in zip(jobs, self._run_jobs(requests), strict=True):
            states[i]["executed"].append(step)
            if not isinstance(results, list):
                results = [f"Error during execution: {results.get('error', 'executor failed')}"] * len(step)
            tool = [
                {"role": "tool", "name": call, "content": str(result)[:MAX_RESULT_CHARS]}
                for call, result in zip(step, results, strict=False)
            ]
            out[i] = [{"role": "user", "content": repr(tool)}]
        return out

    def final_response(self, item: EvalItem, replies: list[str], state: dict[str, Any]) -> str:
        if "turns" not in item.data:
            return replies[-1] if replies else ""
        return json.dumps({"turns": state["turns"], "force_terminated": state["force_terminated"]})

    def _run_jobs(self, jobs: list[dict[str, Any]]) -> list[Any]:
        """Run driver jobs in one jail; if that jail fails (a job hung or blew up), each job alone."""
        if not jobs:
            return []
        binds = (Bind(_package_dir("bfcl_eval"), "/pkgs/bfcl_eval"), Bind(_package_dir("mpmath"), "/pkgs/mpmath"))
        source = DRIVER.read_text()
        batch = run_program(source, input={"jobs": jobs}, limits=BATCH_LIMITS, binds=binds)
        if batch.ok and isinstance(batch.output, list) and len(batch.output) == len(jobs):
            return batch.output
        single = run_programs(
            [source] * len(jobs), inputs=[{"jobs": [j]} for j in jobs], limits=JOB_LIMITS, binds=binds
        )
        return [
            r.output[0]
            if r.ok and isinstance(r.output, list) and r.output
            else {"error": f"{r.error_type}: {r.message}"}
            for r in single
        ]

    # -- scoring ------------------------------------------------------------------------------------------
    def score_many(self, items: Sequence[EvalItem], responses: Sequence[str]) -> list[tuple[float, bool]]:
        out: list[tuple[float, bool]] = [(0.0, False)] * len(items)
        checks: list[tuple[int, dict[str, Any]]] = []
        for i, (item, response) in enumerate(zip(items, responses, strict=True)):
            if "turns" in item.data:
                job = self._check_job(item, response or "")
                if job is not None:
                    checks.append((i, job))
            else:
                passed = self._ast_passed(item, response or "")
                out[i] = (1.0 if passed else 0.0, passed)
        for (i, _), result in zip(checks, self._run_jobs([job for _, job in checks]), strict=True):
            passed = isinstance(result, dict) and result.get("valid") is True
            out[i] = (1.0 if passed else 0.0, passed)
        return out

    def score(self, item: EvalItem, response: str) -> tuple[float, bool]:
        return self.score_many([item], [response])[0]

    def _ast_passed(self, item: EvalItem, response: str) -> bool:
        calls = try_parse_calls(response)
        category = item.data["category"]
        if category == "irrelevance":
            return not calls  # undecodable or empty: the model made no call
        if not calls:
            return False
        checkers = bfcl_checkers()
        try:
            result = checkers.ast_checker(
                item.data["functions"],
                [c.as_bfcl() for c in calls],
                item.answer,
                checkers.Language.PYTHON,
                category,
                "spade",
            )
        except Exception:  # the checker tripping over an odd value is a failed item
            return False
        return bool(result.get("valid"))

    def _check_job(self, item: EvalItem, response: str) -> dict[str, Any] | None:
        """The driver's check job for a multi-turn response, or None when it fails before checking."""
        try:
            recorded = json.loads(response)
            turns = recorded["turns"]
        except (ValueError, TypeError, KeyError):
            return None
        ground_truth = item.answer or []
        if recorded.get("force_terminated") or not isinstance(turns, list) or len(turns) != len(ground_truth):
            return None  # BFCL: force-terminated or incomplete
        decoded = []
        for turn in turns:
            steps = [try_parse_calls(text) if isinstance(text, str) else None for text in turn]
            decoded.append([[c.source() for c in calls] for calls in steps if calls])
        return {"kind": "check", "entry": item.data["entry"], "decoded": decoded, "ground_truth": ground_truth}

    # -- oracle ------------------------------------------------------------------------------------------
    def gold_response(self, item: EvalItem) -> str:
        category = item.data["category"]
        if category == "irrelevance":
            return "None of the given functions can be used for this request."
        if "turns" in item.data:
            turns = [[self._keyword_call(item, source) for source in turn] for turn in item.answer]
            steps = [[f"[{', '.join(c.source() for c in calls)}]"] if calls else [] for calls in turns]
            return json.dumps({"turns": steps})
        calls = []
        for answer in item.answer:
            ((name, params),) = answer.items()
            calls.append(Call(name, {k: _pick(v) for k, v in params.items() if _pick(v) != ""}))
        return f"[{', '.join(c.source() for c in calls)}]"

    @staticmethod
    def _keyword_call(item: EvalItem, source: str) -> Call:
        """A ground-truth call (BFCL data, trusted) with positional arguments named from the method signature."""

        from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

        node = ast.parse(source, mode="eval").body
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        if node.args:
            for cls in item.data["entry"]["involved_classes"]:
                module = importlib.import_module(CLASS_FILE_PATH_MAPPING[cls])
                method = getattr(getattr(module, cls), node.func.id, None)
                if method is not None:
                    names = [p for p in inspect.signature(method).parameters if p != "self"]
                    kwargs.update({names[j]: ast.literal_eval(a) for j, a in enumerate(node.args)})
                    break
        return Call(node.func.id, kwargs)


class BFCLMultiTurnSuite(BFCLSuite):
    """The four BFCL multi-turn categories the paper reports (their ``gem_eval_bfcl_only.yaml:11-28``)."""

    name = "bfcl_multi_turn"
    default_categories = MULTI_TURN_CATEGORIES
