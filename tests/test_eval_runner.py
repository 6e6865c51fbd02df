"""The evaluation runner: every suite for real with the tiny model, a scripted gold agent through the same
loop (multi-turn included), model errors as scored-0 rows, the evals table, and the ``spade eval`` command."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import typer
from typer.testing import CliRunner

from spade_core.cli import eval_cmd
from spade_core.config import load_config
from spade_core.eval import (
    BFCLSuite,
    EvalItem,
    HumanEvalSuite,
    ReasoningGymSuite,
    Suite,
    evaluate,
    evaluate_checkpoint,
    summarize,
)
from spade_core.eval.bfcl import system_prompt
from spade_core.eval.runner import COLUMNS, evaluate_suite
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams
from spade_core.store.artifacts import Store
from spade_core.store.schemas import to_arrow


@dataclass
class GoldAgent:
    """A scripted agent that gives each item's gold replies in turn (a multi-turn item: per turn the
    ground-truth calls, then a reply without calls); ``fail`` lists item ids whose calls error instead."""

    suites: list[Suite]
    items: list[EvalItem]
    fail: set[str] = field(default_factory=set)
    model_ref: str = "scripted:gold"
    supports_token_prompts: bool = False
    batches: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.script: dict[str, tuple[str, list[str]]] = {}
        for suite, item in zip(self.suites, self.items, strict=True):
            gold = suite.gold_response(item)
            replies = [gold]
            if "turns" in item.data:
                replies = [r for turn in json.loads(gold)["turns"] for r in [*turn, "Done."]]
            self.script[self._key(item.messages)] = (item.item_id, replies)

    @staticmethod
    def _key(messages: list[dict[str, str]]) -> str:
        return json.dumps(messages[:2])

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        self.batches.append(len(requests))
        out = []
        for request in requests:
            item_id, replies = self.script[self._key(request.messages)]
            turn = sum(m["role"] == "assistant" for m in request.messages)
            if item_id in self.fail:
                out.append(Completion(text="", error="HTTP 500 from the model server"))
            else:
                out.append(Completion(text=replies[turn]))
        return out

    def close(self) -> None:
        pass


def well_formed(frame, suites: list[Suite], limit: int, seed: int) -> None:  # type: ignore[no-untyped-def]
    assert list(frame.columns) == COLUMNS
    to_arrow("evals", frame)  # exactly the evals schema
    expected = [i.item_id for s in suites for i in s.items(limit, seed)]
    assert list(frame["item_id"]) == expected
    assert frame["score"].between(0.0, 1.0).all() and frame["passed"].map(type).eq(bool).all()
    assert frame["response"].map(lambda r: isinstance(r, str)).all()


def test_every_suite_runs_on_the_tiny_model(tiny_generator, tiny_model_dir: str) -> None:  # type: ignore[no-untyped-def]
    suites: list[Suite] = [
        ReasoningGymSuite(),
        HumanEvalSuite(time_limit_s=5),
        BFCLSuite(categories=("simple", "irrelevance")),
    ]
    frame = evaluate(tiny_generator, suites, limit=2, seed=7, checkpoint=tiny_model_dir, max_new_tokens=8)
    well_formed(frame, suites, 2, 7)
    assert set(frame["checkpoint"]) == {tiny_model_dir}
    assert not frame["response"].str.startswith("[model_error]").any()
    assert list(summarize(frame)["items"]) == [2, 2, 2]


def test_a_multi_turn_item_runs_on_the_tiny_model(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    suite = BFCLSuite(categories=("multi_turn_base",), max_steps_per_turn=1)
    item = suite.item("bfcl/multi_turn_base/3")  # two turns in a file system
    # The real prompt documents every function of the involved classes (~4k tokens: minutes on 2 CPU
    # cores); keep the ground truth's functions so the dialogue loop (generate, execute, next turn) is quick.
    used = {call.split("(")[0] for turn in item.answer for call in turn}
    item.messages[0] = {
        "role": "system",
        "content": system_prompt([f for f in item.data["functions"] if f["name"] in used]),
    }
    frame = evaluate_suite(tiny_generator, suite, [item], "tiny", max_new_tokens=8)
    assert len(frame) == 1 and frame["item_id"][0] == "bfcl/multi_turn_base/3"
    recorded = json.loads(frame["response"][0])
    assert 1 <= len(recorded["turns"]) <= len(item.data["turns"])
    assert frame["score"][0] in (0.0, 1.0)


def test_the_gold_agent_passes_every_suite_through_the_runner() -> None:
    suites: list[Suite] = [ReasoningGymSuite(), HumanEvalSuite(time_limit_s=5), BFCLSuite()]
    items = {s.name: s.items(4, 3) for s in suites}
    agent = GoldAgent([s for s in suites for _ in items[s.name]], [i for s in suites for i in items[s.name]])
    frame = evaluate(agent, suites, limit=4, seed=3, checkpoint="gold")
    well_formed(frame, suites, 4, 3)
    assert frame["passed"].all() and (frame["score"] == 1.0).all()
    multi = frame[frame["item_id"].str.startswith("bfcl/multi_turn_base/")]
    assert len(multi) == 1 and json.loads(multi["response"].iloc[0])["turns"]
    assert agent.batches[0] == 4  # items of a suite are generated in one batch


def test_model_errors_and_garbage_become_zero_rows() -> None:
    suite = ReasoningGymSuite()
    items = suite.items(4, 0)
    agent = GoldAgent([suite] * 4, items, fail={items[0].item_id})
    agent.script[agent._key(items[1].messages)] = (items[1].item_id, ["\x00\ufffd garbage \\boxed{"])
    frame = evaluate(agent, [suite], limit=4, seed=0, checkpoint="gold")
    assert list(frame["score"]) == [0.0, 0.0, 1.0, 1.0] and list(frame["passed"]) == [False, False, True, True]
    assert frame["response"][0] == "[model_error] HTTP 500 from the model server"
    # a suite without a checker of its own names no reason; a failed model call is named
    assert frame["error_type"].iloc[0] == "model_error" and frame["error_type"].iloc[1:].isna().all()


def test_evaluate_checkpoint_writes_the_evals_table(tiny_generator, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = load_config("tiny", None, [f"store.root={tmp_path}", "evaluation.limit=2", "evaluation.seed=5"])
    store = Store(root=str(tmp_path))
    base = evaluate_checkpoint(
        cfg, store, "run-a", 0, suites=["reasoning_gym"], generator=tiny_generator, max_new_tokens=8
    )
    suites: list[Suite] = [ReasoningGymSuite(), BFCLSuite()]
    items = [i for s in suites for i in s.items(2, 5)]
    gold = GoldAgent([s for s in suites for _ in range(2)], items)
    evaluate_checkpoint(cfg, store, "run-a", 1, suites=["reasoning_gym", "bfcl"], generator=gold)
    table = store.read_table("evals", run_id="run-a")
    assert sorted(Path(f).name for f in store.table_files("evals", run_id="run-a", gen=1)) == [
        "eval-bfcl-0.parquet",
        "eval-reasoning_gym-0.parquet",
    ]
    assert len(table) == 6 and set(table["gen"]) == {0, 1}
    assert set(table[table["gen"] == 0]["checkpoint"]) == {"embedded"} == set(base["checkpoint"])
    # Generation 1 ends at global step K: its checkpoint is step K's.
    k = cfg.training.steps_per_generation
    assert set(table[table["gen"] == 1]["checkpoint"]) == {store.checkpoint_dir("run-a", k)}
    assert table[table["gen"] == 1]["passed"].all()
    summary = summarize(table)
    assert list(summary.columns) == ["gen", "checkpoint", "suite", "items", "pass@1", "mean_score"]
    assert summary[summary["gen"] == 1]["pass@1"].tolist() == [1.0, 1.0]


def cli() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)
    app.command("eval")(eval_cmd.eval_)
    app.command("noop")(lambda: None)  # two commands keep "eval" a subcommand
    return app


def test_eval_command_scores_a_checkpoint_and_rejects_unknown_suites(tiny_model_dir: str, tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli(), ["eval", "--suite", "reasoning_gym", "--suite", "gsm8k"])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines()[-1] == (
        "error: unknown evaluation suite 'gsm8k'; allowed: "
        "reasoning_gym, reasoning_gym_hard, humaneval, bfcl, bfcl_multi_turn, bfcl_full, tau2"
    )
    both = runner.invoke(cli(), ["eval", "--checkpoint", tiny_model_dir, "--run-id", "r", "--gen", "1"])
    assert both.exit_code == 2 and "not both" in both.output
    args = ["--suite", "reasoning_gym", "--limit", "2", "--max-new-tokens", "4", "--store", str(tmp_path)]
    args += ["--set", "model.backend=transformers"]  # tiny's engine is tests/test_vllm_engine.py's
    shown = runner.invoke(cli(), ["eval", "--checkpoint", tiny_model_dir, "--json", *args])
    assert shown.exit_code == 0, shown.output
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [r["item_id"] for r in rows] == [i.item_id for i in ReasoningGymSuite().items(2, 1234)]
    written = runner.invoke(cli(), ["eval", "--run-id", "r1", "--gen", "0", *args])
    assert written.exit_code == 0, written.output
    assert "reasoning_gym" in written.output and "pass@1" in written.output
    assert len(Store(root=str(tmp_path)).read_table("evals", run_id="r1", gen=0)) == 2


def test_config_suite_names_are_the_registry() -> None:
    from typing import get_args

    from spade_core.config import SuiteName
    from spade_core.eval import SUITES

    assert set(get_args(SuiteName)) == set(SUITES)
