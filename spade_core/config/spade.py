"""``SpadeConfig``: the resolved configuration of one run, its sections, the checks across them and its
hash."""

from __future__ import annotations

import json

import yaml
from pydantic import Field, model_validator

from spade_core.config.base import SEED_LIMIT, _Section
from spade_core.config.designer import DesignerConfig, ValidationConfig
from spade_core.config.model import ModelConfig
from spade_core.config.orchestration import CorpusConfig, OrchestrationConfig, StoreConfig
from spade_core.config.rollout import MemoryConfig, RolloutConfig, ScoringConfig
from spade_core.config.training import EvaluationConfig, TrainingConfig
from spade_core.hashing import short_hash


class SpadeConfig(_Section):
    """The resolved configuration of one SPADE run."""

    seed: int = Field(0, ge=0, le=SEED_LIMIT, description="Global seed: document sampling, skills, rollout seeds.")
    store: StoreConfig = Field(default_factory=StoreConfig)
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    designer: DesignerConfig = Field(default_factory=DesignerConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    orchestration: OrchestrationConfig = Field(default_factory=OrchestrationConfig)

    @model_validator(mode="after")
    def _delay_covers_the_window(self) -> SpadeConfig:
        delay, k = self.designer.training_delay, self.training.steps_per_generation
        if delay is not None and delay < k:
            raise ValueError(
                f"designer.training_delay {delay} must be >= training.steps_per_generation {k}: a design's "
                "reward is measured over its generation's whole window of K steps"
            )
        return self

    @model_validator(mode="after")
    def _copies_have_parents(self) -> SpadeConfig:
        if self.scoring.parent_copy_raw is not None and self.designer.mode not in ("mutate", "parameters"):
            raise ValueError(
                f"scoring.parent_copy_raw {self.scoring.parent_copy_raw} needs designer.mode mutate or parameters "
                f"(got {self.designer.mode!r}): only a mutation has a parent to copy"
            )
        return self

    @model_validator(mode="after")
    def _replicas_fit_the_devices(self) -> SpadeConfig:
        devices, replicas = self.orchestration.generation_devices, self.orchestration.engine_replicas
        tp = self.model.tensor_parallel_size
        if devices is not None and (len(devices) % replicas or len(devices) // replicas < tp):
            raise ValueError(
                f"orchestration.generation_devices {devices} cannot be split into engine_replicas {replicas} of "
                f"model.tensor_parallel_size {tp} GPUs each: list replicas x tensor_parallel_size devices"
            )
        address = self.orchestration.engine_address
        if address is not None and (":" not in address or not address.rsplit(":", 1)[1].isdigit()):
            raise ValueError(f"orchestration.engine_address {address!r} must be host:port (e.g. 10.0.0.5:8765)")
        return self

    def config_hash(self) -> str:
        """Stable 16-hex hash of the resolved config (key order and formatting independent)."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return short_hash(blob)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
