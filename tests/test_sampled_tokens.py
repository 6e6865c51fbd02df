"""The designer is trained on exactly what it sampled from exactly what the engine was sent: the prompt ids
stored with each design (the engine's own, checked against the chat template's rendering), the sampled
tokens with nothing appended (a reply cut at the token limit ends where it was cut); an older row without
prompt ids is rendered as before. A play whose model call failed is no sample of the agent's."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from samples import ROWS, as_stage, frame, write_stage

from spade_core.config import load_config
from spade_core.designer.memory import Memory
from spade_core.designer.prompt_tokens import render_prompt_ids
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams
from spade_core.pipeline.context import GenerationContext
from spade_core.store.artifacts import Store
from spade_core.train.data import agent_samples, designer_samples

MESSAGES = [{"role": "system", "content": "You design games."}, {"role": "user", "content": "Design one."}]
OTHER_TEMPLATE = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] "


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: str) -> Any:
    from spade_core.llm.hf import load_tokenizer

    return load_tokenizer(tiny_model_dir)


def design(**columns: Any) -> dict[str, Any]:
    """A rewarded design row as ``due_designs`` hands it to the trainer."""
    row = dict(ROWS["designs"], design_id="d1", env_id="e1", prompt=json.dumps(MESSAGES), completion="x")
    return row | {"raw": 0.5, "reward": 1.5, "prompt_ids": None} | columns


def test_a_reply_cut_at_the_token_limit_is_trained_as_it_was_sampled(tokenizer: Any) -> None:
    eos = int(tokenizer.eos_token_id)
    cut = [int(t) for t in tokenizer("def reset(self", add_special_tokens=False)["input_ids"]]
    rows = [
        design(design_id="cut", completion_ids=cut, logprobs=[-0.5] * len(cut)),
        design(design_id="stopped", completion_ids=[*cut, eos], logprobs=[-0.5] * (len(cut) + 1)),
        design(design_id="text", completion="def reset(self", completion_ids=None, logprobs=None),
    ]
    samples = {s.source_id: s for s in designer_samples(pd.DataFrame(rows), tokenizer)}
    # no end-of-turn token is added to the reply the budget cut: every trained token is a sampled one
    assert samples["cut"].completion_ids == cut and samples["cut"].env_mask == [1] * len(cut)
    assert samples["cut"].logprobs == [-0.5] * len(cut)
    # a reply that stopped by itself sampled its end-of-turn token: trained, as any sampled token
    assert samples["stopped"].completion_ids == [*cut, eos] and samples["stopped"].trained_tokens == len(cut) + 1
    # a text-only backend's reply: its text's tokens, nothing appended, no behaviour log-probs
    assert samples["text"].completion_ids == cut and samples["text"].logprobs is None
    # misaligned log-probs are dropped rather than shifted
    (odd,) = designer_samples(pd.DataFrame([design(completion_ids=cut, logprobs=[-0.5])]), tokenizer)
    assert odd.completion_ids == cut and odd.logprobs is None


def test_stored_prompt_ids_are_trained_and_a_changed_template_is_reported_not_trained(
    tokenizer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sent = render_prompt_ids(tokenizer, MESSAGES, None)
    row = design(prompt_ids=sent)
    reports: list[str] = []
    (sample,) = designer_samples(pd.DataFrame([row]), tokenizer, report=reports.append)
    assert sample.prompt_ids == sent and reports == []
    # the template changed after the design was generated: the engine saw another prompt than the trainer
    # would render, so the design is left out and named, never trained on either prompt
    changed = copy.deepcopy(tokenizer)
    changed.chat_template = OTHER_TEMPLATE
    assert render_prompt_ids(changed, MESSAGES, None) != sent
    kept = design(design_id="d2", env_id="e2", prompt_ids=render_prompt_ids(changed, MESSAGES, None))
    samples = designer_samples(pd.DataFrame([row, kept]), changed, report=reports.append)
    assert [s.source_id for s in samples] == ["d2"] and samples[0].prompt_ids == kept["prompt_ids"]
    (line,) = reports
    assert "design d1 (env e1)" in line and "not trained" in line and "\n" not in line
    # by default the line is a warning in the log
    with caplog.at_level("WARNING", logger="spade_core.train.data"):
        assert designer_samples(pd.DataFrame([row]), changed) == []
    assert [r.getMessage() for r in caplog.records] == [line]


def test_a_row_without_prompt_ids_is_rendered_as_before(tokenizer: Any, tmp_path: Path) -> None:
    rendered = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    rendered = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
    old = {k: v for k, v in design().items() if k != "prompt_ids"}  # a frame from before the column
    for row in (old, design(prompt_ids=None), design(prompt_ids=[])):
        (sample,) = designer_samples(pd.DataFrame([row]), tokenizer)
        assert sample.prompt_ids == rendered
    # a designs file an older writer wrote, without the column, reads back with nulls and trains the same way
    import pyarrow.parquet as pq

    from spade_core.store.verdicts import final_designs

    store = Store(str(tmp_path))
    stored = frame("designs", 1).assign(prompt=json.dumps(MESSAGES))
    (path,) = write_stage(store, "old", 1, "design", {"designs": stored}).files["designs"]
    pq.write_table(pq.read_table(path).drop_columns(["prompt_ids"]), path)
    assert "prompt_ids" not in pq.read_schema(path).names
    validations = frame("validations", 1).assign(design_id="x1-0", ok=True, error_type=None)
    write_stage(store, "old", 1, "validate", {"validations": validations})
    final = final_designs(store, "old", 1)
    assert final["prompt_ids"].isna().all()
    (sample,) = designer_samples(final.assign(raw=0.5, reward=1.0), tokenizer)
    assert sample.prompt_ids == rendered and sample.completion_ids == [5, 6]


class Sent:
    """A generator that passes every request to the real one and keeps the prompt ids the engine generated
    from (the backend's own ``prompt_ids``: a request's ids when it carries them)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_ref, self.supports_token_prompts, self.tokenizer = inner.model_ref, True, inner.tokenizer
        self.requests: list[GenerationRequest] = []
        self.sent: list[list[int]] = []

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        self.requests += requests
        self.sent += [self.inner.prompt_ids(r) for r in requests]
        return list(self.inner.generate(requests, params))

    def close(self) -> None:
        pass


