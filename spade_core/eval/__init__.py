"""Held-out evaluation suites (docs/DESIGN.md §9), all offline, from packages:

- ``reasoning_gym``: math, logic and algorithmic problems (reasoning-gym), fixed held-out seed;
- ``reasoning_gym_hard``: the reasoning-gym hard split as the authors evaluate games (100 tasks × 8
  sampled episodes);
- ``humaneval``: HumanEval completions run with their tests in the jail;
- ``bfcl``: BFCL simple / parallel / irrelevance calls and the multi-turn base set, BFCL's own checkers;
- ``bfcl_multi_turn``: BFCL's multi-turn base, miss_func, miss_param and long_context sets;
- ``bfcl_full``: all 17 BFCL v4 categories as the paper evaluates tool use (greedy, every entry once at
  limit 4441);
- ``tau2``: τ²-bench's retail and airline dialogues, the model playing the agent and the simulated user.

One explicit registry, :data:`SUITES`; each suite is one module. Entry points: :func:`evaluate` (any
generator), :func:`evaluate_checkpoint` (a stored run's checkpoint, writes ``evals``), :func:`summarize`.
Suite modules import their packages lazily, so importing this one is cheap.
"""

from __future__ import annotations

from spade_core.eval.base import EvalItem, Suite, UnknownSuiteError
from spade_core.eval.bfcl import BFCLFullSuite, BFCLMultiTurnSuite, BFCLSuite
from spade_core.eval.humaneval import HumanEvalSuite
from spade_core.eval.reasoning_gym_suite import ReasoningGymSuite
from spade_core.eval.registry import SUITE_NAMES, SUITES, get_suite, resolve_suites
from spade_core.eval.runner import evaluate, evaluate_checkpoint, summarize
from spade_core.eval.tau2 import Tau2Suite

__all__ = [
    "SUITES",
    "SUITE_NAMES",
    "BFCLFullSuite",
    "BFCLMultiTurnSuite",
    "BFCLSuite",
    "EvalItem",
    "HumanEvalSuite",
    "ReasoningGymSuite",
    "Suite",
    "Tau2Suite",
    "UnknownSuiteError",
    "evaluate",
    "evaluate_checkpoint",
    "get_suite",
    "resolve_suites",
    "summarize",
]
