"""The one error taxonomy and the one exit classification (sandbox/outcome.py): a table of how nsjail
exits read, real jails ending each way, and a scan that every error_type the code can emit is named."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path
from typing import get_args

import pytest

from sandbox.jail import JailedProcess
from sandbox.oneshot import run_program
from sandbox.outcome import ERROR_MEANINGS, ERROR_TYPES, ErrorType, classify_exit, is_error_type
from sandbox.policy import JailLimits

ROOT = Path(__file__).resolve().parent.parent
LIMITS = JailLimits(time_limit_s=2, cpu_seconds=4)
# nsjail's own lines, as this nsjail writes them to its log
TIME_LIMIT = "[I][2026-01-01T00:00:02+0000] pid=41 run time >= time limit (2 >= 2) ([STANDALONE MODE]). Killing it"
KILLED = "[I][2026-01-01T00:00:02+0000] pid=41 ([STANDALONE MODE]) terminated with signal: SIGKILL (9), (PIDs left: 0)"
EXITED_3 = "[I][2026-01-01T00:00:00+0000] pid=41 ([STANDALONE MODE]) exited with status: 3, (PIDs left: 0)"
MOUNT_FAILED = "[E][2026-01-01T00:00:00+0000][41] mountPt():123 mount('/usr', '/usr'): Permission denied"


@pytest.mark.parametrize(
    ("code", "log", "lived_s", "expected", "says"),
    [
        (137, f"{TIME_LIMIT}\n{KILLED}", 2.0, "timeout", "wall-clock limit of 2s"),
        (137, KILLED, 0.3, "memory", "SIGKILL (memory limit)"),
        (137, "", 0.3, "memory", "SIGKILL (memory limit)"),
        (-9, "", 0.3, "memory", "SIGKILL (memory limit)"),  # nsjail itself killed
        (137, KILLED, 4.2, "timeout", "CPU-seconds limit (4s)"),  # the hard RLIMIT_CPU is a SIGKILL too
        (152, "", 3.1, "timeout", "CPU-seconds limit (4s)"),  # 128 + SIGXCPU
        (-24, "", 3.1, "timeout", "CPU-seconds limit (4s)"),
        (3, EXITED_3, 0.1, "exception", "exited with code 3"),
        (0, "", 0.1, "exception", "exited with code 0"),  # exited without replying or reporting
        (139, "", 0.1, "exception", "SIGSEGV"),
        (255, MOUNT_FAILED, 0.05, "exception", "exited with code 255"),
        (None, "", 9.0, "exception", "did not exit"),
        # the lifetime alone never makes a timeout: a crash right at the deadline is still a crash
        (3, EXITED_3, 2.4, "exception", "exited with code 3"),
    ],
    ids=[
        "time-limit-line",
        "sigkill-without-time-line",
        "sigkill-no-log",
        "nsjail-killed",
        "sigkill-after-cpu-limit",
        "sigxcpu",
        "nsjail-sigxcpu",
        "exit-3",
        "exit-0",
        "segfault",
        "nsjail-failed",
        "not-reaped",
        "exit-at-deadline",
    ],
)
def test_exit_classification_table(code: int | None, log: str, lived_s: float, expected: str, says: str) -> None:
    error_type, reason = classify_exit(code, log, lived_s, LIMITS)
    assert (error_type, says in reason) == (expected, True), reason


def test_taxonomy_is_one_ordered_literal_with_a_meaning_for_each() -> None:
    assert ERROR_TYPES == get_args(ErrorType) == tuple(ERROR_MEANINGS)
    assert len(set(ERROR_TYPES)) == len(ERROR_TYPES)
    assert all(meaning and "\n" not in meaning for meaning in ERROR_MEANINGS.values())
    assert not is_error_type("pwned") and not is_error_type(["timeout"]) and is_error_type("not_novel")


# -- every error_type the code can emit is in the taxonomy ---------------------------------------------------
def _literals(node: ast.expr | None) -> set[str]:
    """The string values an expression can take, as far as its literals show (names and calls add none)."""
    match node:
        case ast.Constant(value=str(value)):
            return {value}
        case ast.IfExp(body=body, orelse=orelse):
            return _literals(body) | _literals(orelse)
        case ast.BoolOp(values=values):
            return set().union(*map(_literals, values))
        case ast.Call(func=ast.Name(id="str"), args=[arg]):
            return _literals(arg)
        case ast.Call(func=ast.Attribute(attr="get"), args=[_, default]):
            return _literals(default)
        case ast.ListComp(elt=elt) | ast.GeneratorExp(elt=elt):
            return _literals(elt)
        case ast.List(elts=elts) | ast.Tuple(elts=elts) | ast.Set(elts=elts):
            return set().union(*map(_literals, elts))
    return set()


def _is_error_type_target(node: ast.expr) -> bool:
    match node:
        case ast.Name(id="error_type") | ast.Attribute(attr="error_type"):
            return True
        case ast.Subscript(slice=ast.Constant(value="error_type")):
            return True
    return False


EMITTERS = {"failure", "fail", "CheckFailed", "JailedEnvError"}  # their first argument is an error type


def emitted_error_types(source: str) -> set[str]:
    """Every literal a module passes where an ``error_type`` goes: arguments, keywords, dict entries,
    assignments and comparisons."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        match node:
            case ast.Call(func=ast.Name(id=name) | ast.Attribute(attr=name), args=[first, *_]) if name in EMITTERS:
                found |= _literals(first)
        match node:
            case ast.keyword(arg="error_type", value=value):
                found |= _literals(value)
            case ast.Dict(keys=keys, values=values):
                for key, value in zip(keys, values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "error_type":
                        found |= _literals(value)
            case ast.Assign(targets=targets, value=value):
                for target in targets:
                    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                        pairs = zip(target.elts, value.elts, strict=False)
                        found |= set().union(*(_literals(v) for t, v in pairs if _is_error_type_target(t)))
                    elif _is_error_type_target(target):
                        found |= _literals(value)
            case ast.AnnAssign(target=target, value=value) if _is_error_type_target(target):
                found |= _literals(value)
            case ast.Compare(left=left, comparators=comparators) if _is_error_type_target(left):
                found |= set().union(*map(_literals, comparators))
    return found


def test_the_scan_finds_error_types_however_they_are_written() -> None:
    source = """
report.update(error_type="syntax_error")
row = {"error_type": res.error_type if res else "unsolvable"}
failed = CallResult(ok=False, error_type=str(reply.get("error_type", "jail_error")))
raise CheckFailed("trivial", "message")
episode.fail(result.error_type or "model_error", result.message)
frame["error_type"] = ["not_novel" if h else e for h, e in pairs]
out.error_type, out.message = "memory", "not an error type"
if result.error_type == "output_limit": pass
"""
    assert emitted_error_types(source) == {
        "syntax_error",
        "unsolvable",
        "jail_error",
        "trivial",
        "model_error",
        "not_novel",
        "memory",
        "output_limit",
    }


def test_every_error_type_the_code_emits_is_in_the_taxonomy() -> None:
    """The sandbox (with the in-jail runtime, which cannot import the taxonomy), the validator, the
    pipeline, the rollout engine and the CLI: no module writes an error type the taxonomy lacks."""
    emitted: dict[str, set[str]] = {}
    for package in ("sandbox", "spade_core", "flows", "tasks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            emitted[str(path.relative_to(ROOT))] = emitted_error_types(path.read_text())
    unknown = {path: sorted(found - set(ERROR_TYPES)) for path, found in emitted.items() if found - set(ERROR_TYPES)}
    assert unknown == {}
    # the scan is not vacuous: the jail runtime, the host side and the validator each name their classes
    assert {"syntax_error", "contract_error", "memory", "output_limit"} <= emitted["sandbox/runtime/host.py"]
    assert {"timeout", "jail_error"} <= emitted["sandbox/jail.py"]
    assert {"nondeterministic", "unsolvable", "trivial"} <= emitted["spade_core/envs/validate.py"]


# -- real jails ending each way ------------------------------------------------------------------------------
@pytest.mark.usefixtures("jail_processes_checked")
@pytest.mark.parametrize(
    ("source", "limits", "expected", "says"),
    [
        ("import time\ntime.sleep(30)", JailLimits(time_limit_s=1, cpu_seconds=5), "timeout", "wall-clock"),
        ("while True:\n    pass", JailLimits(time_limit_s=10, cpu_seconds=1), "timeout", "CPU-seconds"),
        ("import os\nos._exit(3)", JailLimits(time_limit_s=5), "exception", "code 3"),
    ],
    ids=["wall-clock", "cpu-seconds", "early-exit"],
)
def test_a_oneshot_program_ending_each_way_is_classified(
    source: str, limits: JailLimits, expected: str, says: str
) -> None:
    t0 = time.monotonic()
    result = run_program(source, limits=limits)
    assert (result.ok, result.error_type) == (False, expected) and says in (result.message or ""), result.message
    assert time.monotonic() - t0 < limits.time_limit_s + 5


def test_an_unknown_error_type_from_the_jail_becomes_jail_error() -> None:
    """The jail is untrusted: a reply naming an error type outside the taxonomy is not passed on."""
    forger = (
        "import json, struct, sys\n"
        "size = struct.unpack('>I', sys.stdin.buffer.read(4))[0]\n"
        "sys.stdin.buffer.read(size)\n"
        "body = json.dumps({'ok': False, 'error_type': 'pwned', 'message': 'forged'}).encode()\n"
        "sys.stdout.buffer.write(struct.pack('>I', len(body)) + body)\n"
        "sys.stdout.buffer.flush()\n"
    )
    jail = JailedProcess()
    jail.proc = subprocess.Popen(
        [sys.executable, "-c", forger],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        result = jail.call("step", action="a")
    finally:
        jail._kill()
    assert (
        result.error_type == "jail_error" and "'pwned'" in (result.message or "") and "forged" in (result.message or "")
    )
