"""One adversarial environment per test, named after the attack: each is contained and classified, the
host process and its files stay untouched, no process is left behind, no host variable is visible."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from textwrap import dedent

import pytest

from sandbox import policy
from sandbox.jail import JailedProcess
from sandbox.policy import JailLimits, SandboxUnavailable
from sandbox.session import EnvSession
from spade_core.config import ValidationConfig
from spade_core.envs.validate import validate_code

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
FAST = ValidationConfig(call_timeout_s=2.0, max_turns=6, garbage_actions=2, random_plays=1)


def env(reset_body: str, step_body: str = 'return "", 0.0, True, False, {}', header: str = "") -> str:
    """An environment whose reset / step bodies are the attack."""
    reset = "\n".join("        " + line for line in dedent(reset_body).strip().splitlines())
    step = "\n".join("        " + line for line in dedent(step_body).strip().splitlines())
    return (
        f"{dedent(header).strip()}\n\n"
        "class AttackEnv:\n"
        "    def __init__(self, max_turns=12, **kwargs):\n"
        "        self.max_turns = max_turns\n\n"
        "    def reset(self, seed=None):\n"
        f"{reset}\n\n"
        "    def step(self, action):\n"
        f"{step}\n\n"
        "    def solution(self):\n"
        '        return "\\\\boxed{x}"\n'
    )


def first_obs(code: str, limits: JailLimits | None = None) -> tuple[str | None, str | None]:
    """Load and reset in a jail; return (observation, error_type)."""
    with EnvSession(code, limits=limits, call_timeout_s=5.0) as session:
        result = session.open()
        if result.ok:
            result = session.reset(0)
        return (result.data.get("obs") if result.ok else None), result.error_type


def test_fork_bomb_is_stopped() -> None:
    code = env("import os\nwhile True:\n    os.fork()", header="")
    result = validate_code(code, FAST)
    assert not result.ok and result.error_type in {"exception", "timeout", "memory"}


def test_memory_bomb_is_classified_memory() -> None:
    code = env("hog = []\nwhile True:\n    hog.append(bytearray(64 * 1024 * 1024))")
    result = validate_code(code, FAST)
    assert (result.ok, result.error_type) == (False, "memory")


def test_busy_loop_in_step_times_out() -> None:
    code = env('return "go", {}', "while True:\n    pass")
    result = validate_code(code, FAST)
    assert (result.error_type, result.checks.get("step_accepts_any_string")) == ("timeout", False)


def test_sleep_in_reset_times_out() -> None:
    code = env('import time\ntime.sleep(60)\nreturn "late", {}')
    assert validate_code(code, FAST).error_type == "timeout"


def test_jail_wall_clock_limit_kills_a_slow_episode() -> None:
    code = env('return "go", {}', 'import time\ntime.sleep(0.9)\nreturn "", 0.0, False, False, {}')
    with EnvSession(code, limits=JailLimits(time_limit_s=2), call_timeout_s=5.0) as session:
        assert session.open().ok and session.reset(0).ok
        errors = [session.step("a").error_type for _ in range(4)]
    assert "timeout" in errors


def test_network_cannot_reach_a_host_loopback_server() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(4)
    port = server.getsockname()[1]
    accepted: list[object] = []
    waiter = threading.Thread(target=lambda: accepted.append(_accept(server)))
    waiter.start()
    code = env(f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"hello")
            return "connected", {{}}
        except OSError as exc:
            return "blocked: " + type(exc).__name__, {{}}
    """)
    obs, error = first_obs(code)
    waiter.join()
    server.close()
    assert error is None and obs is not None and obs.startswith("blocked")
    assert accepted == [None]


def _accept(server: socket.socket) -> object:
    try:
        return server.accept()
    except TimeoutError:
        return None


def test_network_cannot_resolve_or_reach_metadata_service() -> None:
    code = env("""
        import urllib.request
        try:
            urllib.request.urlopen("http://169.254.169.254/latest/meta-data/", timeout=2)
            return "reached", {}
        except Exception as exc:
            return "blocked: " + type(exc).__name__, {}
    """)
    obs, _ = first_obs(code)
    assert obs is not None and obs.startswith("blocked")


def test_host_environment_variables_are_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary-secret-123")
    monkeypatch.setenv("SPADE_CANARY_TOKEN", "canary-token-456")
    obs, error = first_obs(env("import os, json\nreturn json.dumps(dict(os.environ)), {}"))
    assert error is None and obs is not None
    inside = json.loads(obs)
    assert set(inside) == {k.split("=")[0] for k in policy.JAIL_ENV}
    assert "canary" not in obs


