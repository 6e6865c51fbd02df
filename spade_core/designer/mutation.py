"""Mutation as a design mode (``designer.mode: mutate``): the designer rewrites one parent environment.

POET's and OMNI-EPIC's mutation operator: instead of writing an environment from nothing, the designer gets
one parent environment whole, plus the document, and writes a variant (new rules, sizes, wording or goal
grounded in the document). A small model that cannot write a loading module from a specification can
still edit one that loads. The parent is:

1. an environment of the previous generation's memory (its scored pool, starters and replays included)
   whose win rate is in the learnable band ``memory.positive_win_rate`` [0.15, 0.85], of the prompt's
   skill when one is, else of any skill of the prompt's kind; drawn at random among the ``PARENT_POOL``
   highest-regret ones;
2. else a library environment: the starter of the skill, else any starter of the kind (short modules a
   135M model can copy-edit whole), else the seed environment of the skill, else any of the kind; with
   ``designer.parents`` the library is that folder of ``data/seed_envs`` alone (the designer test bed's
   one family, parent of every skill of its kind).

Parameter mutation (``designer.mode: parameters``, :mod:`spade_core.designer.parameters`) takes its parent by the
same rules among environments that have parameters, except that the library is searched by skill first
(starter, then seed) and by kind after: its prompt shows the parameters, not the module.

The parent's ``env_id`` is stored on the design row (``designs.parent_env_id``: lineage), and a design
that is a near-copy of its parent (:func:`parent_similarity` above ``designer.parent_max_similarity``) is
refused by the novelty stage as ``not_novel``: copying the parent earns nothing.
"""

from __future__ import annotations

import difflib
import random
import re
from dataclasses import dataclass

from spade_core.config import skill_kind
from spade_core.designer.memory import Memory
from spade_core.designer.parameters import parameters_of
from spade_core.envs.seeds import SeedEnv, load_seed_envs, load_starter_envs
from spade_core.resources import parents_dir

PARENT_POOL = 10  # parents are drawn from the top 10 in-band memory entries by regret


@dataclass(frozen=True)
class Parent:
    """The environment a mutation starts from."""

    env_id: str
    skill: str
    code: str
    win_rate: float | None  # None: never played (a library environment)
    source: str  # "memory" | "starter" | "seed"


def library(parents: str | None = None) -> list[tuple[SeedEnv, str]]:
    """The library environments a mutation may start from, with their source: the starters then the seed
    library, or with ``designer.parents`` only the environments of that folder of ``data/seed_envs`` (or of
    that absolute path).

    >>> [(env.skill, source) for env, source in library("difficulty")]
    [('logical_deduction', 'seed')]
    """
    if parents is not None:
        return [(e, "seed") for e in load_seed_envs(parents_dir(parents))]
    return [(e, "starter") for e in load_starter_envs()] + [(e, "seed") for e in load_seed_envs()]


def choose_parent(
    memory: Memory, skill: str, rng: random.Random, *, parameters: bool = False, parents: str | None = None
) -> Parent:
    """The parent of one mutate prompt for ``skill`` (the rules of the module doc).

    ``parameters`` (``designer.mode: parameters``): only environments with parameters
    (:func:`spade_core.designer.parameters.parameters_of`) qualify, and the library is searched for the skill first
    (starter, then seed) and only then for the kind, since the prompt shows the parameters, not the module,
    so a long seed of the right skill costs the designer nothing. ``parents`` (``designer.parents``): the
    library is that folder's environments (:func:`library`).
    """
    kind = skill_kind(skill)
    lo, hi = memory.cfg.positive_win_rate
    usable = (lambda code: bool(parameters_of(code))) if parameters else (lambda code: True)
    played = [e for e in memory if e.gen_added > 0 and lo <= e.win_rate <= hi and e.kind == kind and usable(e.code)]
    for candidates in ([e for e in played if e.skill == skill], played):
        if candidates:
            top = sorted(candidates, key=lambda e: -e.regret)[:PARENT_POOL]
            entry = rng.choice(top)
            return Parent(entry.env_id, entry.skill, entry.code, entry.win_rate, "memory")
    usable_library = [(e, source) for e, source in library(parents) if usable(e.code)]
    of_skill = [(e, source) for e, source in usable_library if e.skill == skill]
    of_kind = [(e, source) for e, source in usable_library if e.kind == kind]
    # parameters: the prompt shows the parameters only, so a long seed of the skill costs nothing;
    # mutate: the whole module, so a short starter of the kind comes before a long seed of the skill
    order = of_skill + of_kind if parameters else sorted(of_skill + of_kind, key=lambda pair: pair[1] != "starter")
    if order:
        env, source = order[0]
        return Parent(env.env_id, env.skill, env.code, None, source)
    raise ValueError(f"no library environment of kind {kind!r} to mutate for skill {skill!r}")


def without_docstring(code: str) -> str:
    """``code`` without its module docstring (a parent's notes are not part of the environment).

    >>> without_docstring('\"\"\"Notes.\\n\\nMore.\"\"\"\\n\\nimport random\\n')
    'import random\\n'
    >>> without_docstring("import random\\n")
    'import random\\n'
    """
    return re.sub(r'\A\s*(?:"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\')\s*\n', "", code, count=1)


def _normalised(code: str) -> list[str]:
    """The code's non-blank lines, stripped, comments and docstring dropped: what a copy keeps."""
    lines = (line.split("#", 1)[0].strip() for line in without_docstring(code).splitlines())
    return [line for line in lines if line]


def parent_similarity(code: str, parent: str) -> float:
    """How much of ``code`` is its parent, line by line, in [0, 1] (1: the same lines in the same order).

    >>> parent = "import random\\nclass E:\\n    def reset(self, seed=None):\\n        return 'a', {}\\n"
    >>> parent_similarity(parent + "# a comment\\n", parent)
    1.0
    >>> round(parent_similarity(parent.replace("'a'", "'b'"), parent), 2)
    0.75
    """
    return difflib.SequenceMatcher(None, _normalised(code), _normalised(parent), autojunk=False).ratio()


def parent_codes(memory: Memory, parents: str | None = None) -> dict[str, str]:
    """Every environment a mutation may have started from, by env_id: the memory's and the library's
    (:func:`library`)."""
    codes = {e.env_id: e.code for e, _source in library(parents)}
    codes.update({e.env_id: e.code for e in memory})
    return codes
