"""GRPO training from stored rollouts (CPU): masks and advantages on the tiny model's plays; real updates, one
optimizer carried across steps, truncated importance sampling, LoRA and checkpoints on the micro model (its
full checkpoints are ~40 MB, the tiny model's ~1.6 GB); bad inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from agents import OracleAgent, oracle_answers
from safetensors.torch import load_file
from samples import write_stage
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.config import RolloutConfig, load_config
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import GenerationRequest, SamplingParams
from spade_core.llm.hf import TransformersGenerator
from spade_core.play.rollout import EpisodeSpec, RolloutEngine
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import (
    checkpoint_complete,
    checkpoint_files,
    model_for_step,
    model_path_for_checkpoint,
    read_marker,
    write_checkpoint,
)
from spade_core.train.data import AGENT, DESIGNER
from spade_core.train.launch import accelerate_command, launch_training
from spade_core.train.step import build_batch, train_step

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.usefixtures("jail_processes_checked")]
SEEDS = {e.skill: e for e in load_seed_envs()}
ENVS = [SEEDS["pattern_recognition"], SEEDS["data_retrieval"]]
RUN = "t"


def _cfg(root: str, *overrides: str, model: str | None = None) -> Any:
    base = [f"store.root={root}", "training.learning_rate=1e-4", "training.per_device_batch_size=6"]
    return load_config("tiny", None, [*base, *([f"model.name_or_path={model}"] if model else []), *overrides])


def _episodes(generator: TransformersGenerator) -> pd.DataFrame:
    """Real episodes: per (env, seed) one oracle play (return 1) and one play of the model (return ~0), so
    groups have reward variance; plus hinted plays the trainer must ignore."""
    rollout = RolloutConfig(max_turns=4, max_tokens_per_turn=24, max_context_tokens=1024)
    params = SamplingParams(temperature=0.6, seed=0)
    oracle = OracleAgent(oracle_answers(ENVS, seed=3))
    oracle_specs = [EpisodeSpec(e.env_id, e.code, 3, play=0) for e in ENVS]
    model_specs = [EpisodeSpec(e.env_id, e.code, 3, play=1) for e in ENVS]
    hinted = [EpisodeSpec(e.env_id, e.code, 3, "hint", hint="Think.", play=0) for e in ENVS]
    tok = generator.tokenizer
    rows = RolloutEngine(oracle, rollout, params, call_timeout_s=3.0, tokenizer=tok).run(oracle_specs)
    rows += RolloutEngine(generator, rollout, params, call_timeout_s=3.0).run(model_specs + hinted)
    frame = pd.DataFrame(rows)
    return frame.assign(policy_step=0) if "logprobs" in frame.columns else frame.assign(logprobs=None, policy_step=0)


def _designs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """One designer group of two replies to the same prompt: one scored environment, one invalid reply
    (the code is a short stand-in so a CPU step stays cheap; the trainer never runs it)."""
    env = SEEDS["optimization"]
    code = "class Boxes:\n    def reset(self, seed=None):\n        return 'Pack the boxes.', {}\n"
    prompt = json.dumps(
        [
            {"role": "system", "content": "You design text environments as Python code."},
            {"role": "user", "content": "Write an optimization game about packing boxes."},
        ]
    )
    common = {"doc_id": "doc1", "group_id": "grp1", "skill": "optimization", "kind": "game", "prompt": prompt}
    common |= {"completion_ids": None, "logprobs": None}  # no stored tokens: the reply's text is tokenized
    designs = pd.DataFrame(
        [
            {**common, "design_id": "des1", "completion": f"```python\n{code}```", "code": code}
            | {"env_id": env.env_id, "model_ref": "base", "attempt": 0, "policy_step": 0},
            {**common, "design_id": "des2", "completion": "I cannot write code.", "code": None}
            | {"env_id": None, "model_ref": "base", "attempt": 0, "policy_step": 0},
        ]
    )
    # The reward stage's row for the valid design: raw 0.8, advantage (centred x scale) 0.5.
    rewards = pd.DataFrame(
        [
            {
                "design_id": "des1",
                "env_id": env.env_id,
                "skill": "optimization",
                "window_win_rate": 0.5,
                "regret": 0.25,
                "raw": 0.8,
                "dropped": False,
                "centred": 0.25,
                "scale": 2.0,
                "reward": 0.5,
                "train_step": S0,
            }
        ]
    )
    return designs, rewards


def _frames(generator: TransformersGenerator) -> dict[str, pd.DataFrame]:
    designs, rewards = _designs()
    verdict = {"attempt": 0, "message": None, "checks": {}, "seconds": 0.0}
    validations = pd.DataFrame(
        [
            {"design_id": "des1", "env_id": SEEDS["optimization"].env_id, "ok": True, "error_type": None, **verdict},
            {"design_id": "des2", "env_id": None, "ok": False, "error_type": "syntax_error", **verdict},
        ]
    )
    frames = {"episodes": _episodes(generator), "designs": designs, "designer_rewards": rewards}
    return frames | {"validations": validations}


@pytest.fixture(scope="module")
def generation_frames(tiny_generator: TransformersGenerator) -> dict[str, pd.DataFrame]:
    """The tables of a generation whose plays are the tiny model's."""
    return _frames(tiny_generator)