def test_host_files_and_credentials_are_unreadable(tmp_path: Path) -> None:
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = canary-file-789")
    code = env(f"""
        found = []
        for path in [{str(secret)!r}, "/etc/shadow", "/etc/passwd", "/root/.aws/credentials", "/proc/1/environ"]:
            try:
                with open(path) as fh:
                    found.append(path + "=" + fh.read(100))
            except OSError as exc:
                found.append(path + ":" + type(exc).__name__)
        return "|".join(found), {{}}
    """)
    obs, error = first_obs(code)
    assert error is None and obs is not None
    assert "canary" not in obs and "root:" not in obs
    assert all(part.split(":")[-1].endswith("Error") for part in obs.split("|")), obs


def test_no_proc_filesystem_inside() -> None:
    obs, _ = first_obs(
        env('import os\ntry:\n    return str(os.listdir("/proc")), {}\nexcept OSError:\n    return "none", {}')
    )
    assert obs == "none"


def test_writes_outside_the_scratch_space_fail_and_host_is_untouched(tmp_path: Path) -> None:
    targets = [str(tmp_path / "pwned"), "/etc/spade_pwned", "/usr/spade_pwned", str(Path.cwd() / "spade_pwned")]
    code = env(f"""
        out = []
        for path in {targets!r}:
            try:
                with open(path, "w") as fh:
                    fh.write("pwned")
                out.append("written")
            except OSError:
                out.append("refused")
        return ",".join(out), {{}}
    """)
    obs, error = first_obs(code)
    assert (obs, error) == (",".join(["refused"] * len(targets)), None)
    assert not any(os.path.exists(t) for t in targets)


def test_scratch_tmp_is_private_to_each_jail() -> None:
    writer = env('open("/tmp/marker", "w").write("x")\nreturn "ok", {}')
    reader = env('import os\nreturn str(os.path.exists("/tmp/marker")), {}')
    assert first_obs(writer) == ("ok", None)
    assert first_obs(reader) == ("False", None)
    assert not os.path.exists("/tmp/marker")


def test_killing_the_parent_or_host_processes_fails() -> None:
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        code = env(f"""
            import os, signal
            out = []
            for pid in (os.getppid(), 1, {os.getpid()}, {bystander.pid}, -1):
                try:
                    os.kill(pid, signal.SIGKILL)
                    out.append("sent")
                except OSError as exc:
                    out.append(type(exc).__name__)
            return ",".join(out), {{}}
        """)
        first_obs(code)
        assert bystander.poll() is None, "a host process was killed from inside the jail"
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()


def test_huge_observation_is_output_limit() -> None:
    assert first_obs(env('return "x" * 10_000_000, {}')) == (None, "output_limit")


def test_endless_printing_is_output_limit_at_once() -> None:
    code = env('return "go", {}', 'while True:\n    print("spam" * 1000)')
    result = validate_code(code, FAST)
    assert result.error_type == "output_limit"


def test_printing_a_gigabyte_fails_the_call_even_when_the_environment_catches_it() -> None:
    # The probe's case: 1 GB printed passed validation after 52 s. Now a call that prints over 1 MiB is
    # output_limit, at the first write past the cap, and catching the exception does not save it.
    printing = """
        for _ in range(1000):
            try:
                print("x" * 1_000_000)
            except BaseException:
                pass
        return "obs", 0.0, True, False, {}
    """
    code = env('return "go", {}', printing)
    with EnvSession(code, call_timeout_s=5.0) as session:
        assert session.open().ok and session.reset(0).ok
        result = session.step("a")
    assert (result.ok, result.error_type) == (False, "output_limit"), result


def test_nan_reward_is_contract_error() -> None:
    code = env('return "go", {}', 'return "obs", float("nan"), False, False, {}')
    result = validate_code(code, FAST)
    assert result.error_type == "contract_error" and "nan" in (result.message or "")


def test_wrong_tuple_length_is_contract_error() -> None:
    code = env('return "go", {}', 'return "obs", 0.0, False')
    result = validate_code(code, FAST)
    assert result.error_type == "contract_error" and "tuple of length 3, expected a tuple of 5" in (
        result.message or ""
    )


def test_non_string_observation_is_contract_error() -> None:
    result = validate_code(env('return {"not": "a string"}, {}'), FAST)
    assert result.error_type == "contract_error" and "type dict" in (result.message or "")


def test_unserialisable_info_is_sanitised_not_fatal() -> None:
    code = env('return "go", {"handle": object(), "nan": float("nan")}')
    with EnvSession(code) as session:
        assert session.open().ok
        result = session.reset(0)
    assert result.ok and "_unserialisable_info" in result.data["info"]


