"""The skill schedule (docs/DESIGN.md §7 step 1): which skills a generation's design prompts target."""

from __future__ import annotations

from spade_core.config import GAME_SKILLS, TOOL_SKILLS, DesignerConfig


def skills_for_generation(gen: int, cfg: DesignerConfig) -> list[str]:
    """The skills of generation ``gen`` (docs/DESIGN.md §7 step 1), round robin per kind: games take
    ``skills_per_generation`` [3] of the 6 game skills, tool use ``tool_skills_per_generation`` [6: all] of
    the 6 tool skills; kind ``both`` gets the game skills, then the tool skills. The window advances by its
    own size each generation (the authors' ``select_active_skills``, ``spade/slime/spade_rollout.py:198-215``).

    >>> from spade_core.config import DesignerConfig
    >>> skills_for_generation(1, DesignerConfig(kind="game", skills_per_generation=3))
    ['mathematical_reasoning', 'logical_deduction', 'spatial_reasoning']
    >>> skills_for_generation(2, DesignerConfig(kind="game", skills_per_generation=3))
    ['pattern_recognition', 'optimization', 'causal_inference']
    >>> len(skills_for_generation(2, DesignerConfig(kind="tool")))
    6
    """
    per_kind = {
        "game": [(GAME_SKILLS, cfg.skills_per_generation)],
        "tool": [(TOOL_SKILLS, cfg.tool_skills_per_generation)],
        "both": [(GAME_SKILLS, cfg.skills_per_generation), (TOOL_SKILLS, cfg.tool_skills_per_generation)],
    }[cfg.kind]
    chosen: list[str] = []
    for pool, count in per_kind:
        count = min(count, len(pool))
        start = ((gen - 1) * count) % len(pool)
        chosen += [pool[(start + i) % len(pool)] for i in range(count)]
    return chosen