@pytest.fixture(scope="module")
def micro_frames(micro_model_dir: str) -> dict[str, pd.DataFrame]:
    """The same tables with the micro model's plays, so that training the micro model is on-policy."""
    generator = TransformersGenerator(micro_model_dir, device="cpu", dtype="float32", batch_size=16)
    try:
        return _frames(generator)
    finally:
        generator.close()


# The pipeline stage that writes each table: the trainer reads only those stages' files.
STAGE_OF = {"episodes": "rollout-s0", "designs": "design", "validations": "validate", "designer_rewards": "reward"}
# Generation 1's designs are trained D = K = 2 steps after its first step: at generation 2's first step, which
# plays the base model (no checkpoint at or below it), so every trainer test trains generation 2.
GEN, S0 = 2, 2
DESIGN_TABLES = ("designs", "validations", "designer_rewards")


def _store_generation(store: Store, frames: dict[str, pd.DataFrame]) -> None:
    """The designs (and their reward) as generation 1 wrote them; the plays and pool as generation 2's."""
    for table, frame in frames.items():  # with their stage markers: readers take the files a marker lists
        write_stage(store, RUN, 1 if table in DESIGN_TABLES else GEN, STAGE_OF[table], {table: frame})
    pool = pd.DataFrame(
        [{"env_id": e.env_id, "design_id": None, "skill": e.skill, "kind": e.kind, "code": e.code} for e in ENVS]
    )
    write_stage(store, RUN, GEN, "pool", {"pool": pool.assign(source="replay")})


def _params(path: str) -> dict[str, torch.Tensor]:
    return load_file(str(Path(path) / "model.safetensors"))


def _generates(path: str) -> str:
    gen = TransformersGenerator(path, device="cpu", dtype="float32", batch_size=2)
    req = GenerationRequest(messages=[{"role": "user", "content": "Say hi."}])
    text = gen.generate([req], SamplingParams(temperature=0.0, max_new_tokens=8))[0].text
    gen.close()
    return text


def test_with_the_agent_frozen_the_batch_holds_only_the_designers_samples(  # type: ignore[no-untyped-def]
    generation_frames, tiny_generator, tmp_path
) -> None:
    store = Store(str(tmp_path))
    _store_generation(store, generation_frames)
    both = build_batch(_cfg(str(tmp_path)), store, RUN, GEN, 0, tiny_generator.tokenizer)
    alone = build_batch(_cfg(str(tmp_path), "training.roles=designer"), store, RUN, GEN, 0, tiny_generator.tokenizer)
    assert len(both.samples(AGENT)) == 4 and len(both.samples(DESIGNER)) == 1
    assert alone.samples(AGENT) == [] and alone.samples(DESIGNER) == both.samples(DESIGNER)


