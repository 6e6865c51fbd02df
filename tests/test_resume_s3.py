"""The kill-and-resume scenario of ``test_resume.py`` on S3 (moto's server on loopback): two generations in
flight, SIGKILL, ``spade resume``, nothing lost, duplicated or redone. A module of its own, so that
``pytest -n 2 --dist loadfile`` may give it to the other worker than the local-store run."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_resume import async_kill_and_resume

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), pytest.mark.usefixtures("jail_processes_checked")]


def test_kill_with_two_generations_in_flight_then_resume_on_s3(
    tmp_path: Path, micro_model_dir: str, s3_bucket: str, s3_endpoint: str
) -> None:
    async_kill_and_resume(tmp_path, micro_model_dir, s3_bucket, s3_endpoint)
