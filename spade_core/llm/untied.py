"""A tied-embedding checkpoint as the vLLM engine on a CPU loads it: an untied view (docs/DESIGN.md §8).

vLLM 0.32's CPU build packs the output head's weight once, after loading (oneDNN); a weight reload
re-packs the layers whose weights it loaded, and a tied head loads none of its own (its weight *is* the
input embedding), so after an in-place reload it kept answering with the old checkpoint's head. The view
gives the head weights of its own, which every reload then loads and re-packs:

- every file of the checkpoint, linked (nothing copied) — but ``config.json``, written with
  ``tie_word_embeddings: false``;
- ``lm_head.safetensors``: one tensor, ``lm_head.weight``, a copy of the input embedding;
- the safetensors index, when the checkpoint has one, with that tensor added to its weight map.

The view answers exactly as the tied checkpoint does (the same weights in both places); it costs one copy
of the embedding (113 MB for SmolLM2-135M in fp32) per checkpoint served.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

from spade_core.hashing import short_hash

HEAD = "lm_head.weight"
HEAD_FILE = "lm_head.safetensors"
INDEX = "model.safetensors.index.json"


def embedding_tensor(checkpoint: Path) -> tuple[Path, str] | None:
    """The safetensors file and name of the checkpoint's input embedding (``...embed_tokens.weight``), or
    None when it has none by that name."""
    index = checkpoint / INDEX
    if index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        names = {name: checkpoint / file for name, file in weight_map.items()}
    else:
        names = {}
        for file in sorted(checkpoint.glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as handle:
                names.update({name: file for name in handle.keys()})  # noqa: SIM118 (a handle, not a dict)
    found = sorted(name for name in names if name.endswith("embed_tokens.weight"))
    return (names[found[0]], found[0]) if found else None


def untied_view(checkpoint: str, root: Path) -> str | None:
    """Write the untied view of ``checkpoint`` under ``root`` (replacing an older one of the same
    checkpoint) and return its path; None when the checkpoint's embedding cannot be found (serve it as it
    is then)."""
    source = Path(checkpoint)
    found = embedding_tensor(source)
    if found is None:
        return None
    file, name = found
    view = root / f"{source.name}-{short_hash(str(source.resolve()))}"
    shutil.rmtree(view, ignore_errors=True)
    view.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name not in ("config.json", INDEX, HEAD_FILE) and entry.is_file():
            os.symlink(entry.resolve(), view / entry.name)
    config = json.loads((source / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (view / "config.json").write_text(json.dumps(config, indent=2))
    with safe_open(str(file), framework="pt") as handle:
        save_file({HEAD: handle.get_tensor(name).contiguous()}, str(view / HEAD_FILE), metadata={"format": "pt"})
    if (source / INDEX).is_file():
        index = json.loads((source / INDEX).read_text())
        index["weight_map"][HEAD] = HEAD_FILE
        (view / INDEX).write_text(json.dumps(index, indent=2))
    return str(view)
