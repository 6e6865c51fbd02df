"""The environment memory (docs/DESIGN.md §7 steps 3 and 8): a FIFO of scored environments for the designer prompt.

Rules (SPADE, the authors' ``spade/core/env_memory.py``; constants from :class:`~spade_core.config.MemoryConfig`,
paper defaults in brackets):

- **Add** (step 8): every scored environment (env_id, skill, kind, code, win rate, regret, gen). Adding an
  env_id already held replaces its entry and moves it to the newest position (a replayed environment
  carries its latest measurement). Beyond ``capacity`` [200] the oldest entries are evicted.
- **Win rate in memory** = the fraction of the no-hint plays with return > 0 (the authors'
  ``spade_rollout.py:728``), given to :meth:`Memory.add_scored` as ``wins`` (:func:`win_fractions` computes
  it from the episodes; an episode with an ``error_type`` counts as not won). Without ``wins`` the scores'
  ``win_rate`` (the mean return) is stored.
- **Positives** (step 3): same skill, ``lo <= win_rate <= hi`` [0.15, 0.85], sorted by regret, highest
  first (ties: newest first); the pool is the top ``max(3k, 10)`` (``env_memory.py:96-99``); with an rng
  ``k`` are sampled from the pool without replacement, else the first ``k`` are taken. Returned highest
  regret first, with the code the designer sees (:func:`prompt_code`): ``memory.example_code = "cut"``
  [the authors'] cuts it to ``code_chars`` [2000] characters; ``"whole"`` shows the whole module, and an
  entry longer than ``code_chars`` is no positive at all (it leaves the pool before the draw), because a
  small designer copies what it is shown and a module cut mid-way copies into one that cannot load.
- **Negatives** (step 3): same skill, ``win_rate > negative_high`` [0.9] or ``< negative_low`` [0.1]; with an
  rng, ``k`` sampled uniformly without replacement, else the ``k`` newest. The prompt shows them by class
  name only (:attr:`MemoryEntry.class_name`), never their code; with ``negative_name: file_stem`` (the paper
  presets) by the authors' name instead, the stem of their game file (:func:`file_stem`), which says nothing
  of what the environment was. Win rates in (0.85, 0.9] or [0.1, 0.15) are
  neither positive nor negative.
- **Stored code**: an entry keeps its whole module, because replay (below) plays it and the novelty
  filter compares with it; the cut to ``code_chars`` [2000] (the authors store only that snippet,
  ``env_memory.py:60``) is applied where code enters the prompt, so the designer sees what the authors'
  designer sees (``example_code = "cut"``, the paper presets'; they start from an empty memory).
- **Replay** (step 6, beyond the paper): the top ``k`` in-band entries of any skill by regret; an empty
  memory replays nothing.
- Sampling is deterministic given the rng's seed. ``enabled = False`` (the "no memory" ablation) makes
  both retrievals return ``[]``; adding and persistence still work.
- **Start**: empty [the paper's memory starts empty], or with ``seed_with_library`` (on in ``tiny``) the
  shipped seed environments (:meth:`Memory.initial`). They have never been played, so they enter with
  ``win_rate = 0.5`` (mid-band: usable as positives from the first generation), ``regret = 0.0`` (so any
  measured positive regret outranks them) and ``gen_added = 0``. :meth:`Memory.seeded` seeds regardless
  of the switch (``spade design`` shows examples with it).
- **Persistence**: one full snapshot per generation in the ``memory`` table, :meth:`Memory.to_frame`
  written by the memory stage (:data:`STAGE`), rows oldest to newest. The snapshot of generation g is the
  memory after step 8 of g; generation g's designer reads ``Memory.load(store, run_id, gen=g - 1)``.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace

import pandas as pd

from sandbox.outcome import is_left_out
from spade_core.config import MemoryConfig, skill_kind
from spade_core.designer.design import env_class_name
from spade_core.envs.seeds import SeedEnv, load_seed_envs
from spade_core.store.artifacts import Store
from spade_core.store.markers import list_markers, listed_files
from spade_core.store.schemas import SCHEMAS

MEMORY_COLUMNS: tuple[str, ...] = tuple(SCHEMAS["memory"].names)
SEED_WIN_RATE = 0.5
SEED_REGRET = 0.0
SEED_GEN = 0
STAGE = "memory"
POSITIVE_POOL_FACTOR = 3  # positives are drawn from the top max(3k, 10) by regret
POSITIVE_POOL_MIN = 10


@dataclass(frozen=True)
class MemoryEntry:
    """One remembered environment and what the agent did on it when it was last scored."""

    env_id: str
    skill: str
    kind: str
    code: str
    win_rate: float
    regret: float
    gen_added: int
    shown_as: str | None = None  # the name a negative example is shown by, when not its class (never stored)

    @property
    def class_name(self) -> str:
        """The name a negative example shows: :attr:`shown_as` when set (``memory.negative_name: file_stem``), else
        the environment class's name (the env_id when no class is found)."""
        return self.shown_as or env_class_name(self.code) or self.env_id


