"""Mutation as a design mode: the parent a prompt gets, the prompt itself, lineage on the design rows, the
novelty stage refusing a copy of the parent (real jails validate the designs), ``spade envs lineage``, and
a catalog over designs written before the lineage column existed. A scripted designer decides what the
replies hold, so the bookkeeping is tested independently of what the tiny model writes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest
from samples import designed_and_checked, frame, write_stage
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.config import MemoryConfig, load_config
from spade_core.designer.memory import Memory, MemoryEntry
from spade_core.designer.mutation import choose_parent, without_docstring
from spade_core.envs.seeds import load_seed_envs, load_starter_envs
from spade_core.llm.base import Completion
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.registry import judges_novelty
from spade_core.report.lineage import lineage
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query
from spade_core.store.verdicts import final_designs

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
STARTER = next(e for e in load_starter_envs() if e.skill == "spatial_reasoning")
# A variant: the same game with other words in most of its lines (it still loads and passes validation).
VARIANT = STARTER.code.replace("left", "west").replace("right", "east").replace("Left", "West")


def _entry(env_id: str, skill: str, win_rate: float, regret: float, gen: int = 1) -> MemoryEntry:
    return MemoryEntry(env_id, skill, "game", f"class E{env_id}: ...\n", win_rate, regret, gen)


def test_the_parent_is_an_in_band_played_environment_else_the_library() -> None:
    rng = random.Random(0)
    memory = Memory(MemoryConfig())
    memory.add(_entry("hot", "spatial_reasoning", 0.5, 0.3))
    memory.add(_entry("easy", "spatial_reasoning", 0.95, 0.9))  # out of the band
    memory.add(_entry("other", "logical_deduction", 0.4, 0.1))
    assert choose_parent(memory, "spatial_reasoning", rng).env_id == "hot"
    # No in-band entry of the skill: one of another skill of the same kind.
    assert choose_parent(memory, "optimization", rng).env_id in {"hot", "other"}
    # An empty (or seeded, never played) memory: the starter of the skill, else any starter of the kind
    # (short modules), else the seed environment of the skill.
    seeded = Memory.seeded()
    parent = choose_parent(seeded, "spatial_reasoning", rng)
    assert (parent.env_id, parent.source, parent.win_rate) == (STARTER.env_id, "starter", None)
    first_starter = load_starter_envs()[0]
    assert choose_parent(seeded, "optimization", rng).env_id == first_starter.env_id
    tool = choose_parent(Memory(), "data_retrieval", rng)  # no tool-use starter: the skill's seed environment
    seed = next(e for e in load_seed_envs() if e.skill == "data_retrieval")
    assert (tool.env_id, tool.source) == (seed.env_id, "seed")


class Designer:
    """Each request gets the next reply of ``replies`` (the parent's code verbatim, or a variant)."""

    model_ref = "scripted:mutator"
    supports_token_prompts = False

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.requests = replies, []  # type: ignore[var-annotated]

    def generate(self, requests, params):  # type: ignore[no-untyped-def]
        out = []
        for r in requests:
            self.requests.append(r)
            out.append(Completion(text=f"```python\n{self.replies[len(self.requests) - 1]}```", token_ids=[1]))
        return out

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def mutated(tmp_path_factory: pytest.TempPathFactory) -> tuple[GenerationContext, Designer]:
    """Generation 1 of a run in mutate mode: two prompts of spatial reasoning; the first reply copies the
    parent, the second is a variant; designed, validated and checked for novelty."""
    root = tmp_path_factory.mktemp("mutate")
    overrides = [
        "designer.mode=mutate",
        "designer.kind=game",
        "designer.skills_per_generation=1",
        "designer.documents_per_generation=2",
        "designer.max_attempts=1",
        "designer.max_new_tokens=64",
        f"store.root={root}",
    ]
    cfg = load_config("tiny", overrides=overrides)
    assert cfg.memory.seed_with_library  # tiny: a seeded memory, never played, so the parent is the starter
    ctx = GenerationContext(cfg, Store(str(root)), "mut", 3)  # generation 3's skill window: spatial reasoning
    designer = Designer([without_docstring(STARTER.code), VARIANT])
    designed_and_checked(ctx, designer)
    return ctx, designer


def test_a_mutation_prompt_shows_the_parent_whole_and_the_row_names_it(mutated) -> None:  # type: ignore[no-untyped-def]
    ctx, designer = mutated
    prompt = designer.requests[0].messages[-1]["content"]
    assert without_docstring(STARTER.code).strip() in prompt and "VARIANT" in prompt and "<document>" in prompt
    assert "Measured base win rate" not in prompt  # the parent's notes are not shown
    designs = ctx.store.read_table("designs", "mut", 3, stages=["design"])
    assert set(designs["parent_env_id"]) == {STARTER.env_id} and set(designs["skill"]) == {"spatial_reasoning"}


def test_the_novelty_stage_refuses_a_copy_of_the_parent(mutated) -> None:  # type: ignore[no-untyped-def]
    ctx, _ = mutated
    assert judges_novelty(ctx.cfg, 3)
    final = final_designs(ctx.store, "mut", 3).set_index("code")
    copy, variant = final.loc[without_docstring(STARTER.code)], final.loc[VARIANT]
    assert (bool(copy.ok), copy.error_type) == (False, "not_novel") and "a copy of its parent" in copy.message
    assert bool(variant.ok), variant.message
    rows = ctx.store.read_table("novelty", "mut", 3)
    assert set(rows["check"]) == {"parent"} and sorted(rows["novel"]) == [False, True]


def test_lineage_walks_back_to_the_library_with_scores(mutated, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx, _ = mutated
    final = final_designs(ctx.store, "mut", 3)
    child = final[final["ok"]].iloc[0]
    # A grandchild in generation 4, written by a mutation of the variant; both scored.
    grand = final.head(1).assign(design_id="g5", env_id="e" * 16, parent_env_id=child.env_id, attempt=0)
    write_stage(ctx.store, "mut", 4, "design", {"designs": grand.drop(columns=["ok", "error_type", "message"])})
    scores = pd.DataFrame(
        {
            "env_id": [child.env_id, "e" * 16, STARTER.env_id],
            "design_id": [child.design_id, "g5", None],
            "skill": "spatial_reasoning",
            "win_rate": [0.5, 0.25, 0.34],
            "r_hint": 0.0,
            "r_no_hint": 0.0,
            "regret": [0.2, 0.1, 0.05],
            "hint_leaked": False,
        }
    )
    write_stage(ctx.store, "mut", 4, "score", {"env_scores": scores})
    chain = lineage(ctx.store, "e" * 16)
    assert list(chain["env_id"]) == ["e" * 16, child.env_id, STARTER.env_id]
    assert list(chain["origin"]) == ["design", "design", "starter"] and list(chain["gen"][:2]) == [4, 3]
    assert list(chain["win_rate"]) == [0.25, 0.5, 0.34] and list(chain["regret"]) == [0.1, 0.2, 0.05]
    result = CliRunner().invoke(app, ["envs", "lineage", "e" * 16, "--store", ctx.store.base])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("env " + "e" * 16) and "gen 4 of mut" in lines[0] and "win rate 0.250" in lines[0]
    assert lines[2].startswith("    parent " + STARTER.env_id) and "starter" in lines[2]
    as_json = CliRunner().invoke(app, ["envs", "lineage", child.env_id, "--store", ctx.store.base, "--json"])
    assert [r["origin"] for r in json.loads(as_json.output)] == ["design", "starter"]
    unknown = CliRunner().invoke(app, ["envs", "lineage", "0" * 16, "--store", ctx.store.base])
    assert unknown.exit_code == 2 and "neither in the store's designs nor in the library" in unknown.output


def test_the_catalog_reads_designs_written_before_the_lineage_column(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    store = Store(str(tmp_path))
    (path,) = write_stage(store, "old", 1, "design", {"designs": frame("designs", 1)}).files["designs"]
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["parent_env_id"]), path)  # as a writer before the column wrote it
    assert "parent_env_id" not in pq.read_schema(path).names
    rows = query(store, "select design_id, parent_env_id from designs")
    assert rows.to_dict("records") == [{"design_id": "x1-0", "parent_env_id": None}]
    assert lineage(store, "e1")["origin"].tolist() == ["design"]
