"""Train a model with TRL's own GRPOTrainer on the environments of a SPADE export, each episode in the jail.

    spade envs export RUN --to exported/
    .venv/bin/python examples/train_on_export.py exported/ --steps 4

The trainer is TRL 1.16's ``GRPOTrainer`` with the transformers backend (no vLLM), given the export through its
environment interface: ``environment_factory`` is a dict of one factory per environment, the dataset's
``environment`` column picks each example's, and each environment owns its reward (``get_reward``, the contract's
episode return) — :mod:`spade_core.envs.trl_envs`. The default model is the embedded SmolLM2-135M-Instruct, on
the CPU; its chat template has no tool calls, so it gets TRL's own ChatML (Qwen2.5) template
(:func:`~spade_core.envs.trl_envs.with_tool_template`). A 135M model rarely calls a tool, so its rewards are
mostly 0: this shows the wiring, not learning.

The last line printed is the final training log, as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train for ``--steps`` steps; returns the trainer's last log entry (with ``seconds_per_step``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", help="An export directory (spade envs export RUN --to DIR), local or s3://.")
    parser.add_argument("--model", default="embedded", help="A local HF model directory, or 'embedded'.")
    parser.add_argument("--steps", type=int, default=4, help="Optimizer steps.")
    parser.add_argument("--env", action="append", dest="env_ids", help="Only this env_id; repeatable.")
    parser.add_argument("--seeds", type=int, default=2, help="Episodes (seeds 0..N-1) per environment.")
    parser.add_argument("--generations", type=int, default=2, help="GRPO group size.")
    parser.add_argument("--max-completion-length", type=int, default=64, help="Tokens per rollout, tool results too.")
    parser.add_argument("--max-turns", type=int, default=4, help="Turns of an episode (tool calls).")
    parser.add_argument("--output-dir", default=None, help="Where the trainer writes (default: a temporary dir).")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from spade_core.envs.trl_envs import ExportEnvironments, with_tool_template
    from spade_core.llm.embedded import embedded_model_dir

    model = str(embedded_model_dir()) if args.model == "embedded" else args.model
    tokenizer = with_tool_template(AutoTokenizer.from_pretrained(model))
    with (
        ExportEnvironments(args.export, env_ids=args.env_ids, max_turns=args.max_turns) as envs,
        tempfile.TemporaryDirectory() as scratch,
    ):
        config = GRPOConfig(
            output_dir=args.output_dir or scratch,
            max_steps=args.steps,
            per_device_train_batch_size=args.generations,  # one environment's group per step
            num_generations=args.generations,
            max_completion_length=args.max_completion_length,
            max_tool_calling_iterations=args.max_turns,
            learning_rate=1e-6,
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=False,  # a 135M model fits; recomputing activations only slows the CPU
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=0,
        )
        trainer = GRPOTrainer(
            model=model,
            args=config,
            train_dataset=envs.dataset(seeds=list(range(args.seeds))),
            processing_class=tokenizer,
            environment_factory=envs.factories,
        )
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    last = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    last["seconds_per_step"] = seconds / max(1, trainer.state.global_step)
    last["global_step"] = trainer.state.global_step
    print(json.dumps(last, default=float))
    return last


if __name__ == "__main__":
    main()
