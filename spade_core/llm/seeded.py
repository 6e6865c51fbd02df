"""Per-request seeded sampling for the transformers backend (docs/DESIGN.md §8).

A batched ``model.generate`` draws every row from torch's one global random stream, so a row's tokens
depend on what else is in the batch and on every other thread that draws from torch meanwhile: two runs
with the same seeds part as soon as their batches or threads differ. Here each request draws from its own
``torch.Generator`` seeded with the request's seed (what a server does with the request's ``seed``), so a
reply depends only on its prompt, its seed and the weights.

:class:`SeededSampler` is a logits processor that does the sampling itself: it applies temperature, top-k
and top-p to the row's logits (vLLM's order), draws one token with the row's generator and returns scores
that make that token the only choice; ``generate`` then runs greedy (``do_sample=False``) and picks it. The
log-probs the backend returns come from the raw logits (``output_logits``), so they are unchanged.
"""

from __future__ import annotations

from typing import Any

import torch


def filtered_probs(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float) -> torch.Tensor:
    """Sampling probabilities of each row of logits (the last dimension): softmax at ``temperature``, then
    the ``top_k`` most likely tokens, then the smallest set whose mass reaches ``top_p`` (the most likely
    token always stays).

    >>> p = filtered_probs(torch.tensor([2.0, 1.0, 0.0, -1.0]), 1.0, top_k=3, top_p=1.0)
    >>> [round(x, 3) for x in p.tolist()]
    [0.665, 0.245, 0.09, 0.0]
    >>> [round(x, 3) for x in filtered_probs(torch.tensor([[2.0, 1.0, 0.0, -1.0]]), 1.0, 3, 0.9)[0].tolist()]
    [0.731, 0.269, 0.0, 0.0]
    """
    scaled = logits.float() / temperature
    if top_k is not None and 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if top_p < 1.0:
        ordered, order = torch.sort(probs, dim=-1, descending=True)
        above = torch.cumsum(ordered, dim=-1) - ordered  # the mass of the tokens more likely than each
        probs = probs.scatter(-1, order, ordered.masked_fill(above >= top_p, 0.0))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


class SeededSampler:
    """A ``LogitsProcessor`` that samples row ``i`` with ``generators[i]``; see the module docstring.

    >>> rows = torch.tensor([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]])
    >>> a = SeededSampler([torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)], 1.0, None, 1.0)
    >>> b = SeededSampler([torch.Generator().manual_seed(5), torch.Generator().manual_seed(2)], 1.0, None, 1.0)
    >>> picks = lambda s: [s(None, rows).argmax(-1).tolist() for _ in range(8)]
    >>> [row[1] for row in picks(a)] == [row[1] for row in picks(b)]  # row 1: the same seed, the same tokens
    True
    """

    def __init__(self, generators: list[torch.Generator], temperature: float, top_k: int | None, top_p: float):
        self.generators = generators
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p

    def __call__(self, input_ids: Any, scores: torch.Tensor) -> torch.Tensor:
        probs = filtered_probs(scores, self.temperature, self.top_k, self.top_p).to("cpu")
        chosen = torch.full_like(scores, float("-inf"))
        for row, generator in enumerate(self.generators):
            chosen[row, int(torch.multinomial(probs[row], 1, generator=generator))] = 0.0
        return chosen


def request_generators(seeds: list[int]) -> list[torch.Generator]:
    """One CPU generator per request, seeded with its seed.

    >>> [g.initial_seed() for g in request_generators([3, 7])]
    [3, 7]
    """
    return [torch.Generator().manual_seed(seed) for seed in seeds]
