"""The authors' LLM validator (``validation.llm_validator``): the training model judges the tool-use designs
that passed the jailed checks; a ``\\boxed{no}`` rejects one, every verdict is stored and queryable. A
scripted judge where the point is the bookkeeping, the tiny model where it is what a model says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from samples import validated_generation
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.designer import llm_validator
from spade_core.envs.seeds import load_multiturn_envs, load_seed_envs
from spade_core.llm.base import Completion, SamplingParams
from spade_core.pipeline.context import GenerationContext
from spade_core.store.verdicts import final_designs

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
MULTITURN = [e.code for e in load_multiturn_envs()]
GAME = next(e.code for e in load_seed_envs() if e.kind == "game")


class Model:
    """Designs: the i-th design request gets ``designs[i]``. Judgements: the reply for the judged code is
    ``verdicts[code]`` (a string, or None for a failed model call)."""

    model_ref = "scripted:self"
    supports_token_prompts = False

    def __init__(self, designs: list[str], verdicts: dict[str, str | None]) -> None:
        self.designs, self.verdicts, self.judged = designs, verdicts, []  # type: ignore[var-annotated]

    def generate(self, requests, params):  # type: ignore[no-untyped-def]
        if requests and requests[0].messages[0]["content"] == llm_validator.SYSTEM:
            self.judged.append(params)
            out = []
            for r in requests:
                reply = next(v for code, v in self.verdicts.items() if code.strip() in r.messages[1]["content"])
                out.append(Completion(text="", error="server down") if reply is None else Completion(text=reply))
            return out
        return [Completion(text=f"```python\n{code}```", token_ids=[1], logprobs=[-0.5]) for code in self.designs]

    def close(self) -> None:
        pass


def test_judgements_keep_all_but_a_boxed_no() -> None:
    codes = ["a", "b", "c", "d", "e"]
    replies = {
        "a": "Criterion 2 needs status 'shipped' and no tool sets it. \\boxed{no}",
        "b": "All criteria are reachable. \\boxed{yes}",
        "c": "I am not sure.",
        "d": None,
        "e": "\\boxed{maybe}",
    }
    model = Model([], {f"```python\n{c}\n```": r for c, r in replies.items()})
    out = llm_validator.judge(model, codes, SamplingParams(temperature=0.3, max_new_tokens=64, seed=1))
    assert [(j.verdict, j.keep) for j in out] == [
        ("no", False),
        ("yes", True),
        ("none", True),
        ("error", True),
        ("no", False),
    ]
    assert out[0].reason.startswith("Criterion 2") and out[3].reason == "server down"


def _validate(tmp_path: Path, model: Model, *overrides: str) -> GenerationContext:
    tool = ["designer.kind=tool", "designer.documents_per_generation=3"]
    return validated_generation(tmp_path, model, "judged", *tool, *overrides)


def test_a_no_rejects_the_design_and_every_verdict_is_queryable_in_sql(tmp_path: Path) -> None:
    # two multi-turn designs pass the checks and are judged (no, yes); the game is not judged (tool use only)
    verdicts = {MULTITURN[0]: "step 3 can never hold. \\boxed{no}", MULTITURN[1]: "\\boxed{yes}"}
    model = Model([MULTITURN[0], MULTITURN[1], GAME], verdicts)
    ctx = _validate(tmp_path, model, "validation.llm_validator=true", "validation.llm_validator_max_new_tokens=99")
    (params,) = model.judged  # one batched judgement, at the judge's temperature and budget
    assert (params.temperature, params.max_new_tokens) == (0.3, 99)
    final = final_designs(ctx.store, "judged", 1).sort_values("design_id")
    assert len(final) == 3
    rows = {r.code.strip(): r for r in final.itertuples()}
    rejected, kept, game = rows[MULTITURN[0].strip()], rows[MULTITURN[1].strip()], rows[GAME.strip()]
    assert (rejected.ok, rejected.error_type) == (False, "unsolvable")
    assert rejected.message == "llm_validator: judged impossible: step 3 can never hold. \\boxed{no}"
    assert kept.ok and game.ok
    query = (
        "select llm_verdict, ok, checks['llm_validator'] as judged_ok, count(*) as n from validations "
        "group by all order by llm_verdict nulls last"
    )
    result = CliRunner().invoke(app, ["sql", "--store", str(tmp_path), "--format", "json", query])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"llm_verdict": "no", "ok": False, "judged_ok": False, "n": 1},
        {"llm_verdict": "yes", "ok": True, "judged_ok": True, "n": 1},
        {"llm_verdict": None, "ok": True, "judged_ok": None, "n": 1},
    ]


def test_without_the_switch_nothing_is_judged(tmp_path: Path) -> None:
    model = Model([MULTITURN[0], MULTITURN[1], GAME], {})
    ctx = _validate(tmp_path, model)
    assert model.judged == [] and final_designs(ctx.store, "judged", 1)["ok"].all()


def test_the_tiny_model_judges_a_seed(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    params = SamplingParams(temperature=0.3, max_new_tokens=48, seed=0)
    (judgement,) = llm_validator.judge(tiny_generator, [MULTITURN[0]], params)
    assert judgement.verdict in ("yes", "no", "none") and judgement.keep == (judgement.verdict != "no")
    assert judgement.reason  # what it said (or that it said nothing) is kept
