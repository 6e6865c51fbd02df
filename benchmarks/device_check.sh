#!/usr/bin/env bash
# The GPU checks a CPU machine cannot run, in one short script (≤ 10 minutes on one GPU): a bf16 GRPO step of
# the project's trainer launched with the single-GPU accelerate config, the transformers backend generating on
# the GPU, one line per check (benchmarks/device_check.py says what each is). For an offline CUDA machine with
# PyTorch: what else it needs travels in .device/ (make device-bundle; carry it). Where no GPU is present it
# says so and exits 0.
#
#   benchmarks/device_check.sh            # in the repository root; PYTHON=... to choose the interpreter
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
BUNDLE=${BUNDLE:-.device}

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    echo "device check: no GPU here (torch sees no CUDA device, or $PYTHON has no torch): nothing to check"
    exit 0
fi
if [ ! -d "$BUNDLE/whl" ]; then
    echo "device check: no bundle at $BUNDLE: run 'make device-bundle' on the machine you start from, and carry $BUNDLE"
    exit 1
fi
SITE=$(mktemp -d /tmp/spade-device-site.XXXXXX)
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$BUNDLE"/whl/*.whl \
    || { echo "device check: the bundle's wheels did not install"; exit 1; }
ln -s "$PWD/data" "$SITE/spade_data"  # the bundled presets and accelerate configs, as an install maps them
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 540 "$PYTHON" benchmarks/device_check.py --bundle "$BUNDLE" "$@"
status=$?
rm -rf "$SITE"
exit $status