def file_stem(entry: MemoryEntry, index: int, steps_per_generation: int) -> str:
    """The authors' name of a remembered game, the stem of its file (``game_{rollout:05d}_{index:03d}_{skill}``,
    their ``spade/core/utils/game_files.py:33-34``): the global step that designed it (its generation's first),
    its place among its generation's entries (theirs: among its batch's prompts) and its skill.

    >>> file_stem(MemoryEntry("e", "optimization", "game", "", 0.95, 0.0, 3), 7, 4)
    'game_00008_007_optimization'
    """
    step = (entry.gen_added - 1) * steps_per_generation
    return f"game_{step:05d}_{index:03d}_{entry.skill}"


def prompt_code(code: str, code_chars: int, whole: bool) -> str | None:
    """The code of a positive example as the design prompt shows it (docs/DESIGN.md §7.3): cut to its first
    ``code_chars`` characters [the authors'], or with ``whole`` the whole module when it has at most
    ``code_chars`` characters, else None (the example is not shown).

    >>> prompt_code("import random\\nclass E: ...\\n", 8, whole=False)
    'import r'
    >>> prompt_code("import random\\nclass E: ...\\n", 8, whole=True) is None
    True
    >>> prompt_code("class E: ...\\n", 40, whole=True)
    'class E: ...\\n'
    """
    if not whole:
        return code[:code_chars]
    return code if len(code) <= code_chars else None


def _rng(rng: random.Random | int | None) -> random.Random | None:
    return random.Random(rng) if isinstance(rng, int) else rng


