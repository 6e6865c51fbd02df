"""BFCL (Berkeley Function-Calling Leaderboard, ``bfcl-eval`` data, v4): its 17 scoring categories of single
calls, multi-turn dialogues and relevance, each checked with BFCL's own checker. The categories, by the names
the authors' ``gem_eval_bfcl_only.yaml`` uses (BFCL's file in :data:`~spade_core.eval.bfcl_data.CATEGORIES`):

- non-live (BFCL's expert-written entries): ``simple`` (Python), ``multiple`` (one call, several functions
  offered), ``parallel`` (several calls of one function), ``parallel_multiple``, ``java``, ``javascript``
  (one call in that language's syntax) and ``irrelevance`` (no function fits: the right answer is no call);
- live (user-contributed entries): ``live_simple``, ``live_multiple``, ``live_parallel``,
  ``live_parallel_multiple``, ``live_relevance`` (some function fits: any call passes, BFCL gives no
  answer) and ``live_irrelevance``;
- multi-turn: ``multi_turn_base``, ``multi_turn_miss_func`` (functions held out until a later turn reveals
  them, as BFCL's inference loop does), ``multi_turn_miss_param`` (a parameter the user has not given: the
  agent should ask for it) and ``multi_turn_long_context`` (BFCL's executor fills the environment with long
  content).

Suites: ``bfcl`` runs simple, parallel, irrelevance and the multi-turn base set; ``bfcl_multi_turn`` the four
multi-turn categories; ``bfcl_full`` all 17 as the paper evaluates tool use (:class:`BFCLFullSuite`: one
greedy sample per entry, every entry of every category when ``limit`` is
:data:`~spade_core.eval.bfcl_data.FULL_LIMIT` or more). BFCL's group accuracies over their rows (non-live,
live, multi-turn, irrelevance): :func:`spade_core.eval.bfcl_scores.summary`.

bfcl-eval 2026.3.23 ships six more categories, none of which the paper runs and none of which is run here
(:data:`~spade_core.eval.bfcl_data.NOT_RUN` says why, one line each): the five agentic ones
(``web_search_base`` and ``web_search_no_snippet`` search and fetch pages over the network through SerpAPI,
with an API key;
``memory_kv``, ``memory_vector``, ``memory_rec_sum`` first replay prerequisite conversations into a memory
backend, ``memory_vector``'s being a sentence-transformers model loaded by its hub name and a faiss index)
and ``format_sensitivity``, which BFCL itself does not score.

The prompt is BFCL's default prompting-model system prompt (``ret_fmt=python``, function docs as JSON;
compact JSON here, which only drops whitespace), with BFCL's language hints on the function docs (Java and
JavaScript parameters become strings "in string representation"); an entry's own system message follows it,
as BFCL appends it. The authors generate with BFCL's function-calling handler instead (tools through the chat
template); this suite uses BFCL's prompting route, whose replies BFCL decodes and checks the same way.

Single-turn categories: :mod:`spade_core.eval.bfcl_single` decodes the reply (Python with ``ast``, literals
only; Java and JavaScript with BFCL's tree-sitter decoders) and runs BFCL's ``ast_checker`` or relevance test
on the host. Nothing runs. A failed item carries BFCL's ``error_type`` (:meth:`BFCLSuite.verdicts`).

Multi-turn categories: BFCL's inference loop. Each user turn, the model replies; a reply that
decodes to calls is executed and the results come back as a user message (BFCL's
``format_execution_results_prompting``, each result cut to 2,000 characters); a reply without calls ends the
turn; more than ``max_steps_per_turn`` call steps in one turn force-terminates the episode, which fails, as
in BFCL. The stored response is the JSON ``{"turns": [[reply, ...], ...]}``; scoring decodes it and runs
BFCL's ``multi_turn_checker`` (state and execution-result checks against the ground truth); a response that
is not that JSON fails as ``multi_turn:inference_error``, a force-terminated or incomplete one as
``multi_turn:force_terminated``, as BFCL's runner names them.

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
from spade_core.eval.bfcl_calls import Call, bfcl_checkers, bfcl_decoders, try_parse_calls
from spade_core.eval.bfcl_data import (
    CATEGORIES,
    DEFAULT_CATEGORIES,
    MAXIMUM_STEP_LIMIT,
    MULTI_TURN_CATEGORIES,
    PAPER_CATEGORIES,
    allocate,
    answers,
    bfcl_name,
    category_sizes,
    entries,
    multi_turn_functions,
    package_dir,
)
from spade_core.eval.bfcl_single import PASSED, Verdict, gold_calls, single_turn_verdict

MAX_RESULT_CHARS = 2000
DRIVER = Path(__file__).with_name("bfcl_driver.py")
BATCH_LIMITS = JailLimits(memory_mb=1024, max_pids=8, time_limit_s=60, cpu_seconds=60, tmpfs_mb=8)
JOB_LIMITS = JailLimits(memory_mb=1024, max_pids=8, time_limit_s=15, cpu_seconds=15, tmpfs_mb=8)


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


def _hinted(functions: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    """The function docs as BFCL's prompt shows them: its language hints (a copy; the data stays as is)."""
    return bfcl_checkers().language_docs(copy.deepcopy(functions), bfcl_name(category))  # type: ignore[no-any-return]


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
        if {"java", "javascript"} & set(categories):
            try:  # BFCL's Java and JavaScript decoders: refuse here rather than fail every such item
                bfcl_decoders()
            except ImportError as exc:
                raise ModuleNotFoundError(
                    f"BFCL's java and javascript categories need tree_sitter==0.21.3, tree-sitter-java==0.21.0 and "
                    f"tree-sitter-javascript==0.21.4 (bfcl-eval's pins; make install): {exc}"
                ) from exc
        self.categories = tuple(categories)
        self.max_steps_per_turn = max_steps_per_turn

    # -- items ------------------------------------------------------------------------------------------
    def items(self, limit: int, seed: int) -> list[EvalItem]:
        out: list[EvalItem] = []
        for category, count in zip(self.categories, allocate(limit, category_sizes(self.categories)), strict=True):
            data = entries(CATEGORIES[category])
            rng = random.Random(f"spade-eval/bfcl/{seed}/{category}")
            for index in sorted(rng.sample(range(len(data)), count)):
                out.append(self._item(category, data[index]))
        return out

    def item(self, item_id: str) -> EvalItem:
        prefix, category, number = ([*item_id.split("/"), "", ""])[:3]
        if prefix != "bfcl" or category not in CATEGORIES:
            raise KeyError(f"not a BFCL item id: {item_id!r}")
        for entry in entries(CATEGORIES[category]):
            if entry["id"].rsplit("_", 1)[1] == number:
                return self._item(category, entry)
        raise KeyError(f"no BFCL item {item_id!r}")

    def _item(self, category: str, entry: dict[str, Any]) -> EvalItem:
        number = entry["id"].rsplit("_", 1)[1]
        multi_turn = category.startswith("multi_turn")
        # The checker gets the docs as the data has them, the prompt BFCL's hinted ones (module doc).
        functions = _hinted(
            multi_turn_functions(entry["involved_classes"]) if multi_turn else entry["function"], category
        )
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
        else:
            data["functions"] = copy.deepcopy(entry["function"])
        first = list(turns[0])
        prompt = system_prompt(functions)
        if first and first[0]["role"] == "system":  # BFCL: the entry's own system message after its prompt
            first[0] = {"role": "system", "content": f"{prompt}\n\n{first[0]['content']}"}
        else:
            first.insert(0, {"role": "system", "content": prompt})
        return EvalItem(
            suite=self.name,
            item_id=f"bfcl/{category}/{number}",
            messages=first,
            answer=answers(category).get(entry["id"]),
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
        binds = (Bind(package_dir("bfcl_eval"), "/pkgs/bfcl_eval"), Bind(package_dir("mpmath"), "/pkgs/mpmath"))
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
    def verdicts(self, items: Sequence[EvalItem], responses: Sequence[str]) -> list[Verdict]:
        """BFCL's check of each response: passed, or failed with BFCL's ``error_type`` (module doc). A bad
        response is a failed verdict, never an exception; multi-turn checks run together in one jail."""
        out: list[Verdict] = [PASSED] * len(items)
        checks: list[tuple[int, dict[str, Any]]] = []
        for i, (item, response) in enumerate(zip(items, responses, strict=True)):
            if "turns" not in item.data:
                category = bfcl_name(item.data["category"])
                out[i] = single_turn_verdict(response or "", category, item.data["functions"], item.answer)
                continue
            job = self._check_job(item, response or "")
            if isinstance(job, Verdict):
                out[i] = job
            else:
                checks.append((i, job))
        for (i, _), result in zip(checks, self._run_jobs([job for _, job in checks]), strict=True):
            if isinstance(result, dict) and result.get("valid") is True:
                out[i] = PASSED
            elif isinstance(result, dict) and "valid" in result:
                out[i] = Verdict(False, str(result.get("error_type")), str(result.get("error_message", "")))
            else:
                error = result.get("error", "no result") if isinstance(result, dict) else repr(result)[:200]
                out[i] = Verdict(False, "multi_turn:checker_error", str(error))
        return out

    def score_many(self, items: Sequence[EvalItem], responses: Sequence[str]) -> list[tuple[float, bool]]:
        return [(v.score, v.passed) for v in self.verdicts(items, responses)]

    def score(self, item: EvalItem, response: str) -> tuple[float, bool]:
        return self.score_many([item], [response])[0]

    def _check_job(self, item: EvalItem, response: str) -> dict[str, Any] | Verdict:
        """The driver's check job for a multi-turn response, or the verdict when it fails before checking."""
        try:
            recorded = json.loads(response)
            turns = recorded["turns"]
        except (ValueError, TypeError, KeyError):
            return Verdict(False, "multi_turn:inference_error", "the response is not the recorded dialogue")
        ground_truth = item.answer or []
        if not isinstance(turns, list) or not all(isinstance(turn, list) for turn in turns):
            return Verdict(False, "multi_turn:inference_error", "the recorded turns are not lists of replies")
        if recorded.get("force_terminated") or len(turns) != len(ground_truth):  # BFCL: one error type for both
            reason = "step limit reached" if recorded.get("force_terminated") else f"{len(turns)} turns recorded"
            return Verdict(False, "multi_turn:force_terminated", f"{reason}, {len(ground_truth)} expected")
        decoded = []
        for turn in turns:
            steps = [try_parse_calls(text) if isinstance(text, str) else None for text in turn]
            decoded.append([[c.source() for c in calls] for calls in steps if calls])
        return {"kind": "check", "entry": item.data["entry"], "decoded": decoded, "ground_truth": ground_truth}

    # -- oracle ------------------------------------------------------------------------------------------
    def gold_response(self, item: EvalItem) -> str:
        if "turns" in item.data:
            turns = [[self._keyword_call(item, source) for source in turn] for turn in item.answer]
            steps = [[f"[{', '.join(c.source() for c in calls)}]"] if calls else [] for calls in turns]
            return json.dumps({"turns": steps})
        return gold_calls(bfcl_name(item.data["category"]), item.data["functions"], item.answer)

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


class BFCLFullSuite(BFCLSuite):
    """The paper's BFCL evaluation: all 17 categories (:data:`PAPER_CATEGORIES`), one sample per entry.

    Sampling as theirs: greedy (their offline ``bfcl generate --temperature 0.0``; in the training loop
    0.001), up to 4,096 tokens per reply and BFCL's 20 call steps per turn (``gem_eval_bfcl_only.yaml``,
    ``bfcl_evaluator.py``). Their sample count is every entry once: ``limit`` ``FULL_LIMIT`` (4,441) or more
    selects all of them; a smaller ``limit`` is split evenly over the categories.
    """

    name = "bfcl_full"
    max_new_tokens = 4096
    default_categories = PAPER_CATEGORIES

    def __init__(self, categories: Sequence[str] | None = None, max_steps_per_turn: int = MAXIMUM_STEP_LIMIT) -> None:
        super().__init__(categories, max_steps_per_turn)
