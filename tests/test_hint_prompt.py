"""``rollout.hint_prompt`` and the hint sampling settings: the authors' request (their system prompt per kind,
the code alone as the user message, the reply kept whole) against ours (the rules in the request, the reply
cut to ``hint_max_words``), through the hint stage with a scripted hint writer and the real jail."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_hint_leaks import VAULT, HintModel, _ctx, _pool

from spade_core.config import load_config
from spade_core.play import hint_batch as hint
from spade_core.play.hints import AUTHORS_GAME_HINT_SYSTEM, AUTHORS_TOOL_HINT_SYSTEM, HINT_SYSTEM, hint_messages

pytestmark = pytest.mark.usefixtures("jail_processes_checked")

LONG = " ".join(["Count"] + ["the digits"] * 70 + ["and box three."])  # 142 words


def test_the_authors_request_is_their_system_prompt_and_the_code_alone(tmp_path: Path) -> None:
    ctx, model = _ctx(tmp_path, "rollout.hint_prompt=authors"), HintModel([LONG])
    frame, _ = hint.hints_and_counts(ctx.play_run(), _pool(), model)
    (request,), _ = model.calls[0]
    assert request.messages == [
        {"role": "system", "content": AUTHORS_GAME_HINT_SYSTEM},
        {"role": "user", "content": f"Environment code:\n```python\n{VAULT}\n```"},
    ]
    assert frame.hint[0] == LONG  # no word cut
    ctx, model = _ctx(tmp_path / "ours"), HintModel([LONG])
    frame, _ = hint.hints_and_counts(ctx.play_run(), _pool(), model)
    (request,), _ = model.calls[0]
    assert request.messages[0] == {"role": "system", "content": HINT_SYSTEM}
    words = ctx.cfg.rollout.hint_max_words
    assert f"at most {words} words" in request.messages[1]["content"] and len(frame.hint[0].split()) == words


def test_the_authors_tool_prompt_asks_for_a_value_free_plan_and_their_parse_reads_a_json_hint() -> None:
    system = hint_messages("class T: ...", "tool", 100, "authors")[0]["content"]
    assert system == AUTHORS_TOOL_HINT_SYSTEM and "<answer>done</answer>" in system and "placeholder" in system
    assert "\\boxed{answer}" in AUTHORS_GAME_HINT_SYSTEM and "under 100 words" in AUTHORS_GAME_HINT_SYSTEM
    from spade_core.play.hints import read_hint

    wrapped = '```json\n{"hint": "Sort them first."}\n```'
    assert read_hint(wrapped, 100, "authors") == "Sort them first."
    assert read_hint(wrapped, 100, "ours") == ""  # ours drops fenced blocks


def test_hint_sampling_is_the_authors_in_the_paper_presets_and_the_models_elsewhere(tmp_path: Path) -> None:
    ctx, model = _ctx(tmp_path, "rollout.hint_top_p=0.9", "rollout.hint_top_k=0"), HintModel(["Count up."])
    hint.hints_and_counts(ctx.play_run(), _pool(), model)
    params = model.calls[0][1]
    assert (params.temperature, params.top_p, params.top_k) == (0.3, 0.9, None)
    ctx, model = _ctx(tmp_path / "ours"), HintModel(["Count up."])
    hint.hints_and_counts(ctx.play_run(), _pool(), model)
    params = model.calls[0][1]
    assert (params.top_p, params.top_k) == (ctx.cfg.model.top_p, ctx.cfg.model.top_k) == (0.95, 20)
    paper = load_config("paper-games").rollout
    assert (paper.hint_temperature, paper.hint_top_p, paper.hint_top_k, paper.hint_prompt) == (0.3, 0.9, 0, "authors")
