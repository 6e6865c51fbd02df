"""The one registry of evaluation suites, by the names ``evaluation.suites`` takes (docs/DESIGN.md §9)."""

from __future__ import annotations

from collections.abc import Sequence

from spade_core.eval.base import Suite, UnknownSuiteError
from spade_core.eval.bfcl import BFCLFullSuite, BFCLMultiTurnSuite, BFCLSuite
from spade_core.eval.humaneval import HumanEvalSuite
from spade_core.eval.reasoning_gym_hard import ReasoningGymHardSuite
from spade_core.eval.reasoning_gym_suite import ReasoningGymSuite
from spade_core.eval.tau2 import Tau2Suite

SUITES: dict[str, type[Suite]] = {
    "reasoning_gym": ReasoningGymSuite,
    "reasoning_gym_hard": ReasoningGymHardSuite,
    "humaneval": HumanEvalSuite,
    "bfcl": BFCLSuite,
    "bfcl_multi_turn": BFCLMultiTurnSuite,
    "bfcl_full": BFCLFullSuite,
    "tau2": Tau2Suite,
}
SUITE_NAMES: tuple[str, ...] = tuple(SUITES)


def get_suite(name: str) -> Suite:
    """A suite with its default settings, by registry name.

    Raises:
        UnknownSuiteError: ``name`` is not registered (the message lists the allowed names).
    """
    if name not in SUITES:
        raise UnknownSuiteError(f"unknown evaluation suite {name!r}; allowed: {', '.join(SUITE_NAMES)}")
    return SUITES[name]()


def resolve_suites(suites: Sequence[str | Suite]) -> list[Suite]:
    """Suite instances for names or instances, every name checked before any work starts."""
    return [s if isinstance(s, Suite) else get_suite(s) for s in suites]
