"""Checkpoints in the store and the model each step plays with (docs/DESIGN.md §4, §7).

Checkpoints are numbered by global optimizer step: the step ``s`` of a run trains checkpoint ``s`` and
writes checkpoint ``s + 1`` under ``{root}/checkpoints/run={run_id}/step={s+1}/``; checkpoint 0 is the base
model (``model.name_or_path``). Generation ``g`` owns steps ``(g-1)·K … g·K-1`` (K =
``training.steps_per_generation``). A checkpoint holds either full weights (``save_pretrained``) or a LoRA
adapter, plus the tokenizer and the optimizer and scheduler state of the run's one optimizer
(``optimizer.pt``, ``scheduler.pt``), and a marker file ``spade-checkpoint.json`` written LAST: a directory
without the marker is an interrupted upload and is never used.

The marker records each file's size and digest (the first 16 hex of its sha256, as every store file's). The
train stage lists them in its own marker, so a reuse, ``spade status`` and ``spade verify --quick`` find a
checkpoint file missing or cut short, and ``spade verify`` one changed in place; and a checkpoint is checked
against them before it is used (:func:`check_checkpoint`, once per process for a file as it is on disk; an
S3 checkpoint as it is downloaded), so a damaged one stops the stage in one line instead of being loaded.

Every backend needs a plain local HF directory: an S3 checkpoint is downloaded once into the local
cache, and a LoRA adapter is merged onto its parent model once (also cached), so transformers loads it
and the vLLM server restarts on it the same way.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from spade_core.cachedir import build_once
from spade_core.hashing import short_hash, stream_hash
from spade_core.llm.embedded import cache_dir, resolve_model
from spade_core.store.artifacts import Store, WrittenFile

MARKER = "spade-checkpoint.json"
# full = all weights; lora = an adapter on the parent; unchanged = no update happened (no usable samples, or
# every group had zero reward variance): the marker alone, pointing at the parent, so the chain stays whole.
KINDS = ("full", "lora", "unchanged")


class CheckpointError(ValueError):
    """A checkpoint that is missing, incomplete or damaged; the message names the run and step."""


def _store_key(store: Store) -> str:
    return short_hash(store.base, 12)


def checkpoint_complete(store: Store, run_id: str, step: int) -> bool:
    """True when checkpoint ``step`` of the run was written completely (step 0, the base model, always is)."""
    return step == 0 or store.exists(f"{store.checkpoint_dir(run_id, step)}/{MARKER}")


def checkpoint_files(store: Store, run_id: str, step: int) -> list[WrittenFile]:
    """What the training of checkpoint ``step`` wrote, as files the train stage lists in its marker: the
    checkpoint's marker file (written last, it stands for the whole upload), each file of the checkpoint
    with the size and digest its marker recorded, and the tables its marker names (``train_metrics``,
    ``train_samples``)."""
    target = store.checkpoint_dir(run_id, step)
    data = store.read_bytes(f"{target}/{MARKER}")
    meta = json.loads(data)
    digests, sizes = meta.get("digests", {}), meta.get("sizes", {})
    weights = [
        WrittenFile("checkpoint", f"{target}/{name}", 0, digests[name], int(sizes[name]))
        for name in meta.get("files", [])
        if name in digests and name in sizes
    ]
    tables = [WrittenFile(**w) for w in meta.get("written", [])]
    return [WrittenFile("checkpoint", f"{target}/{MARKER}", 0, short_hash(data), len(data)), *weights, *tables]


def file_digest(path: Path) -> str:
    """The digest a store records for a file (first 16 hex of its sha256), of a local file."""
    with open(path, "rb") as fh:
        return stream_hash(fh)


@lru_cache(maxsize=512)
def _digest_as_on_disk(path: str, size: int, mtime_ns: int) -> str:
    """:func:`file_digest` of ``path`` as it is now (``size`` and ``mtime_ns`` key it: a file changed since
    is read again)."""
    return file_digest(Path(path))


def check_checkpoint(local: Path, meta: dict[str, Any], run_id: str, step: int) -> None:
    """Refuse a checkpoint directory whose files are not those its marker recorded: one missing, or of
    another size or digest (a checkpoint written before digests were recorded is checked for presence).

    Raises:
        CheckpointError: one line naming the run, the step, the file and what to do.
    """
    sizes, digests = meta.get("sizes", {}), meta.get("digests", {})
    for name in meta.get("files", []):
        path = local / name
        try:
            stat = path.stat()
        except OSError:
            problem = "is missing"
        else:
            if name in sizes and stat.st_size != int(sizes[name]):
                problem = f"has {stat.st_size} bytes, its marker recorded {sizes[name]}"
            elif name in digests and _digest_as_on_disk(str(path), stat.st_size, stat.st_mtime_ns) != digests[name]:
                problem = "has changed since it was written (digest)"
            else:
                continue
        raise CheckpointError(
            f"checkpoint run={run_id} step={step}: {name} {problem}; 'spade verify {run_id} --repair' removes it "
            f"and the stages after it, then 'spade resume {run_id}' trains it again"
        )


def read_marker(store: Store, run_id: str, step: int) -> dict[str, Any]:
    """The metadata of a complete checkpoint (kind, parent, base model, files, created)."""
    if not checkpoint_complete(store, run_id, step) or step == 0:
        raise CheckpointError(f"checkpoint run={run_id} step={step} does not exist (or its upload did not finish)")
    return dict(json.loads(store.read_bytes(f"{store.checkpoint_dir(run_id, step)}/{MARKER}")))


def write_checkpoint(store: Store, local_dir: str | Path, run_id: str, step: int, meta: dict[str, Any]) -> str:
    """Upload a saved model (or adapter) directory into the store, then write the marker.

    The files are streamed from disk through fsspec; the marker is written last, so a reader never uses a
    partial upload.

    Args:
        store: The artifact store (local or S3).
        local_dir: A directory written by ``save_pretrained`` (weights or adapter, plus tokenizer).
        run_id: Run the checkpoint belongs to.
        step: Its index: the global step that produced it, plus one (>= 1).
        meta: Extra marker fields; must include ``kind`` (one of :data:`KINDS`) and ``parent_step``.

    Returns:
        The checkpoint directory in the store.
    """
    if step < 1:
        raise CheckpointError(f"checkpoint step must be >= 1 (0 is the base model), got {step}")
    if meta.get("kind") not in KINDS:
        raise CheckpointError(f"checkpoint kind {meta.get('kind')!r} must be one of {', '.join(KINDS)}")
    src = Path(local_dir)
    target = store.checkpoint_dir(run_id, step)
    store.remove_dir(target)  # a rerun replaces an interrupted or older upload
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.name != MARKER)
    names = [p.relative_to(src).as_posix() for p in files]
    digests = {name: file_digest(p) for name, p in zip(names, files, strict=True)}  # before the upload
    store.upload_files(src, target, names)
    marker = {
        **meta,
        "run_id": run_id,
        "step": step,
        "files": names,
        "sizes": {name: p.stat().st_size for name, p in zip(names, files, strict=True)},
        "digests": digests,
        "bytes": sum(p.stat().st_size for p in files),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    store.write_text(f"{target}/{MARKER}", json.dumps(marker, indent=2, sort_keys=True))
    return target


def local_checkpoint_dir(store: Store, run_id: str, step: int) -> Path:
    """A local directory holding checkpoint ``step`` as stored (downloaded once from S3), checked against
    its marker (:func:`check_checkpoint`)."""
    meta = read_marker(store, run_id, step)
    if not store.is_s3:
        local = Path(store.checkpoint_dir(run_id, step))
        check_checkpoint(local, meta, run_id, step)
        return local
    local = cache_dir() / "checkpoints" / _store_key(store) / f"run={run_id}" / f"step={step}"

    def download(tmp: Path) -> None:
        store.download_files(store.checkpoint_dir(run_id, step), tmp, meta["files"])
        check_checkpoint(tmp, meta, run_id, step)  # what came down is what was written
        (tmp / MARKER).write_text(json.dumps(meta))  # last: the copy is complete

    return build_once(local, download, ready=lambda path: _local_marker(path) == meta)


def _local_marker(local: Path) -> dict[str, Any] | None:
    """The marker of a downloaded checkpoint, or None when there is none (or it is unreadable)."""
    try:
        return dict(json.loads((local / MARKER).read_text()))
    except (OSError, ValueError):
        return None


def _merged_lora(cfg: Any, store: Store, run_id: str, step: int, adapter_dir: Path, parent_step: int) -> Path:
    """Merge a LoRA adapter onto its parent model once; the merged directory is cached locally."""
    merged = cache_dir() / "merged" / _store_key(store) / f"run={run_id}" / f"step={step}"

    def merge(tmp: Path) -> None:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        parent = model_path_for_checkpoint(cfg, store, run_id, parent_step)
        base = AutoModelForCausalLM.from_pretrained(parent, dtype=torch.float32)
        model = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(str(adapter_dir)).save_pretrained(tmp)

    return build_once(merged, merge, ready=lambda path: (path / "config.json").is_file())


def model_path_for_checkpoint(cfg: Any, store: Store, run_id: str, step: int) -> str:
    """A local HF model directory (or hub id, for the base model) for checkpoint ``step`` of the run.

    Step 0 is the configured base model. A LoRA checkpoint is returned merged onto its parent; an
    ``unchanged`` one is its parent.

    Raises:
        CheckpointError: the checkpoint does not exist or its upload did not finish.
    """
    if step == 0:
        return resolve_model(cfg.model.name_or_path)
    meta = read_marker(store, run_id, step)
    if meta["kind"] == "unchanged":
        return model_path_for_checkpoint(cfg, store, run_id, int(meta["parent_step"]))
    local = local_checkpoint_dir(store, run_id, step)
    if meta["kind"] == "lora":
        return str(_merged_lora(cfg, store, run_id, step, local, int(meta["parent_step"])))
    return str(local)


def newest_checkpoint_at_or_below(store: Store, run_id: str, step: int) -> int:
    """The newest complete checkpoint with index <= ``step`` (0 = the base model)."""
    for s in range(step, 0, -1):
        if checkpoint_complete(store, run_id, s):
            return s
    return 0


def optimizer_state_dir(store: Store, run_id: str, step: int) -> Path | None:
    """A local directory holding the optimizer state the step after checkpoint ``step`` continues from
    (``optimizer.pt``, ``scheduler.pt``): the newest trained checkpoint at or before it, following the
    ``unchanged`` ones back; None before the first update (a fresh optimizer)."""
    while step > 0:
        meta = read_marker(store, run_id, step)
        if meta["kind"] != "unchanged" and "optimizer.pt" in meta.get("files", []):
            return local_checkpoint_dir(store, run_id, step)
        step = int(meta["parent_step"])
    return None


def model_for_step(cfg: Any, store: Store, run_id: str, step: int) -> str:
    """The model the plays of global step ``step`` use: checkpoint ``step`` (the newest complete one at or
    before it, should a step have written none), else the base model."""
    return model_path_for_checkpoint(cfg, store, run_id, newest_checkpoint_at_or_below(store, run_id, step))


def model_cfg_for_step(cfg: Any, store: Store, run_id: str, step: int) -> Any:
    """``cfg.model`` pointing at :func:`model_for_step` (feed it to ``make_generator``)."""
    return cfg.model.model_copy(update={"name_or_path": model_for_step(cfg, store, run_id, step)})
