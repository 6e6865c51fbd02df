"""The ``store`` and ``corpus`` sections and the ``orchestration`` section (task runner, retries, devices,
the engine service)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from spade_core.config.base import _Section


class StoreConfig(_Section):
    root: str = Field(
        "./spade-store", min_length=1, pattern=r"\S", description="Local path or s3://bucket/prefix of the store."
    )
    endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint; falls back to the AWS_ENDPOINT_URL variable."
    )


class CorpusConfig(_Section):
    source: str = Field("embedded", description="'embedded' (Wikipedia leads) or a Parquet/JSONL path or URL.")
    max_words: int = Field(6000, gt=0, description="Document truncation for game designs [paper: 6000].")
    max_words_tool: int = Field(4000, gt=0, description="Document truncation for tool-use designs [4000].")
    enabled: bool = Field(True, description="False = the 'no corpus' ablation (designer gets no document).")


class OrchestrationConfig(_Section):
    task_runner: Literal["threads", "processes", "dask"] = Field("threads", description="Prefect task runner.")
    dask_address: str | None = Field(None, description="Dask scheduler address (None = local cluster).")
    shard_size: int = Field(16, ge=1, description="Items per mapped task shard.")
    retries: int = Field(2, ge=0, description="Retries of I/O and model tasks.")
    retry_delay_s: float = Field(
        5.0, gt=0, description="Delay before the first retry of an I/O or model task; doubles on each retry."
    )
    async_generations: bool = Field(
        True,
        description="spade-run starts generation g+1's design chain (documents..hint) once generation g's memory "
        "is written, on the newest checkpoint at that moment, while g trains its steps.",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        le=1,
        description="1: step k's plays may use checkpoint k-1 and overlap step k-1's update (off-policy by one "
        "step, corrected by TIS); 0: every play is on-policy.",
    )
    generation_devices: list[int] | None = Field(
        None, description="CUDA devices of the generation server (None = all visible; shared with training)."
    )
    training_devices: list[int] | None = Field(
        None, description="CUDA devices of the trainer (None = all visible; shared with generation)."
    )
    engine_replicas: int = Field(
        1,
        ge=1,
        le=64,
        description="backend=vllm: data-parallel engine replicas of the run's engine service; generation_devices "
        "are split evenly among them (on a CPU each replica is bound to its own core). A request goes to the "
        "least-loaded replica, an episode's turns to the one that served its first.",
    )
    engine_address: str | None = Field(
        None,
        description="backend=vllm: host:port the run's engine service listens on, for workers on other machines "
        "(its API key from $SPADE_ENGINE_KEY, set alike on the run's machine and the workers); None = loopback "
        "on a free port, found by the run's local worker processes.",
    )
    generator_during_update: Literal["auto", "kept", "released"] = Field(
        "auto",
        description="What the generator does while the trainer (or the evaluator) runs: 'released' = closed, "
        "and loaded again on the new checkpoint after (the two take turns for the memory they share), 'kept' = "
        "it stays (a vLLM server then takes the new weights in place), 'auto' = released on a GPU that "
        "generation and training share, else kept.",
    )

    @model_validator(mode="after")
    def _devices_split_or_shared(self) -> OrchestrationConfig:
        gen, train = self.generation_devices, self.training_devices
        if gen is not None and train is not None and set(gen) & set(train) and set(gen) != set(train):
            raise ValueError(
                f"orchestration.generation_devices {gen} and training_devices {train} must be disjoint (separate "
                "devices) or equal (shared: they take turns)"
            )
        for key, devices in (("generation_devices", gen), ("training_devices", train)):
            if devices is not None and (not devices or len(set(devices)) != len(devices) or min(devices) < 0):
                raise ValueError(f"orchestration.{key} {devices} must list distinct device indices >= 0")
        return self

    def devices_shared(self) -> bool:
        """Whether generation and training use the same devices (then a model is released before training)."""
        gen, train = self.generation_devices, self.training_devices
        return gen is None or train is None or set(gen) == set(train)

    def takes_turns(self, device: str) -> bool:
        """Whether the generator is released while the trainer runs (``generator_during_update``; auto: on a
        GPU (``device``) that generation and training share).

        >>> OrchestrationConfig().takes_turns("cpu"), OrchestrationConfig().takes_turns("cuda")
        (False, True)
        >>> OrchestrationConfig(generator_during_update="released").takes_turns("cpu")
        True
        >>> OrchestrationConfig(generation_devices=[0], training_devices=[1]).takes_turns("cuda")
        False
        """
        if self.generator_during_update != "auto":
            return self.generator_during_update == "released"
        return device != "cpu" and self.devices_shared()
