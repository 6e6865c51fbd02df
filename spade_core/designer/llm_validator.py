"""The authors' LLM validator for tool-use environments (``validation.llm_validator``): the training model
reads a design that passed the jailed checks and judges whether it can be solved at all.

Their ``spade/core/env_validator.py`` (tool-use prompt :49-87, parsing :170-185; settings ``types.py:184-189``):
the judge is the training model itself ("self"), sampled at temperature 0.3 within its own token budget
[16384]; it lists the success criteria, finds for each the tool that produces the state it needs, and answers
``\\boxed{yes}`` (solvable, however hard) or ``\\boxed{no}`` (a criterion is unreachable, type-impossible,
set only by a tool that always fails, needs a value no instruction or tool reveals, or most steps hold at
reset). The first ``\\boxed{}`` of the reply decides: yes / y / true keep the design, anything else rejects
it. A reply without one, an empty reply or a failed model call keeps the design (the judge never blocks
training). Each verdict is stored with the design's validation row (``llm_verdict``, ``llm_reason``).

Their 120 s per judgement (``corpus_orchestrator.py:166-169``) is ``validation.llm_validator_deadline_s``: a
judgement not back by then rejects the design (verdict ``deadline``, :mod:`spade_core.designer.deadline`).
The chat-template switch that turns the model's thinking off is ``model.enable_thinking``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from spade_core.designer.deadline import DEADLINE, generate_within, is_late
from spade_core.llm.base import Completion, GenerationRequest, Generator, SamplingParams

Verdict = Literal["yes", "no", "none", "error", "deadline"]
REASON_CHARS = 2000  # the stored reasoning is cut to this many characters (the head holds the verdict's trace)

SYSTEM = (
    "You audit auto-generated Python tool-use environments for SOLVABILITY. Reject an environment only when it "
    "is IMPOSSIBLE: no sequence of tool calls can satisfy its success criteria. Keep environments that are "
    "merely HARD, where the agent must discover hidden values by calling tools: difficulty is good curriculum, "
    "impossibility is fatal. Trace every success criterion to the tool that produces the state it needs."
)

PROMPT = """Audit this tool-use environment for solvability. The agent calls tools turn by turn; in a
multi-turn instruction environment it satisfies each instruction's criterion in turn and then submits
<answer>done</answer>. It is SOLVABLE if SOME sequence of tool calls makes every success criterion true.

```python
{code}
```

1. List the success criteria (the instruction criteria, the answer check, the reward and termination logic)
   and the exact state each one requires.
2. For each required value, find the tool that sets it. A random value is fine when some tool returns it to
   the agent; it is a problem only if no tool ever shows it, or a tool gives a different value every call.
3. Reject for these: a required value no tool ever sets; two criteria that contradict each other; a
   criterion that can never be true because of types (a string looked up in a list of dicts, 5 compared
   with "5"); a value set only by a tool that always fails; a specific hidden value that neither an
   instruction states nor a tool reveals; most of the steps already true at reset.
4. Never reject for difficulty, distractor tools or long sequences, nor for cosmetic issues.

Answer \\boxed{{no}} if a success criterion is impossible by these tests, else \\boxed{{yes}}."""

_BOXED = re.compile(r"\\boxed\{(.+?)\}", re.S)
KEEP = ("yes", "y", "true")


@dataclass(frozen=True)
class Judgement:
    """One verdict: whether the design is kept, the verdict and the judge's reasoning (cut)."""

    keep: bool
    verdict: Verdict
    reason: str


def messages(code: str) -> list[dict[str, str]]:
    """The judge's chat prompt for one environment's code."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT.format(code=code.strip())}]


def parse_verdict(text: str) -> Judgement:
    """The verdict of the judge's reply: its first ``\\boxed{}`` (their env_validator.py:170-185).

    >>> parse_verdict("criterion 1 is set by tool_mv. \\\\boxed{Yes} then \\\\boxed{no}").verdict
    'yes'
    >>> [parse_verdict(t).keep for t in ("\\\\boxed{no}", "\\\\boxed{maybe}", "I cannot tell.", "")]
    [False, False, True, True]
    >>> parse_verdict("no box here").verdict
    'none'
    """
    found = _BOXED.search(text or "")
    reason = (text or "")[:REASON_CHARS]
    if found is None:
        return Judgement(True, "none", reason or "the judge's reply is empty")
    keep = found.group(1).strip().lower() in KEEP
    return Judgement(keep, "yes" if keep else "no", reason)


def judge(
    generator: Generator, codes: Sequence[str], params: SamplingParams, deadline_s: float | None = None
) -> list[Judgement]:
    """Judge each environment's code with ``generator`` in one batch (``params``: the model's sampling at the
    judge's temperature and budget); a failed model call keeps the design (verdict ``error``), a judgement not
    back within ``deadline_s`` (``validation.llm_validator_deadline_s``; None: no deadline) rejects it (verdict
    ``deadline``, as the authors' timeout raises)."""
    if not codes:
        return []
    base = params.seed or 0
    requests = [GenerationRequest(messages=messages(code), seed=base + i) for i, code in enumerate(codes)]
    try:
        replies = generate_within(generator, requests, params, deadline_s, "validation.llm_validator_deadline_s")
    except Exception as exc:  # the judge never blocks training (theirs: accept on error)
        return [Judgement(True, "error", f"{type(exc).__name__}: {exc}"[:REASON_CHARS]) for _ in codes]
    return [_judgement(reply) for reply in replies]


def _judgement(reply: Completion) -> Judgement:
    if is_late(reply):
        return Judgement(False, "deadline", str(reply.error).removeprefix(f"{DEADLINE}:").strip())
    if reply.error is not None:
        return Judgement(True, "error", reply.error[:REASON_CHARS])
    return parse_verdict(reply.text)
