"""Parameter mutation as a design mode (``designer.mode: parameters``): the parent a prompt gets, the prompt,
the variant built from a reply, a repair round that asks for parameters, and the novelty stage refusing a
copy of the parent's parameters. Real jails validate the variants; a scripted designer decides what the
replies hold, so the bookkeeping is tested independently of what the tiny model writes."""

from __future__ import annotations

import json
import random

import pytest
from agents import InOrder
from samples import designed_and_checked

from spade_core.config import load_config
from spade_core.designer.design import REPAIR_PARAMETERS
from spade_core.designer.memory import Memory
from spade_core.designer.mutation import choose_parent
from spade_core.designer.parameters import parameter_block, parameters_of
from spade_core.envs.seeds import load_seed_envs, load_starter_envs
from spade_core.pipeline.context import GenerationContext
from spade_core.store.artifacts import Store
from spade_core.store.verdicts import final_designs

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
STARTER = next(e for e in load_starter_envs() if e.skill == "spatial_reasoning")
COPY = f"Sure.\n```python\n{parameter_block(STARTER.code)}\n```"
VARIANT = 'New values from the document:\n```python\n_OBJECTS = ["river", "delta", "levee", "bank"]\n```\nDone.'
TOO_FEW = '```python\n_OBJECTS = ["river"]\n```'  # loads, but reset draws two objects from one: an exception
REPAIRED = '```python\n_OBJECTS = ["moon", "sun", "comet"]\n```'


def test_the_parent_is_of_the_skill_first_and_has_parameters() -> None:
    rng = random.Random(0)
    # No starter of the skill: the skill's seed (its parameters are what the prompt shows), where mutate
    # takes a short starter of another skill.
    parent = choose_parent(Memory.seeded(), "mathematical_reasoning", rng, parameters=True)
    seed = next(e for e in load_seed_envs() if e.skill == "mathematical_reasoning")
    assert (parent.env_id, parent.source) == (seed.env_id, "seed") and parameters_of(parent.code)
    assert choose_parent(Memory.seeded(), "mathematical_reasoning", rng).source == "starter"
    assert choose_parent(Memory(), "spatial_reasoning", rng, parameters=True).env_id == STARTER.env_id


@pytest.fixture(scope="module")
def generation(tmp_path_factory: pytest.TempPathFactory) -> tuple[GenerationContext, InOrder]:
    """Generation 3 of a run in parameters mode (spatial reasoning: the starter is the parent): three prompts,
    whose replies copy the parameters, vary them, and break them (then a repair round mends them);
    designed, validated and checked for novelty."""
    root = tmp_path_factory.mktemp("parameters")
    overrides = [
        "designer.mode=parameters",
        "designer.kind=game",
        "designer.skills_per_generation=1",
        "designer.documents_per_generation=3",
        "designer.max_attempts=2",
        "designer.repair_rounds=1",
        "designer.max_new_tokens=64",
        f"store.root={root}",
    ]
    cfg = load_config("tiny", overrides=overrides)
    ctx = GenerationContext(cfg, Store(str(root)), "par", 3)  # generation 3's skill window: spatial reasoning
    designer = InOrder([COPY, VARIANT, TOO_FEW, REPAIRED])
    designed_and_checked(ctx, designer)
    return ctx, designer


def test_the_prompt_shows_the_document_and_the_parameters_not_the_code(generation) -> None:  # type: ignore[no-untyped-def]
    _, designer = generation
    (message,) = designer.requests[0].messages  # no system prompt
    prompt = message["content"]
    assert prompt.index("<document>") < prompt.index(parameter_block(STARTER.code))
    assert "def step" not in prompt and "Measured base win rate" not in prompt and "import" not in prompt


def test_a_variant_is_the_parent_with_the_new_values_and_passes(generation) -> None:  # type: ignore[no-untyped-def]
    ctx, _ = generation
    final = final_designs(ctx.store, "par", 3)
    variant = final[final["code"].str.contains("\"river\"|'river'", regex=True)].iloc[0]
    assert bool(variant.ok), variant.message
    assert parameters_of(variant.code) == {"_OBJECTS": ["river", "delta", "levee", "bank"]}
    # The parent's docstring cut to its first paragraph, the assignment replaced, every other line as it was.
    assert variant.code.startswith('"""Which of two objects is on the left? Both candidates are shown inside')
    assert "Measured base win rate" not in variant.code
    assert "_OBJECTS = ['river', 'delta', 'levee', 'bank']\n" in variant.code
    after = variant.code.split("_OBJECTS = ", 1)[1].split("\n", 1)[1]
    assert after == STARTER.code.split("_OBJECTS = ", 1)[1].split("\n", 1)[1]
    assert variant.parent_env_id == STARTER.env_id and variant.completion == VARIANT


def test_a_broken_variant_is_repaired_with_a_request_for_parameters(generation) -> None:  # type: ignore[no-untyped-def]
    ctx, designer = generation
    repair = designer.requests[3].messages
    assert repair[-1]["content"].endswith(REPAIR_PARAMETERS) and repair[-2]["content"] == TOO_FEW
    designs = ctx.store.read_table("designs", "par", 3)
    first, second = (
        designs[designs["completion"] == TOO_FEW].iloc[0],
        designs[designs["completion"] == REPAIRED].iloc[0],
    )
    assert (first.design_id, int(first.attempt), int(second.attempt)) == (second.design_id, 0, 1)
    final = final_designs(ctx.store, "par", 3).set_index("design_id")
    assert (
        bool(final.loc[second.design_id].ok)
        and parameters_of(final.loc[second.design_id].code)["_OBJECTS"][0] == "moon"
    )
    validations = ctx.store.read_table("validations", "par", 3)
    broken = validations[(validations["design_id"] == first.design_id) & (validations["attempt"] == 0)].iloc[0]
    assert broken.error_type == "exception"


def test_the_novelty_stage_refuses_a_copy_of_the_parameters(generation) -> None:  # type: ignore[no-untyped-def]
    ctx, _ = generation
    final = final_designs(ctx.store, "par", 3).set_index("completion")
    copy = final.loc[COPY]
    assert (bool(copy.ok), copy.error_type) == (False, "not_novel")
    assert copy.message == "a copy of its parent: 1.000 of its parameters unchanged > 0.9"
    rows = ctx.store.read_table("novelty", "par", 3)
    assert set(rows["check"]) == {"parameters"} and sorted(rows["novel"]) == [False, True, True]
    assert json.loads(final.loc[VARIANT].prompt)[0]["role"] == "user"
