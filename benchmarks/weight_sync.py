"""Weight sync: a new checkpoint reloaded into the running vLLM engine vs the engine restarted on it.

The checkpoint is a copy of the tiny model's directory with every weight moved (as after a training step).
Each way is timed ``--repeats`` times, alternating, until the engine answers a request on the new weights;
the medians are compared. The last line is machine-readable:

    reload_s=A restart_s=B ratio=B/A

    .venv/bin/python benchmarks/weight_sync.py [--repeats 3] [--dtype bfloat16]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path so
# `import sandbox` finds the package when a script here is run by path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from spade_core.config import load_config
from spade_core.llm.base import GenerationRequest, SamplingParams
from spade_core.llm.embedded import resolve_model
from spade_core.llm.vllm_server import VLLMGenerator

ASK = [GenerationRequest(messages=[{"role": "user", "content": "Name three colours."}])]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8, logprobs=True)


def moved_copy(base: str, out: Path) -> str:
    """``base`` with every weight moved by a little noise, saved as a full checkpoint directory."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.02)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (Path(base) / name).is_file():
            shutil.copy(Path(base) / name, out / name)
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="times each way is timed")
    parser.add_argument("--dtype", default="bfloat16", help="the engine's dtype")
    args = parser.parse_args()

    cfg = load_config("tiny").model.model_copy(
        update={"backend": "vllm", "dtype": args.dtype, "engine_dtype": args.dtype, "device": "cpu"}
    )
    base = resolve_model(cfg.name_or_path)
    with tempfile.TemporaryDirectory() as tmp:
        moved = moved_copy(base, Path(tmp) / "moved")
        size = sum(f.stat().st_size for f in Path(moved).glob("*.safetensors"))
        load = os.getloadavg()[0]
        print(f"checkpoint: {size / 2**20:.0f} MiB of safetensors; engine dtype {args.dtype}; load {load:.2f}")
        engine = VLLMGenerator(cfg)
        reloads, restarts = [], []
        try:
            answers = {base: engine.generate(ASK, GREEDY)[0].text}
            for i in range(args.repeats):
                for path in (moved, base):
                    t0 = time.perf_counter()
                    engine.reload(path)
                    text = engine.generate(ASK, GREEDY)[0].text
                    reloads.append(time.perf_counter() - t0)
                    answers.setdefault(path, text)
                    assert text == answers[path], "a reload served other weights than the checkpoint's"
                t0 = time.perf_counter()
                engine._start(moved if i % 2 == 0 else base, "restart")
                engine.generate(ASK, GREEDY)
                restarts.append(time.perf_counter() - t0)
                print(f"round {i + 1}: reloads {reloads[-2]:.2f} s, {reloads[-1]:.2f} s; restart {restarts[-1]:.1f} s")
        finally:
            engine.close()
    reload_s, restart_s = statistics.median(reloads), statistics.median(restarts)
    print(
        f"load average now: {os.getloadavg()[0]:.2f}; greedy answers differ between the two checkpoints: "
        f"{len(set(answers.values())) == 2}"
    )
    print(f"reload_s={reload_s:.2f} restart_s={restart_s:.1f} ratio={restart_s / reload_s:.1f}")


if __name__ == "__main__":
    main()
