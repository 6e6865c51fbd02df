"""Tool use as the authors run it, on this machine: the native protocol against the one-call-per-turn
protocol, and the LLM validator's verdicts.

(1) Protocols: the reference solutions of the multi-turn seeds (data/seed_envs/multiturn/) played by a
scripted agent, once with every call of the script in one reply (``rollout.tool_protocol: native``) and once
with one call per reply (``user_messages``), through the real engine and jails with the tiny model's
tokenizer: agent turns, conversation tokens and wall time per protocol.

(2) The judge: the tiny model as the LLM validator (temperature 0.3) on the three seeds as they are and on a
broken copy of each (a first criterion asks for a state no tool ever sets), ``--repeats`` judgements each:
the verdicts, how often a broken design is rejected and a sound one kept, and seconds per judgement.

    .venv/bin/python benchmarks/tool_use.py [--repeats 4] [--max-new-tokens 256]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.session import EnvSession
from spade_core.config import RolloutConfig
from spade_core.designer.llm_validator import judge
from spade_core.envs.contract import env_id_for, split_actions
from spade_core.envs.seeds import load_multiturn_envs
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams
from spade_core.llm.hf import TransformersGenerator
from spade_core.play.rollout import EpisodeSpec, RolloutEngine


class Script:
    """Plays ``replies[seed]`` in order; the seed is read off the first user message ("seed N: ...")."""

    model_ref = "scripted:solution"
    supports_token_prompts = False

    def __init__(self, replies: dict[int, list[str]]) -> None:
        self.replies = replies

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        out = []
        for r in requests:
            first = next(m["content"] for m in r.messages if m["role"] == "user")
            seed = int(re.match(r"seed (\d+):", first).group(1))  # type: ignore[union-attr]
            turn = sum(m["role"] == "assistant" for m in r.messages)
            out.append(Completion(text=self.replies[seed][turn]))
        return out

    def close(self) -> None:
        pass


def protocols(tokenizer: object) -> None:
    envs = load_multiturn_envs()
    specs, actions = [], {}
    for seed, env in enumerate(envs):
        code = env.code.replace("return obs, {}", 'return "seed %s: " % seed + obs, {}')
        with EnvSession(code) as session:
            session.open()
            session.reset(seed)
            actions[seed] = split_actions(session.solution().data["solution"])
        specs.append(EpisodeSpec(env_id_for(code), code, seed))
    print(f"(1) {len(envs)} multi-turn seeds, their reference solutions, real jails, the tiny model's tokenizer")
    print(f"{'protocol':>14} {'return':>7} {'agent turns':>12} {'tool msgs':>10} {'tokens':>8} {'seconds':>8}")
    for protocol in ("user_messages", "native"):
        replies = {s: a if protocol == "user_messages" else ["".join(a[:-1]), a[-1]] for s, a in actions.items()}
        cfg = RolloutConfig(max_turns=12, max_tokens_per_turn=64, max_context_tokens=8192, tool_protocol=protocol)
        engine = RolloutEngine(Script(replies), cfg, SamplingParams(seed=0), call_timeout_s=5.0, tokenizer=tokenizer)
        t0 = time.perf_counter()
        rows = engine.run(specs)
        seconds = time.perf_counter() - t0
        mean = sum(r["episode_return"] for r in rows) / len(rows)
        turns = sum(r["turns"] for r in rows) / len(rows)
        tools = sum(m["role"] == "tool" for r in rows for m in r["transcript"]) / len(rows)
        tokens = sum(len(r["token_ids"]) for r in rows) / len(rows)
        print(f"{protocol:>14} {mean:>7.2f} {turns:>12.1f} {tools:>10.1f} {tokens:>8.0f} {seconds:>8.2f}")


def broken(code: str) -> str:
    """The same environment with a first criterion that asks for a state no tool ever sets: unsolvable."""
    unreachable = "lambda env: getattr(env, 'approved_by_manager', False),"
    return code.replace("self.criteria = [", "self.criteria = [\n            " + unreachable, 1)


def judgements(generator: TransformersGenerator, repeats: int, max_new_tokens: int) -> None:
    sound = [e.code for e in load_multiturn_envs()]
    codes = [*sound, *(broken(c) for c in sound)]
    truth = ["sound"] * len(sound) + ["broken"] * len(sound)
    verdicts: dict[str, Counter[str]] = {"sound": Counter(), "broken": Counter()}
    t0 = time.perf_counter()
    for r in range(repeats):
        params = SamplingParams(temperature=0.3, max_new_tokens=max_new_tokens, seed=1000 + r)
        for kind, j in zip(truth, judge(generator, codes, params), strict=True):
            verdicts[kind][j.verdict] += 1
    seconds = (time.perf_counter() - t0) / (repeats * len(codes))
    n = repeats * len(sound)
    kept = sum(v for k, v in verdicts["sound"].items() if k != "no")
    rejected = verdicts["broken"]["no"]
    print(f"\n(2) the tiny model as LLM validator, {repeats} x {len(codes)} judgements, {max_new_tokens} tokens each")
    for kind, counts in verdicts.items():
        print(f"  {kind:>6}: " + ", ".join(f"{v} {c}" for v, c in sorted(counts.items())))
    print(f"sound_kept={kept}/{n} broken_rejected={rejected}/{n} seconds_per_judgement={seconds:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=4, help="judgements of each design [4]")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="the judge's token budget here [256]")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    generator = TransformersGenerator("embedded", device="cpu")
    protocols(generator.tokenizer)
    judgements(generator, args.repeats, args.max_new_tokens)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
