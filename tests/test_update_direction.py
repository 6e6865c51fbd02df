"""The update points the right way (docs/DESIGN.md §7 steps 7 and 9, §7.2): after one real optimizer step
on the micro model, the sequence log-prob of the positively rewarded samples rises relative to the
negatively rewarded ones, and with the rewards' signs flipped it falls. For the designer the rewards come
out of the reward stage (stored plays of the designs' environments over the window, centred per skill),
and the update is the trainer step at which the designs are due (D = K steps later); for the agent the
rewards are the stored plays' returns. The samples are the micro model's own (its replies and plays with
their behaviour log-probs), so the step is on-policy and the truncated importance weights must be 1.

A sign error in the advantages, a loss mask on the wrong tokens or a behaviour log-prob that does not line
up with its token turns one of these comparisons around or moves the importance weights off 1.

Why the comparison is robust: AdamW's first step moves every parameter by ``lr · sign(g)``, so to first
order the change of ``log p(x) - log p(y)`` for a pair with advantages ``+a`` and ``-a`` is
``lr · Σ |∇ log p(x) - ∇ log p(y)|`` > 0 (the two roles are trained in separate steps, so neither's
gradient decides the other's signs).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
import torch
from samples import ROWS, as_stage

from spade_core.config import RolloutConfig, load_config
from spade_core.designer.prompt_text import DESIGNER_SYSTEM
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import GenerationRequest, SamplingParams
from spade_core.llm.hf import TransformersGenerator, load_tokenizer
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.registry import BY_NAME
from spade_core.play.rollout import EpisodeSpec, RolloutEngine
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import model_path_for_checkpoint
from spade_core.store.markers import StageRecord, write_marker
from spade_core.train.data import Sample, agent_samples, designer_samples
from spade_core.train.step import due_designs, train_step

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), pytest.mark.usefixtures("jail_processes_checked")]
RUN = "direction"
K = 2  # tiny: steps per generation; gen 1's designs are due at global step D = K
SKILL = "optimization"
# Design d1, d2 get in-band plays (a raw blend of 1.0), d3, d4 never-won plays (0.0): centred +0.5 / -0.5.
POSITIVE, NEGATIVE = ("d1", "d2"), ("d3", "d4")
WON = {"no_hint": [1.0, 0.0], "hint": [1.0, 1.0]}  # window win rate 0.5, regret 1 - 0.5
LOST = {"no_hint": [0.0, 0.0], "hint": [0.0, 0.0]}  # window win rate 0, regret 0


def _cfg(root: str, micro: str, *overrides: str) -> Any:
    """The tiny preset (its learning rate, loss, batch and TIS bounds) on the micro model."""
    base = [f"store.root={root}", f"model.name_or_path={micro}", "rollout.plays_no_hint=2"]
    return load_config("tiny", None, [*base, *overrides])


@pytest.fixture(scope="module")
def design_replies(micro_generator: TransformersGenerator) -> list[tuple[str, Any]]:
    """Four replies of the micro model to a design prompt, with their tokens and log-probs (the prompt is
    short: the trainer re-renders any chat prompt alike, and a short one keeps the steps cheap)."""
    task = f"Target skill: {SKILL}. Write a GAME environment about packing boxes as one ```python block."
    messages = [{"role": "system", "content": DESIGNER_SYSTEM}, {"role": "user", "content": task}]
    requests = [GenerationRequest(messages=messages, seed=i) for i in range(4)]
    params = SamplingParams(temperature=1.0, max_new_tokens=24, seed=0, logprobs=True)
    return [(json.dumps(messages), c) for c in micro_generator.generate(requests, params)]


@pytest.fixture(scope="module")
def agent_plays(micro_generator: TransformersGenerator) -> pd.DataFrame:
    """Four no-hint plays of the micro model on a seed game, from the rollout engine (tokens, mask, log-probs)."""
    env = next(e for e in load_seed_envs() if e.kind == "game")
    specs = [EpisodeSpec(env.env_id, env.code, seed=p, play=p) for p in range(4)]
    rollout = RolloutConfig(max_turns=2, max_tokens_per_turn=16, max_context_tokens=1024)
    params = SamplingParams(temperature=1.0, seed=0)
    rows = RolloutEngine(micro_generator, rollout, params, call_timeout_s=5.0).run(specs)
    return pd.DataFrame(rows).assign(policy_step=0)


def _store_designs(store: Store, replies: list[tuple[str, Any]], flipped: bool) -> None:
    """Generation 1's designs, verdicts, pool, hints and window of plays, as its stages write them."""
    designs, validations, pool, hints, plays = [], [], [], [], []
    for design_id, (prompt, reply) in zip(POSITIVE + NEGATIVE, replies, strict=True):
        env_id, code = f"env-{design_id}", f"class {design_id.upper()}Env: ..."
        designs.append(
            ROWS["designs"]
            | {"design_id": design_id, "group_id": design_id, "env_id": env_id, "skill": SKILL, "code": code}
            | {"prompt": prompt, "completion": reply.text, "completion_ids": list(reply.token_ids)}
            | {"logprobs": list(reply.logprobs), "kind": "game", "attempt": 0, "policy_step": 0}
        )
        verdict = {"design_id": design_id, "attempt": 0, "env_id": env_id, "ok": True, "error_type": None}
        validations.append(ROWS["validations"] | verdict | {"message": None})
        pool.append(ROWS["pool"] | {"env_id": env_id, "design_id": design_id, "skill": SKILL, "code": code})
        hints.append(ROWS["hints"] | {"env_id": env_id})
        won = (design_id in POSITIVE) != flipped
        returns = WON if won else LOST
        for step in range(K):
            for condition in ("no_hint", "hint") if step == 0 else ("no_hint",):
                for p, value in enumerate(returns[condition]):
                    row = {"episode_id": f"{env_id}-{step}-{condition}-{p}", "env_id": env_id, "seed": p}
                    row |= {"condition": condition, "episode_return": value, "policy_step": step}
                    plays.append((step, ROWS["episodes"] | row))
    _write(store, "designs", pd.DataFrame(designs), "design")
    _write(store, "validations", pd.DataFrame(validations), "validate")
    _write(store, "pool", pd.DataFrame(pool), "pool")
    _write(store, "hints", pd.DataFrame(hints), "hint")
    for step in range(K):
        _write(store, "episodes", pd.DataFrame([row for s, row in plays if s == step]), f"rollout-s{step}")


