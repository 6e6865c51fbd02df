"""KV-cache reuse across turns (transformers backend, tiny model on the CPU): under greedy decoding a turn
that reuses the kept cache returns exactly what a full prefill returns, and kept caches are bounded and
freed."""

from __future__ import annotations

from typing import Any

import pytest

from spade_core.config import RolloutConfig
from spade_core.envs.contract import env_id_for
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import CacheSlot, Completion, GenerationRequest, SamplingParams
from spade_core.play.rollout import EpisodeSpec, RolloutEngine

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10, logprobs=True, seed=0)
SEEDS = {e.skill: e for e in load_seed_envs()}
GAME, TOOL = SEEDS["pattern_recognition"], SEEDS["data_retrieval"]
COUNTDOWN = (  # ends after 1 + seed % 3 steps whatever the agent says: episodes leave the batch at different turns
    "class Countdown:\n"
    "    def __init__(self, max_turns=12, **kw): self.left = 0\n"
    "    def reset(self, seed=None):\n"
    "        self.left = 1 + (seed or 0) % 3\n"
    "        return 'Count down with me. ' * (1 + self.left), {}\n"
    "    def step(self, action):\n"
    "        self.left -= 1\n"
    "        return 'Next. ' * (1 + self.left), 0.0, self.left == 0, False, {}\n"
    "    def solution(self): return '\\\\boxed{0}' * 3\n"
)


def assert_same(cached: list[Completion], full: list[Completion]) -> None:
    """Token ids and text identical, per-token log-probs equal up to float noise."""
    assert [c.token_ids for c in cached] == [c.token_ids for c in full]
    assert [c.text for c in cached] == [c.text for c in full]
    for a, b in zip(cached, full, strict=True):
        assert a.logprobs is not None and b.logprobs is not None
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def conversations(tokenizer: Any) -> list[list[int]]:
    """Three first prompts of different lengths."""
    asks = ["Name a colour.", "Count from one to ten, one number per line, please.", "Hi!"]
    chats = [[{"role": "user", "content": ask}] for ask in asks]
    return [list(tokenizer.apply_chat_template(c, add_generation_prompt=True)["input_ids"]) for c in chats]


