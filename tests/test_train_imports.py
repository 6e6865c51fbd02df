"""The trainer subprocess (``accelerate launch -m spade_core.train.step``) loads no module of the pipeline.

It reads the store by stage name (:mod:`spade_core.stage_names`), the markers (:mod:`spade_core.store.markers`) and
the design verdicts (:mod:`spade_core.store.verdicts`); the orchestration (registry, stages, context, runner) stays
out of every training process. A fresh interpreter, so no other test's imports count.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = (
    "import sys, spade_core.train.step; print(sorted(m for m in sys.modules if m.startswith('spade_core.pipeline')))"
)


def test_the_trainer_imports_no_pipeline_module() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