def _write(store: Store, table: str, frame: pd.DataFrame, stage: str, gen: int = 1) -> None:
    """Write ``frame`` as ``stage``'s file of ``table`` and the stage's marker listing it, as a finished stage
    leaves them (the reward stage reads exactly the files its inputs' markers list)."""
    path = store.write_table(table, frame, run_id=RUN, gen=gen, stage=stage).path
    record = StageRecord(stage=stage, run_id=RUN, gen=gen, artifact_hash="test", digest=stage, files={table: [path]})
    write_marker(store, record)


def sequence_logprobs(model_path: str, samples: list[Sample]) -> dict[str, float]:
    """source_id -> sum of log p(token | everything before it) over the sample's trained tokens (mask 1)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    out = {}
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            n = len(s.completion_ids)
            logits = model(ids, logits_to_keep=n + 1).logits[0, :-1]  # those that predict the completion
            token_logp = torch.log_softmax(logits.float(), dim=-1).gather(1, ids[0, -n:, None])[:, 0]
            out[s.source_id] = float(token_logp[torch.tensor(s.env_mask, dtype=torch.bool)].double().sum())
    return out


def _gap(before: dict[str, float], after: dict[str, float], up: tuple[str, ...], down: tuple[str, ...]) -> float:
    """Mean log-prob change of ``up`` minus that of ``down``."""
    change = {k: after[k] - before[k] for k in before}
    return sum(change[k] for k in up) / len(up) - sum(change[k] for k in down) / len(down)


def _tis_weights(store: Store, gen: int) -> list[float]:
    return store.read_table("train_metrics", run_id=RUN, gen=gen)["tis_weight_mean"].tolist()


def _designer_gap(tmp_path: Any, micro: str, replies: list[tuple[str, Any]], flipped: bool) -> float:
    """Store gen 1, run its reward stage and the step where its designs are due; return the log-prob gap."""
    store = Store(str(tmp_path))
    cfg = _cfg(str(tmp_path), micro)
    _store_designs(store, replies, flipped)
    # the reward stage with its marker: the trainer reads the files it lists
    summary = as_stage(GenerationContext(cfg, store, RUN, 1), "reward", lambda run: BY_NAME["reward"].body(run, None))
    assert summary["rewarded"] == 4 and summary["train_step"] == K
    rewards = store.read_table("designer_rewards", RUN, 1, stages=["reward"]).set_index("design_id")["reward"]
    up, down = (NEGATIVE, POSITIVE) if flipped else (POSITIVE, NEGATIVE)
    assert (rewards[list(up)] > 0).all() and (rewards[list(down)] < 0).all(), rewards.to_dict()
    samples = designer_samples(due_designs(cfg, store, RUN, K), load_tokenizer(micro))
    assert sorted(s.source_id for s in samples) == sorted(POSITIVE + NEGATIVE)
    result = train_step(cfg, store, RUN, 2, 0)  # generation 2's first step = global step K
    assert result.kind == "full" and result.designer_samples == 4 and result.agent_samples == 0, result
    assert _tis_weights(store, 2) == pytest.approx([1.0], abs=1e-3)  # on-policy: log-probs line up
    after = model_path_for_checkpoint(cfg, store, RUN, K + 1)
    return _gap(sequence_logprobs(micro, samples), sequence_logprobs(after, samples), POSITIVE, NEGATIVE)


def test_designer_update_raises_the_positively_rewarded_designs(micro_model_dir, design_replies, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gap = _designer_gap(tmp_path / "signs", micro_model_dir, design_replies, flipped=False)
    flipped = _designer_gap(tmp_path / "flipped", micro_model_dir, design_replies, flipped=True)
    # Measured: about +-0.01 at tiny's learning rate of 1e-6 (gap and flipped mirror each other), some 100
    # times the float32 rounding of the log-probs it compares.
    assert gap > 0 > flipped, (gap, flipped)


def _agent_gap(tmp_path: Any, micro: str, plays: pd.DataFrame, flipped: bool) -> float:
    """Store the plays with returns 1, 1, 0, 0 (flipped: 0, 0, 1, 1), train one step; return the gap."""
    store = Store(str(tmp_path))
    cfg = _cfg(str(tmp_path), micro, "designer.train=false")
    won = [1.0, 1.0, 0.0, 0.0]
    plays = plays.sort_values("seed").assign(episode_return=[1.0 - w for w in won] if flipped else won)
    _write(store, "episodes", plays, "rollout-s0")
    env = next(e for e in load_seed_envs() if e.env_id == plays["env_id"].iloc[0])
    pool = ROWS["pool"] | {"env_id": env.env_id, "design_id": None, "skill": env.skill, "kind": env.kind}
    _write(store, "pool", pd.DataFrame([pool | {"code": env.code, "source": "replay"}]), "pool")
    samples, skipped = agent_samples(plays)
    assert skipped == 0 and len(samples) == 4 and all(sum(s.env_mask) > 0 for s in samples)
    result = train_step(cfg, store, RUN, 1, 0)
    assert result.kind == "full" and result.agent_samples == 4, result
    assert _tis_weights(store, 1) == pytest.approx([1.0], abs=1e-3)
    after = model_path_for_checkpoint(cfg, store, RUN, 1)
    ids = list(plays["episode_id"])
    return _gap(sequence_logprobs(micro, samples), sequence_logprobs(after, samples), tuple(ids[:2]), tuple(ids[2:]))


def test_agent_update_raises_the_positively_rewarded_plays(micro_model_dir, agent_plays, tmp_path) -> None:  # type: ignore[no-untyped-def]
    gap = _agent_gap(tmp_path / "signs", micro_model_dir, agent_plays, flipped=False)
    flipped = _agent_gap(tmp_path / "flipped", micro_model_dir, agent_plays, flipped=True)
    # Measured: about +-0.01 at tiny's learning rate of 1e-6 (gap and flipped mirror each other), some 100
    # times the float32 rounding of the log-probs it compares.
    assert gap > 0 > flipped, (gap, flipped)
