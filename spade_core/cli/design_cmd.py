"""``spade design``: show the designer's prompt and designs for one document, without training."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated

import typer

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.designer.batch import prompt_from_text
from spade_core.designer.memory import Memory
from spade_core.designer.replies import extract_code
from spade_core.designer.skills import skills_for_generation
from spade_core.envs.validate import validate_many
from spade_core.llm import make_generator
from spade_core.llm.base import GenerationRequest, SamplingParams
from spade_core.store.reader import RunReader


@clean_errors
def design(
    doc_id: Annotated[str | None, typer.Option("--doc-id", help="A document of the store's documents table.")] = None,
    text: Annotated[Path | None, typer.Option("--text", help="A text file to use as the document.")] = None,
    skill: Annotated[str | None, typer.Option("--skill", help="Target skill (default: the first of gen 1).")] = None,
    n: Annotated[int, typer.Option("--n", help="Designs to sample.")] = 2,
    show_prompt: Annotated[bool, typer.Option("--show-prompt", help="Print the full prompt.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per design.")] = False,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Sample designs for one document with the configured model, validate them in the jail and show them.

    Memory examples come from the seed library (seeded whatever ``memory.seed_with_library`` says, so the
    prompt shows examples); the document is cut as the design stage cuts it, with the truncation marker.
    """
    cfg = resolve(preset, config, overrides, store)
    if (doc_id is None) == (text is None):
        raise FileNotFoundError("give exactly one of --doc-id or --text")
    st = open_store(cfg)
    if text is not None:
        if not text.is_file():
            raise FileNotFoundError(f"document file {str(text)!r} does not exist")
        document = text.read_text(errors="replace")
    else:
        found = RunReader(st).query("select text from documents where doc_id = ? limit 1", [doc_id])
        if found.empty:
            raise FileNotFoundError(f"document {doc_id!r} is not in the store's documents table")
        document = str(found.text[0])
    skill = skill or skills_for_generation(1, cfg.designer)[0]
    prompt = prompt_from_text(cfg, skill, None, document, Memory.seeded(cfg.memory), random.Random(cfg.seed))
    messages = prompt.messages
    if prompt.parent_env_id is not None and not as_json:  # designer.mode mutate or parameters
        typer.echo(f"mutating environment {prompt.parent_env_id}")
    if show_prompt and not as_json:
        typer.echo(messages[1]["content"] + "\n" + "=" * 80)
    generator = make_generator(cfg.model)
    params = SamplingParams.from_config(cfg.model, max_new_tokens=cfg.designer.max_new_tokens, seed=cfg.seed)
    replies = generator.generate([GenerationRequest(messages=messages, seed=i) for i in range(n)], params)
    generator.close()
    codes = [extract_code(r.text) for r in replies]
    results = validate_many([c for c in codes if c], cfg.validation)
    by_code = dict(zip([c for c in codes if c], results, strict=True))
    for i, (reply, code) in enumerate(zip(replies, codes, strict=True)):
        res = by_code.get(code) if code else None
        verdict = "no code" if res is None else ("valid" if res.ok else f"{res.error_type}: {res.message}")
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "index": i,
                        "skill": skill,
                        "completion": reply.text,
                        "code": code,
                        "env_id": res.env_id if res else None,
                        "ok": bool(res and res.ok),
                        "error_type": res.error_type if res else "syntax_error",
                    }
                )
            )
        else:
            typer.echo(f"--- design {i + 1}/{n} ({skill}): {verdict}\n{reply.text}\n")
