"""SPADE configuration: one pydantic model tree, loaded from YAML presets with dotted overrides.

Every field has a docstring-like ``description``; unknown keys and bad values fail at load time with one
line naming the key, the bad value and what is allowed (docs/DESIGN.md §3). The resolved config is hashed
(``config_hash``); the *artifact hash* (the config without the store location and the execution-only
settings, ``spade_core.store.markers.artifact_hash``) binds a run id and is part of every stage marker.

Field defaults follow the paper (arXiv 2608.19197, docs/DESIGN.md §7) where the project implements that
part of the method; docs/DESIGN.md §3 lists those that still differ. The ``tiny`` preset shrinks them for
the embedded CPU model.

The sections live in modules by group (``base``: the section base class, ``ConfigError``, limits and
skills; ``model``; ``designer`` with ``validation``; ``rollout`` with ``scoring`` and ``memory``;
``training`` with ``evaluation``; ``orchestration`` with ``store`` and ``corpus``), the tree in ``spade``
and the resolving in ``loading``; import every name from ``spade_core.config``.
"""

from __future__ import annotations

from spade_core.config.base import (
    GAME_SKILLS,
    NUMBER_LIMIT,
    SEED_LIMIT,
    TOKEN_LIMIT,
    TOOL_SKILLS,
    ConfigError,
    skill_kind,
)
from spade_core.config.designer import VALIDATION_CHECKS, CodeRepair, DesignerConfig, ValidationConfig
from spade_core.config.loading import (
    PRESET_DIR,
    RETIRED_KEYS,
    available_presets,
    load_config,
    load_config_text,
)
from spade_core.config.model import ModelConfig, sampling_cut
from spade_core.config.orchestration import CorpusConfig, OrchestrationConfig, StoreConfig
from spade_core.config.rollout import DesignerRewardVariant, MemoryConfig, RolloutConfig, ScoringConfig
from spade_core.config.spade import SpadeConfig
from spade_core.config.training import EvaluationConfig, SuiteName, TrainingConfig

__all__ = [
    "GAME_SKILLS",
    "NUMBER_LIMIT",
    "PRESET_DIR",
    "RETIRED_KEYS",
    "SEED_LIMIT",
    "TOKEN_LIMIT",
    "TOOL_SKILLS",
    "VALIDATION_CHECKS",
    "CodeRepair",
    "ConfigError",
    "CorpusConfig",
    "DesignerConfig",
    "DesignerRewardVariant",
    "EvaluationConfig",
    "MemoryConfig",
    "ModelConfig",
    "OrchestrationConfig",
    "RolloutConfig",
    "ScoringConfig",
    "SpadeConfig",
    "StoreConfig",
    "SuiteName",
    "TrainingConfig",
    "ValidationConfig",
    "available_presets",
    "load_config",
    "load_config_text",
    "sampling_cut",
    "skill_kind",
]
