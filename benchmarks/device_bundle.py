"""Make what ``benchmarks/device_check.sh`` carries to an offline GPU machine: ``.device/`` (ignored by git),
at most 64 MiB with the repository.

- ``whl/``: wheels of the packages such a machine lacks or has too old (its image has PyTorch, transformers,
  accelerate, peft, pandas and pyarrow, but not TRL, datasets or pydantic), at the versions installed here,
  downloaded for CPython 3.12 on x86-64 Linux from the package registry (``--no-deps``: each is named);
- ``model/``: the tiny model's config and tokenizer (no weights: its 94 MB do not fit; the check gives the
  same architecture random weights);
- ``store/``: one stored generation to train on — no-hint plays of the tiny model on game seed environments,
  played here through the rollout engine and the jail (``benchmarks/train_step.py``'s recipe).

    .venv/bin/python benchmarks/device_bundle.py [--out .device]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import argparse
import importlib.util
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

# The packages the check imports that the GPU image lacks (or has older than this project needs).
WHEELS = (
    "trl",
    "datasets",
    "dill",
    "multiprocess",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "transformers",
    "huggingface-hub",
    "kernels",
    "tokenizers",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")  # fmt: skip
LIMIT_MIB = 64


def download_wheels(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pins = [f"{name}=={version(name)}" for name in WHEELS]
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", *platforms, "-d", str(out), *pins]  # fmt: skip
    subprocess.run(command, check=True)


def copy_model(out: Path) -> None:
    from spade_core.llm.embedded import embedded_model_dir

    source = Path(embedded_model_dir())
    out.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, out / name)


def stored_generation(out: Path) -> int:
    """Four game environments, four plays each, as ``benchmarks/train_step.py`` stores them."""
    spec = importlib.util.spec_from_file_location("train_step_bench", os.path.join(HERE, "train_step.py"))
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from spade_core.store.artifacts import Store

    shutil.rmtree(out, ignore_errors=True)
    return int(bench.stored_generation(Store(str(out)), envs=4, plays=4, turns=3, tokens=32))


def size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".device", help="where to write the bundle (git ignores .device/)")
    args = parser.parse_args()
    out = Path(args.out)
    download_wheels(out / "whl")
    copy_model(out / "model")
    episodes = stored_generation(out / "store")
    total = size_mib(out)
    print(f"{out}: {len(list((out / 'whl').glob('*.whl')))} wheels, the model's config and tokenizer, "
          f"{episodes} stored episodes; {total:.1f} MiB (the repository adds its own)")  # fmt: skip
    if total > LIMIT_MIB - 8:
        print(f"warning: over {LIMIT_MIB - 8} MiB: the bundle and the repository may not fit {LIMIT_MIB} MiB")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