def test_loss_mask_covers_exactly_the_agent_tokens(generation_frames, tiny_generator, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = Store(str(tmp_path))
    _store_generation(store, generation_frames)
    cfg = _cfg(str(tmp_path))
    gen = tiny_generator  # its tokenizer
    batch = build_batch(cfg, store, RUN, GEN, 0, gen.tokenizer)
    episodes = generation_frames["episodes"]
    no_hint = episodes[episodes["condition"] == "no_hint"]
    assert len(batch.samples(AGENT)) == len(no_hint) == 4  # hinted plays are never trained on
    assert len(batch.samples(DESIGNER)) == 1  # the invalid reply is never trained on
    assert batch.samples()[0].role == DESIGNER  # the designer's samples come first
    for row in no_hint.itertuples():
        group = [s for s in batch.samples(AGENT) if s.group == f"agent:{row.env_id}"]
        sample = next(s for s in group if s.prompt_ids + s.completion_ids == list(row.token_ids))
        assert sample.reward == row.episode_return and sample.source_id == row.episode_id
        # The advantage is SPADE's z-score over the plays of the environment at this step.
        rewards = [s.reward for s in group]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        assert sample.advantage == pytest.approx((sample.reward - mean) / (std + 1e-8))
        if row.env_id == SEEDS["data_retrieval"].env_id and not row.terminated:
            # A tool-use play cut by the turn limit stays in its group but is masked out of the loss.
            assert sum(sample.env_mask) == 0
            continue
        trained = [t for t, m in zip(sample.completion_ids, sample.env_mask, strict=True) if m]
        agent_text = "".join(t["content"] for t in row.transcript if t["role"] == "assistant")
        decoded = gen.tokenizer.decode(trained, skip_special_tokens=True)
        assert decoded.replace("\n", "") == agent_text.replace("\n", "")
        env_tokens = [t for t, m in zip(sample.completion_ids, sample.env_mask, strict=True) if not m]
        masked_out = gen.tokenizer.decode(env_tokens)
        for turn in row.transcript[2:]:  # later observations are environment text: never trained on
            if turn["role"] == "user":
                assert turn["content"].strip()[:40] in masked_out
    (design,) = batch.samples(DESIGNER)
    assert (design.reward, design.advantage, design.source_id) == (0.8, 0.5, "des1")  # not z-scored
    assert build_batch(cfg, store, RUN, GEN, 1, gen.tokenizer).samples(DESIGNER) == []  # due at one step only
    # A fixed batch size (the authors' 192, here 3): the designer's sample first, the agent's tail cut.
    fixed = build_batch(_cfg(str(tmp_path), "training.global_batch_size=3"), store, RUN, GEN, 0, gen.tokenizer)
    assert [s.role for s in fixed.samples()] == [DESIGNER, AGENT, AGENT] and fixed.trimmed == 2
    assert [s.source_id for s in fixed.samples()] == [s.source_id for s in batch.samples()[:3]]


def test_full_finetuning_steps_change_weights_and_carry_one_optimizer(micro_frames, micro_model_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = Store(str(tmp_path))
    _store_generation(store, micro_frames)
    cfg = _cfg(str(tmp_path), model=micro_model_dir)
    summary = train_step(cfg, store, RUN, GEN, 0)
    assert summary.kind == "full" and summary.steps == 1, summary
    assert summary.agent_samples == 4 and summary.designer_samples == 1
    # The summary says how far the step moved the weights, and the line a user sees shows it.
    assert summary.grad_norm is not None and summary.grad_norm > 0
    assert summary.weight_delta is not None and summary.weight_delta > 0
    assert summary.weight_delta_relative is not None and 0 < summary.weight_delta_relative < 1
    assert "weights moved" in summary.line() and "grad norm" in summary.line()
    assert checkpoint_complete(store, RUN, S0 + 1)
    path = model_path_for_checkpoint(cfg, store, RUN, S0 + 1)
    assert model_for_step(cfg, store, RUN, S0 + 1) == path  # the next step plays the checkpoint it wrote
    assert {"optimizer.pt", "scheduler.pt"} <= set(read_marker(store, RUN, S0 + 1)["files"])
    # What the train stage lists in its marker: the checkpoint's marker file and the tables the step wrote.
    listed = {w.table: w for w in checkpoint_files(store, RUN, S0 + 1)}
    assert set(listed) == {"checkpoint", "train_metrics", "train_samples"}
    assert listed["train_samples"].rows == 5 and listed["train_samples"].path.endswith("/train-s0-0.parquet")
    before, after = _params(micro_model_dir), _params(path)
    changed = sum(not torch.equal(before[k], after[k]) for k in before)
    assert changed > len(before) // 2, f"only {changed}/{len(before)} tensors changed"
    # The reported move is the two checkpoints' difference (the trainer reads the first back, holds no copy).
    moved = sum(float((after[k].double() - before[k].double()).pow(2).sum()) for k in before) ** 0.5
    size = sum(float(before[k].double().pow(2).sum()) for k in before) ** 0.5
    assert summary.weight_delta == pytest.approx(moved, rel=1e-3)
    assert summary.weight_delta_relative == pytest.approx(moved / size, rel=1e-3)
    assert (Path(path) / "tokenizer.json").is_file() or (Path(path) / "tokenizer_config.json").is_file()
    assert isinstance(_generates(path), str)
    metrics = store.read_table("train_metrics", run_id=RUN, gen=GEN)
    assert set(metrics["role"]) == {AGENT, DESIGNER} and set(metrics["step"]) == {S0}
    assert metrics["loss"].map(math.isfinite).all() and (metrics["tokens"] > 0).all()
    assert (metrics["learning_rate"] == 1e-4).all()  # constant schedule
    assert metrics["kl"].isna().all()  # beta 0: no reference model is loaded, no KL term
    # Behaviour log-probs were stored by the engine (the raw distribution's, though it sampled at temperature
    # 0.6; the oracle's plays and the designer's reply have none): this step is on-policy, so every weight is 1.
    assert (metrics["tis_weight_mean"] - 1.0).abs().max() < 1e-4, metrics["tis_weight_mean"].tolist()
    samples = store.read_table("train_samples", run_id=RUN, gen=GEN)
    assert len(samples) == 5 and set(samples["role"]) == {AGENT, DESIGNER}
    designer = samples[samples["role"] == DESIGNER].iloc[0]
    assert (designer["source_id"], designer["advantage"], designer["behaviour_step"]) == ("des1", 0.5, 0)
    assert set(samples[samples["role"] == AGENT]["source_id"]) == set(micro_frames["episodes"].query(
        "condition == 'no_hint'")["episode_id"])  # fmt: skip
    assert store.fs.glob(f"{store.run_dir(RUN)}/tensorboard/step={S0}/**/events.out.tfevents.*")

    # One optimizer for the run: the next step (the same stored plays stand in for its own) continues the
    # AdamW state of the checkpoint it plays, and redoing that step after a "kill" gives the same weights.
    step1 = micro_frames["episodes"].assign(policy_step=S0 + 1)
    write_stage(store, RUN, GEN, "rollout-s1", {"episodes": step1})
    train_step(cfg, store, RUN, GEN, 1)
    optimizer = torch.load(Path(store.checkpoint_dir(RUN, S0 + 2)) / "optimizer.pt", weights_only=True)
    assert {int(v["step"]) for v in optimizer["state"].values()} == {2}  # AdamW's own count: two updates
    first = _params(model_path_for_checkpoint(cfg, store, RUN, S0 + 2))
    store.remove_dir(store.checkpoint_dir(RUN, S0 + 2))
    train_step(cfg, store, RUN, GEN, 1)
    again = _params(model_path_for_checkpoint(cfg, store, RUN, S0 + 2))
    assert all(torch.allclose(first[k], again[k], rtol=0, atol=1e-7) for k in first)


def test_truncated_importance_weights_are_capped_when_the_behaviour_policy_differs(  # type: ignore[no-untyped-def]
    micro_frames, micro_model_dir, tmp_path
) -> None:
    store = Store(str(tmp_path))
    frames = dict(micro_frames)
    # A behaviour policy far less confident than the trained one: exp(logp_train - logp_behaviour) >> high.
    frames["episodes"] = frames["episodes"].assign(logprobs=[[-50.0] * len(t) for t in frames["episodes"]["token_ids"]])
    _store_generation(store, frames)
    cfg = _cfg(str(tmp_path), "designer.train=false", "training.tis_high=1.5", model=micro_model_dir)
    train_step(cfg, store, RUN, GEN, 0)
    metrics = store.read_table("train_metrics", run_id=RUN, gen=GEN)
    assert metrics["tis_weight_mean"].tolist() == [1.5] and metrics["tis_clipped_fraction"].tolist() == [1.0]
    # every weight clamped at 1.5: the spread the table keeps is that one value
    spread = [metrics[f"tis_weight_{k}"].tolist() for k in ("min", "p10", "p50", "p90", "max")]
    assert spread == [[1.5]] * 5, spread


def _far_checkpoint(store: Store, base: str, out: Path) -> None:
    """Checkpoint S0 of the run: the base micro model with every weight moved (noise of std 0.05, about its
    initial scale), a policy far from the base as after many updates."""
    import shutil

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (Path(base) / name).is_file():
            shutil.copy(Path(base) / name, out / name)
    write_checkpoint(store, out, RUN, S0, {"kind": "full", "parent_step": 0})


def test_kl_is_taken_against_the_base_model_and_clamped(micro_frames, micro_model_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The authors' tool use: --kl-loss-coef 0.005, low_var_kl, --ref-load = the base model.
    kl_on = ("training.beta=0.005", "training.drop_zero_advantage=false", "designer.train=false")
    far, same = Store(str(tmp_path / "far")), Store(str(tmp_path / "same"))
    for store in (far, same):
        _store_generation(store, micro_frames)
    _far_checkpoint(far, micro_model_dir, tmp_path / "far-model")
    train_step(_cfg(far.base, *kl_on, model=micro_model_dir), far, RUN, GEN, 0)
    # The step's own starting checkpoint as the reference (what the trainer used before): here the step
    # starts from the base model itself, so policy and reference agree and the term is ~0.
    train_step(_cfg(same.base, *kl_on, model=micro_model_dir), same, RUN, GEN, 0)
    (far_kl,) = far.read_table("train_metrics", run_id=RUN, gen=GEN)["kl"].tolist()
    (same_kl,) = same.read_table("train_metrics", run_id=RUN, gen=GEN)["kl"].tolist()
    assert 0.01 < far_kl <= 10.0, far_kl  # clamped per token to [-10, 10], as Slime's low_var_kl
    assert abs(same_kl) < 1e-5, same_kl


def test_lora_under_accelerate_launch_on_s3_loads_back(micro_frames, micro_model_dir, s3_bucket, s3_endpoint) -> None:  # type: ignore[no-untyped-def]
    store = Store(s3_bucket, endpoint_url=s3_endpoint)
    _store_generation(store, micro_frames)
    overrides = (f"store.endpoint_url={s3_endpoint}", "training.lora=true", "training.lora_r=4")
    cfg = _cfg(s3_bucket, *overrides, model=micro_model_dir)
    lines: list[str] = []
    summary = launch_training(cfg, store, RUN, GEN, 0, echo=lines.append)
    assert summary.kind == "lora" and summary.steps >= 1, "\n".join(lines[-20:])
    marker = read_marker(store, RUN, S0 + 1)
    assert "adapter_config.json" in marker["files"] and "model.safetensors" not in marker["files"]
    merged = model_path_for_checkpoint(cfg, store, RUN, S0 + 1)  # downloaded from S3, merged onto the base
    before, after = _params(micro_model_dir), _params(merged)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert isinstance(_generates(merged), str)


def test_generation_without_trainable_samples_is_reported_not_crashed(tmp_path, tiny_model_dir) -> None:  # type: ignore[no-untyped-def]
    store = Store(str(tmp_path))
    cfg = _cfg(str(tmp_path))
    summary = train_step(cfg, store, RUN, 1, 0)  # nothing stored at all
    assert summary.kind == "unchanged" and "no trainable samples" in (summary.skipped_reason or "")
    assert checkpoint_complete(store, RUN, 1)
    assert model_for_step(cfg, store, RUN, 1) == model_path_for_checkpoint(cfg, store, RUN, 0)


def test_all_zero_variance_groups_are_reported_not_trained(generation_frames, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = Store(str(tmp_path))
    frames = dict(generation_frames)
    frames["episodes"] = frames["episodes"].assign(episode_return=0.0)
    frames["designer_rewards"] = frames["designer_rewards"].assign(centred=0.0, reward=0.0)
    _store_generation(store, frames)
    summary = train_step(_cfg(str(tmp_path)), store, RUN, GEN, 0)
    assert summary.kind == "unchanged" and summary.zero_variance_groups == 3
    assert "zero reward variance" in (summary.skipped_reason or "")
    assert store.read_table("train_metrics", run_id=RUN).empty


def test_the_summary_counts_only_the_samples_of_the_update(micro_frames, micro_model_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A designer reward centred to 0 (a design alone in its skill): drop_zero_advantage leaves it out, so the
    # summary counts no designer sample, as the update's train_samples rows hold none.
    store = Store(str(tmp_path))
    frames = dict(micro_frames)
    frames["designer_rewards"] = frames["designer_rewards"].assign(centred=0.0, reward=0.0)
    _store_generation(store, frames)
    summary = train_step(_cfg(str(tmp_path), model=micro_model_dir), store, RUN, GEN, 0)
    assert summary.kind == "full" and summary.designer_samples == 0 and summary.dropped_samples >= 1, summary
    trained = store.read_table("train_samples", run_id=RUN, gen=GEN)
    assert len(trained) == summary.agent_samples + summary.designer_samples
    assert set(trained["role"]) == {"agent"}


def test_a_signal_free_step_still_steps_adamw_when_asked(micro_frames, micro_model_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The authors' optimizer steps whatever the advantages: with all of them 0 the gradient is 0, but AdamW's
    # decoupled weight decay still shrinks every decayed weight (lr 1e-4 x wd 0.1 = 1e-5 of each).
    store = Store(str(tmp_path))
    frames = dict(micro_frames)
    frames["episodes"] = frames["episodes"].assign(episode_return=0.0)
    _store_generation(store, frames)
    on = ("designer.train=false", "training.weight_decay=0.1", "training.step_on_zero_signal=true")
    summary = train_step(_cfg(str(tmp_path), *on, model=micro_model_dir), store, RUN, GEN, 0)
    assert summary.kind == "full" and summary.zero_variance_groups > 0, summary
    assert summary.grad_norm == 0.0 and summary.dropped_samples == 0  # tiny's drop_zero_advantage keeps them
    trained = model_path_for_checkpoint(_cfg(str(tmp_path)), store, RUN, S0 + 1)
    before, after = _params(micro_model_dir), _params(trained)
    shrunk = [k for k in before if before[k].ndim == 2 and before[k].abs().sum() > 0]
    assert shrunk and all(after[k].abs().sum() < before[k].abs().sum() for k in shrunk)


def test_accelerate_command_uses_the_named_config_and_rejects_unknown_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(str(tmp_path), "training.accelerate_config=ddp-8gpu.yaml")
    cmd = accelerate_command(cfg, "c.yaml", RUN, 3, 1)
    assert cmd[cmd.index("--config_file") + 1].endswith("data/accelerate/ddp-8gpu.yaml")
    assert cmd[-8:] == ["--run-id", RUN, "--gen", "3", "--step", "1", "--config", "c.yaml"]
    with pytest.raises(FileNotFoundError, match=r"'nope\.yaml' not found; files in data/accelerate/: .*ddp-8gpu"):
        accelerate_command(_cfg(str(tmp_path), "training.accelerate_config=nope.yaml"), "c.yaml", RUN, 1, 0)


def test_spade_train_cli_reports_a_generation_with_nothing_to_train(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(app, ["train", "--run-id", RUN, "--gen", "1", "--store", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "gen 1 step 0: no update (no trainable samples" in result.output
    bad = CliRunner().invoke(app, ["train", "--run-id", RUN, "--gen", "0", "--store", str(tmp_path)])
    assert bad.exit_code == 2 and "--gen must be >= 1" in bad.output


@pytest.fixture(scope="module")
def engine_sized_micro_model(micro_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The micro model with heads of 32 (vLLM's CPU attention takes no smaller), its weights scaled up so
    that its distributions are peaked and bf16 rounding shows in the log-probs."""
    from transformers import AutoConfig, AutoModelForCausalLM

    out = tmp_path_factory.mktemp("engine-micro")
    config = AutoConfig.from_pretrained(micro_model_dir)
    config.update({"num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(4.0)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (Path(micro_model_dir) / name).is_file():
            (out / name).write_bytes((Path(micro_model_dir) / name).read_bytes())
    return str(out)


def test_a_bf16_engine_gives_importance_weights_that_the_train_metrics_report(  # type: ignore[no-untyped-def]
    engine_sized_micro_model, tmp_path
) -> None:
    from spade_core.llm.vllm_server import VLLMGenerator

    model = engine_sized_micro_model
    overrides = [f"model.name_or_path={model}", "model.backend=vllm", "model.dtype=bfloat16", "model.device=cpu"]
    engine = VLLMGenerator(load_config("tiny", overrides=overrides).model)
    try:
        frames = _frames(engine)  # plays of the bf16 engine, with its log-probs
    finally:
        engine.close()
    played = frames["episodes"].query("condition == 'no_hint'")
    pairs = zip(played["logprobs"], played["token_ids"], strict=True)
    assert all(lp is not None and len(lp) == len(ids) for lp, ids in pairs)
    store = Store(str(tmp_path))
    _store_generation(store, frames)
    train_step(_cfg(str(tmp_path), "designer.train=false", model=model), store, RUN, GEN, 0)
    metrics = store.read_table("train_metrics", run_id=RUN, gen=GEN)
    # The fp32 trainer and the bf16 engine disagree: weights off 1 (an fp32 engine stays within 1e-4 of 1).
    weight = float(metrics["tis_weight_mean"].iloc[0])
    assert abs(weight - 1.0) > 1e-3 and 0.0 < weight <= 2.0, weight
    low, high = float(metrics["tis_weight_min"].iloc[0]), float(metrics["tis_weight_max"].iloc[0])
    assert 0.0 <= low <= float(metrics["tis_weight_p50"].iloc[0]) <= high <= 2.0 and high > low
    assert 0.0 <= float(metrics["tis_clipped_fraction"].iloc[0]) <= 1.0


def _trainer_of_this_process() -> int | None:
    """The pid of a ``spade_core.train.step`` process that descends from this one (accelerate's child)."""
    import os

    from spade_core.processes import command_line, descendants

    for pid in descendants(os.getpid()):
        command = command_line(pid)
        if "spade_core.train.step" in command and "accelerate" not in command:
            return pid
    return None


def test_a_killed_trainer_is_one_line_naming_its_step_and_the_signal(micro_frames, micro_model_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal
    import threading
    import time

    from spade_core.faults import fault_line, permanent
    from spade_core.train.launch import TrainingError, training_log

    store = Store(str(tmp_path))
    _store_generation(store, micro_frames)
    cfg = _cfg(str(tmp_path), model=micro_model_dir)
    killed: list[int] = []

    def kill_the_trainer() -> None:
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            pid = _trainer_of_this_process()
            if pid is not None:
                time.sleep(1.0)  # it has started importing: killed mid-way, as the probe did
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.1)

    threading.Thread(target=kill_the_trainer, daemon=True).start()
    with pytest.raises(TrainingError) as failed:
        launch_training(cfg, store, RUN, GEN, 0)
    line = str(failed.value)
    log = training_log(RUN, GEN, 0)
    assert killed and line == (
        f"training of run {RUN} gen {GEN} step 0 failed: the trainer was killed by SIGKILL (its whole output: {log})"
    )
    assert log.is_file()  # the whole trace is kept there
    assert fault_line(failed.value) == f"error: {line}"  # what `spade run` prints: this one line
    assert not permanent(failed.value)  # a killed trainer may be retried; a full disk is not:
    full = OSError(28, "No space left on device")
    try:
        raise TrainingError("training of run t gen 2 step 0 failed: OSError: [Errno 28] No space left") from full
    except TrainingError as exc:
        assert permanent(exc)
