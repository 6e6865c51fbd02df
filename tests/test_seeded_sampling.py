"""Per-request seeded sampling on the transformers backend (spade_core/llm/seeded.py), on the tiny model: a
seeded request's reply depends on its prompt, its seed and the weights only — not on the rest of its batch,
on its place in it, or on another thread drawing from torch meanwhile — so two runs on the same seeds make
the same designs and plays until their weights part."""

from __future__ import annotations

import threading

import torch

from spade_core.llm.base import GenerationRequest, SamplingParams
from spade_core.llm.hf import TransformersGenerator

SAMPLE = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=10)


def ask(text: str, seed: int | None = None) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": text}], seed=seed)


def replies(generator: TransformersGenerator, requests: list[GenerationRequest], **params: object) -> list[list[int]]:
    out = generator.generate(requests, SamplingParams(**{**SAMPLE.__dict__, **params}))
    assert all(c.error is None for c in out)
    return [c.token_ids for c in out]


def test_a_seeded_reply_does_not_depend_on_its_batch_or_its_place_in_it(tiny_generator: TransformersGenerator) -> None:
    target = ask("Write a short poem about rivers.", seed=11)
    (alone,) = replies(tiny_generator, [target])
    others = [ask("Name a colour.", seed=1), ask("Count to five, slowly, one number per line please.", seed=2)]
    batched = replies(tiny_generator, [others[0], target, others[1]])
    assert batched[1] == alone and len(alone) > 4
    assert replies(tiny_generator, [target, *others])[0] == alone


def test_another_seed_or_no_seed_samples_afresh(tiny_generator: TransformersGenerator) -> None:
    prompt = "Write a short poem about rivers."
    draws = [replies(tiny_generator, [ask(prompt, seed=s)])[0] for s in (11, 12)]
    assert draws[0] != draws[1]  # 10 tokens at temperature 1: distinct seeds, distinct replies
    unseeded = [replies(tiny_generator, [ask(prompt)])[0] for _ in range(2)]
    assert unseeded[0] != unseeded[1]


def test_a_calls_seed_gives_each_request_its_own_stream(tiny_generator: TransformersGenerator) -> None:
    prompt = "Write a short poem about rivers."
    first, second = replies(tiny_generator, [ask(prompt), ask(prompt)], seed=40)
    assert first != second  # identical prompts in one seeded call differ ...
    assert replies(tiny_generator, [ask(prompt)], seed=41)[0] == second  # ... and row i is seed + i


def test_a_thread_drawing_from_torch_meanwhile_changes_no_seeded_reply(tiny_generator: TransformersGenerator) -> None:
    target = ask("Describe a mountain in one sentence.", seed=5)
    (quiet,) = replies(tiny_generator, [target])
    stop = threading.Event()

    def draw() -> None:  # the other arm of a side-by-side benchmark, sampling from torch's global stream
        while not stop.is_set():
            torch.rand(64)

    other = threading.Thread(target=draw)
    other.start()
    try:
        torch.manual_seed(123)
        (busy,) = replies(tiny_generator, [target])
    finally:
        stop.set()
        other.join()
    assert busy == quiet


def test_greedy_and_the_cut_distribution_are_honoured(tiny_generator: TransformersGenerator) -> None:
    request = ask("Name three fruits.", seed=3)
    greedy = replies(tiny_generator, [request], temperature=0.0)
    assert replies(tiny_generator, [ask("Name three fruits.", seed=99)], temperature=0.0) == greedy
    # at a near-zero temperature every seed picks the most likely token, as greedy does
    assert replies(tiny_generator, [request], temperature=1e-4, top_k=5) == greedy
