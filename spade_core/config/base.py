"""What every config section shares: the section base class (unknown keys refused, numbers bounded),
the error type, the number limits and the skill keys."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, model_validator

GAME_SKILLS = (
    "mathematical_reasoning",
    "logical_deduction",
    "spatial_reasoning",
    "pattern_recognition",
    "optimization",
    "causal_inference",
)
TOOL_SKILLS = (
    "api_orchestration",
    "data_retrieval",
    "state_modification",
    "error_recovery",
    "tool_selection",
    "multi_step_workflows",
)


def skill_kind(skill: str) -> str:
    """'game' or 'tool' for a skill key; an unknown skill is an error naming it."""
    if skill in GAME_SKILLS:
        return "game"
    if skill in TOOL_SKILLS:
        return "tool"
    raise ValueError(f"unknown skill {skill!r}; skills: {', '.join(GAME_SKILLS + TOOL_SKILLS)}")


class ConfigError(ValueError):
    """A configuration problem, with a one-line message naming the key and the bad value."""

    __module__ = "spade_core.config"  # the name tracebacks and doctests show: where it is imported from


# Every number of the config has a range: those a field does not bound above (or below) are within ±NUMBER_LIMIT,
# floats are finite, token budgets within TOKEN_LIMIT (the model's own context is known only once it loads).
NUMBER_LIMIT = 1_000_000_000
TOKEN_LIMIT = 1_048_576
SEED_LIMIT = 2**32 - 1  # stages derive seeds from it (seed · 100003 + gen, + offsets) that torch takes as 64 bits


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _numbers_bounded(self) -> Self:
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            bounds = {type(m).__name__ for m in info.metadata}
            if (not bounds & {"Le", "Lt"} and value > NUMBER_LIMIT) or (
                not bounds & {"Ge", "Gt"} and value < -NUMBER_LIMIT
            ):
                raise ValueError(
                    f"config key {_key_of(type(self), name)!r} has bad value {value!r}: every number of the config "
                    f"is within ±{NUMBER_LIMIT:,}"
                )
        return self


def _key_of(section: type[BaseModel], name: str) -> str:
    """The dotted key of field ``name`` of a section (``training.learning_rate``), for messages: the field of
    the config (a section too) that holds the section, found among the sections without importing the config
    (whose module imports this one)."""
    for owner in _Section.__subclasses__():
        for key, info in owner.model_fields.items():
            if info.annotation is section:
                return f"{key}.{name}"
    return name