def observation(tokenizer: Any, turn: int, i: int) -> list[int]:
    """The template and text an environment appends after a reply (different lengths per conversation)."""
    text = "<|im_end|>\n" if turn % 2 else "\n"
    text += "<|im_start|>user\n" + "Go on. " * (1 + i * 3) + "<|im_end|>\n<|im_start|>assistant\n"
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_reused_cache_gives_exactly_the_full_prefill_output(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    prompts = conversations(tok)
    added: list[int] = []  # tokens each conversation gained since its previous turn (observation + template)
    slots = [CacheSlot(f"kv-test-{i}", 4096) for i in range(len(prompts))]
    for turn in range(3):
        requests = [GenerationRequest([], prompt_ids=p, cache_slot=s) for p, s in zip(prompts, slots, strict=True)]
        cached = tiny_generator.generate(requests, GREEDY)
        assert_same(cached, tiny_generator.generate([GenerationRequest([], prompt_ids=p) for p in prompts], GREEDY))
        prefilled = [c.prompt_tokens - c.cached_tokens for c in cached]
        if turn:  # only what was added, plus the last sampled token when it was never fed back
            assert all(n <= fed <= n + 1 for fed, n in zip(prefilled, added, strict=True)), (prefilled, added)
        else:
            assert prefilled == [len(p) for p in prompts]
        added = [len(observation(tok, turn, i)) for i in range(len(prompts))]
        prompts = [
            p + c.token_ids + observation(tok, turn, i) for i, (p, c) in enumerate(zip(prompts, cached, strict=True))
        ]
    assert tiny_generator.kept_tokens > 0
    tiny_generator.release(s.key for s in slots)
    assert tiny_generator.kept_tokens == 0


def test_a_diverging_prompt_reuses_only_the_shared_prefix_and_stays_exact(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    """A key that meets a different conversation costs a prefill, never a wrong answer; one batch mixes a
    row that reuses a cache with a row that has none."""
    first, other, _ = conversations(tiny_generator.tokenizer)
    slot = CacheSlot("kv-diverge", 4096)
    tiny_generator.generate([GenerationRequest([], prompt_ids=first, cache_slot=slot)], GREEDY)
    shared = first[:-3] + other[-5:]  # shares all but the last three tokens of the kept prompt
    requests = [GenerationRequest([], prompt_ids=shared, cache_slot=slot), GenerationRequest([], prompt_ids=other)]
    cached = tiny_generator.generate(requests, GREEDY)
    assert cached[0].cached_tokens == len(first) - 3 and cached[1].cached_tokens == 0
    assert_same(cached, tiny_generator.generate([GenerationRequest([], prompt_ids=p) for p in (shared, other)], GREEDY))
    tiny_generator.release(["kv-diverge"])


def test_a_conversation_past_its_bound_keeps_no_cache(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    prompt = conversations(tiny_generator.tokenizer)[0]
    slot = CacheSlot("kv-bound", max_tokens=len(prompt) + 2)  # the reply makes it longer than that
    out = tiny_generator.generate([GenerationRequest([], prompt_ids=prompt, cache_slot=slot)], GREEDY)
    assert len(out[0].token_ids) > 2 and tiny_generator.kept_tokens == 0
    again = tiny_generator.generate(
        [GenerationRequest([], prompt_ids=prompt + out[0].token_ids, cache_slot=slot)], GREEDY
    )
    assert again[0].cached_tokens == 0


class Spy:
    """The tiny generator, with every completion it returned kept per call, and each release's key count."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_ref, self.supports_token_prompts, self.tokenizer = inner.model_ref, True, inner.tokenizer
        self.calls: list[list[Completion]] = []
        self.released: list[int] = []

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        self.calls.append(self.inner.generate(requests, params))
        return self.calls[-1]

    def release(self, keys: Any) -> None:
        keys = list(keys)
        self.released.append(len(keys))
        self.inner.release(keys)

    def close(self) -> None:
        pass


def play(tiny_generator: Any, reuse: bool) -> tuple[list[dict[str, Any]], Spy, RolloutEngine]:
    specs = [
        EpisodeSpec(GAME.env_id, GAME.code, 0),
        EpisodeSpec(TOOL.env_id, TOOL.code, 1),
        *(EpisodeSpec(env_id_for(COUNTDOWN), COUNTDOWN, seed) for seed in (0, 1)),
    ]
    cfg = RolloutConfig(max_turns=3, max_tokens_per_turn=10, max_context_tokens=2048, reuse_kv_cache=reuse)
    spy = Spy(tiny_generator)
    engine = RolloutEngine(spy, cfg, GREEDY, call_timeout_s=10.0)  # a loaded machine is no env timeout
    return engine.run(specs), spy, engine


def test_rollouts_with_and_without_the_cache_are_identical(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    rows, spy, engine = play(tiny_generator, reuse=True)
    rows_full, spy_full, engine_full = play(tiny_generator, reuse=False)
    assert [r["error_type"] for r in rows] == [None] * 4
    assert [r["turns"] for r in rows] == [3, 3, 1, 2]  # episodes of different lengths, one batch
    assert [len(call) for call in spy.calls] == [4, 3, 2]
    assert spy.released == [1, 1, 2] and spy_full.released == []  # each cache freed as its episode ends
    for cached, full in zip(spy.calls, spy_full.calls, strict=True):
        assert_same(cached, full)
    for key in ("token_ids", "loss_mask", "transcript", "rewards"):
        assert [r[key] for r in rows] == [r[key] for r in rows_full]
    for row, row_full in zip(rows, rows_full, strict=True):  # the stored behaviour log-probs too
        assert row["logprobs"] == pytest.approx(row_full["logprobs"], abs=1e-4)
    assert engine_full.stats.cached_tokens == 0
    assert engine.stats.cached_tokens > 0.6 * (engine.stats.prompt_tokens - sum(c.prompt_tokens for c in spy.calls[0]))
    assert tiny_generator.kept_tokens == 0  # every finished episode's cache was freed