def test_printing_cannot_forge_protocol_frames() -> None:
    code = env(
        'print(\'{"ok": true, "obs": "forged"}\')\nreturn "real", {}',
        """
        import os, struct, sys, json
        forged = json.dumps({"ok": True, "obs": "forged", "reward": 1.0, "terminated": True,
                             "truncated": False, "info": {}}).encode()
        frame = struct.pack(">I", len(forged)) + forged
        print(frame.decode())
        os.write(1, frame)
        sys.__stdout__.write(frame.decode())
        sys.__stdout__.flush()
        return "honest", 0.25, False, False, {}
        """,
    )
    with EnvSession(code) as session:
        assert session.open().ok
        reset = session.reset(0)
        step = session.step("a")
    assert reset.data["obs"] == "real" and "forged" in reset.stdout
    assert (step.data["obs"], step.data["reward"]) == ("honest", 0.25)


def test_patching_json_and_struct_cannot_forge_replies() -> None:
    header = """
        import json, struct
        json.dumps = lambda *a, **k: '{"ok": true, "obs": "forged", "reward": 1.0}'
        struct.pack = lambda *a: b"\\x00\\x00\\x00\\x02{}"
    """
    code = env('return "real", {}', 'return "honest", 0.5, False, False, {}', header=header)
    with EnvSession(code) as session:
        assert session.open().ok
        step = session.step("a") if session.reset(0).ok else None
    assert step is not None and (step.data["obs"], step.data["reward"]) == ("honest", 0.5)


def test_os_exit_is_exception() -> None:
    result = validate_code(env('return "go", {}', "import os\nos._exit(3)"), FAST)
    assert result.error_type == "exception" and "code 3" in (result.message or "")


def test_a_forged_nsjail_time_limit_line_does_not_turn_a_crash_into_a_timeout() -> None:
    """The exit classification reads nsjail's own log on a private pipe, never the jail's stdout or stderr."""
    forged = b"[I][2026-01-01T00:00:02+0000] pid=1 run time >= time limit (120 >= 120) ([STANDALONE MODE]).\n"
    code = env('return "go", {}', f"import os\nos.write(1, {forged!r})\nos.write(2, {forged!r})\nos._exit(3)")
    result = validate_code(code, FAST)
    assert result.error_type == "exception" and "code 3" in (result.message or "")


def test_sys_exit_is_exception() -> None:
    result = validate_code(env("import sys\nsys.exit(0)"), FAST)
    assert result.error_type == "exception" and "SystemExit" in (result.message or "")


def test_unbounded_recursion_is_exception() -> None:
    code = env("def f(n):\n    return f(n + 1)\nreturn f(0), {}")
    result = validate_code(code, FAST)
    assert result.error_type == "exception" and "RecursionError" in (result.message or "")


def test_host_site_packages_are_not_importable() -> None:
    obs, _ = first_obs(
        env('try:\n    import numpy\n    return "numpy", {}\nexcept ImportError:\n    return "none", {}')
    )
    assert obs == "none"


def test_subprocesses_run_as_nobody_inside_the_jail() -> None:
    obs, error = first_obs(
        env('import subprocess\nreturn subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip(), {}')
    )
    assert (obs, error) == ("65534", None)


def test_broken_nsjail_fails_with_one_line_and_never_runs_code_unjailed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran-unjailed"
    monkeypatch.setenv("NSJAIL_PATH", "/bin/false")
    for fn in (policy.probe, policy.resolve_cgroups):
        fn.cache_clear()
    try:
        jail = JailedProcess()
        with pytest.raises(SandboxUnavailable, match="nsjail cannot start a jail on this machine") as err:
            jail.start()
        assert "\n" not in str(err.value)
        monkeypatch.setenv("NSJAIL_PATH", str(tmp_path / "missing"))
        with pytest.raises(SandboxUnavailable, match="is not an executable file"):
            policy.nsjail_binary()
        assert not marker.exists()
    finally:
        monkeypatch.delenv("NSJAIL_PATH")
        for fn in (policy.probe, policy.resolve_cgroups):
            fn.cache_clear()


def test_lone_surrogates_in_replies_are_replaced_not_passed_on() -> None:
    obs, error = first_obs(env('return "bad " + chr(0xD800) + " text", {}'))
    assert (obs, error) == ("bad ? text", None)
    assert obs is not None and obs.encode("utf-8")  # valid text for the tokenizer and Parquet


def test_cpu_seconds_limit_is_classified_timeout() -> None:
    code = env("while True:\n    pass")
    with EnvSession(code, limits=JailLimits(cpu_seconds=2), call_timeout_s=20.0) as session:
        assert session.open().ok
        result = session.reset(0)
    assert result.error_type == "timeout" and "CPU-seconds" in (result.message or "")
    assert session.jail.dead is not None  # the jail is gone, not left running


def test_a_process_that_stops_reading_cannot_stall_a_large_request() -> None:
    jail = JailedProcess()
    jail.proc = subprocess.Popen(
        ["sleep", "30"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        with pytest.raises(TimeoutError):
            jail._send({"op": "step", "action": "y" * 1_000_000}, time.monotonic() + 1.0)
    finally:
        jail._kill()
    assert jail.proc.poll() is not None
