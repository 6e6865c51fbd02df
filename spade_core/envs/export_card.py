"""The dataset card of an export (its ``README.md``): the Hub's YAML header, then what the rows are.

The header names the licence, the data files (so ``datasets.load_dataset(DIR)`` finds them) and tags; the
body says which run the environments come from (its config hash, the hash of the settings its markers bind,
its model, its corpus and that corpus's licence), the filters of the export, what is in it by skill and kind,
the three ways to use it, and the schema, column by column, from :data:`~spade_core.envs.export.EXPORT_SCHEMA`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pydantic

from spade_core.config import SpadeConfig
from spade_core.envs.export import DATA_FILE, EXPORT_SCHEMA, Export

# What we know of a corpus's licence, by ``corpus.source`` (spade_core/designer/corpus.py, docs/models.md): the
# embedded corpus is Wikipedia's lead sections. Any other source is the user's, whose licence we cannot know.
CORPUS_LICENCES = {"embedded": ("cc-by-sa-4.0", "CC BY-SA 4.0 (English Wikipedia lead sections, © their contributors)")}
EMBEDDED_MODEL = "SmolLM2-135M-Instruct (embedded, Apache-2.0)"


def corpus_licence(config: dict[str, Any]) -> tuple[str, str]:
    """(the Hub's licence id, a sentence) for the corpus of a stored config.

    >>> corpus_licence({"corpus": {"source": "embedded", "enabled": True}})[0]
    'cc-by-sa-4.0'
    >>> corpus_licence({"corpus": {"source": "s3://b/notes.parquet", "enabled": True}})
    ('other', "unknown: the run's corpus is s3://b/notes.parquet; state its licence before publishing")
    """
    corpus = config.get("corpus") or {}
    source = str(corpus.get("source", "embedded"))
    if corpus.get("enabled") is False:
        return "other", "no corpus (the run's designer read no document)"
    if source in CORPUS_LICENCES:
        return CORPUS_LICENCES[source]
    return "other", f"unknown: the run's corpus is {source}; state its licence before publishing"


def config_hash(config: dict[str, Any]) -> str | None:
    """``spade config show``'s hash of a stored config; None when it no longer loads as a config."""
    try:
        return SpadeConfig.model_validate(config).config_hash()
    except (pydantic.ValidationError, ValueError, TypeError):
        return None


def _type(type_: Any) -> str:
    return str(type_).replace("<item: ", "<").replace("element: ", "")


def dataset_card(export: Export) -> str:
    """The card's text."""
    config = export.config
    licence_id, licence = corpus_licence(config)
    model = str((config.get("model") or {}).get("name_or_path", "unknown"))
    frame = export.rows.select(["skill", "kind"]).to_pylist()
    by_skill = Counter(r["skill"] for r in frame)
    by_kind = Counter(r["kind"] for r in frame)
    header = [
        "---",
        f"license: {licence_id}",
        f"pretty_name: SPADE environments of run {export.run_id}",
        "tags:",
        "- spade",
        "- reinforcement-learning",
        "- environments",
        "- gymnasium",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        f"    path: {DATA_FILE}",
        "---",
        "",
    ]
    skills = ", ".join(f"{skill} {n}" for skill, n in sorted(by_skill.items()))
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
    body = [
        f"# SPADE environments of run `{export.run_id}`",
        "",
        f"{export.rows.num_rows} environments that a SPADE run designed, validated in a jail and played: one "
        "row per environment, each a standard-library Python module obeying the SPADE environment contract "
        "(`reset(seed)`, `step(action)`, `solution()`), with its skill, source document, parent and lineage, the "
        "validator's verdict, and its win rates with and without a hint and its regret per generation.",
        "",
        "| | |",
        "|---|---|",
        f"| run | `{export.run_id}` |",
        f"| config hash | `{config_hash(config) or 'unknown'}` |",
        f"| artifact hash (the settings the run's markers bind) | `{export.artifact_hash or 'unknown'}` |",
        f"| model | {EMBEDDED_MODEL if model == 'embedded' else model} |",
        f"| corpus | `{(config.get('corpus') or {}).get('source', 'unknown')}` |",
        f"| corpus licence | {licence} |",
        f"| filters | {export.filters.describe()} |",
        f"| skills | {skills} |",
        f"| kinds | {kinds} |",
        "",
        "The code is model output: run it only in a sandbox (SPADE runs every line in nsjail).",
        "",
        "## Use",
        "",
        "```python",
        "import datasets",
        f'rows = datasets.load_dataset("parquet", data_files="DIR/{DATA_FILE}")["train"]',
        "",
        "import gymnasium",
        "from spade_core.envs.gym import register_export",
        'ids = register_export("DIR")              # spade/<env_id>, each in the jail',
        "env = gymnasium.make(ids[0])",
        "",
        "from spade_core.envs.trl_envs import ExportEnvironments   # TRL's GRPOTrainer(environment_factory=...)",
        "```",
        "",
        "As a fixed pool of another SPADE run: `spade run --set designer.fixed_pool=export:DIR`.",
        "",
        "## Schema",
        "",
        "| column | type | null | meaning |",
        "|---|---|---|---|",
    ]
    for f in EXPORT_SCHEMA:
        meaning = (f.metadata or {}).get(b"description", b"").decode()
        body.append(f"| `{f.name}` | `{_type(f.type)}` | {'yes' if f.nullable else 'no'} | {meaning} |")
    return "\n".join([*header, *body, ""])