class Memory:
    """FIFO environment memory: insertion order is age, the last entry is the newest."""

    def __init__(self, cfg: MemoryConfig | None = None, entries: Iterable[MemoryEntry] = ()) -> None:
        self.cfg = cfg if cfg is not None else MemoryConfig()
        self._entries: OrderedDict[str, MemoryEntry] = OrderedDict()
        for entry in entries:
            self.add(entry)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[MemoryEntry]:
        return iter(self._entries.values())

    def __contains__(self, env_id: object) -> bool:
        return env_id in self._entries

    def get(self, env_id: str) -> MemoryEntry | None:
        return self._entries.get(env_id)

    # -- adding (step 8) --------------------------------------------------------------------------------
    def add(self, entry: MemoryEntry) -> None:
        """Insert ``entry`` as the newest; replace an entry with the same env_id; evict the oldest."""
        self._entries.pop(entry.env_id, None)
        self._entries[entry.env_id] = entry
        while len(self._entries) > self.cfg.capacity:
            self._entries.popitem(last=False)

    def add_scored(
        self, scores: pd.DataFrame, envs: pd.DataFrame, gen: int, wins: Mapping[str, float] | None = None
    ) -> int:
        """Add every valid scored environment of generation ``gen``; returns how many were added.

        Args:
            scores: env_scores rows (:func:`spade_core.method.scoring.score_environments`).
            envs: ``env_id`` and ``code`` of the same environments, and ``valid`` where some are invalid
                (no ``valid`` column: every row ran); extra columns are ignored.
            gen: the generation that scored them.
            wins: env_id -> fraction of its no-hint plays with return > 0 (:func:`win_fractions`), the win
                rate the memory stores [the authors']; every added env must be in it. None: the scores'
                ``win_rate`` (the mean no-hint return) is stored.
        """
        ran = envs["valid"].astype(bool) if "valid" in envs.columns else pd.Series(True, index=envs.index)
        valid = envs.loc[ran, ["env_id", "code"]].drop_duplicates("env_id")
        code_of = dict(zip(valid["env_id"], valid["code"], strict=True))
        added = 0
        for row in scores.drop_duplicates("env_id").itertuples(index=False):
            if row.env_id not in code_of:
                continue  # invalid designs are not environments to show the designer
            env_id, skill = str(row.env_id), str(row.skill)
            if wins is None:
                win = float(row.win_rate)
            elif env_id in wins:
                win = float(wins[env_id])
            else:
                raise ValueError(f"no win fraction for scored env {env_id!r}: pass every env's no-hint plays")
            regret = float(row.regret)
            self.add(MemoryEntry(env_id, skill, skill_kind(skill), str(code_of[env_id]), win, regret, gen))
            added += 1
        return added

    def seed_from_library(self, seeds: Iterable[SeedEnv] | None = None) -> None:
        """Add the seed environments (default: ``load_seed_envs()``) with the never-played values above."""
        for seed in load_seed_envs() if seeds is None else seeds:
            self.add(MemoryEntry(seed.env_id, seed.skill, seed.kind, seed.code, SEED_WIN_RATE, SEED_REGRET, SEED_GEN))

    @classmethod
    def seeded(cls, cfg: MemoryConfig | None = None) -> Memory:
        """The seed library, whatever ``seed_with_library`` says (for ``spade design`` and tests)."""
        memory = cls(cfg)
        memory.seed_from_library()
        return memory

    @classmethod
    def initial(cls, cfg: MemoryConfig | None = None) -> Memory:
        """The memory before the first generation: empty [paper], the seed library with ``seed_with_library``."""
        cfg = cfg if cfg is not None else MemoryConfig()
        return cls.seeded(cfg) if cfg.seed_with_library else cls(cfg)

    # -- retrieval (step 3) -----------------------------------------------------------------------------
    def _newest_first(self) -> list[MemoryEntry]:
        return list(reversed(self._entries.values()))

    def positives(
        self, skill: str, k: int = 2, rng: random.Random | int | None = None, *, whole: bool | None = None
    ) -> list[MemoryEntry]:
        """Up to ``k`` same-skill, in-band entries drawn from the top ``max(3k, 10)`` by regret, highest regret
        first, their code as the prompt shows it (:func:`prompt_code`). ``whole`` (None: from
        ``memory.example_code``) shows whole modules and leaves out entries longer than ``code_chars``."""
        skill_kind(skill)
        if not self.cfg.enabled or k <= 0:
            return []
        whole = self.cfg.example_code == "whole" if whole is None else whole
        lo, hi = self.cfg.positive_win_rate
        shown = {e.env_id: prompt_code(e.code, self.cfg.code_chars, whole) for e in self if e.skill == skill}
        in_band = [e for e in self._newest_first() if e.env_id in shown and lo <= e.win_rate <= hi]
        in_band = [e for e in in_band if shown[e.env_id] is not None]  # "whole": too long to show, not drawn
        size = max(POSITIVE_POOL_FACTOR * k, POSITIVE_POOL_MIN)
        pool = sorted(in_band, key=lambda e: -e.regret)[:size]  # stable sort: ties stay newest first
        generator = _rng(rng)
        chosen = pool[:k] if generator is None or len(pool) <= k else generator.sample(pool, k)
        return [replace(e, code=str(shown[e.env_id])) for e in sorted(chosen, key=lambda e: -e.regret)]

    def negatives(
        self, skill: str, k: int = 1, rng: random.Random | int | None = None, steps_per_generation: int = 1
    ) -> list[MemoryEntry]:
        """Up to ``k`` same-skill entries the agent almost always or almost never wins, shown by class name, or
        with ``memory.negative_name: file_stem`` by the authors' file stem (:func:`file_stem`; K =
        ``steps_per_generation`` places a generation on the step axis; an entry of the seed library keeps its
        class name)."""
        skill_kind(skill)
        if not self.cfg.enabled or k <= 0:
            return []
        high, low = self.cfg.negative_high, self.cfg.negative_low
        candidates = [e for e in self._newest_first() if e.skill == skill and (e.win_rate > high or e.win_rate < low)]
        generator = _rng(rng)
        chosen = candidates[:k] if generator is None or len(candidates) <= k else generator.sample(candidates, k)
        if self.cfg.negative_name != "file_stem":
            return chosen
        places: dict[str, int] = {}
        counts: dict[int, int] = {}
        for entry in self:  # oldest first: an entry's place among its generation's entries
            places[entry.env_id] = counts.get(entry.gen_added, 0)
            counts[entry.gen_added] = places[entry.env_id] + 1
        return [
            replace(e, shown_as=file_stem(e, places[e.env_id], steps_per_generation)) if e.gen_added >= 1 else e
            for e in chosen
        ]

    def replay(self, k: int, exclude: Iterable[str] = ()) -> list[MemoryEntry]:
        """Up to ``k`` in-band entries of any skill, highest regret first (ties: newest first), for rollouts.

        docs/DESIGN.md §7 step 6 (PLR-style replay, beyond the paper): with only seed environments in memory these
        are the seeds. Deterministic; ``exclude`` drops env_ids already in the pool. Independent of
        ``enabled``, which governs the designer prompt only (``rollout.replay_envs = 0`` turns replay off).
        """
        lo, hi = self.cfg.positive_win_rate
        skip = set(exclude)
        in_band = [e for e in self._newest_first() if lo <= e.win_rate <= hi and e.env_id not in skip]
        return sorted(in_band, key=lambda e: -e.regret)[: max(k, 0)]

    # -- frames and persistence -------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """The memory table's columns, one row per entry, oldest first."""
        frame = pd.DataFrame([asdict(e) for e in self], columns=list(MEMORY_COLUMNS))
        return frame.astype({"win_rate": "float64", "regret": "float64", "gen_added": "int64"})

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, cfg: MemoryConfig | None = None) -> Memory:
        """Entries from memory-table rows in their order (oldest first); extra columns are ignored."""
        rows = frame[list(MEMORY_COLUMNS)].to_dict("records")
        entries = [
            MemoryEntry(
                env_id=str(r["env_id"]),
                skill=str(r["skill"]),
                kind=str(r["kind"]),
                code=str(r["code"]),
                win_rate=float(r["win_rate"]),
                regret=float(r["regret"]),
                gen_added=int(r["gen_added"]),
            )
            for r in rows
        ]
        return cls(cfg, entries)

    @classmethod
    def load(cls, store: Store, run_id: str, gen: int | None = None, cfg: MemoryConfig | None = None) -> Memory:
        """The latest snapshot at or before ``gen`` (None: the latest); :meth:`initial` when there is none.

        A snapshot is the file the memory stage's marker of its generation lists: a file written into the
        partition around the pipeline is never read. Reads the marker of ``gen`` when it has one (what every
        generation's pipeline needs); only otherwise lists the run's markers. A snapshot with no rows counts
        as none: the memory only grows (FIFO eviction keeps ``capacity`` entries), so an empty snapshot means
        nothing has entered yet.
        """
        if gen is not None and gen < 1:
            return cls.initial(cfg)  # before the first generation
        if gen is not None:
            files = listed_files(store, run_id, gen, STAGE, "memory")
            if files:
                frame = store.read_files("memory", files)
                if not frame.empty:
                    return cls.from_frame(frame, cfg)
        markers = list_markers(store, run_id)
        for g in sorted((g for g in markers if gen is None or g <= gen), reverse=True):
            record = markers[g].get(STAGE)
            files = listed_files(store, run_id, g, STAGE, "memory", record=record) if record else None
            frame = store.read_files("memory", files) if files else None
            if frame is not None and not frame.empty:
                return cls.from_frame(frame, cfg)
        return cls.initial(cfg)


def win_fractions(episodes: pd.DataFrame) -> dict[str, float]:
    """env_id -> fraction of its no-hint plays with return > 0: the win rate the memory stores.

    ``episodes``: ``env_id``, ``condition``, ``episode_return`` and optionally ``error_type``: a play the
    environment broke (a sandbox error class) or whose model call failed is left out, as in scoring; any other
    error counts as not won.
    Hinted plays are ignored; an env without no-hint plays is absent.

    >>> eps = pd.DataFrame({"env_id": ["a", "a", "a", "a", "b"], "condition": ["no_hint"] * 3 + ["hint", "hint"],
    ...                     "episode_return": [0.5, -1.0, 0.0, 1.0, 1.0]})
    >>> win_fractions(eps)
    {'a': 0.3333333333333333}
    """
    plays = episodes[episodes["condition"] == "no_hint"]
    if "error_type" in plays.columns:
        plays = plays[~plays["error_type"].map(is_left_out).astype(bool)]
    won = plays["episode_return"].astype(float) > 0
    if "error_type" in plays.columns:
        won &= plays["error_type"].isna()
    fractions = won.groupby(plays["env_id"]).mean()
    return {str(env_id): float(value) for env_id, value in fractions.items()}
