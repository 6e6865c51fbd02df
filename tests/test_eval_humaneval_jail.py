"""HumanEval completions run only in the jail: one attack per test, named after it. Each completion is the
canonical solution plus the attack, written so that it can pass only if the attack works; it must fail, and
nothing on the host may change."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from spade_core.eval import EvalItem, HumanEvalSuite
from spade_core.eval.humaneval import problems

TASK = "HumanEval/0"  # has_close_elements(numbers, threshold)
# every test fails if it leaves a jailed program of its own (or an orphaned one) running
pytestmark = pytest.mark.usefixtures("jail_processes_checked")


@pytest.fixture(scope="module")
def suite() -> HumanEvalSuite:
    return HumanEvalSuite(time_limit_s=3)


@pytest.fixture(scope="module")
def item(suite: HumanEvalSuite) -> EvalItem:
    return suite.item(TASK)


def completion(attack: str) -> str:
    """The full function with ``attack`` as its first statements, then the canonical body."""
    problem = problems()[TASK]
    lines = "".join(f"    {line}\n" for line in attack.strip().splitlines())
    return f"```python\n{problem['prompt']}{lines}{problem['canonical_solution']}```"


def test_the_canonical_completion_passes_in_the_jail(suite: HumanEvalSuite, item: EvalItem) -> None:
    assert suite.score(item, completion("pass")) == (1.0, True)


def test_reading_a_host_file_fails(suite: HumanEvalSuite, item: EvalItem, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    for path in (secret, Path("/etc/shadow"), Path("/etc/passwd"), Path(__file__)):
        assert suite.score(item, completion(f"open({str(path)!r}).read()")) == (0.0, False), path


def test_writing_outside_the_jail_leaves_the_host_untouched(
    suite: HumanEvalSuite, item: EvalItem, tmp_path: Path
) -> None:
    before = sorted(tmp_path.iterdir())
    target = tmp_path / "pwned.txt"
    assert suite.score(item, completion(f"open({str(target)!r}, 'w').write('x')")) == (0.0, False)
    host_tmp = Path("/tmp") / f"spade-canary-{uuid.uuid4().hex}"
    # /tmp inside the jail is a private tmpfs: the write works there (so this passes) and vanishes with it.
    assert suite.score(item, completion(f"open({str(host_tmp)!r}, 'w').write('x')")) == (1.0, True)
    assert not host_tmp.exists() and not target.exists() and sorted(tmp_path.iterdir()) == before


def test_connecting_to_a_host_port_fails_and_nothing_arrives(suite: HumanEvalSuite, item: EvalItem) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    attack = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')"
    try:
        assert suite.score(item, completion(attack)) == (0.0, False)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()


def test_an_infinite_loop_times_out_as_a_failed_item(suite: HumanEvalSuite, item: EvalItem) -> None:
    t0 = time.monotonic()
    (result,) = suite.run([item], [completion("while True:\n    pass")])
    assert result is not None and not result.ok and result.error_type == "timeout"
    assert time.monotonic() - t0 < 3 + 6  # the jail's limit plus start-up, never a hang


def test_exiting_early_or_printing_a_forged_report_does_not_pass(suite: HumanEvalSuite, item: EvalItem) -> None:
    forged = 'print(\'{"ok": true, "error_type": null}\')\nimport os\nos._exit(0)'
    for attack in ("import sys\nsys.exit(0)", forged, "raise SystemExit(0)"):
        assert suite.score(item, completion(attack)) == (0.0, False), attack


def test_a_thread_left_running_does_not_hold_the_item(suite: HumanEvalSuite, item: EvalItem) -> None:
    attack = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()"
    t0 = time.monotonic()
    assert suite.score(item, completion(attack)) == (1.0, True)
    assert time.monotonic() - t0 < 3


def test_memory_blowup_fails(suite: HumanEvalSuite, item: EvalItem) -> None:
    (result,) = suite.run([item], [completion("x = bytearray(2 * 1024 ** 3)")])
    assert result is not None and not result.ok and result.error_type == "memory"


def test_parallel_runs_are_isolated_from_each_other(suite: HumanEvalSuite, item: EvalItem) -> None:
    """A file one completion writes to /tmp is not there for another running at the same time."""
    writer = completion(
        "import os, time\nif not os.path.exists('/tmp/shared'):\n    open('/tmp/shared', 'w').write('x')\n"
        "    time.sleep(1)"
    )
    reader = completion("open('/tmp/shared').read()")
    assert suite.workers == 2  # both jails run at once
    assert suite.score_many([item, item], [writer, reader]) == [(1.0, True), (0.0, False)]
