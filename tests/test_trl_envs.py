"""An export's environments through TRL's environment interface: the factories' environments play in the
real jail and own their reward (the contract's episode return), their tools have the schemas TRL builds from
type hints and docstrings, and ``examples/train_on_export.py`` runs a real GRPOTrainer step on the embedded
model with one environment per example."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from export_samples import RUN, tiny_run

from spade_core.envs.export import build_export, write_export
from spade_core.envs.export_card import dataset_card
from spade_core.envs.trl_envs import ExportEnvironments, JailedGame, JailedToolUse, with_tool_template
from spade_core.store.artifacts import Store

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def export_dir(tmp_path: Path) -> tuple[str, dict]:
    store = Store(str(tmp_path / "store"))
    envs = tiny_run(store)
    export = build_export(store, RUN)
    write_export(export, str(tmp_path / "export"), dataset_card(export))
    return str(tmp_path / "export"), envs


@pytest.mark.usefixtures("jail_processes_checked")
def test_a_game_owns_its_reward_its_solution_wins_and_a_wrong_move_does_not(export_dir: tuple[str, dict]) -> None:
    from spade_core.envs.gym import JailedEnv

    directory, envs = export_dir
    game = envs["designed"][0]
    reference = JailedEnv(code=game.code)
    try:
        reference.reset(seed=5)
        solution = reference.solution()
    finally:
        reference.close()
    with ExportEnvironments(directory, env_ids=[game.env_id]) as exported:
        episode = exported.factories[game.env_id]()
        assert isinstance(episode, JailedGame)
        observation = episode.reset(prompt=[], seed=5)
        assert observation.endswith("calling the `act` tool with your command.")
        assert episode.get_reward() == 0.0  # nothing played yet
        episode.act(solution)
        assert episode.get_reward() == 1.0
        assert episode.act(solution) == "The episode is over."
        episode.reset(seed=5)  # the same jail, a fresh episode
        episode.act("\\boxed{definitely wrong}")
        assert episode.get_reward() == 0.0


@pytest.mark.usefixtures("jail_processes_checked")
def test_a_tool_use_environment_is_played_through_call_tool_and_answer(export_dir: tuple[str, dict]) -> None:
    from spade_core.envs.gym import JailedEnv

    directory, envs = export_dir
    tool_env = envs["designed"][2]
    reference = JailedEnv(code=tool_env.code)
    try:
        reference.reset(seed=2)
        solution = reference.solution()
    finally:
        reference.close()
    calls = [json.loads(c) for c in re.findall(r"<tool_call>(.*?)</tool_call>", solution)]
    answer = re.search(r"<answer>(.*?)</answer>", solution).group(1)  # type: ignore[union-attr]
    with ExportEnvironments(directory, env_ids=[tool_env.env_id], max_turns=12) as exported:
        episode = exported.factories[tool_env.env_id]()
        assert isinstance(episode, JailedToolUse)
        episode.reset(seed=2)
        for call in calls:
            assert "failed" not in episode.call_tool(call["name"], call["arguments"])
        episode.answer(answer)
        assert episode.get_reward() == 1.0


BROKEN = """
class Broken:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        if seed == 1:
            raise ValueError("no episode at seed 1")
        return "Say \\\\boxed{x}.", {}

    def step(self, action):
        raise RuntimeError("boom")

    def solution(self):
        return "\\\\boxed{x}"
"""


@pytest.mark.usefixtures("jail_processes_checked")
def test_an_environment_that_breaks_in_the_jail_is_an_episode_with_return_0_not_a_crash() -> None:
    episode = JailedGame(BROKEN)
    try:
        assert episode.reset(seed=1) == "The environment failed to start (exception); there is nothing to play."
        assert episode.act("\\boxed{x}") == "The episode is over." and episode.get_reward() == 0.0
        assert episode.reset(seed=2).startswith("Say ")
        assert episode.act("\\boxed{x}") == "The environment failed (exception); the episode is over."
        assert episode.get_reward() == 0.0
        assert episode.reset(seed=2).startswith("Say ")  # a fresh jail
    finally:
        episode._close()


def test_the_tools_have_the_schemas_trl_builds(export_dir: tuple[str, dict]) -> None:
    from transformers.utils import get_json_schema

    directory, _ = export_dir
    with ExportEnvironments(directory) as exported:
        kinds = {type(f()).__name__: f() for f in exported.factories.values()}
        dataset = exported.dataset(seeds=[0, 1])
    assert set(kinds) == {"JailedGame", "JailedToolUse"}
    act = get_json_schema(kinds["JailedGame"].act)["function"]  # type: ignore[attr-defined]
    assert (act["name"], act["parameters"]["required"]) == ("act", ["action"])
    call = get_json_schema(kinds["JailedToolUse"].call_tool)["function"]  # type: ignore[attr-defined]
    assert call["parameters"]["properties"]["arguments"]["type"] == "object"
    assert dataset.column_names == ["prompt", "environment", "seed"]
    assert len(dataset) == 2 * len(exported.factories)


def test_the_embedded_tokenizer_gets_a_template_trl_parses_tool_calls_with(tiny_model_dir: str) -> None:
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema, parse_response, supports_tool_calling

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert not supports_tool_calling(tokenizer)  # SmolLM2's own template: TRL would refuse it
    with_tool_template(tokenizer)
    assert supports_tool_calling(tokenizer)
    add_response_schema(tokenizer)  # what GRPOTrainer does with a template it knows
    tools = [JailedGame("class E: ...").act]  # a bound method, as TRL holds them (the jail opens at reset)
    prefix = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Play."}], tools=tools, add_generation_prompt=True, tokenize=True
    )
    reply = '<tool_call>\n{"name": "act", "arguments": {"action": "\\\\boxed{7}"}}\n</tool_call><|im_end|>'
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    parsed = parse_response(tokenizer, ids, prefix=list(prefix["input_ids"]))  # a BatchEncoding
    assert parsed["tool_calls"][0]["function"] == {"name": "act", "arguments": {"action": "\\boxed{7}"}}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("jail_processes_checked")
def test_the_example_trains_one_trl_step_on_the_export(export_dir: tuple[str, dict], tiny_model_dir: str) -> None:
    directory, envs = export_dir
    spec = importlib.util.spec_from_file_location("train_on_export", ROOT / "examples" / "train_on_export.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    game = envs["designed"][0].env_id
    args = [directory, "--model", tiny_model_dir, "--steps", "1", "--env", game, "--max-completion-length", "24"]
    last = example.main(args)
    assert last["global_step"] == 1
    # the environment owned the reward: TRL logged it under the environment's class
    assert "rewards/JailedGame/mean" in last and "tools/call_frequency" in last