def test_the_design_stage_stores_the_prompt_ids_it_sent_and_trains_on_them(  # type: ignore[no-untyped-def]
    tmp_path: Path, micro_generator
) -> None:
    """Design and validate with the transformers backend (a repair round, so a retry's row is checked too): every
    row stores the ids the engine generated from, the trainer trains on exactly those and the sampled
    tokens, and a reply the budget cut ends where it was cut."""
    from spade_core.pipeline.stages import documents
    from spade_core.pipeline.stages.design import design as design_stage
    from spade_core.pipeline.stages.validate import validate_shard

    overrides = [
        "designer.mode=write",
        "designer.documents_per_generation=2",
        "designer.group_size=1",
        "designer.skills_per_generation=1",
        "designer.kind=game",
        "designer.max_new_tokens=8",  # the micro model writes noise: every reply is cut at the budget
        "designer.max_attempts=2",
        "designer.repair_rounds=1",
        "designer.memory_negative=0",
        "corpus.max_words=60",
        "corpus.max_words_tool=60",
        "memory.report_diversity=false",
        f"store.root={tmp_path}",
    ]
    cfg = load_config("tiny", overrides=overrides)
    ctx = GenerationContext(cfg, Store(str(tmp_path)), "ids", 1)
    engine = Sent(micro_generator)
    as_stage(ctx, "documents", lambda run: documents.run(run, None))
    as_stage(ctx, "design", lambda run: design_stage(run, run.read("documents", ["documents"]), engine, Memory()))
    as_stage(ctx, "validate", lambda run: validate_shard(run, run.read_shard("designs", "design", 0), 0, engine))
    designs = ctx.read("designs", ["design", "validate"]).sort_values(["attempt", "design_id"])
    assert sorted(designs["attempt"]) == [0, 0, 1, 1]  # no noise is a valid game: each prompt was repaired
    assert len(engine.requests) == len(designs)
    by_messages = {json.dumps(r.messages): ids for r, ids in zip(engine.requests, engine.sent, strict=True)}
    tokenizer = micro_generator.tokenizer
    for row in designs.itertuples():
        stored = [int(t) for t in row.prompt_ids]
        # the row's ids are the ids the engine generated from, the template's rendering of its prompt
        assert stored == by_messages[row.prompt]
        assert stored == render_prompt_ids(tokenizer, json.loads(row.prompt), cfg.model.enable_thinking)
    repairs = designs[designs["attempt"] == 1]
    for row in repairs.itertuples():  # a repair's prompt is the conversation its reply was sampled from
        first = designs[(designs["design_id"] == row.design_id) & (designs["attempt"] == 0)].iloc[0]
        messages = json.loads(row.prompt)
        assert messages[: len(json.loads(first.prompt))] == json.loads(first.prompt)
        assert messages[-2] == {"role": "assistant", "content": first.completion}
        assert "failed validation" in messages[-1]["content"]
    eos = int(tokenizer.eos_token_id)
    cut = 0
    for row in designs.to_dict("records"):
        (sample,) = designer_samples(pd.DataFrame([row]).assign(raw=1.0, reward=1.0), tokenizer)
        assert sample.prompt_ids == [int(t) for t in row["prompt_ids"]]
        assert sample.completion_ids == [int(t) for t in row["completion_ids"]] and all(sample.env_mask)
        cut += len(sample.completion_ids) == 8 and sample.completion_ids[-1] != eos
    assert cut >= 1  # a reply cut at the budget is trained without an end token


def test_a_play_whose_model_call_failed_is_left_out_of_its_group() -> None:
    plays = frame("episodes", 3).assign(env_id="e1", seed=[0, 1, 2], episode_return=[1.0, 0.0, 0.0])
    plays.loc[2, ["error_type", "terminated"]] = ["model_error", False]
    samples, skipped = agent_samples(plays)
    assert skipped == 1 and [s.source_id for s in samples] == ["ep1-0", "ep1-1"]
    # the group's z-scores are over the two real plays: a failed call is no 0 among them
    assert [round(s.advantage, 6) for s in samples] == [1.0, -1.0]
    broken = plays.assign(error_type=[None, None, "timeout"])
    assert agent_samples(broken)[1] == 1
