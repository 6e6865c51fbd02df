"""Novelty verdicts: valid designs too close to a known environment, or (mutations) to their parent.

Two checks, each on when configured (:func:`novelty_verdicts`); each verdict is a ``novelty`` row whose
``check`` column says which:

- ``memory.novelty_threshold``: a valid design whose MiniLM cosine similarity to a memory environment
  (the snapshot of ``gen - 1``) or to an earlier accepted design of this generation exceeds the threshold
  gets ``novel = false``;
- ``designer.mode: mutate``: a valid design whose lines match its parent's more than
  ``designer.parent_max_similarity`` (:func:`spade_core.designer.mutation.parent_similarity`) gets ``novel = false``:
  a copy of the parent is not a new environment. Such a design is not embedded. With ``designer.mode:
  parameters`` the similarity is the share of the parent's parameters the design leaves unchanged
  (:func:`spade_core.designer.parameters.parameter_similarity`).
"""

from __future__ import annotations

import pandas as pd

from spade_core.config import SpadeConfig
from spade_core.designer.memory import Memory
from spade_core.designer.mutation import parent_codes, parent_similarity
from spade_core.designer.novelty import default_embedder, novelty_filter
from spade_core.designer.parameters import parameter_similarity
from spade_core.store.verdicts import PARAMETERS_CHECK, PARENT_CHECK


def novelty_rows(valid: pd.DataFrame, memory_codes: list[str], threshold: float) -> pd.DataFrame:
    """One row per valid design (in ``design_id`` order): accepted or not, and its highest similarity."""
    valid = valid.sort_values("design_id")
    verdicts = novelty_filter([str(c) for c in valid["code"]], memory_codes, threshold, default_embedder())
    return pd.DataFrame(
        {
            "design_id": valid["design_id"],
            "attempt": valid["attempt"].astype(int),
            "env_id": valid["env_id"],
            "novel": [accepted for accepted, _ in verdicts],
            "similarity": [float(similarity) for _, similarity in verdicts],
            "threshold": float(threshold),
            "check": "embedding",
        }
    )


def parent_rows(
    valid: pd.DataFrame, parents: dict[str, str], threshold: float, parameters: bool = False
) -> pd.DataFrame:
    """One row per valid design with a known parent: its similarity to the parent (the share of the parent's
    lines it keeps, check ``parent``; ``parameters``: of the parent's parameters, check ``parameters``), above
    ``threshold`` refused. ``parents`` maps a parent env_id to its code.

    >>> parent = "import random\\nclass E:\\n    def reset(self, seed=None):\\n        return 'a', {}\\n"
    >>> valid = pd.DataFrame({"design_id": ["d1", "d2"], "attempt": [0, 1], "env_id": ["e1", "e2"],
    ...                       "code": [parent, parent.replace("'a'", "'b'")], "parent_env_id": ["p", "p"]})
    >>> parent_rows(valid, {"p": parent}, 0.9)[["design_id", "novel", "similarity"]].to_dict("records")
    [{'design_id': 'd1', 'novel': False, 'similarity': 1.0}, {'design_id': 'd2', 'novel': True, 'similarity': 0.75}]
    """
    known = valid[valid["parent_env_id"].isin(list(parents))].sort_values("design_id")
    pairs = zip(known["code"], known["parent_env_id"], strict=True)
    similarity_of = parameter_similarity if parameters else parent_similarity
    similarity = [similarity_of(str(code), parents[parent]) for code, parent in pairs]
    return pd.DataFrame(
        {
            "design_id": known["design_id"],
            "attempt": known["attempt"].astype(int),
            "env_id": known["env_id"],
            "novel": [s <= threshold for s in similarity],
            "similarity": [float(s) for s in similarity],
            "threshold": float(threshold),
            "check": PARAMETERS_CHECK if parameters else PARENT_CHECK,
        }
    )


def novelty_verdicts(valid: pd.DataFrame, memory: Memory, cfg: SpadeConfig) -> pd.DataFrame:
    """The ``novelty`` rows of the ``valid`` designs (final verdicts, ok): the parent check first (with
    ``designer.mode`` mutate or parameters), then the embedding check (``memory.novelty_threshold``) of the
    designs that are no copy of their parent."""
    frames = []
    if cfg.designer.mode in ("mutate", "parameters") and "parent_env_id" in valid.columns:
        parameters = cfg.designer.mode == "parameters"
        codes = parent_codes(memory, cfg.designer.parents)
        copies = parent_rows(valid, codes, cfg.designer.parent_max_similarity, parameters)
        frames.append(copies)
        valid = valid[~valid["design_id"].isin(copies.loc[~copies["novel"], "design_id"])]
    if cfg.memory.novelty_threshold is not None:
        frames.append(novelty_rows(valid, [e.code for e in memory], cfg.memory.novelty_threshold))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
